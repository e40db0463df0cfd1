//! The soak (`chaos --soak MINUTES`): the fleet under a steady load for a long while,
//! with retention on, sampled every minute: each node's resident set, its database
//! sessions and open file descriptors, the job table's and the outbox's size with
//! their indexes, and the p99 of a step's hand-off (from a step's answer at the target
//! to the next step's call: the checkpoint between and the dispatch; only jobs whose
//! steps follow one another with no wait, retry or re-run between, so the figure is
//! the engine's). The samples are written as a CSV and drawn as a PNG; the run fails
//! when a node's resident set, sessions or file descriptors grow without bound (a
//! least-squares slope, after a warm-up, above the limits below), when the last ten
//! minutes' p99 hand-off is more than twice the first ten's (after the warm-up), when
//! a node logged a panic, or when fewer samples were taken than the soak needs to
//! judge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plotters::prelude::*;
use protomolt_e2e::invariants::Breach;

use crate::database::Database;
use crate::fixture::{Call, Outcome, Targets};
use crate::load::{JobSpec, Kind};
use crate::world::Node;

/// A node's resident set may grow by at most this much an hour after the warm-up.
pub const RSS_SLOPE_LIMIT_MIB_PER_HOUR: f64 = 32.0;
/// A node's database sessions may grow by at most this many an hour after the warm-up.
pub const SESSIONS_SLOPE_LIMIT_PER_HOUR: f64 = 2.0;
/// A node's open file descriptors may grow by at most this many an hour.
pub const FDS_SLOPE_LIMIT_PER_HOUR: f64 = 20.0;
/// Minutes left out of the slopes and the latency baseline while pools fill and
/// caches warm.
const WARM_UP_MINUTES: f64 = 5.0;
/// The fewest samples after the warm-up that can be judged.
const FEWEST_SETTLED_SAMPLES: usize = 20;
/// The p99 hand-off of the last ten minutes may be at most this times the first ten's.
const LATENCY_DRIFT_LIMIT: f64 = 2.0;

/// Soak invariants.
pub const RSS: &str = "no node's memory grows without bound";
/// See [`RSS`].
pub const SESSIONS: &str = "no node's database sessions grow without bound";
/// See [`RSS`].
pub const FDS: &str = "no node's open files grow without bound";
/// See [`RSS`].
pub const LATENCY: &str = "step latency does not drift past twice its start";
/// See [`RSS`].
pub const SAMPLED: &str = "the soak sampled long enough to judge";

/// One minute's sample.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Minutes since the load began.
    pub minute: f64,
    /// Per node: resident set (MiB), database sessions, open file descriptors.
    pub nodes: Vec<(f64, i64, usize)>,
    /// `workflow_run` with its indexes and TOAST, MiB.
    pub jobs_mib: f64,
    /// Its indexes alone, MiB.
    pub jobs_index_mib: f64,
    /// The outbox with its indexes, MiB.
    pub outbox_mib: f64,
    /// Jobs finished in the minute.
    pub finished: i64,
    /// The p99 hand-off of the minute, ms (0: no hand-off seen).
    pub p99_handoff_ms: f64,
}

/// The jobs whose hand-offs count: two or four steps called one after another, with
/// no failing step, no cancel and no re-run.
pub fn steady_jobs(specs: &[JobSpec]) -> BTreeSet<String> {
    specs
        .iter()
        .filter(|s| matches!(s.kind, Kind::Two | Kind::Four))
        .filter(|s| s.plan.failing_step.is_none() && s.cancel_after.is_none())
        .filter(|s| s.rerun_from.is_none())
        .map(|s| s.id.clone())
        .collect()
}

