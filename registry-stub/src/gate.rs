//! The gate every request to a non-public route passes before a handler sees it.
//!
//! In order, and in one place so that the actions route, the routes roles contribute
//! and `/metrics` are guarded alike:
//!
//! 1. **Browser checks** ([`HostPolicy`]): a `Host` the node is not known by is refused
//!    (a page that rebinds its DNS name to 127.0.0.1 still sends its own name), and so
//!    is an `Origin` from another site (a page the operator opens may send requests to
//!    the loopback node, but the browser names the page's origin). A body-carrying
//!    method must declare `Content-Type: application/json`: the content types a page
//!    can send without the browser asking first (`text/plain`, forms) are refused.
//! 2. **The bearer token**, when `[auth]` is on (401 without a valid one; the scope a
//!    route or verb needs is checked by [`guard`] or by the actions route).
//! 3. **The token's budgets**: `requests_per_minute` (a token bucket holding a minute's
//!    worth, refilled continuously; over budget answers 429 `resource_exhausted` with
//!    `Retry-After`) and `max_body_bytes` (429 as well: the caller may send again, with
//!    a smaller body). Budgets are kept by each node for itself: a fleet of N nodes
//!    behind a balancer admits up to N times a token's budget.
//!
//! Each refusal is logged with the token's name (never the secret): the first of its
//! kind (token and code) at once, then one line a minute with the count since, so a
//! storm cannot flood the log ([`Gate::log_refusal`]; over-budget refusals keep their
//! own count per bucket).
//!
//! A hand-rolled token bucket rather than a rate-limiting crate: one bucket per
//! configured token, with no keys to evict, is a dozen lines.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::action::error_response;
use crate::action::{ActionError, Code};
use crate::auth::{AuthConfig, TokenConfig};
use crate::limits::MAX_BODY_BYTES;

/// Which `Host` and `Origin` values a node answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPolicy {
    /// The node is bound to a loopback address: only loopback names (`localhost`,
    /// `127.0.0.0/8`, `[::1]`, on any port) and `allowed_hosts` are answered.
    pub loopback: bool,
    /// Further names the node is reached by (`node.allowed_hosts`): `host` (any port)
    /// or `host:port` for `Host`; for `Origin` an entry must match exactly (`host`
    /// stands for the scheme's default port). On a non-loopback bind, when empty,
    /// `Host` is not checked.
    pub allowed_hosts: Vec<String>,
}

impl HostPolicy {
    /// The policy of a node bound to `bind`, also known by `allowed_hosts`.
    pub fn for_bind(bind: SocketAddr, allowed_hosts: Vec<String>) -> Self {
        HostPolicy {
            loopback: bind.ip().is_loopback(),
            allowed_hosts,
        }
    }

    /// Whether `authority` (`host` or `host:port`, as in a `Host` header) names this
    /// node.
    fn knows(&self, authority: &str) -> bool {
        let authority = authority.trim().to_ascii_lowercase();
        let (host, port) = split_authority(&authority);
        if port.is_some_and(|port| port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit())) {
            return false;
        }
        self.lists(&authority) || (self.loopback && is_loopback_name(host))
    }

    /// Whether `allowed_hosts` names `authority` (lower case): as it is, or its host
    /// listed without a port.
    fn lists(&self, authority: &str) -> bool {
        let (host, _) = split_authority(authority);
        self.allowed_hosts.iter().any(|allowed| {
            let allowed = allowed.trim().to_ascii_lowercase();
            allowed == authority || allowed == host
        })
    }

    /// Refuses a foreign `Host` or `Origin` (403, naming `node.allowed_hosts`).
    fn check(&self, headers: &HeaderMap) -> Result<(), ActionError> {
        let host = headers.get(header::HOST).map(|v| v.to_str().unwrap_or(""));
        let checks_host = self.loopback || !self.allowed_hosts.is_empty();
        // A request without `Host` (HTTP/1.0, some tools) carries no name a page chose.
        if let Some(host) = host
            && checks_host
            && !self.knows(host)
        {
            return Err(ActionError::new(
                Code::PermissionDenied,
                format!(
                    "this node is not known as '{}': add it to node.allowed_hosts, or call the node by an address it is bound to",
                    printable(host)
                ),
            ));
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin.to_str().unwrap_or("");
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .filter(|rest| !rest.is_empty() && !rest.contains('/'));
        // The page's origin must be this very node (the `Host` it was reached by, port
        // included) or listed exactly, port included: another port of localhost is
        // another site, such as a development server the operator has open, and a
        // listed host without a port vouches for `Host` only.
        let same_site = authority.is_some_and(|authority| {
            host.is_some_and(|host| host.trim().eq_ignore_ascii_case(authority))
                || self
                    .allowed_hosts
                    .iter()
                    .any(|allowed| allowed.trim().eq_ignore_ascii_case(authority))
        });
        if same_site {
            Ok(())
        } else {
            Err(ActionError::new(
                Code::PermissionDenied,
                format!(
                    "requests from the web page at '{}' are refused: only this node's own pages may call it from a browser (node.allowed_hosts lists further names it is known by)",
                    printable(origin)
                ),
            ))
        }
    }
}

