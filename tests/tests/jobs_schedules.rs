//! Schedules (issue 35) on in-process nodes: the verbs' refusals, backfill, catch-up
//! and daylight-saving days under a clock the test controls (the node's own
//! scheduler fired at chosen instants, its loop off), and the overlap policies under
//! the real loop with jobs slower than their schedule.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use http::StatusCode;
use jobs_role::actions::JobsState;
use protomolt_e2e::TestDatabase;
use protomolt_e2e::jobs::{JobsNode, http_get_text, test_config};
use serde_json::json;
use workflow::testkit::{FixtureOptions, FixtureServer, leaf_workflow};

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("a test instant")
        .with_timezone(&Utc)
}

/// A node whose schedules fire only when the test fires them (`workers` running
/// jobs), with `leaf` stored.
async fn clocked_node(
    db: &TestDatabase,
    target: &str,
    workers: usize,
) -> (JobsNode, Arc<JobsState>) {
    let mut config = test_config(&db.url, "clocked", workers);
    config.schedule_poll_ms = 0;
    let node = JobsNode::start(config).await;
    node.ok("put-workflow", json!({ "workflow": leaf_workflow(target) }))
        .await;
    let state = node
        .node
        .get::<Arc<JobsState>>()
        .expect("the jobs role provides its state");
    (node, state)
}