/// Samples every `every` until `stop` is cancelled, on a fresh connection to the
/// primary of the moment each time; answers the samples.
pub async fn sample(
    nodes: Vec<Arc<Node>>,
    database: Arc<Database>,
    targets: Arc<Targets>,
    steady: BTreeSet<String>,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<Sample> {
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut seen_calls = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return samples,
        }
        let Ok((client, connection)) =
            tokio_postgres::connect(&database.url(), tokio_postgres::NoTls).await
        else {
            continue;
        };
        tokio::spawn(connection);
        let calls: Vec<Call> = targets
            .calls()
            .into_iter()
            .filter(|c| steady.contains(&c.job))
            .collect();
        let fresh = &calls[seen_calls.min(calls.len())..];
        let p99_handoff_ms = p99(handoffs(&calls, fresh));
        seen_calls = calls.len();
        let mut per_node = Vec::new();
        for node in &nodes {
            let (rss, fds) = node.pid().map_or((0.0, 0), process_figures);
            let sessions = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    &[&node.name],
                )
                .await
                .map_or(-1, |row| row.get(0));
            per_node.push((rss, sessions, fds));
        }
        let Ok(sizes) = client
            .query_one(
                "SELECT pg_total_relation_size('workflow_run')::float8 / 1048576,
                        pg_indexes_size('workflow_run')::float8 / 1048576,
                        pg_total_relation_size('workflow_run_events_outbox')::float8 / 1048576,
                        (SELECT count(*) FROM workflow_run WHERE finished_at > now() - $1::bigint * interval '1 millisecond')",
                &[&(every.as_millis() as i64)],
            )
            .await
        else {
            continue;
        };
        samples.push(Sample {
            minute: start.elapsed().as_secs_f64() / 60.0,
            nodes: per_node,
            jobs_mib: sizes.get(0),
            jobs_index_mib: sizes.get(1),
            outbox_mib: sizes.get(2),
            finished: sizes.get(3),
            p99_handoff_ms,
        });
    }
}

/// A process's resident set (MiB, `VmRSS`) and open file descriptors.
fn process_figures(pid: u32) -> (f64, usize) {
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<f64>().ok())
        })
        .unwrap_or(0.0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (rss_kib / 1024.0, fds)
}

/// The hand-offs that ended in `fresh`: for each answered call, the time from the
/// same job's previous answered call (of another step) ending to it starting.
fn handoffs(all: &[Call], fresh: &[Call]) -> Vec<f64> {
    let mut last_end: BTreeMap<&str, (&str, i64)> = BTreeMap::new();
    let fresh_from = all.len() - fresh.len();
    let mut found = Vec::new();
    // Calls are recorded as they end: a job's previous step is earlier in the list.
    for (at, call) in all.iter().enumerate() {
        if call.outcome != Outcome::Answered {
            continue;
        }
        if let Some((step, ended)) = last_end.get(call.job.as_str())
            && *step != call.step
            && at >= fresh_from
        {
            found.push((call.started_ms - ended) as f64);
        }
        last_end.insert(&call.job, (&call.step, call.ended_ms));
    }
    found
}

fn p99(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[((values.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)]
}

/// The least-squares slope of `points`, per hour (x in minutes).
fn slope_per_hour(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 3.0 {
        return 0.0;
    }
    let (mean_x, mean_y) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let covariance: f64 = points
        .iter()
        .map(|(x, y)| (x - mean_x) * (y - mean_y))
        .sum();
    let variance: f64 = points.iter().map(|(x, _)| (x - mean_x).powi(2)).sum();
    if variance == 0.0 {
        0.0
    } else {
        covariance / variance * 60.0
    }
}

/// The soak's verdicts, and the figures the summary prints.
pub fn check(samples: &[Sample], names: &[String]) -> (Vec<Breach>, Vec<(String, String)>) {
    let mut breaches = Vec::new();
    let mut figures = Vec::new();
    let settled: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.minute >= WARM_UP_MINUTES)
        .collect();
    for (i, name) in names.iter().enumerate() {
        let rss: Vec<(f64, f64)> = settled.iter().map(|s| (s.minute, s.nodes[i].0)).collect();
        let sessions: Vec<(f64, f64)> = settled
            .iter()
            .map(|s| (s.minute, s.nodes[i].1 as f64))
            .collect();
        let fds: Vec<(f64, f64)> = settled
            .iter()
            .map(|s| (s.minute, s.nodes[i].2 as f64))
            .collect();
        let (rss_slope, sessions_slope) = (slope_per_hour(&rss), slope_per_hour(&sessions));
        let fds_slope = slope_per_hour(&fds);
        figures.push((
            format!("{name}: open files slope after the warm-up"),
            format!("{fds_slope:+.1}/h"),
        ));
        if fds_slope > FDS_SLOPE_LIMIT_PER_HOUR {
            breaches.push(Breach {
                invariant: FDS,
                detail: format!(
                    "{name}'s open files grew {fds_slope:.1}/h (limit {FDS_SLOPE_LIMIT_PER_HOUR})"
                ),
            });
        }
        figures.push((
            format!("{name}: resident set slope after the warm-up"),
            format!("{rss_slope:+.1} MiB/h"),
        ));
        figures.push((
            format!("{name}: database sessions slope after the warm-up"),
            format!("{sessions_slope:+.2}/h"),
        ));
        if rss_slope > RSS_SLOPE_LIMIT_MIB_PER_HOUR {
            breaches.push(Breach {
                invariant: RSS,
                detail: format!(
                    "{name} grew {rss_slope:.1} MiB/h (limit {RSS_SLOPE_LIMIT_MIB_PER_HOUR})"
                ),
            });
        }
        if sessions_slope > SESSIONS_SLOPE_LIMIT_PER_HOUR {
            breaches.push(Breach {
                invariant: SESSIONS,
                detail: format!(
                    "{name}'s sessions grew {sessions_slope:.2}/h (limit {SESSIONS_SLOPE_LIMIT_PER_HOUR})"
                ),
            });
        }
    }
    let window = |from: f64, to: f64| -> f64 {
        let minutes: Vec<f64> = samples
            .iter()
            .filter(|s| s.minute > from && s.minute <= to && s.p99_handoff_ms > 0.0)
            .map(|s| s.p99_handoff_ms)
            .collect();
        // The median of the minutes' p99s: one slow minute does not decide.
        p50(minutes)
    };
    if settled.len() < FEWEST_SETTLED_SAMPLES {
        breaches.push(Breach {
            invariant: SAMPLED,
            detail: format!(
                "{} samples after the {WARM_UP_MINUTES}-minute warm-up, fewer than the {FEWEST_SETTLED_SAMPLES} a verdict needs",
                settled.len()
            ),
        });
    }
    let jobs_slope = slope_per_hour(
        &settled
            .iter()
            .map(|s| (s.minute, s.jobs_mib))
            .collect::<Vec<_>>(),
    );
    figures.push((
        "job table with indexes, slope after the warm-up (retention on)".into(),
        format!("{jobs_slope:+.1} MiB/h"),
    ));
    let last = samples.last().map_or(0.0, |s| s.minute);
    let (first, latest) = (
        window(WARM_UP_MINUTES, WARM_UP_MINUTES + 10.0),
        window(last - 10.0, last),
    );
    figures.push((
        "p99 step hand-off, first 10 minutes after the warm-up (median of the minutes)".into(),
        format!("{first:.0} ms"),
    ));
    figures.push((
        "p99 step hand-off, last 10 minutes".into(),
        format!("{latest:.0} ms"),
    ));
    if first > 0.0 && latest > first * LATENCY_DRIFT_LIMIT {
        breaches.push(Breach {
            invariant: LATENCY,
            detail: format!("the p99 hand-off went from {first:.0} ms to {latest:.0} ms"),
        });
    }
    (breaches, figures)
}

