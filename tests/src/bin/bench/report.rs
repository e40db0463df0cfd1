//! What a scenario measured: figures beside their targets, printed as one JSON line
//! per scenario and as a table.

use serde_json::{Value, json};

/// A target a figure is held to.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The figure must be at least this.
    AtLeast(f64),
    /// The figure must be at most this.
    AtMost(f64),
}

impl Target {
    fn met(self, value: f64) -> bool {
        match self {
            Target::AtLeast(bound) => value >= bound,
            Target::AtMost(bound) => value <= bound,
        }
    }

    fn text(self) -> String {
        match self {
            Target::AtLeast(bound) => format!(">= {bound}"),
            Target::AtMost(bound) => format!("<= {bound}"),
        }
    }
}

/// One measured figure.
#[derive(Debug, Clone)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
    pub target: Option<Target>,
}

/// Builds a figure.
pub fn figure(name: impl Into<String>, value: f64, unit: &'static str) -> Figure {
    Figure {
        name: name.into(),
        value,
        unit,
        target: None,
    }
}

impl Figure {
    /// The same figure held to `target`.
    pub fn target(mut self, target: Target) -> Figure {
        self.target = Some(target);
        self
    }
}

/// A scenario's figures and the sizes it ran with.
#[derive(Debug, Clone)]
pub struct Report {
    pub scenario: &'static str,
    pub params: Value,
    pub figures: Vec<Figure>,
}

impl Report {
    /// The JSON line: `{"scenario", "params", "figures": [{name, value, unit, target, met}]}`.
    pub fn json(&self) -> Value {
        let figures: Vec<Value> = self
            .figures
            .iter()
            .map(|f| {
                json!({
                    "name": f.name,
                    "value": (f.value * 100.0).round() / 100.0,
                    "unit": f.unit,
                    "target": f.target.map(Target::text),
                    "met": f.target.map(|t| t.met(f.value)),
                })
            })
            .collect();
        json!({ "scenario": self.scenario, "params": self.params, "figures": figures })
    }
}

/// The table of every figure, target beside it (Markdown, as `docs/benchmarks.md`
/// records it).
pub fn table(reports: &[Report]) -> String {
    let mut out =
        String::from("| scenario | figure | value | target | met |\n|---|---|---:|---|---|\n");
    for report in reports {
        for f in &report.figures {
            let (target, met) = match f.target {
                Some(t) => (t.text(), if t.met(f.value) { "yes" } else { "**missed**" }),
                None => (String::new(), ""),
            };
            out.push_str(&format!(
                "| {} | {} | {:.2} {} | {} | {} |\n",
                report.scenario, f.name, f.value, f.unit, target, met
            ));
        }
    }
    out
}

/// The `p`th percentile (0–100) of `samples` in milliseconds, nearest rank.
pub fn percentile_ms(samples: &mut [std::time::Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1].as_secs_f64() * 1000.0
}
