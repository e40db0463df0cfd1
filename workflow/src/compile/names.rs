//! Names and targets as a workflow may write them: workflow and step names, the
//! invisible characters a name must not hold, and `host:port` targets.

use crate::compile::limits::MAX_NAME_CHARS;
use crate::scope::INPUT;

pub(super) fn valid_name(name: &str) -> Result<(), String> {
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!("is longer than {MAX_NAME_CHARS} characters"));
    }
    if name.chars().any(char::is_control) {
        return Err("contains control characters".into());
    }
    Ok(())
}

/// Unicode's invisible formatting characters (general category Cf): bidirectional
/// overrides and isolates, zero-width characters, the byte-order mark, tags.
pub(crate) fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{AD}' | '\u{600}'..='\u{605}' | '\u{61C}' | '\u{6DD}' | '\u{70F}' | '\u{890}'..='\u{891}'
        | '\u{8E2}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}'
        | '\u{110BD}' | '\u{110CD}' | '\u{13430}'..='\u{1343F}' | '\u{1BCA0}'..='\u{1BCA3}'
        | '\u{1D173}'..='\u{1D17A}' | '\u{E0001}' | '\u{E0020}'..='\u{E007F}')
}

/// The forms a step's `target` takes, for findings.
const TARGET_FORMS: &str = "a target is host:port, e.g. '127.0.0.1:50051', 'tokenizer.internal:443' or '[::1]:50051' (\"tls\": true for TLS)";

/// A step's `target` is `host:port`: a hostname, an IPv4 address or a bracketed IPv6
/// address, and a port from 1 to 65535; no scheme, no path.
pub(super) fn valid_target(target: &str) -> Result<(), String> {
    if let Some((scheme, rest)) = target.split_once("://") {
        return Err(format!(
            "'{target}' has a scheme ('{scheme}://'): {TARGET_FORMS}, so write '{}'",
            rest.trim_end_matches('/')
        ));
    }
    if target.contains('/') {
        return Err(format!("'{target}' has a path: {TARGET_FORMS}"));
    }
    let Some((host, port)) = target.rsplit_once(':') else {
        return Err(format!("'{target}' has no port: {TARGET_FORMS}"));
    };
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    match port.parse::<u16>() {
        Ok(1..) if digits => {}
        _ => {
            return Err(format!(
                "'{target}': the port '{port}' is not a number from 1 to 65535: {TARGET_FORMS}"
            ));
        }
    }
    let host_ok = match host.strip_prefix('[') {
        // An IPv6 address, with a zone (`%25eth0`, percent-encoded as in a URI) or not.
        Some(bracketed) => bracketed
            .strip_suffix(']')
            .and_then(ipv6_with_zone)
            .is_some(),
        None if host.parse::<std::net::IpAddr>().is_err() && ends_in_a_number(host) => {
            return Err(format!(
                "'{target}': '{host}' is neither a name nor an IP address as written (a host ending in a number is read as an IPv4 address in some other form, 10.6488325 or 0xA630005): write the address as four decimal numbers (10.99.1.5), or a name: {TARGET_FORMS}"
            ));
        }
        None => {
            // A fully-qualified name may end with a dot (`svc.cluster.local.`).
            let name = host.strip_suffix('.').unwrap_or(host);
            !name.is_empty()
                && name.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                })
        }
    };
    if host_ok {
        Ok(())
    } else {
        Err(format!(
            "'{target}': '{host}' is not a hostname or an IP address: {TARGET_FORMS}"
        ))
    }
}

/// Whether a host that is not an IP address as Rust reads it ends in a number (its
/// last label all digits, or `0x` and hex digits): the C resolver reads such a host
/// as an IPv4 address in another form (`10.6488325`, `0xA630005`, `012.0.0.1` as
/// 10.0.0.1), so it is no name, and an address the outbound policy would check by
/// name patterns only. Refused, as the WHATWG URL standard refuses it.
pub(crate) fn ends_in_a_number(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    let last = host.rsplit('.').next().unwrap_or(host);
    let hex = last
        .strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()));
    !last.is_empty() && (last.bytes().all(|b| b.is_ascii_digit()) || hex)
}

/// The address of a bracketed IPv6 host (without its brackets), which may carry a
/// zone, percent-encoded as in a URI (`fe80::1%25eth0`). A zone is an interface name
/// or number: letters, digits, `.`, `_` and `-` only, at most 64. Anything else
/// (`%25@10.0.0.1`, a `]` or `/`) is refused, since the HTTP stack would read it as
/// something other than a zone (userinfo and another host) and connect elsewhere than
/// the outbound policy checked.
pub(crate) fn ipv6_with_zone(bracketed: &str) -> Option<std::net::Ipv6Addr> {
    let (address, zone) = match bracketed.split_once("%25") {
        Some((address, zone)) => (address, Some(zone)),
        None => (bracketed, None),
    };
    let zone_ok = zone.is_none_or(|zone| {
        !zone.is_empty()
            && zone.len() <= 64
            && zone
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    });
    if !zone_ok {
        return None;
    }
    address.parse().ok()
}

pub(super) fn valid_step_name(name: &str) -> Result<(), String> {
    valid_name(name)?;
    let mut chars = name.chars();
    let identifier = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier {
        return Err(format!(
            "'{name}' is not an identifier (letters, digits, '_'; not starting with a digit): rules and gates refer to steps by name"
        ));
    }
    if name == INPUT {
        return Err("'input' is reserved for the workflow input".into());
    }
    Ok(())
}
