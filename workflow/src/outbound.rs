//! The outbound call policy: which targets a workflow's steps may call, how, and
//! within what bounds.
//!
//! Anyone allowed to run a workflow names its targets, so without a policy the node
//! would call any `host:port` it can reach on their behalf. The policy is checked
//! three times:
//!
//! 1. **when a workflow is accepted** (`run-workflow`, `put-workflow`, submissions):
//!    [`OutboundPolicy::findings`] names each step and the rule it breaks;
//! 2. **before each call**: a job accepted under an older policy fails its step (a
//!    `WORKFLOW` failure, not retried) instead of calling;
//! 3. **when connecting**: a name's DNS answers are checked, and only an allowed
//!    address is connected to, so a name that resolves into a forbidden range (the
//!    cloud's metadata address, the node's own loopback) is refused.
//!
//! ## Rules
//! - `allow`: entries `host:port`, the port a number or `*`. A host that is an IP
//!   address or a CIDR range (`10.0.0.0/8`, `[fd00::/8]`) is an **address entry**; any
//!   other host is a **name pattern** (`*` matches any run of characters,
//!   case-insensitive: `*.svc.cluster.local`). A target naming an IP address must
//!   match an address entry; a target naming a host must match a name pattern.
//! - `deny_addresses`: CIDR ranges a *name* may not resolve into, unless an address
//!   entry of `allow` lists that address and port. By default loopback, link-local
//!   (which holds cloud metadata services), unspecified, multicast and broadcast, and
//!   IPv6 addresses that carry one of those to a NAT64 or 6to4 translator; private
//!   ranges are allowed on purpose ([`DENIED_BY_DEFAULT`] says why).
//! - `require_tls`: a step without `"tls": true` must match a `plaintext` entry (same
//!   syntax as `allow`; by default the loopback ones, for development).
//! - `max_step_deadline_ms`, `max_segment_deadline_ms`: ceilings on a step's deadline
//!   (its `deadlineMs`, or the segment's when it has none) and the workflow's.
//! - `max_request_bytes`, `max_response_bytes`: ceilings on the encoded request a step
//!   sends and on the response it accepts (its `maxResponseBytes`, or the node's).
//!
//! [`OutboundPolicy::unrestricted`] allows everything (the library's default, for
//! embedding and tests); a node's config starts from [`OutboundRules::default`],
//! which allows loopback targets only.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::compile::{CompiledStep, CompiledWorkflow, Finding};

/// The loopback entries a node allows (and calls without TLS) by default.
pub const LOOPBACK: [&str; 3] = ["localhost:*", "127.0.0.0/8:*", "[::1]:*"];

/// Ranges a name may not resolve into by default.
///
/// Private ranges (`10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`, `fc00::/7`) are not
/// among them on purpose: the services steps call usually live there, named through a
/// service mesh or cluster DNS. Where the node's network holds what no workflow may
/// reach, add those ranges to `deny_addresses` and list the allowed ones by address.
pub const DENIED_BY_DEFAULT: [&str; 12] = [
    "127.0.0.0/8",
    "::1/128",
    "0.0.0.0/8",
    "::/128",
    "169.254.0.0/16",
    "fe80::/10",
    "224.0.0.0/4",
    "ff00::/8",
    "255.255.255.255/32",
    // Alibaba's and Azure's metadata services, and AWS's over IPv6.
    "100.100.100.200/32",
    "168.63.129.16/32",
    "fd00:ec2::254/128",
];

/// The policy as configured (`[workflow.outbound]`): strings and numbers, checked by
/// [`OutboundRules::compile`].
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundRules {
    /// Targets steps may call: `host:port` entries (see the module docs).
    pub allow: Vec<String>,
    /// Ranges a target name may not resolve into, unless `allow` lists the address.
    pub deny_addresses: Vec<String>,
    /// Steps must use TLS, except to targets matching `plaintext`.
    pub require_tls: bool,
    /// Targets called without TLS even when `require_tls` is on.
    pub plaintext: Vec<String>,
    /// Ceiling on a step's deadline, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_step_deadline_ms: Option<u64>,
    /// Ceiling on a workflow's segment deadline, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_segment_deadline_ms: Option<u64>,
    /// Ceiling on the encoded request a step sends, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_bytes: Option<usize>,
    /// Ceiling on the response a step accepts, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<usize>,
}