/// The ticks (`scheduled_for`) of schedule `name`'s jobs, oldest first.
async fn ticks_of(db: &TestDatabase, name: &str) -> Vec<DateTime<Utc>> {
    db.connect()
        .await
        .query(
            "SELECT scheduled_for FROM workflow_run WHERE schedule_name = $1 ORDER BY scheduled_for",
            &[&name],
        )
        .await
        .expect("ticks")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Moves the test's clock from tick to tick of schedule `name` up to `until`, firing
/// just after each (as a node's loop would, on time).
async fn fire_each_tick(state: &JobsState, name: &str, until: DateTime<Utc>) {
    loop {
        let schedule = state
            .store
            .schedule(name)
            .await
            .expect("read")
            .expect("the schedule");
        let Some(next) = schedule.next_fire_at.filter(|next| *next <= until) else {
            return;
        };
        state
            .scheduler
            .fire_due(next + chrono::Duration::seconds(1))
            .await
            .expect("fire");
    }
}

#[tokio::test]
async fn bad_cron_zone_workflow_or_input_is_a_400_naming_the_field_and_nothing_is_stored() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let (node, _) = clocked_node(&db, &server.target(), 0).await;
    let good = json!({ "name": "nightly", "cron": "30 2 * * *", "timezone": "Europe/Berlin",
        "workflowName": "leaf", "input": { "text": "hello" } });
    for (field, value, named) in [
        ("cron", json!("61 * * * *"), "cron"),
        ("cron", json!("* * *"), "cron"),
        ("cron", json!("0 0 30 2 *"), "cron"),
        ("cron", json!("@every 0s"), "cron"),
        ("timezone", json!("Mars/Olympus"), "timezone"),
        ("workflowName", json!("no-such-workflow"), "workflowName"),
        ("input", json!({ "nope": 1 }), "input"),
        ("overlap", json!("sometimes"), "overlap"),
        ("catchup", json!("most"), "catchup"),
        ("name", json!("Not A Name"), "name"),
        ("endAt", json!("2020-01-01T00:00:00Z"), "endAt"),
    ] {
        let mut body = good.clone();
        body[field] = value.clone();
        let (status, answer) = node.call("put-schedule", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field} {value}: {answer}");
        let said = answer.to_string();
        assert!(said.contains(named), "{field} {value} is named: {said}");
    }
    let stored: i64 = db
        .connect()
        .await
        .query_one("SELECT count(*) FROM workflow_schedules", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(stored, 0, "no refused schedule was stored");
    let listed = node.ok("list-schedules", json!({})).await;
    assert_eq!(listed["schedules"], json!([]));

    // The good one is stored, with its next five ticks in its zone.
    let put = node.ok("put-schedule", good).await;
    assert_eq!(put["created"], true);
    let shown = node.ok("get-schedule", json!({ "name": "nightly" })).await;
    let upcoming = shown["schedule"]["nextFireTimes"]
        .as_array()
        .expect("ticks");
    assert_eq!(upcoming.len(), 5, "{shown}");
    assert_eq!(shown["schedule"]["overlap"], "skip");
    assert_eq!(shown["schedule"]["catchup"], "last");
    let unknown = node.ok("get-schedule", json!({ "name": "weekly" })).await;
    assert_eq!(unknown["ok"], false);
}

#[tokio::test]
async fn backfilling_a_past_hour_of_a_ten_minute_schedule_makes_six_jobs_once() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let (node, _) = clocked_node(&db, &server.target(), 0).await;
    node.ok(
        "put-schedule",
        json!({ "name": "every-ten", "cron": "*/10 * * * *", "workflowName": "leaf",
            "input": { "text": "backfilled" } }),
    )
    .await;
    let from = "2026-11-01T09:00:00Z";
    let to = "2026-11-01T10:00:00Z";
    let first = node
        .ok(
            "backfill-schedule",
            json!({ "name": "every-ten", "from": from, "to": to }),
        )
        .await;
    assert_eq!(first["made"], 6, "{first}");
    let again = node
        .ok(
            "backfill-schedule",
            json!({ "name": "every-ten", "from": from, "to": to }),
        )
        .await;
    assert_eq!(again["made"], 0, "{again}");
    assert_eq!(again["already"], 6);
    let ticks = ticks_of(&db, "every-ten").await;
    let expected: Vec<DateTime<Utc>> = (0..6)
        .map(|i| at(from) + chrono::Duration::minutes(10 * i))
        .collect();
    assert_eq!(ticks, expected);

    // Each job says which schedule and tick it stands for, in get-job, list-jobs and
    // its ACCEPTED event.
    let listed = node
        .ok(
            "list-jobs",
            json!({ "scheduleName": "every-ten", "oldestFirst": true }),
        )
        .await;
    let jobs = listed["jobs"].as_array().expect("jobs");
    assert_eq!(jobs.len(), 6);
    let first = jobs
        .iter()
        .find(|job| {
            job["scheduledFor"]
                .as_str()
                .is_some_and(|t| at(t) == at(from))
        })
        .expect("the job of the range's first tick");
    let job_id = first["jobId"].as_str().expect("an id");
    let job = node.ok("get-job", json!({ "jobId": job_id })).await;
    assert_eq!(job["job"]["scheduleName"], "every-ten");
    assert_eq!(
        at(job["job"]["scheduledFor"].as_str().expect("a tick")),
        at(from)
    );
    let accepted = &job["job"]["events"][0];
    assert_eq!(accepted["type"], "ACCEPTED", "{accepted}");
    assert_eq!(
        accepted["detail"]["scheduleName"], "every-ten",
        "{accepted}"
    );

    // A range ending in the future, or upside down, is refused naming the field.
    let (status, answer) = node
        .call(
            "backfill-schedule",
            json!({ "name": "every-ten", "from": from, "to": "2999-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("to:")
    );
    let (status, _) = node
        .call(
            "backfill-schedule",
            json!({ "name": "every-ten", "from": to, "to": from }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        ticks_of(&db, "every-ten").await.len(),
        6,
        "nothing more was made"
    );
}

#[tokio::test]
async fn five_missed_minutes_make_one_job_under_last_five_under_all_and_none_under_none() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let (node, state) = clocked_node(&db, &server.target(), 0).await;
    let start = "2027-01-01T10:00:00Z";
    for catchup in ["last", "all", "none"] {
        node.ok(
            "put-schedule",
            json!({ "name": format!("minutely-{catchup}"), "cron": "* * * * *",
                "workflowName": "leaf", "input": { "text": catchup }, "catchup": catchup,
                "overlap": "allow", "startAt": start }),
        )
        .await;
    }
    // The fleet fires 10:00 on time, then is down until 10:05:30.
    state
        .scheduler
        .fire_due(at("2027-01-01T10:00:01Z"))
        .await
        .expect("fire");
    let report = state
        .scheduler
        .fire_due(at("2027-01-01T10:05:30Z"))
        .await
        .expect("fire");
    assert_eq!(report.fired, 3, "{report:?}");
    let minutes = |ticks: Vec<DateTime<Utc>>| -> Vec<String> {
        ticks
            .iter()
            .map(|t| t.format("%H:%M").to_string())
            .collect()
    };
    assert_eq!(
        minutes(ticks_of(&db, "minutely-last").await),
        ["10:00", "10:05"]
    );
    assert_eq!(
        minutes(ticks_of(&db, "minutely-all").await),
        ["10:00", "10:01", "10:02", "10:03", "10:04", "10:05"]
    );
    assert_eq!(minutes(ticks_of(&db, "minutely-none").await), ["10:00"]);
    // Each goes on from the next minute.
    for catchup in ["last", "all", "none"] {
        let shown = node
            .ok(
                "get-schedule",
                json!({ "name": format!("minutely-{catchup}") }),
            )
            .await;
        assert_eq!(
            at(shown["schedule"]["nextFireAt"].as_str().expect("next")),
            at("2027-01-01T10:06:00Z")
        );
    }
    // Firing the same instant again (a node that lost its COMMIT's answer) makes no more.
    state
        .scheduler
        .fire_due(at("2027-01-01T10:05:30Z"))
        .await
        .expect("fire");
    assert_eq!(ticks_of(&db, "minutely-all").await.len(), 6);
}

#[tokio::test]
async fn new_york_and_berlin_schedules_follow_daylight_saving_as_promised() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let (node, state) = clocked_node(&db, &server.target(), 0).await;
    // Each bounded by endAt, so firing one's days never reaches the others'.
    let put = |name: &str, cron: &str, zone: &str, from: &str, to: &str| {
        json!({ "name": name, "cron": cron, "timezone": zone, "workflowName": "leaf",
            "input": { "text": name }, "overlap": "allow", "startAt": from, "endAt": to })
    };
    node.ok(
        "put-schedule",
        put(
            "ny-spring",
            "30 2 * * *",
            "America/New_York",
            "2027-03-13T00:00:00Z",
            "2027-03-16T00:00:00Z",
        ),
    )
    .await;
    node.ok(
        "put-schedule",
        put(
            "ny-fall",
            "30 2 * * *",
            "America/New_York",
            "2027-11-06T00:00:00Z",
            "2027-11-09T00:00:00Z",
        ),
    )
    .await;
    node.ok(
        "put-schedule",
        put(
            "berlin",
            "0 9 * * MON-FRI",
            "Europe/Berlin",
            "2027-03-22T00:00:00Z",
            "2027-04-03T00:00:00Z",
        ),
    )
    .await;
    // The clock moves forward only: March in New York, then Berlin, then November.
    fire_each_tick(&state, "ny-spring", at("2027-03-16T00:00:00Z")).await;
    fire_each_tick(&state, "berlin", at("2027-04-03T00:00:00Z")).await;
    fire_each_tick(&state, "ny-fall", at("2027-11-09T00:00:00Z")).await;

    let shown = |ticks: Vec<DateTime<Utc>>| -> Vec<String> {
        ticks.iter().map(|t| t.to_rfc3339()).collect()
    };
    // 2027-03-14 has no 02:30 in New York: that day fires once, at 03:00 EDT.
    assert_eq!(
        shown(ticks_of(&db, "ny-spring").await),
        [
            "2027-03-13T07:30:00+00:00",
            "2027-03-14T07:00:00+00:00",
            "2027-03-15T06:30:00+00:00",
        ]
    );
    // 2027-11-07 falls back at 02:00 EDT: 02:30 EST, once.
    assert_eq!(
        shown(ticks_of(&db, "ny-fall").await),
        [
            "2027-11-06T06:30:00+00:00",
            "2027-11-07T07:30:00+00:00",
            "2027-11-08T07:30:00+00:00",
        ]
    );
    // Berlin moves to summer time on 2027-03-28: 09:00 is 08:00 UTC before, 07:00 after.
    let berlin = ticks_of(&db, "berlin").await;
    assert_eq!(berlin.len(), 10, "two working weeks: {berlin:?}");
    for tick in &berlin {
        let summer = *tick >= at("2027-03-28T01:00:00Z");
        let hour = if summer { "07:00" } else { "08:00" };
        assert_eq!(tick.format("%H:%M").to_string(), hour, "{tick}");
    }
}

/// Schedule `name` of `leaf` (Tokenize taking 3 s) every second under `overlap` on a
/// node with workers, for `seconds`; then paused. Samples the schedule's live jobs by
/// status while it runs.
async fn run_slow_schedule(
    overlap: &str,
    seconds: u64,
) -> (TestDatabase, FixtureServer, Vec<(i64, i64)>, String) {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        tokenize_delay: Some(Duration::from_secs(3)),
        ..FixtureOptions::default()
    })
    .await;
    let mut config = test_config(&db.url, "overlap", 4);
    config.schedule_poll_ms = 200;
    let node = JobsNode::start(config).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": leaf_workflow(&server.target()) }),
    )
    .await;
    node.ok(
        "put-schedule",
        json!({ "name": "slow", "cron": "@every 1s", "workflowName": "leaf",
            "input": { "text": overlap }, "overlap": overlap }),
    )
    .await;
    let client = db.connect().await;
    let mut samples = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(seconds);
    while std::time::Instant::now() < until {
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE status = 'QUEUED'),
                        count(*) FILTER (WHERE status = 'RUNNING')
                   FROM workflow_run WHERE schedule_name = 'slow'",
                &[],
            )
            .await
            .expect("sample");
        samples.push((row.get(0), row.get(1)));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.ok(
        "pause-schedule",
        json!({ "name": "slow", "reason": "done" }),
    )
    .await;
    let (_, metrics) = http_get_text(&node.router, "/metrics").await;
    node.stop().await;
    (db, server, samples, metrics)
}

