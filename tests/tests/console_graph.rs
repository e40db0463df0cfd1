//! The console draws workflow graphs in a real headless Chromium: a job's steps as
//! boxes coloured by state with arrows for `after`, a map step's progress and its
//! elements paged, the timeline's bars, and a stored workflow's graph. Screenshots
//! land in `target/screenshots/`.

use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::browser::{Browser, click, element, screenshot, serve, wait_for_text};
use protomolt_e2e::jobs::{JobsNode, test_config};
use serde_json::json;
use workflow::testkit::{
    FixtureOptions, FixtureServer, diamond_workflow, distinct_text, map_workflow,
};

const WAIT: Duration = Duration::from_secs(30);

async fn count(page: &fantoccini::Client, css: &str) -> u64 {
    page.execute(
        "return document.querySelectorAll(arguments[0]).length;",
        vec![json!(css)],
    )
    .await
    .unwrap()
    .as_u64()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_page_draws_the_graph_a_maps_progress_and_its_elements() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start_with(FixtureOptions {
        embed_delay: Some(Duration::from_millis(15)),
        embed_echo_ids: true,
        ..Default::default()
    })
    .await;
    let node = JobsNode::start(test_config(&db.url, "graph-node", 2)).await;
    let base = serve(node.router.clone()).await;
    // 120 elements, 2 at a time: long enough to be seen running.
    let job_id = node
        .submit(
            &map_workflow(&server.target(), 2),
            json!({ "text": distinct_text(120) }),
        )
        .await;
    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&format!("{base}/console#/jobs/{job_id}"))
        .await
        .unwrap();

    // Two boxes and the arrow between them.
    element(
        &page,
        "#job-graph svg.step-graph g.graph-step[data-step=\"a\"]",
    )
    .await;
    element(
        &page,
        "#job-graph svg.step-graph g.graph-step[data-step=\"each\"]",
    )
    .await;
    assert_eq!(
        count(
            &page,
            "#job-graph path.graph-edge[data-from=\"a\"][data-to=\"each\"]"
        )
        .await,
        1
    );
    // The map step's progress counts up to the whole list, and the boxes end done.
    wait_for_text(
        &page,
        "#job-graph g.graph-step[data-step=\"each\"] .graph-count",
        "the whole list mapped",
        |t| t == "120/120",
    )
    .await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    element(
        &page,
        "#job-graph g.graph-step.state-done[data-step=\"each\"]",
    )
    .await;
    let bar = element(
        &page,
        "#job-graph g.graph-step[data-step=\"each\"] rect.graph-progress",
    )
    .await;
    let track = element(
        &page,
        "#job-graph g.graph-step[data-step=\"each\"] rect.graph-progress-track",
    )
    .await;
    assert_eq!(
        bar.attr("width").await.unwrap(),
        track.attr("width").await.unwrap(),
        "a full progress bar"
    );

    // The elements, paged: the first page, then the next.
    click(&page, "#map-items details[data-step=\"each\"] summary").await;
    wait_for_text(
        &page,
        "#map-items details[data-step=\"each\"] li[data-index=\"0\"]",
        "the first element",
        |t| t.contains("#0") && t.contains("256"),
    )
    .await;
    assert_eq!(count(&page, "#map-items li.map-item").await, 50);
    click(&page, "#map-items button.map-items-more").await;
    element(&page, "#map-items li[data-index=\"99\"]").await;

    // The timeline says how long each step took, with a bar.
    wait_for_text(
        &page,
        "#timeline li[data-step=\"each\"] .step-took",
        "the map step's duration",
        |t| t.starts_with("took "),
    )
    .await;
    assert_eq!(
        page.find(fantoccini::Locator::Css("#timeline li[data-step=\"each\"]"))
            .await
            .unwrap()
            .attr("data-state")
            .await
            .unwrap()
            .as_deref(),
        Some("done")
    );
    screenshot(&page, "job-graph").await;
    page.close().await.unwrap();
    browser.stop().await;
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_diamond_is_drawn_with_its_four_boxes_and_arrows() {
    let db = TestDatabase::create().await;
    let node = JobsNode::start(test_config(&db.url, "graph-workflows", 0)).await;
    let base = serve(node.router.clone()).await;
    node.ok(
        "put-workflow",
        json!({ "workflow": diamond_workflow("127.0.0.1:9") }),
    )
    .await;
    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&format!("{base}/console#/workflows/diamond"))
        .await
        .unwrap();
    element(&page, "svg.step-graph g.graph-step[data-step=\"d\"]").await;
    assert_eq!(count(&page, "svg.step-graph g.graph-step").await, 4);
    assert_eq!(count(&page, "svg.step-graph path.graph-edge").await, 4);
    assert_eq!(
        count(&page, "svg.step-graph path.graph-edge[data-to=\"d\"]").await,
        2,
        "d waits for b and c"
    );
    let after = element(&page, "ol.flow li[data-step=\"d\"] .step-after").await;
    assert_eq!(after.text().await.unwrap(), "after b, c");
    screenshot(&page, "workflow-graph").await;
    page.close().await.unwrap();
    browser.stop().await;
    node.stop().await;
}