impl Default for OutboundRules {
    fn default() -> Self {
        OutboundRules {
            allow: LOOPBACK.map(String::from).to_vec(),
            deny_addresses: DENIED_BY_DEFAULT.map(String::from).to_vec(),
            require_tls: true,
            plaintext: LOOPBACK.map(String::from).to_vec(),
            max_step_deadline_ms: None,
            max_segment_deadline_ms: None,
            max_request_bytes: None,
            max_response_bytes: None,
        }
    }
}

impl OutboundRules {
    /// The policy these rules describe; the error names the key and the entry
    /// (`workflow.outbound.allow[2]: ...`).
    pub fn compile(&self) -> Result<OutboundPolicy, String> {
        let entries = |key: &str, list: &[String]| -> Result<Vec<TargetPattern>, String> {
            list.iter()
                .enumerate()
                .map(|(i, entry)| {
                    TargetPattern::parse(entry)
                        .map_err(|e| format!("workflow.outbound.{key}[{i}]: {e}"))
                })
                .collect()
        };
        let deny = self
            .deny_addresses
            .iter()
            .enumerate()
            .map(|(i, range)| {
                parse_range(range.trim()).ok_or_else(|| {
                    format!(
                        "workflow.outbound.deny_addresses[{i}]: '{}' is not an IP address or a CIDR range (169.254.0.0/16, fe80::/10)",
                        range.escape_debug()
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (key, value) in [
            (
                "max_step_deadline_ms",
                self.max_step_deadline_ms.map(|v| v as u128),
            ),
            (
                "max_segment_deadline_ms",
                self.max_segment_deadline_ms.map(|v| v as u128),
            ),
            (
                "max_request_bytes",
                self.max_request_bytes.map(|v| v as u128),
            ),
            (
                "max_response_bytes",
                self.max_response_bytes.map(|v| v as u128),
            ),
        ] {
            if value == Some(0) {
                return Err(format!(
                    "workflow.outbound.{key} must be at least 1 (leave it out for no ceiling)"
                ));
            }
        }
        Ok(OutboundPolicy {
            allow: entries("allow", &self.allow)?,
            deny: deny.clone(),
            require_tls: self.require_tls,
            plaintext: entries("plaintext", &self.plaintext)?,
            max_step_deadline: self.max_step_deadline_ms.map(Duration::from_millis),
            max_segment_deadline: self.max_segment_deadline_ms.map(Duration::from_millis),
            max_request_bytes: self.max_request_bytes,
            max_response_bytes: self.max_response_bytes,
            unrestricted: false,
        })
    }
}

/// `10.0.0.0/8`, `fd00::/8`, or a single address (a /32 or /128).
fn parse_range(text: &str) -> Option<IpNet> {
    let text = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

/// What an entry's host part is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// An IP address or CIDR range.
    Range(IpNet),
    /// A name, lower-cased, `*` matching any run of characters.
    Name(String),
}

/// One `host:port` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TargetPattern {
    text: String,
    host: HostPattern,
    /// `None` for `*`.
    port: Option<u16>,
}

impl TargetPattern {
    fn parse(entry: &str) -> Result<Self, String> {
        let text = entry.trim();
        let shown = text.escape_debug();
        let (host, port) = text.rsplit_once(':').ok_or_else(|| {
            format!("'{shown}' has no port: write host:port, the port a number or * (api.internal:443, 10.0.0.0/8:*)")
        })?;
        let port = match port {
            "*" => None,
            digits => Some(digits.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                format!("'{shown}': the port '{digits}' is neither * nor a number from 1 to 65535")
            })?),
        };
        let host = match parse_range(host) {
            Some(range) => HostPattern::Range(range),
            None if !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '*')) =>
            {
                HostPattern::Name(host.to_ascii_lowercase())
            }
            None => {
                return Err(format!(
                    "'{shown}': '{}' is neither a host name pattern (*.internal) nor an IP address or CIDR range (10.0.0.0/8, [fd00::/8])",
                    host.escape_debug()
                ));
            }
        };
        Ok(TargetPattern {
            text: text.to_owned(),
            host,
            port,
        })
    }

    fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    fn matches(&self, target: &Target) -> bool {
        self.port_matches(target.port)
            && match (&self.host, &target.host) {
                (HostPattern::Range(range), TargetHost::Address(ip)) => range.contains(ip),
                (HostPattern::Name(pattern), TargetHost::Name(name)) => {
                    crate::glob::glob_matches(pattern.as_bytes(), name.as_bytes())
                }
                _ => false,
            }
    }

    fn allows_address(&self, ip: IpAddr, port: u16) -> bool {
        self.port_matches(port)
            && matches!(&self.host, HostPattern::Range(range) if range.contains(&ip))
    }
}

/// A step's target, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TargetHost {
    Address(IpAddr),
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    host: TargetHost,
    port: u16,
}

impl Target {
    /// `host:port`, `[v6]:port` (a zone, `%25eth0`, is ignored for the policy; one
    /// with other characters than an interface name's is no target at all).
    fn parse(target: &str) -> Option<Target> {
        let (host, port) = target.rsplit_once(':')?;
        let port = port.parse::<u16>().ok()?;
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(v6) => TargetHost::Address(IpAddr::V6(crate::compile::ipv6_with_zone(v6)?)),
            None => match host.parse::<IpAddr>() {
                Ok(ip) => TargetHost::Address(ip),
                // An address in another form (`10.6488325`) is neither.
                Err(_) if crate::compile::ends_in_a_number(host) => return None,
                Err(_) => TargetHost::Name(host.trim_end_matches('.').to_ascii_lowercase()),
            },
        };
        Some(Target { host, port })
    }
}

/// The compiled policy; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundPolicy {
    allow: Vec<TargetPattern>,
    deny: Vec<IpNet>,
    require_tls: bool,
    plaintext: Vec<TargetPattern>,
    max_step_deadline: Option<Duration>,
    max_segment_deadline: Option<Duration>,
    max_request_bytes: Option<usize>,
    max_response_bytes: Option<usize>,
    unrestricted: bool,
}

impl Default for OutboundPolicy {
    fn default() -> Self {
        Self::unrestricted()
    }
}

impl OutboundPolicy {
    /// Allows every target, in the clear or not, with no ceilings.
    pub fn unrestricted() -> Self {
        OutboundPolicy {
            allow: Vec::new(),
            deny: Vec::new(),
            require_tls: false,
            plaintext: Vec::new(),
            max_step_deadline: None,
            max_segment_deadline: None,
            max_request_bytes: None,
            max_response_bytes: None,
            unrestricted: true,
        }
    }

    /// Allows no target at all: what a node falls back to if its rules could not be
    /// read, so that a broken policy never opens everything.
    pub fn nothing() -> Self {
        OutboundPolicy {
            unrestricted: false,
            ..Self::unrestricted()
        }
    }

    /// Whether this is [`OutboundPolicy::unrestricted`].
    pub fn is_unrestricted(&self) -> bool {
        self.unrestricted
    }

    /// Every rule `workflow` breaks, one finding per step and rule (empty when it
    /// complies).
    pub fn findings(&self, workflow: &CompiledWorkflow) -> Vec<Finding> {
        let mut findings = Vec::new();
        if let Some(ceiling) = self.max_segment_deadline
            && workflow.deadline > ceiling
        {
            findings.push(Finding {
                step: None,
                path: "$.deadlineMs".into(),
                message: format!(
                    "the workflow's deadline of {} ms is above the {} ms workflow.outbound.max_segment_deadline_ms allows",
                    workflow.deadline.as_millis(),
                    ceiling.as_millis()
                ),
            });
        }
        for step in &workflow.steps {
            findings.extend(self.step_findings(workflow, step));
        }
        findings
    }

