//! `flame`: a flame graph PNG from `perf script` output, with no tool beyond this
//! workspace (the bench's plotters and a system TrueType font).
//!
//! ```sh
//! perf record -a -g -F 499 -o drain.data -- sleep 6     # while a drain runs
//! perf script -i drain.data > drain.txt
//! cargo run --release -p protomolt-e2e --bin flame -- drain.txt docs/flame-drain.png "a one-step drain"
//! ```
//!
//! The bottom row is the process (`comm`: `postgres`, `tokio-rt-worker` for the node
//! and the fixture, `swapper` for an idle CPU); above it each stack from the outermost
//! frame in, every box as wide as its share of the samples.

use std::collections::BTreeMap;

use plotters::prelude::*;

const WIDTH: u32 = 1600;
const ROW: i32 = 17;
const MAX_DEPTH: usize = 48;

/// One frame of the merged stacks and the samples that passed through it.
#[derive(Default)]
struct Frame {
    samples: u64,
    children: BTreeMap<String, Frame>,
}

impl Frame {
    fn add(&mut self, stack: &[String]) {
        self.samples += 1;
        if let Some((first, rest)) = stack.split_first() {
            self.children.entry(first.clone()).or_default().add(rest);
        }
    }

    fn depth(&self) -> usize {
        1 + self.children.values().map(Frame::depth).max().unwrap_or(0)
    }
}

/// The samples of `perf script` output, each as its process and frames, outermost
/// first.
fn stacks(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for sample in text.split("\n\n") {
        let mut lines = sample.lines().filter(|line| !line.trim().is_empty());
        let Some(header) = lines.next() else { continue };
        let comm = header.split_whitespace().next().unwrap_or("?").to_owned();
        let mut frames: Vec<String> = lines
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let _address = parts.next()?;
                let symbol = parts.next().unwrap_or("[unknown]");
                let symbol = symbol.split("+0x").next().unwrap_or(symbol);
                Some(if symbol == "[unknown]" {
                    // The library is the best name an unsymbolised frame has.
                    let dso = line.rsplit('/').next().unwrap_or("").trim_end_matches(')');
                    format!("[{dso}]")
                } else {
                    symbol.to_owned()
                })
            })
            .collect();
        frames.reverse();
        frames.insert(0, comm);
        frames.truncate(MAX_DEPTH);
        out.push(frames);
    }
    out
}

fn colour(name: &str) -> RGBColor {
    let hash = name.bytes().fold(2_166_136_261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    });
    RGBColor(
        205 + (hash % 50) as u8,
        80 + ((hash >> 8) % 140) as u8,
        30 + ((hash >> 16) % 50) as u8,
    )
}

fn draw(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    frame: &Frame,
    name: &str,
    (x, y, width): (f64, i32, f64),
    total: u64,
) -> Result<(), String> {
    if width < 1.0 {
        return Ok(());
    }
    let (left, right) = (x as i32, (x + width) as i32 - 1);
    area.draw(&Rectangle::new(
        [(left, y - ROW + 1), (right.max(left), y)],
        colour(name).filled(),
    ))
    .map_err(|e| e.to_string())?;
    let share = 100.0 * frame.samples as f64 / total as f64;
    let label = format!("{name} ({share:.1}%)");
    let fits = ((width - 6.0) / 7.0) as usize;
    if fits >= 4 {
        let shown: String = if label.chars().count() > fits {
            label
                .chars()
                .take(fits.saturating_sub(2))
                .chain("..".chars())
                .collect()
        } else {
            label
        };
        area.draw(&Text::new(
            shown,
            (left + 3, y - ROW + 3),
            ("sans-serif", 12),
        ))
        .map_err(|e| e.to_string())?;
    }
    let mut at = x;
    for (child_name, child) in &frame.children {
        let child_width = width * child.samples as f64 / frame.samples as f64;
        draw(area, child, child_name, (at, y - ROW, child_width), total)?;
        at += child_width;
    }
    Ok(())
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output, rest @ ..] = args.as_slice() else {
        return Err("usage: flame <perf script output> <out.png> [title]".into());
    };
    let title = rest.first().map_or("flame graph", String::as_str);
    let text = std::fs::read_to_string(input).map_err(|e| format!("{input}: {e}"))?;
    let mut root = Frame::default();
    for stack in stacks(&text) {
        root.add(&stack);
    }
    if root.samples == 0 {
        return Err(format!("{input}: no samples (is it `perf script` output?)"));
    }
    protomolt_e2e::charts::register_label_font()?;
    let rows = root.depth() as i32;
    let height = (rows + 3) * ROW;
    let area = BitMapBackend::new(output, (WIDTH, height as u32)).into_drawing_area();
    area.fill(&WHITE).map_err(|e| e.to_string())?;
    area.draw(&Text::new(
        format!("{title}: {} samples", root.samples),
        (8, 6),
        ("sans-serif", 16),
    ))
    .map_err(|e| e.to_string())?;
    let mut x = 0.0;
    for (name, child) in &root.children {
        let width = f64::from(WIDTH) * child.samples as f64 / root.samples as f64;
        draw(&area, child, name, (x, height - 4, width), root.samples)?;
        x += width;
    }
    area.present().map_err(|e| e.to_string())
}