/// `protomolt_jobs_schedule_ticks_total{outcome}` in a scrape (0 when absent).
fn ticks_counted(metrics: &str, outcome: &str) -> f64 {
    let prefix = format!("protomolt_jobs_schedule_ticks_total{{outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn count_where(db: &TestDatabase, condition: &str) -> i64 {
    db.connect()
        .await
        .query_one(
            &format!(
                "SELECT count(*) FROM workflow_run WHERE schedule_name = 'slow' AND {condition}"
            ),
            &[],
        )
        .await
        .expect("count")
        .get(0)
}

#[tokio::test]
async fn overlap_skip_makes_no_job_while_the_previous_one_runs() {
    let (db, server, samples, metrics) = run_slow_schedule("skip", 10).await;
    let made = count_where(&db, "true").await;
    assert!(
        (2..=6).contains(&made),
        "3 s jobs on a 1 s schedule over 10 s: one job per run, the ticks between skipped ({made})"
    );
    assert!(
        samples
            .iter()
            .all(|(queued, running)| queued + running <= 1),
        "never two live jobs of the schedule: {samples:?}"
    );
    let most = server.stats.max_in_flight_by_text();
    assert_eq!(most.get("skip"), Some(&1), "{most:?}");
    // The node counted what it fired and what it skipped.
    assert_eq!(ticks_counted(&metrics, "fired"), made as f64, "{metrics}");
    assert!(
        ticks_counted(&metrics, "skipped_overlap") >= 3.0,
        "{metrics}"
    );
    assert!(
        metrics.contains("protomolt_jobs_schedule_lag_seconds_count"),
        "{metrics}"
    );
}

#[tokio::test]
async fn overlap_buffer_one_keeps_at_most_one_job_waiting() {
    let (db, server, samples, _) = run_slow_schedule("buffer-one", 10).await;
    assert!(
        samples
            .iter()
            .all(|(queued, running)| *queued <= 1 && *running <= 1),
        "one running and at most one waiting: {samples:?}"
    );
    assert!(
        samples
            .iter()
            .any(|(queued, running)| *queued == 1 && *running == 1),
        "a job did wait behind the running one: {samples:?}"
    );
    let most = server.stats.max_in_flight_by_text();
    assert_eq!(most.get("buffer-one"), Some(&1), "{most:?}");
    assert!(count_where(&db, "true").await >= 3);
}

#[tokio::test]
async fn overlap_cancel_previous_cancels_the_running_job() {
    let (db, server, samples, _) = run_slow_schedule("cancel-previous", 8).await;
    assert!(
        samples.iter().all(|(_, running)| *running <= 1),
        "the new job starts once the cancelled one stopped: {samples:?}"
    );
    let cancelled = count_where(
        &db,
        "status = 'CANCELLED' AND cancel_reason LIKE '%cancel-previous%'",
    )
    .await;
    assert!(
        cancelled >= 2,
        "each tick cancelled the job before it ({cancelled})"
    );
    // A cancelled job had been running: its step was called.
    let called: std::collections::HashSet<String> = server
        .stats
        .calls()
        .iter()
        .filter_map(|call| {
            call.metadata
                .iter()
                .find(|(name, _)| name == "x-protomolt-job-id")
                .map(|(_, id)| id.clone())
        })
        .collect();
    let rows = db
        .connect()
        .await
        .query(
            "SELECT job_id::text FROM workflow_run WHERE schedule_name = 'slow' AND status = 'CANCELLED'",
            &[],
        )
        .await
        .expect("cancelled");
    assert!(
        rows.iter()
            .any(|row| called.contains(&row.get::<_, String>(0))),
        "a job was cancelled while it ran"
    );
}

#[tokio::test]
async fn a_tick_fired_twice_under_cancel_previous_keeps_its_own_job() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let (node, state) = clocked_node(&db, &server.target(), 0).await;
    node.ok(
        "put-schedule",
        json!({ "name": "replaced", "cron": "* * * * *", "workflowName": "leaf",
            "input": { "text": "x" }, "overlap": "cancel-previous",
            "startAt": "2027-01-01T10:00:00Z" }),
    )
    .await;
    let fire = |at_text: &'static str| {
        let state = state.clone();
        async move { state.scheduler.fire_due(at(at_text)).await.expect("fire") }
    };
    fire("2027-01-01T10:00:01Z").await;
    // The row goes back to the tick it fired (a put that raced the fire, a node
    // that lost its COMMIT's answer): the tick fires again.
    db.connect()
        .await
        .execute(
            "UPDATE workflow_schedules SET next_fire_at = '2027-01-01T10:00:00Z' WHERE name = 'replaced'",
            &[],
        )
        .await
        .expect("rewind");
    let again = fire("2027-01-01T10:00:02Z").await;
    assert_eq!(again.already, 1, "{again:?}");
    assert_eq!(
        again.cancelled, 0,
        "its own job is not a previous one: {again:?}"
    );
    assert_eq!(
        count_named(&db, "replaced", "status = 'QUEUED'").await,
        1,
        "the tick's one job still stands"
    );
    // The next tick does cancel it.
    let next = fire("2027-01-01T10:01:01Z").await;
    assert_eq!(next.cancelled, 1, "{next:?}");
    assert_eq!(
        count_named(&db, "replaced", "status = 'CANCELLED'").await,
        1
    );
}

