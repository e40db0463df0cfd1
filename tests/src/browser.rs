//! A real headless Chromium, driven over WebDriver, for the console's tests.
//!
//! Each test starts its own `chromedriver` (Debian's `chromium-driver`, which
//! `./dev test` installs) on a free port and opens as many browser sessions as it
//! needs; when the [`Browser`] is dropped (a failing test included) the driver is
//! asked to stop, which closes every browser it started, then killed. The node under test is
//! served on `127.0.0.1:0` by [`serve`], so the page talks to it over real HTTP:
//! the actions route, the SSE route, the console's own files.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use axum::Router;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// How long a test waits for the page to show something.
pub const PAGE_WAIT: Duration = Duration::from_secs(30);

/// A `chromedriver` of one test.
pub struct Browser {
    /// Held for its kill on drop.
    _driver: Child,
    url: String,
    /// A folder of this browser's own, named on every browser process's command line:
    /// what finds them to kill (see `Drop`).
    profiles: tempfile::TempDir,
}

impl Browser {
    /// Starts `chromedriver` (from `CHROMEDRIVER`, else `/usr/bin/chromedriver`).
    pub async fn start() -> Browser {
        let program =
            std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        let port = free_port();
        let driver = Command::new(&program)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {program}: {e}: run the tests with ./dev test, which installs chromium and chromium-driver")
            });
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "{program} never listened on {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profiles = tempfile::Builder::new()
            .prefix("protomolt-chromium-")
            .tempdir()
            .expect("a profile folder");
        Browser {
            _driver: driver,
            url,
            profiles,
        }
    }

    /// A new browser session (its own profile: its own session storage).
    pub async fn session(&self) -> Client {
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let profile = tempfile::tempdir_in(self.profiles.path()).expect("a profile");
        let profile = profile.keep();
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1280,1000",
                    "--no-first-run", "--disable-extensions",
                    "--disable-crash-reporter", "--disable-breakpad",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("a JSON object literal")
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&self.url)
                .await
            {
                Ok(client) => return client,
                // A loaded machine can be slow to start the first browser.
                Err(e) if attempt < 3 => {
                    eprintln!("a browser session failed to start ({e}); again")
                }
                Err(e) => panic!("no browser session: {e}"),
            }
        }
    }

    /// Stops the driver and its browsers.
    pub async fn stop(self) {
        drop(self);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A test that fails before closing its sessions leaves its browsers running
        // (chromedriver, killed on drop, does not take them along): end every process
        // whose command line names this browser's own profile folder, and only those.
        let _ = std::process::Command::new("pkill")
            .arg("-KILL")
            .arg("-f")
            .arg(self.profiles.path())
            .stderr(Stdio::null())
            .status();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Serves `router` on `127.0.0.1:0`; returns its base URL (`http://127.0.0.1:N`).
pub async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}")
}

/// The element `css` matches, once it exists.
pub async fn element(client: &Client, css: &str) -> fantoccini::elements::Element {
    client
        .wait()
        .at_most(PAGE_WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no element {css}: {e}"))
}

/// Waits until the text of the element `css` satisfies `check`; returns it.
pub async fn wait_for_text(
    client: &Client,
    css: &str,
    what: &str,
    check: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + PAGE_WAIT;
    let mut last = String::new();
    loop {
        if let Ok(found) = client.find(Locator::Css(css)).await
            && let Ok(text) = found.text().await
        {
            if check(&text) {
                return text;
            }
            last = text;
        }
        assert!(
            Instant::now() < deadline,
            "{css} never showed {what}; last text: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the element `css` has exactly `expected` as its text.
pub async fn wait_for_exact_text(client: &Client, css: &str, expected: &str) -> String {
    wait_for_text(client, css, expected, |text| text.trim() == expected).await
}

/// Clears the input `css` and types `text` into it.
pub async fn fill(client: &Client, css: &str, text: &str) {
    let input = element(client, css).await;
    input
        .clear()
        .await
        .unwrap_or_else(|e| panic!("clear {css}: {e}"));
    input
        .send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("type into {css}: {e}"));
}

/// Clicks the element `css`.
pub async fn click(client: &Client, css: &str) {
    element(client, css)
        .await
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

/// Saves a screenshot of the page as `target/screenshots/<name>.png` in the
/// workspace.
pub async fn screenshot(client: &Client, name: &str) -> PathBuf {
    let png = client.screenshot().await.expect("screenshot");
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&folder).expect("screenshots folder");
    let path = folder.join(format!("{name}.png"));
    std::fs::write(&path, png).expect("write screenshot");
    path
}
