//! The throughput chart: jobs/s against the in-flight limit, drawn as a PNG.

use std::path::Path;

use plotters::prelude::*;

/// Draws `points` (in-flight limit, jobs/s) to `path`, with `target` as a line, and
/// the peer's drain of the same run (no-op jobs, its defaults) as another.
pub fn draw(
    path: &Path,
    points: &[(usize, f64)],
    target: f64,
    peer: Option<f64>,
) -> Result<(), String> {
    protomolt_e2e::charts::register_label_font()?;

    let root = BitMapBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let x_max = points.iter().map(|(x, _)| *x).max().unwrap_or(1) as f64 * 1.5;
    let y_max = points
        .iter()
        .map(|(_, y)| *y)
        .chain(peer)
        .fold(target, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption("one-step jobs drained by one node", ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((0.8f64..x_max).log_scale(), 0f64..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("max_in_flight (log scale)")
        .y_desc("jobs/s")
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(|e| e.to_string())?;
    let series: Vec<(f64, f64)> = points.iter().map(|(x, y)| (*x as f64, *y)).collect();
    chart
        .draw_series(LineSeries::new(series.clone(), BLUE.stroke_width(2)))
        .map_err(|e| e.to_string())?
        .label("measured")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(
            series
                .iter()
                .map(|point| Circle::new(*point, 4, BLUE.filled())),
        )
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.8, target), (x_max, target)],
            RED.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?
        .label(format!("target {target} jobs/s"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    if let Some(peer) = peer {
        chart
            .draw_series(LineSeries::new(
                vec![(0.8, peer), (x_max, peer)],
                GREEN.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(format!(
                "peer (graphile-worker, no-op jobs) {peer:.0} jobs/s"
            ))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREEN));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