#[tokio::test]
async fn a_tick_whose_id_another_job_holds_makes_nothing_and_says_so() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let (node, state) = clocked_node(&db, &server.target(), 0).await;
    node.ok(
        "put-schedule",
        json!({ "name": "guarded", "cron": "* * * * *", "workflowName": "leaf",
            "input": { "text": "mine" }, "startAt": "2027-01-01T10:00:00Z" }),
    )
    .await;
    // The salt is never shown: the verbs do not give it away.
    let shown = node.ok("get-schedule", json!({ "name": "guarded" })).await;
    assert!(!shown.to_string().contains("alt"), "{shown}");
    // Someone who could read it takes the 10:00 tick's id with another input.
    let salt: uuid::Uuid = db
        .connect()
        .await
        .query_one(
            "SELECT id_salt FROM workflow_schedules WHERE name = 'guarded'",
            &[],
        )
        .await
        .expect("salt")
        .get(0);
    let id = jobs_role::schedules::firing::tick_job_id(
        "guarded",
        salt,
        at("2027-01-01T10:00:00Z"),
        jobs_role::schedules::firing::TickKind::Tick,
    );
    node.ok(
        "submit-workflow",
        json!({ "workflowName": "leaf", "input": { "text": "theirs" }, "jobId": id.to_string() }),
    )
    .await;
    let report = state
        .scheduler
        .fire_due(at("2027-01-01T10:00:01Z"))
        .await
        .expect("fire");
    assert_eq!(report.failed, 1, "{report:?}");
    let shown = node.ok("get-schedule", json!({ "name": "guarded" })).await;
    let error = shown["schedule"]["lastError"].as_str().unwrap_or_default();
    assert!(error.contains("held by another job"), "{shown}");
    assert_eq!(count_named(&db, "guarded", "true").await, 0);
}

