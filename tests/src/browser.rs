//! A real headless Chromium, driven over WebDriver, for the console's tests.
//!
//! Each test starts its own `chromedriver` (Debian's `chromium-driver`, which
//! `./dev test` installs) and opens as many browser sessions as it needs; when the
//! [`Browser`] is dropped (a failing test included) the driver is killed and so is
//! every browser it started. The node under test is served on `127.0.0.1:0` by
//! [`serve`], so the page talks to it over real HTTP: the actions route, the SSE
//! route, the console's own files.
//!
//! The driver is started with `--port=0` and the test reads the port it chose from
//! its first lines: a port picked by the test and handed over would be free only
//! until another test's server took it, and the test would then be talking to that
//! server (a CI run once failed so). A driver that dies is started again.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a test waits for the page to show something.
pub const PAGE_WAIT: Duration = Duration::from_secs(30);

/// How long `chromedriver` may take to say which port it listens on.
const DRIVER_START: Duration = Duration::from_secs(30);

/// What `chromedriver` prints once it listens, before the port.
const STARTED_ON_PORT: &str = "was started successfully on port ";

/// A `chromedriver` of one test.
pub struct Browser {
    driver: tokio::sync::Mutex<Driver>,
    /// A folder of this browser's own, named on every browser process's command line:
    /// what finds them to kill (see `Drop`).
    profiles: tempfile::TempDir,
}

/// One running `chromedriver` process.
struct Driver {
    /// Held for its kill on drop.
    child: Child,
    url: String,
    /// The driver's last lines of output, for a failure's message.
    output: Arc<Mutex<Vec<String>>>,
}

impl Driver {
    /// Starts `chromedriver` (from `CHROMEDRIVER`, else `/usr/bin/chromedriver`) on
    /// a port of its own choosing.
    async fn start() -> Driver {
        let program =
            std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        let mut child = Command::new(&program)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {program}: {e}: run the tests with ./dev test, which installs chromium and chromium-driver")
            });
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let output = Arc::new(Mutex::new(Vec::new()));
        let port = tokio::time::timeout(DRIVER_START, async {
            while let Ok(Some(line)) = lines.next_line().await {
                remember(&output, &line);
                if let Some(rest) = line.split(STARTED_ON_PORT).nth(1) {
                    return rest.trim_end_matches('.').trim().parse::<u16>().ok();
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            panic!(
                "{program} never said which port it listens on; it printed: {:?}",
                output.lock().map(|o| o.clone()).unwrap_or_default()
            )
        });
        // Keep reading, so that the driver never blocks on a full pipe and a later
        // failure can show what it said.
        let tail = Arc::clone(&output);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                remember(&tail, &line);
            }
        });
        Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            output,
        }
    }

    /// Why the driver is gone, if it is.
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "chromedriver exited ({status}); its last lines: {:?}",
                self.output.lock().map(|o| o.clone()).unwrap_or_default()
            )),
            _ => None,
        }
    }
}

/// Keeps the last lines a driver printed.
fn remember(output: &Mutex<Vec<String>>, line: &str) {
    if let Ok(mut lines) = output.lock() {
        if lines.len() == 20 {
            lines.remove(0);
        }
        lines.push(line.to_owned());
    }
}

impl Browser {
    /// Starts `chromedriver` (from `CHROMEDRIVER`, else `/usr/bin/chromedriver`).
    pub async fn start() -> Browser {
        let driver = Driver::start().await;
        let profiles = tempfile::Builder::new()
            .prefix("protomolt-chromium-")
            .tempdir()
            .expect("a profile folder");
        Browser {
            driver: tokio::sync::Mutex::new(driver),
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
        let mut driver = self.driver.lock().await;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&driver.url)
                .await
            {
                Ok(client) => return client,
                // A loaded machine can be slow to start the first browser, and a
                // driver can die under it: then a new one is started.
                Err(e) if attempt < 3 => {
                    let gone = driver.exited();
                    eprintln!(
                        "a browser session failed to start ({e}; {}); again",
                        gone.as_deref().unwrap_or("the driver still runs")
                    );
                    if gone.is_some() {
                        *driver = Driver::start().await;
                    }
                }
                Err(e) => panic!(
                    "no browser session: {e}; {}",
                    driver
                        .exited()
                        .as_deref()
                        .unwrap_or("the driver still runs")
                ),
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
