//! The console: a web page for the fleet, every job's story, a human-review inbox and
//! the stored workflows, served at `/console`.
//!
//! The page is three static files embedded in the binary (no Node toolchain to build
//! or run it): `console/index.html`, `console/console.js` and `console/console.css`
//! beside this crate. It holds no privilege of its own: it calls the same actions
//! route as every client, with the same bearer token (asked for when the node
//! answers 401, kept in the tab's session storage), and reads a job's events from
//! the SSE route. Review forms are generated from the step's output type by
//! `get-form`, so a reviewer never hand-writes `complete-step` JSON.
//!
//! The files themselves are public (they hold no data); a strict
//! Content-Security-Policy allows only the page's own script and style, and
//! connections back to this node.

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../console/index.html");
const CONSOLE_JS: &str = include_str!("../console/console.js");
const CONSOLE_CSS: &str = include_str!("../console/console.css");

/// Only the page's own files, and calls back to this node: no inline script or
/// style, no framing, no form posts elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
style-src 'self'; connect-src 'self'; img-src 'self' data:; form-action 'none'; \
frame-ancestors 'none'; base-uri 'none'";

/// The console's routes (public: the files hold no data).
pub fn router() -> Router {
    Router::new()
        .route(
            "/console",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/",
            get(|| async { Redirect::permanent("/console") }),
        )
        .route(
            "/console/console.js",
            get(|| async { asset(CONSOLE_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console/console.css",
            get(|| async { asset(CONSOLE_CSS, "text/css; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            // A new binary serves new files: revalidate rather than run a stale page.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