#[tokio::test]
async fn a_node_without_the_workflow_leaves_the_tick_to_one_that_has_it() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    // Each in-process node has its own stored workflows: only `with` stores leaf.
    let (with, with_state) = clocked_node(&db, &server.target(), 0).await;
    let mut config = test_config(&db.url, "without", 0);
    config.schedule_poll_ms = 0;
    let without = JobsNode::start(config).await;
    let without_state = without
        .node
        .get::<Arc<JobsState>>()
        .expect("the jobs role provides its state");
    with.ok(
        "put-schedule",
        json!({ "name": "deployed", "cron": "* * * * *", "workflowName": "leaf",
            "input": { "text": "x" }, "startAt": "2027-01-01T10:00:00Z" }),
    )
    .await;
    let left = without_state
        .scheduler
        .fire_due(at("2027-01-01T10:00:01Z"))
        .await
        .expect("fire");
    assert_eq!((left.deferred, left.fired), (1, 0), "{left:?}");
    let fired = with_state
        .scheduler
        .fire_due(at("2027-01-01T10:00:02Z"))
        .await
        .expect("fire");
    assert_eq!(fired.made, 1, "{fired:?}");
    // With no node that has it, the tick is fired without its job after a while,
    // and the schedule says why.
    let late = without_state
        .scheduler
        .fire_due(at("2027-01-01T10:01:09Z"))
        .await
        .expect("fire");
    assert_eq!((late.fired, late.failed), (1, 1), "{late:?}");
    let shown = with.ok("get-schedule", json!({ "name": "deployed" })).await;
    assert!(
        shown["schedule"]["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("workflowName") || e.contains("no stored workflow")),
        "{shown}"
    );
    assert_eq!(
        at(shown["schedule"]["nextFireAt"].as_str().expect("next")),
        at("2027-01-01T10:02:00Z")
    );
}