    /// Every rule one called step breaks (none for an external step).
    pub fn step_findings(&self, workflow: &CompiledWorkflow, step: &CompiledStep) -> Vec<Finding> {
        let Some(target_text) = step.target.as_deref() else {
            return Vec::new();
        };
        let finding = |key: &str, message: String| Finding {
            step: Some(step.name.clone()),
            path: format!("$.steps[{}].{key}", step.index),
            message,
        };
        let mut findings = Vec::new();
        if !self.unrestricted {
            match Target::parse(target_text) {
                None => findings.push(finding(
                    "target",
                    format!("'{target_text}' is not host:port, so workflow.outbound.allow cannot allow it"),
                )),
                Some(target) => {
                    if !self.allow.iter().any(|entry| entry.matches(&target)) {
                        let kind = match target.host {
                            TargetHost::Address(_) => "an address entry (IP or CIDR range with a port)",
                            TargetHost::Name(_) => "a name pattern with a port",
                        };
                        findings.push(finding(
                            "target",
                            format!(
                                "the target '{target_text}' is not allowed by workflow.outbound.allow ({}): add {kind} that matches it, or call an allowed target",
                                listed(&self.allow)
                            ),
                        ));
                    }
                    if self.require_tls
                        && !step.tls
                        && !self.plaintext.iter().any(|entry| entry.matches(&target))
                    {
                        findings.push(finding(
                            "tls",
                            format!(
                                "the step calls '{target_text}' without TLS, and workflow.outbound.require_tls is on: set \"tls\": true, or list the target in workflow.outbound.plaintext ({})",
                                listed(&self.plaintext)
                            ),
                        ));
                    }
                }
            }
        }
        if let Some(ceiling) = self.max_step_deadline {
            let deadline = step.deadline.unwrap_or(workflow.deadline);
            if deadline > ceiling {
                let whose = if step.deadline.is_some() {
                    "its deadlineMs"
                } else {
                    "the workflow's deadline, which it runs under without a deadlineMs of its own,"
                };
                findings.push(finding(
                    "deadlineMs",
                    format!(
                        "{whose} of {} ms is above the {} ms workflow.outbound.max_step_deadline_ms allows",
                        deadline.as_millis(),
                        ceiling.as_millis()
                    ),
                ));
            }
        }
        if let (Some(ceiling), Some(asked)) = (self.max_response_bytes, step.max_response_bytes)
            && asked > ceiling
        {
            findings.push(finding(
                "maxResponseBytes",
                format!(
                    "{asked} bytes is above the {ceiling} bytes workflow.outbound.max_response_bytes allows"
                ),
            ));
        }
        findings
    }

    /// The deadline a segment runs under: the workflow's, or the ceiling if lower.
    pub fn segment_limit(&self, workflow_deadline: Duration) -> Duration {
        self.max_segment_deadline
            .map_or(workflow_deadline, |ceiling| ceiling.min(workflow_deadline))
    }

    /// The largest response a step may accept, given what it would accept otherwise.
    pub fn response_limit(&self, otherwise: usize) -> usize {
        self.max_response_bytes
            .map_or(otherwise, |ceiling| ceiling.min(otherwise))
    }

    /// Refuses an encoded request larger than `max_request_bytes`.
    pub fn check_request_size(&self, bytes: usize) -> Result<(), String> {
        match self.max_request_bytes {
            Some(ceiling) if bytes > ceiling => Err(format!(
                "the request its rules built is {bytes} bytes, above the {ceiling} bytes workflow.outbound.max_request_bytes allows"
            )),
            _ => Ok(()),
        }
    }

    /// Whether a connection for `target_host` (as named in the step) may go to
    /// `address:port`, which the name resolved to (or which it is). Checked at
    /// connect time in full, `allow` included, whatever was checked before: the name
    /// must match an entry of `allow`, and the address must be listed or outside
    /// `deny_addresses`.
    pub fn allows_connection(&self, target_host: &str, address: IpAddr, port: u16) -> bool {
        if self.unrestricted {
            return true;
        }
        // `::ffff:127.0.0.1` is 127.0.0.1: ranges are checked on the canonical form.
        let address = address.to_canonical();
        let bare = target_host.trim_start_matches('[').trim_end_matches(']');
        let named_by_address =
            bare.parse::<IpAddr>().is_ok() || crate::compile::ipv6_with_zone(bare).is_some();
        let listed = self
            .allow
            .iter()
            .any(|entry| entry.allows_address(address, port));
        if named_by_address {
            return listed;
        }
        if crate::compile::ends_in_a_number(bare) {
            return false;
        }
        let name = Target {
            host: TargetHost::Name(bare.trim_end_matches('.').to_ascii_lowercase()),
            port,
        };
        if !self.allow.iter().any(|entry| entry.matches(&name)) {
            return false;
        }
        let denied = |address: &IpAddr| self.deny.iter().any(|range| range.contains(address));
        listed || !(denied(&address) || embedded_ipv4(address).is_some_and(|v4| denied(&v4)))
    }
}