/// `host` and the port of an authority (`[::1]:8080`, `example.com`).
fn split_authority(authority: &str) -> (&str, Option<&str>) {
    if let Some(rest) = authority.strip_prefix('[') {
        // An IPv6 literal: `[addr]` or `[addr]:port`; the brackets stay part of host.
        return match rest.find(']') {
            Some(end) => {
                let (host, after) = authority.split_at(end + 2);
                (host, after.strip_prefix(':'))
            }
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    }
}

fn is_loopback_name(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    literal.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// At most 200 characters of a header value, control characters escaped, for a message.
fn printable(value: &str) -> String {
    value
        .chars()
        .take(200)
        .flat_map(char::escape_debug)
        .collect()
}

/// A token's request budget: a bucket of `per_minute` requests, refilled continuously.
struct Bucket {
    per_minute: u32,
    tokens: f64,
    refilled_at: Instant,
    /// Refusals since the last one logged, and when that was.
    unlogged_refusals: u64,
    logged_at: Option<Instant>,
}

/// What taking one request from a bucket found.
enum Take {
    Admitted,
    /// Over budget: the caller may retry after this long; `log` holds the number of
    /// refusals to report now, when it is time to log again.
    Refused {
        retry_after: Duration,
        log: Option<u64>,
    },
}

impl Bucket {
    fn new(per_minute: u32) -> Self {
        Bucket {
            per_minute,
            tokens: f64::from(per_minute),
            refilled_at: Instant::now(),
            unlogged_refusals: 0,
            logged_at: None,
        }
    }

    fn take(&mut self, now: Instant) -> Take {
        let rate = f64::from(self.per_minute) / 60.0;
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(f64::from(self.per_minute));
        self.refilled_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Take::Admitted;
        }
        let retry_after = Duration::from_secs_f64((1.0 - self.tokens) / rate);
        self.unlogged_refusals += 1;
        let due = self
            .logged_at
            .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(60));
        let log = due.then(|| {
            self.logged_at = Some(now);
            std::mem::take(&mut self.unlogged_refusals)
        });
        Take::Refused { retry_after, log }
    }
}

pub use crate::action::Caller;

/// The node's gate: its tokens, their budgets and its host policy.
pub struct Gate {
    auth: Option<AuthConfig>,
    /// One per token of `auth`, in the same order; `None` where the token sets no rate.
    buckets: Vec<Option<Mutex<Bucket>>>,
    hosts: HostPolicy,
    refusals: RefusalLog,
}

impl Gate {
    /// A gate requiring the tokens of `auth` (when set) and answering what `hosts`
    /// allows.
    pub fn new(auth: Option<AuthConfig>, hosts: HostPolicy) -> Self {
        let buckets = auth
            .iter()
            .flat_map(|auth| &auth.tokens)
            .map(|token| {
                token
                    .requests_per_minute
                    .map(|n| Mutex::new(Bucket::new(n)))
            })
            .collect();
        Gate {
            auth,
            buckets,
            hosts,
            refusals: RefusalLog::default(),
        }
    }

    /// The token a [`Caller`] presented.
    pub fn token(&self, caller: Caller) -> Option<&TokenConfig> {
        let index = caller.0?;
        self.auth.as_ref()?.tokens.get(index)
    }