fn p50(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Prints the soak's summary, writes its CSV and chart into `out`, and answers
/// whether every invariant held: the database's (`report`), the drain, and the
/// soak's own. (The per-job checks of a chaos run are not made: retention deletes
/// the rows and events they read.)
pub fn report(
    out: &Path,
    samples: &[Sample],
    names: &[String],
    report: protomolt_e2e::invariants::Report,
    drained: Result<(), String>,
    logs: &[(String, String)],
    commit: String,
) -> bool {
    let (mut breaches, figures) = check(samples, names);
    breaches.extend(crate::verdict::log_breaches(logs));
    breaches.extend(report.breaches.iter().cloned());
    if let Err(left) = drained {
        breaches.push(Breach {
            invariant: crate::verdict::DRAINED,
            detail: left,
        });
    }
    let _ = std::fs::create_dir_all(out);
    let (csv, png) = (out.join("soak.csv"), out.join("soak.png"));
    if let Err(e) = write_csv(&csv, samples, names) {
        println!("chaos: writing {}: {e}", csv.display());
    }
    if let Err(e) = draw(&png, samples, names) {
        println!("chaos: drawing {}: {e}", png.display());
    }
    let minutes = samples.last().map_or(0.0, |s| s.minute);
    println!("\n## Soak: {minutes:.0} minutes, commit {commit}\n");
    println!("Samples: {} and {}.\n", csv.display(), png.display());
    println!("| jobs by final status | count |\n|---|---|");
    for (status, count) in &report.jobs_by_status {
        println!("| {status} | {count} |");
    }
    let finished: i64 = samples.iter().map(|s| s.finished).sum();
    println!("\n| figure | value |\n|---|---|");
    println!(
        "| jobs finished while sampled | {finished} ({:.1}/s) |",
        finished as f64 / (minutes * 60.0).max(1.0)
    );
    for (name, value) in figures {
        println!("| {name} | {value} |");
    }
    let invariants = [
        protomolt_e2e::invariants::STUCK,
        protomolt_e2e::invariants::CHECKPOINTS,
        protomolt_e2e::invariants::UNPUBLISHED,
        crate::verdict::DRAINED,
        crate::verdict::LOGS,
        SAMPLED,
        RSS,
        SESSIONS,
        FDS,
        LATENCY,
    ];
    crate::verdict::print_verdicts(invariants, &breaches)
}

/// Writes the samples as a CSV (one row a minute, a column per node and figure).
pub fn write_csv(path: &Path, samples: &[Sample], names: &[String]) -> std::io::Result<()> {
    let mut text = String::from("minute");
    for name in names {
        text.push_str(&format!(",{name}_rss_mib,{name}_sessions,{name}_fds"));
    }
    text.push_str(",jobs_mib,jobs_index_mib,outbox_mib,finished_per_minute,p99_handoff_ms\n");
    for s in samples {
        text.push_str(&format!("{:.2}", s.minute));
        for (rss, sessions, fds) in &s.nodes {
            text.push_str(&format!(",{rss:.1},{sessions},{fds}"));
        }
        text.push_str(&format!(
            ",{:.2},{:.2},{:.2},{},{:.1}\n",
            s.jobs_mib, s.jobs_index_mib, s.outbox_mib, s.finished, s.p99_handoff_ms
        ));
    }
    std::fs::write(path, text)
}

/// One panel of the chart: its title, its unit, its lines and their labels.
type Panel<'a> = (&'a str, &'a str, Vec<Vec<(f64, f64)>>, &'a Vec<String>);