/// The IPv4 address an IPv6 address carries for a translator (NAT64's well-known
/// `64:ff9b::/96`, SIIT's `::ffff:0:a.b.c.d`, 6to4's `2002::/16`, the deprecated
/// IPv4-compatible `::a.b.c.d`): `64:ff9b::a9fe:a9fe` reaches 169.254.169.254 through
/// the gateway, so a name may not resolve to it where it may not resolve to that. A
/// network's own NAT64 prefix (`64:ff9b:1::/48` or any other) cannot be recognized:
/// list it in `deny_addresses`, or the IPv6 forms of the ranges it must not reach.
fn embedded_ipv4(address: IpAddr) -> Option<IpAddr> {
    let IpAddr::V6(v6) = address else {
        return None;
    };
    let s = v6.segments();
    let from = |high: u16, low: u16| {
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        Some(IpAddr::from([a, b, c, d]))
    };
    match s {
        [0x64, 0xff9b, 0, 0, 0, 0, high, low] => from(high, low),
        // SIIT's IPv4-translated form.
        [0, 0, 0, 0, 0xffff, 0, high, low] => from(high, low),
        [0x2002, high, low, ..] => from(high, low),
        // `::` and `::1` are IPv6's own unspecified and loopback addresses.
        [0, 0, 0, 0, 0, 0, high, low] if (high, low) > (0, 1) => from(high, low),
        _ => None,
    }
}