    /// The browser checks and the token; the token's position when `[auth]` is on.
    fn admit(&self, request: &Request) -> Result<Caller, ActionError> {
        self.hosts.check(request.headers())?;
        check_content_type(request.method(), request.headers())?;
        let Some(auth) = &self.auth else {
            return Ok(Caller(None));
        };
        let header = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let token = auth.authenticate(header)?;
        let index = auth
            .tokens
            .iter()
            .position(|t| std::ptr::eq(t, token))
            // authenticate returns one of auth.tokens, so its position exists.
            .unwrap_or_default();
        Ok(Caller(Some(index)))
    }

    /// Logs a refusal of `caller` (by the token's name, never the secret): the first
    /// of its kind (token and code) at once, then once a minute with the count since.
    /// `what` is cut to 200 characters, control characters escaped.
    pub fn log_refusal(&self, caller: Caller, what: &str, error: &ActionError) {
        let Some(refusals) = self
            .refusals
            .due((caller.0, error.code.as_str()), Instant::now())
        else {
            return;
        };
        let token = self.token(caller).map_or("(none)", |t| t.name.as_str());
        tracing::warn!(
            token,
            code = error.code.as_str(),
            refusals,
            what = %printable(what),
            reason = %error.message,
            "request refused"
        );
    }

    /// Takes one request from the caller's budget; over it, the error and the seconds
    /// to wait.
    fn spend(&self, caller: Caller, what: &str) -> Result<(), (ActionError, u64)> {
        let Some(Some(bucket)) = caller
            .0
            .map(|i| self.buckets.get(i).and_then(Option::as_ref))
        else {
            return Ok(());
        };
        // The lock is held for a few arithmetic steps; a poisoned one (a panic there
        // cannot happen) would still hold a usable bucket.
        let take = bucket
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take(Instant::now());
        let Take::Refused { retry_after, log } = take else {
            return Ok(());
        };
        let token = self.token(caller).map_or("", |t| t.name.as_str());
        let per_minute = self.token(caller).and_then(|t| t.requests_per_minute);
        if let Some(refusals) = log {
            tracing::warn!(
                token,
                refusals,
                per_minute,
                what = %printable(what),
                "request budget exhausted; refusing with 429"
            );
        }
        let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
        let error = ActionError::new(
            Code::ResourceExhausted,
            format!(
                "the token '{token}' is over its budget of {} requests a minute; retry after {seconds} s",
                per_minute.unwrap_or_default()
            ),
        );
        Err((error, seconds))
    }
}

