//! Drain mode: a node that stops claiming and finishes what it runs, so it can be
//! stopped or upgraded while the rest of the fleet takes the queue.
//!
//! `POST /admin/drain` (scope `node:admin`) with `{"drain": true}` (the default) or
//! `{"drain": false}` turns it on or off; `GET /admin/drain` answers the state:
//!
//! ```json
//! {"ok": true, "draining": true, "running": 3}
//! ```
//!
//! `running` is how many jobs the node still runs: 0 once it has drained. The mode is
//! the node's own (it is not stored: a restarted node claims again), and
//! `protomolt node drain` calls the route.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The node's drain switch, shared by its dispatcher and its admin route.
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    running: AtomicUsize,
    changed: Notify,
}

impl Drain {
    /// True while the node claims nothing.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Turns drain mode on or off; a dispatcher waiting for it to end hears at once.
    pub fn set(&self, draining: bool) {
        self.draining.store(draining, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Waits until the mode changes.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// The dispatcher's count of the jobs it runs.
    pub(crate) fn set_running(&self, running: usize) {
        self.running.store(running, Ordering::Release);
    }

    /// How many jobs the node runs now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    fn state(&self) -> Value {
        json!({ "ok": true, "draining": self.is_draining(), "running": self.running() })
    }
}

/// `GET` and `POST /admin/drain`.
pub fn router(drain: Arc<Drain>) -> Router {
    Router::new()
        .route("/admin/drain", get(read).post(switch))
        .with_state(drain)
}

async fn read(State(drain): State<Arc<Drain>>) -> Json<Value> {
    Json(drain.state())
}

async fn switch(State(drain): State<Arc<Drain>>, body: Option<Json<Value>>) -> Json<Value> {
    let on = body
        .and_then(|Json(body)| body.get("drain").and_then(Value::as_bool))
        .unwrap_or(true);
    drain.set(on);
    tracing::info!(draining = on, "drain mode switched by an operator");
    Json(drain.state())
}