/// Draws four panels (resident sets, sessions, table sizes, p99 hand-off) against the
/// minute.
pub fn draw(path: &Path, samples: &[Sample], names: &[String]) -> Result<(), String> {
    protomolt_e2e::charts::register_label_font()?;
    let root = BitMapBackend::new(path, (1200, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((2, 2));
    let last = samples.last().map_or(1.0, |s| s.minute).max(1.0);
    let colours = [BLUE, RED, GREEN, MAGENTA];
    let series_of = |pick: &dyn Fn(&Sample) -> Vec<f64>| -> Vec<Vec<(f64, f64)>> {
        let width = samples.first().map_or(0, |s| pick(s).len());
        (0..width)
            .map(|i| samples.iter().map(|s| (s.minute, pick(s)[i])).collect())
            .collect()
    };
    let node_labels: Vec<String> = names.to_vec();
    let table_labels = vec![
        "workflow_run (all)".to_owned(),
        "workflow_run indexes".to_owned(),
        "outbox (all)".to_owned(),
    ];
    let handoff_label = vec!["p99 hand-off".to_owned()];
    let panel_specs: [Panel; 4] = [
        (
            "resident set per node",
            "MiB",
            series_of(&|s| s.nodes.iter().map(|n| n.0).collect()),
            &node_labels,
        ),
        (
            "database sessions per node",
            "sessions",
            series_of(&|s| s.nodes.iter().map(|n| n.1 as f64).collect()),
            &node_labels,
        ),
        (
            "table sizes (retention on)",
            "MiB",
            series_of(&|s| vec![s.jobs_mib, s.jobs_index_mib, s.outbox_mib]),
            &table_labels,
        ),
        (
            "p99 step hand-off",
            "ms",
            series_of(&|s| vec![s.p99_handoff_ms]),
            &handoff_label,
        ),
    ];
    for (panel, (title, unit, series, labels)) in panels.iter().zip(panel_specs) {
        let y_max = series.iter().flatten().map(|(_, y)| *y).fold(1.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d(0f64..last, 0f64..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("minute")
            .y_desc(unit)
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, points) in series.into_iter().enumerate() {
            let colour = colours[i % colours.len()];
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(labels.get(i).cloned().unwrap_or_default())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_series_has_no_slope_and_a_growing_one_does() {
        let flat: Vec<(f64, f64)> = (0..50).map(|m| (m as f64, 100.0)).collect();
        assert_eq!(slope_per_hour(&flat), 0.0);
        let growing: Vec<(f64, f64)> = (0..50).map(|m| (m as f64, m as f64)).collect();
        assert!((slope_per_hour(&growing) - 60.0).abs() < 1e-9);
    }

    #[test]
    fn a_hand_off_is_from_one_steps_answer_to_the_next_steps_call() {
        let call = |job: &str, step: &str, started_ms, ended_ms| Call {
            job: job.into(),
            step: step.into(),
            started_ms,
            ended_ms,
            outcome: Outcome::Answered,
        };
        let calls = vec![
            call("a", "tokenize", 0, 10),
            call("b", "tokenize", 5, 12),
            call("a", "embed", 25, 30),
            call("b", "embed", 40, 41),
        ];
        assert_eq!(handoffs(&calls, &calls[2..]), vec![15.0, 28.0]);
        assert_eq!(p99(vec![1.0, 2.0, 3.0]), 3.0);
    }
}