/// A job waiting for an event: its page shows the key and a form generated from the
/// step's outputType that sends the event; the job takes it and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_for_an_event_shows_its_key_and_a_send_event_form() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "event-node", 1)).await;
    let base = serve(node.router.clone()).await;
    let envelope = workflow::testkit::event_workflow(&server.target(), json!({ "validate": true }));
    let job_id = node.submit(&envelope, json!({ "text": "77" })).await;
    node.wait_for_status(&job_id, "WAITING", WAIT).await;
    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&format!("{base}/console#/jobs/{job_id}"))
        .await
        .unwrap();
    wait_for_text(&page, "#event-key", "the key the job waits on", |t| {
        t == "order-77"
    })
    .await;
    let field = |path: &str| format!("form.event-form [data-path=\"{path}\"]");
    element(&page, &field("notes")).await;
    protomolt_e2e::browser::fill(&page, &field("notes"), "paid by card").await;
    protomolt_e2e::browser::fill(&page, &field("score"), "3").await;
    screenshot(&page, "send-event-form").await;
    click(&page, "form.event-form button.send-event").await;
    wait_for_text(
        &page,
        "#review .review-outcome",
        "the send's outcome",
        |t| t.contains("the job takes it"),
    )
    .await;
    let done = node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    assert_eq!(
        done["result"],
        json!({ "notes": "paid by card", "score": 3 })
    );
    browser.stop().await;
    node.stop().await;
}

/// A parent's page lists its children with links and statuses; a child's page links
/// back to its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parents_page_lists_its_children_and_a_child_links_back() {
    let db = TestDatabase::create().await;
    let server = FixtureServer::start().await;
    let node = JobsNode::start(test_config(&db.url, "tree-node", 2)).await;
    let base = serve(node.router.clone()).await;
    let leaf = workflow::testkit::leaf_workflow(&server.target());
    node.ok("put-workflow", json!({ "workflow": leaf })).await;
    let parent = workflow::testkit::workflow(
        "tree",
        vec![
            workflow::testkit::step(
                "a",
                &server.target(),
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text"],
            ),
            json!({ "name": "each", "workflow": "leaf", "forEach": "a.ids",
                    "rules": ["text = input.text"] }),
        ],
        Some(json!({ "type": "jobs.test.Vectors" })),
    );
    let job_id = node.submit(&parent, json!({ "text": "abc" })).await;
    node.wait_for_status(&job_id, "COMPLETED", WAIT).await;
    let browser = Browser::start().await;
    let page = browser.session().await;
    page.goto(&format!("{base}/console#/jobs/{job_id}"))
        .await
        .unwrap();
    element(&page, "#job-children li[data-status=\"COMPLETED\"]").await;
    assert_eq!(count(&page, "#job-children li").await, 3);
    screenshot(&page, "job-tree").await;
    click(&page, "#job-children li a").await;
    wait_for_text(&page, "#job-parent a", "the link back to the parent", |t| {
        // The id's head and tail, cut in the middle.
        let (head, tail) = t.split_once('…').unwrap_or((t, ""));
        !head.is_empty() && job_id.starts_with(head) && job_id.ends_with(tail)
    })
    .await;
    browser.stop().await;
    node.stop().await;
}
