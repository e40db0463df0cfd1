//! The console: a web page for the fleet, every job's story, a human-review inbox,
//! the stored workflows and the schedules, served at `/console`.
//!
//! The page is static files embedded in the binary (no Node toolchain to build or run
//! it, no build step): `console/index.html`, `console/console.css`, and the script as
//! ES modules, `console/console.js` (the entry module: the router) importing the ones
//! in `console/js/`, one per concept (`dom`, `api`, `sse`, `forms-rules`, `forms`,
//! `definition`, `graph`, `map-items`, `charts`, and one per page: `fleet`, `job`, `inbox`,
//! `workflows`, `schedules`; see the
//! comment at the top of `console.js`). It holds no privilege of its own: it calls the
//! same actions route as every client, with the same bearer token (asked for when the
//! node answers 401, kept in the tab's session storage), and reads a job's events from
//! the SSE route. Review forms are generated from the step's output type by
//! `get-form`, so a reviewer never hand-writes `complete-step` JSON.
//!
//! The files themselves are public (they hold no data); a strict
//! Content-Security-Policy allows only the page's own script and style (its module
//! imports are same-origin), and connections back to this node.

use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../console/index.html");
const CONSOLE_JS: &str = include_str!("../console/console.js");
const CONSOLE_CSS: &str = include_str!("../console/console.css");

/// Each module in `console/js/`, by file name, with its text.
macro_rules! modules {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../console/js/", $name)))),*]
    };
}

/// The modules `console.js` imports, served at `/console/js/{name}`: this list is the
/// whole set (nothing is read from the filesystem), any other name is 404.
const MODULES: &[(&str, &str)] = modules![
    "api.js",
    "charts.js",
    "definition.js",
    "dom.js",
    "fleet.js",
    "forms-rules.js",
    "forms.js",
    "graph.js",
    "inbox.js",
    "job.js",
    "map-items.js",
    "schedules.js",
    "sse.js",
    "tree.js",
    "workflows.js",
];

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

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
            get(|| async { asset(CONSOLE_JS, JAVASCRIPT) }),
        )
        .route("/console/js/{name}", get(module))
        .route(
            "/console/console.css",
            get(|| async { asset(CONSOLE_CSS, "text/css; charset=utf-8") }),
        )
}

/// One of the modules in [`MODULES`], or 404.
async fn module(Path(name): Path<String>) -> Response {
    match MODULES.iter().find(|(file, _)| *file == name) {
        Some((_, body)) => asset(body, JAVASCRIPT),
        None => StatusCode::NOT_FOUND.into_response(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn console_dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("console")
    }

    /// The modules a script imports (`from './x.js'`, or `'./js/x.js'` from the entry).
    fn imports(script: &str) -> Vec<String> {
        script
            .lines()
            .filter(|line| line.starts_with("import ") || line.starts_with("} from "))
            .filter_map(|line| line.split(" from '").nth(1)?.strip_suffix("';"))
            .map(|path| {
                path.trim_start_matches("./")
                    .trim_start_matches("js/")
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn every_module_is_listed_and_every_import_is_served() {
        let mut on_disk: Vec<String> = std::fs::read_dir(console_dir().join("js"))
            .expect("console/js")
            .map(|entry| {
                entry
                    .expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        on_disk.sort();
        let listed: Vec<String> = MODULES.iter().map(|(name, _)| (*name).to_owned()).collect();
        assert_eq!(
            listed, on_disk,
            "MODULES lists the files in console/js, sorted"
        );
        let scripts = std::iter::once(CONSOLE_JS).chain(MODULES.iter().map(|(_, body)| *body));
        let mut imported = Vec::new();
        for script in scripts {
            imported.extend(imports(script));
        }
        assert!(imported.len() > 20, "imports found: {imported:?}");
        for name in imported {
            assert!(
                MODULES.iter().any(|(file, _)| *file == name),
                "{name} is imported but not served"
            );
        }
    }

    #[tokio::test]
    async fn a_module_is_served_like_the_script_and_an_unknown_one_is_404() {
        let served = module(Path("forms-rules.js".to_owned())).await;
        assert_eq!(served.status(), StatusCode::OK);
        let headers = served.headers();
        assert_eq!(headers[header::CONTENT_TYPE], JAVASCRIPT);
        assert_eq!(
            headers[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        for unknown in ["x.js", "../console.js", "console.js", "dom.js.map", ""] {
            let answer = module(Path(unknown.to_owned())).await;
            assert_eq!(answer.status(), StatusCode::NOT_FOUND, "{unknown:?}");
        }
    }
}