#[tokio::test]
async fn putting_the_same_schedule_again_changes_nothing_and_an_unreadable_one_is_paused() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let (node, state) = clocked_node(&db, &server.target(), 0).await;
    let body = json!({ "name": "same", "cron": "*/5 * * * *", "workflowName": "leaf",
        "input": { "text": "x" } });
    let first = node.ok("put-schedule", body.clone()).await;
    let again = node.ok("put-schedule", body).await;
    assert_eq!(again["created"], false);
    assert_eq!(again["schedule"]["revision"], first["schedule"]["revision"]);
    assert_eq!(
        again["schedule"]["nextFireAt"],
        first["schedule"]["nextFireAt"]
    );

    // A row edited by hand into something no node can read is paused, saying why,
    // not retried on every round.
    db.connect()
        .await
        .execute(
            "UPDATE workflow_schedules SET spec = jsonb_set(spec, '{cron}', '\"not a cron\"'), next_fire_at = now() - interval '1 minute' WHERE name = 'same'",
            &[],
        )
        .await
        .expect("edit");
    state
        .scheduler
        .fire_due(chrono::Utc::now())
        .await
        .expect("fire");
    let shown = node.ok("get-schedule", json!({ "name": "same" })).await;
    assert_eq!(shown["schedule"]["paused"], true, "{shown}");
    assert!(
        shown["schedule"]["pausedReason"]
            .as_str()
            .is_some_and(|r| r.contains("cron")),
        "{shown}"
    );
}

async fn count_named(db: &TestDatabase, name: &str, condition: &str) -> i64 {
    db.connect()
        .await
        .query_one(
            &format!("SELECT count(*) FROM workflow_run WHERE schedule_name = $1 AND {condition}"),
            &[&name],
        )
        .await
        .expect("count")
        .get(0)
}