/// A body-carrying method must send JSON: the content types a web page may send to
/// another site without the browser asking it first are not JSON.
fn check_content_type(method: &Method, headers: &HeaderMap) -> Result<(), ActionError> {
    if matches!(*method, Method::GET | Method::HEAD) {
        return Ok(());
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?"));
    let essence = content_type
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    if essence == "application/json" {
        return Ok(());
    }
    let sent = match content_type {
        Some(v) => format!("Content-Type '{}'", printable(v)),
        None => "no Content-Type".to_owned(),
    };
    Err(ActionError::new(
        Code::UnsupportedMediaType,
        format!(
            "the request has {sent}; send Content-Type: application/json and a JSON body (`{{}}` when it needs nothing)"
        ),
    ))
}

/// The middleware: admits a request through `gate`, checks `scope` when one is given
/// (the actions route checks each verb's scope itself), spends the caller's budget,
/// bounds the body by the caller's `max_body_bytes`, and leaves the [`Caller`] in the
/// request's extensions.
pub async fn guard(
    State((gate, scope)): State<(Arc<Gate>, Option<Arc<str>>)>,
    mut request: Request,
    next: Next,
) -> Response {
    let what = format!("{} {}", request.method(), request.uri().path());
    let admitted = gate.admit(&request).and_then(|caller| {
        if let (Some(scope), Some(token)) = (&scope, gate.token(caller)) {
            token.authorize(scope, &what)?;
        }
        Ok(caller)
    });
    let caller = match admitted {
        Ok(caller) => caller,
        Err(error) => {
            log_refusal(&gate, &request, &what, &error);
            return error_response(&error);
        }
    };
    if let Err((error, seconds)) = gate.spend(caller, &what) {
        let mut response = error_response(&error);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        return response;
    }
    if let Some(limit) = gate.token(caller).and_then(|t| t.max_body_bytes) {
        request = match bound_body(request, limit, gate.token(caller)).await {
            Ok(request) => request,
            Err(error) => {
                gate.log_refusal(caller, &what, &error);
                return error_response(&error);
            }
        };
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Reads the body, refusing it (429) past the token's `max_body_bytes`.
async fn bound_body(
    request: Request,
    limit: usize,
    token: Option<&TokenConfig>,
) -> Result<Request, ActionError> {
    let name = token.map_or("", |t| t.name.as_str());
    let over = |size: String| {
        ActionError::new(
            Code::ResourceExhausted,
            format!(
                "the body is {size} bytes; the token '{name}' may send at most {limit} bytes (max_body_bytes)"
            ),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .max(request.body().size_hint().lower());
    if declared > limit as u64 {
        return Err(over(declared.to_string()));
    }
    // Never more than the route's own limit, whatever the token allows.
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, limit.min(MAX_BODY_BYTES)).await {
        Ok(bytes) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Err(error) if is_over_limit(&error) => Err(over(format!("more than {limit}"))),
        // The connection broke or the body was malformed: not a budget matter.
        Err(error) => Err(ActionError::new(
            Code::InvalidArgument,
            format!("the request body could not be read: {error}"),
        )),
    }
}

/// Whether reading a body stopped at its length limit (rather than failing).
fn is_over_limit(error: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Logs a refused request with the token's name when one was recognized: never the
/// secret, nor the header that carried it.
fn log_refusal(gate: &Gate, request: &Request, what: &str, error: &ActionError) {
    let token = gate.auth.as_ref().and_then(|auth| {
        let header = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let token = auth.authenticate(header).ok()?;
        auth.tokens.iter().position(|t| std::ptr::eq(t, token))
    });
    gate.log_refusal(Caller(token), what, error);
}

/// How often refusals of one kind are logged: the first at once, then one line a
/// minute with the count since, so a storm of bad requests cannot flood the log.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Refusals by token and error code, for [`Gate::log_refusal`]. The keys are bounded
/// by the configured tokens times the codes: nothing a caller sends adds one.
#[derive(Default)]
struct RefusalLog {
    by_kind: Mutex<HashMap<(Option<usize>, &'static str), Refusals>>,
}

struct Refusals {
    logged_at: Instant,
    unlogged: u64,
}

impl RefusalLog {
    /// The number of refusals to report now (this one included), or `None` while
    /// this kind was logged less than [`REFUSAL_LOG_INTERVAL`] ago.
    fn due(&self, key: (Option<usize>, &'static str), now: Instant) -> Option<u64> {
        // A few steps under the lock; a poisoned lock still holds usable counts.
        let mut by_kind = self
            .by_kind
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(refusals) = by_kind.get_mut(&key) else {
            by_kind.insert(
                key,
                Refusals {
                    logged_at: now,
                    unlogged: 0,
                },
            );
            return Some(1);
        };
        refusals.unlogged += 1;
        if now.saturating_duration_since(refusals.logged_at) < REFUSAL_LOG_INTERVAL {
            return None;
        }
        refusals.logged_at = now;
        Some(std::mem::take(&mut refusals.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_loopback_node_answers_only_loopback_names_and_its_listed_hosts() {
        let policy = HostPolicy::for_bind(
            "127.0.0.1:8080".parse().unwrap(),
            vec!["jobs.internal:8443".into(), "ops-box".into()],
        );
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST",
            "127.1.2.3:9",
            "[::1]:8080",
            "jobs.internal:8443",
            "ops-box:1234",
        ] {
            assert!(policy.check(&headers(&[("host", host)])).is_ok(), "{host}");
        }
        for host in [
            "evil.example:8080",
            "jobs.internal:80",
            "127.0.0.1.evil.example",
            "[::2]:8080",
            "localhost:80a",
            "localhost:",
            "",
        ] {
            let error = policy.check(&headers(&[("host", host)])).unwrap_err();
            assert_eq!(error.code, Code::PermissionDenied, "{host}");
            assert!(error.message.contains("node.allowed_hosts"), "{error:?}");
        }
        assert!(policy.check(&HeaderMap::new()).is_ok(), "no Host at all");
    }

    #[test]
    fn only_same_site_origins_are_answered() {
        let policy = HostPolicy::for_bind("127.0.0.1:8080".parse().unwrap(), vec![]);
        let ok = |origin: &str| {
            policy
                .check(&headers(&[("host", "127.0.0.1:8080"), ("origin", origin)]))
                .is_ok()
        };
        assert!(ok("http://127.0.0.1:8080"));
        assert!(
            !ok("http://localhost:3000"),
            "another port of localhost is another site (a development server, say)"
        );
        assert!(
            !ok("http://localhost:8080"),
            "the page's origin is not the name this request was sent to"
        );
        assert!(!ok("https://evil.example"));
        assert!(!ok("null"));
        assert!(!ok("http://127.0.0.1:8080/path"));
        assert!(!ok("file://"));

        let listed = HostPolicy::for_bind(
            "127.0.0.1:8080".parse().unwrap(),
            vec!["ops-box".into(), "console.internal:3000".into()],
        );
        let from = |origin: &str| {
            listed
                .check(&headers(&[("host", "127.0.0.1:8080"), ("origin", origin)]))
                .is_ok()
        };
        assert!(from("https://ops-box"));
        assert!(from("http://console.internal:3000"));
        assert!(
            !from("http://ops-box:5173"),
            "a host listed without a port vouches for no other port's pages"
        );

        let public = HostPolicy::for_bind("0.0.0.0:8080".parse().unwrap(), vec![]);
        assert!(
            public
                .check(&headers(&[("host", "jobs.example.com")]))
                .is_ok(),
            "a non-loopback node without a list does not check Host"
        );
        let foreign = public
            .check(&headers(&[
                ("host", "jobs.example.com"),
                ("origin", "https://evil.example"),
            ]))
            .unwrap_err();
        assert!(foreign.message.contains("evil.example"), "{foreign:?}");
        assert!(
            public
                .check(&headers(&[
                    ("host", "jobs.example.com"),
                    ("origin", "https://jobs.example.com")
                ]))
                .is_ok()
        );
    }

    #[test]
    fn bodies_must_be_declared_json() {
        let post = Method::POST;
        assert!(check_content_type(&Method::GET, &HeaderMap::new()).is_ok());
        assert!(
            check_content_type(&post, &headers(&[("content-type", "application/json")])).is_ok()
        );
        assert!(
            check_content_type(
                &post,
                &headers(&[("content-type", "Application/JSON; charset=utf-8")])
            )
            .is_ok()
        );
        for refused in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            let error =
                check_content_type(&post, &headers(&[("content-type", refused)])).unwrap_err();
            assert_eq!(error.code, Code::UnsupportedMediaType, "{refused}");
        }
        let missing = check_content_type(&post, &HeaderMap::new()).unwrap_err();
        assert!(missing.message.contains("no Content-Type"), "{missing:?}");
    }

    #[test]
    fn a_bucket_admits_a_minute_s_worth_then_refills_continuously() {
        let start = Instant::now();
        let mut bucket = Bucket::new(6);
        for _ in 0..6 {
            assert!(matches!(bucket.take(start), Take::Admitted));
        }
        let Take::Refused { retry_after, log } = bucket.take(start) else {
            panic!("the seventh request is over budget");
        };
        assert_eq!(retry_after.as_secs(), 10, "one request every 10 s");
        assert_eq!(log, Some(1), "the first refusal is logged");
        let Take::Refused { log, .. } = bucket.take(start + Duration::from_secs(1)) else {
            panic!("still over budget");
        };
        assert_eq!(log, None, "later refusals wait for the next minute's line");
        assert!(matches!(
            bucket.take(start + Duration::from_secs(11)),
            Take::Admitted
        ));
        let later = start + Duration::from_secs(61);
        let log = loop {
            if let Take::Refused { log, .. } = bucket.take(later) {
                break log;
            }
        };
        assert_eq!(
            log,
            Some(2),
            "a minute later, the refusals since are counted"
        );
    }

    #[test]
    fn a_kind_of_refusal_is_logged_at_once_then_once_a_minute_with_its_count() {
        let log = RefusalLog::default();
        let start = Instant::now();
        let kind = (Some(0), "unauthenticated");
        assert_eq!(log.due(kind, start), Some(1));
        for second in 1..=30 {
            assert_eq!(log.due(kind, start + Duration::from_secs(second)), None);
        }
        assert_eq!(
            log.due((None, "unauthenticated"), start),
            Some(1),
            "another token's refusals are their own kind"
        );
        assert_eq!(log.due(kind, start + Duration::from_secs(60)), Some(31));
        assert_eq!(log.due(kind, start + Duration::from_secs(61)), None);
    }
}