fn listed(entries: &[TargetPattern]) -> String {
    if entries.is_empty() {
        return "it is empty".into();
    }
    let shown: Vec<&str> = entries.iter().take(8).map(|e| e.text.as_str()).collect();
    let more = entries.len().saturating_sub(8);
    if more > 0 {
        format!("it lists {} and {more} more", shown.join(", "))
    } else {
        format!("it lists {}", shown.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> OutboundPolicy {
        OutboundRules {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            ..OutboundRules::default()
        }
        .compile()
        .unwrap()
    }

    fn allowed(policy: &OutboundPolicy, target: &str) -> bool {
        let target = Target::parse(target).unwrap();
        policy.allow.iter().any(|entry| entry.matches(&target))
    }

    #[test]
    fn names_match_name_patterns_and_addresses_match_ranges() {
        let p = policy(&[
            "*.svc.cluster.local:50051",
            "10.0.0.0/8:*",
            "[fd00::/8]:443",
            "api.internal:443",
        ]);
        assert!(allowed(&p, "tokenizer.jobs.svc.cluster.local:50051"));
        assert!(
            allowed(&p, "Tokenizer.Jobs.SVC.cluster.local.:50051"),
            "case and a trailing dot"
        );
        assert!(
            !allowed(&p, "tokenizer.jobs.svc.cluster.local:50052"),
            "another port"
        );
        assert!(!allowed(&p, "svc.cluster.local.evil.example:50051"));
        assert!(allowed(&p, "10.1.2.3:9000"));
        assert!(!allowed(&p, "11.1.2.3:9000"));
        assert!(allowed(&p, "[fd00::7]:443"));
        assert!(!allowed(&p, "[fd00::7]:444"));
        assert!(allowed(&p, "api.internal:443"));
        assert!(!allowed(&p, "api.internal:80"));
        let anywhere = policy(&["*:*"]);
        assert!(allowed(&anywhere, "anything.example:1"));
        assert!(
            !allowed(&anywhere, "169.254.169.254:80"),
            "a name pattern never matches an address"
        );
    }

    #[test]
    fn a_name_may_not_resolve_into_a_denied_range_unless_the_address_is_listed() {
        let p = policy(&["*.internal:*"]);
        let metadata: IpAddr = "169.254.169.254".parse().unwrap();
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let private: IpAddr = "10.0.0.7".parse().unwrap();
        assert!(!p.allows_connection("evil.internal", metadata, 80));
        assert!(!p.allows_connection("evil.internal", loopback, 80));
        assert!(
            !p.allows_connection("evil.internal", mapped, 80),
            "IPv4-mapped loopback"
        );
        for translated in [
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "::127.0.0.1",
            "::ffff:0:127.0.0.1",
        ] {
            let address: IpAddr = translated.parse().unwrap();
            assert!(
                !p.allows_connection("evil.internal", address, 80),
                "{translated} carries a denied IPv4 address"
            );
        }
        let public_v4_via_nat64: IpAddr = "64:ff9b::5db8:d822".parse().unwrap();
        assert!(p.allows_connection("db.internal", public_v4_via_nat64, 80));
        assert!(p.allows_connection("db.internal", private, 80));
        let dev = policy(&LOOPBACK);
        assert!(
            dev.allows_connection("localhost", loopback, 50051),
            "listed by address"
        );
        assert!(dev.allows_connection("127.0.0.1", loopback, 50051));
        assert!(
            !dev.allows_connection("10.0.0.7", private, 50051),
            "an address target must be listed"
        );
        assert!(OutboundPolicy::unrestricted().allows_connection("x", metadata, 80));
        assert!(
            !p.allows_connection("db.example", private, 80),
            "a name allow does not list is refused at connect time too"
        );
    }

    #[test]
    fn a_zone_is_an_interface_name_or_the_target_is_refused() {
        let p = policy(&["[fd00::/8]:*"]);
        assert!(allowed(&p, "[fd00::1%25eth0]:50099"));
        assert!(allowed(&p, "[fd00::1%25en0.1_a-b]:50099"));
        let names = policy(&["*:*"]);
        for number in [
            "0XA630005:443",
            "10.6488325:443",
            "012.0.0.1:443",
            "127.1:443",
            "10.0.0.1.:80",
        ] {
            assert!(Target::parse(number).is_none(), "{number} is no name");
            let host = number.rsplit_once(':').unwrap().0;
            assert!(
                !names.allows_connection(host, "10.99.0.5".parse().unwrap(), 443),
                "{number} never connects as a name"
            );
        }
        assert!(allowed(&names, "api.example.com:443"));
        assert!(
            allowed(&names, "svc-1.internal:443"),
            "digits inside a label are fine"
        );
        for hostile in [
            "[fd00::1%25@3221225986]:50099",
            "[fd00::1%25@192.0.2.2]:50099",
            "[fd00::1%25]:50099",
            "[fd00::1%25a/b]:50099",
            "[fd00::1%25a]b]:50099",
        ] {
            assert!(Target::parse(hostile).is_none(), "{hostile} is no target");
        }
    }

    #[test]
    fn bad_entries_name_the_key_and_the_fix() {
        for (rules, expected) in [
            (
                OutboundRules {
                    allow: vec!["api.internal".into()],
                    ..Default::default()
                },
                "workflow.outbound.allow[0]: 'api.internal' has no port",
            ),
            (
                OutboundRules {
                    allow: vec!["api.internal:http".into()],
                    ..Default::default()
                },
                "the port 'http' is neither",
            ),
            (
                OutboundRules {
                    allow: vec!["http://x:1".into()],
                    ..Default::default()
                },
                "is neither a host name pattern",
            ),
            (
                OutboundRules {
                    plaintext: vec!["10.0.0.0/33:1".into()],
                    ..Default::default()
                },
                "workflow.outbound.plaintext[0]",
            ),
            (
                OutboundRules {
                    deny_addresses: vec!["nope".into()],
                    ..Default::default()
                },
                "workflow.outbound.deny_addresses[0]",
            ),
            (
                OutboundRules {
                    max_request_bytes: Some(0),
                    ..Default::default()
                },
                "max_request_bytes must be at least 1",
            ),
        ] {
            let error = rules.compile().unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
        assert!(OutboundRules::default().compile().is_ok());
    }
}
