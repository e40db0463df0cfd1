//! Bearer tokens and scopes.
//!
//! Tokens come from the node's `[auth]` config, each with its scopes. Every verb
//! declares the scope it needs (`workflow:run`, `jobs:read`, `jobs:complete`,
//! `registry:read`, `registry:write`, ...); the scope `*` grants every verb. Without
//! `[auth]` the node accepts every call, and [`crate::config`] only lets it bind to
//! loopback addresses.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::action::{ActionError, Code};

/// The `[auth]` section.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Accepted tokens.
    pub tokens: Vec<TokenConfig>,
}

/// One accepted token.
///
/// Serialized in full, token included: whoever prints it masks the token (as
/// `protomolt-node check-config` does).
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Who holds it (for logs).
    #[serde(default)]
    pub name: String,
    /// The bearer token itself; or leave it out and give `token_sha256`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// The SHA-256 of the token, 64 hex digits, so the config never holds the token
    /// (`protomolt token new` prints a new token and its digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
    /// Scopes it grants; `*` grants all.
    pub scopes: Vec<String>,
    /// At most this many requests a minute (a bucket of this many, refilled
    /// continuously); more answer 429 `resource_exhausted` with `Retry-After`. Unset:
    /// no limit. Each node keeps its own count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// The largest request body this token may send, in bytes (never more than the
    /// route's 8 MiB); a larger one answers 429 `resource_exhausted`. Unset: 8 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<usize>,
}

impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("TokenConfig")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("requests_per_minute", &self.requests_per_minute)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

impl AuthConfig {
    /// Checks the config: at least one token; each gives either `token` (at least 16
    /// characters) or `token_sha256` (64 hex digits), not both.
    pub fn check(&self) -> Result<(), String> {
        if self.tokens.is_empty() {
            return Err("[auth] needs at least one token under [[auth.tokens]]".into());
        }
        for (i, token) in self.tokens.iter().enumerate() {
            let n = i + 1;
            match (&token.token_sha256, token.token.is_empty()) {
                (Some(_), false) => {
                    return Err(format!(
                        "[auth] token #{n} gives both token and token_sha256; keep token_sha256 only"
                    ));
                }
                (Some(digest), true) if hex_digest(digest).is_none() => {
                    return Err(format!(
                        "[auth] token #{n}: token_sha256 must be 64 hex digits (protomolt token new prints one)"
                    ));
                }
                (Some(_), true) => {}
                (None, _) if token.token.trim().chars().count() < 16 => {
                    return Err(format!(
                        "[auth] token #{n} is shorter than 16 characters; use a long random token (protomolt token new)"
                    ));
                }
                (None, _) => {}
            }
            if token.requests_per_minute == Some(0) {
                return Err(format!(
                    "[auth] token #{n}: requests_per_minute must be at least 1 (leave it out for no limit)"
                ));
            }
            if token.max_body_bytes == Some(0) {
                return Err(format!(
                    "[auth] token #{n}: max_body_bytes must be at least 1 (leave it out for the route's 8 MiB)"
                ));
            }
            if token
                .max_body_bytes
                .is_some_and(|n| n > crate::limits::MAX_BODY_BYTES)
            {
                return Err(format!(
                    "[auth] token #{n}: max_body_bytes may be at most {} (the route's own limit; leave it out for that)",
                    crate::limits::MAX_BODY_BYTES
                ));
            }
        }
        Ok(())
    }

    /// The token presented in an `Authorization` header value, if it is accepted.
    pub fn authenticate(&self, header: Option<&str>) -> Result<&TokenConfig, ActionError> {
        let Some(header) = header else {
            return Err(ActionError::new(
                Code::Unauthenticated,
                "missing bearer token: send Authorization: Bearer <token>",
            ));
        };
        let presented = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                ActionError::new(
                    Code::Unauthenticated,
                    "the Authorization header must be 'Bearer <token>'",
                )
            })?;
        // Digests are compared, never the tokens: every comparison has the same length,
        // so the time taken says nothing about a token's length or prefix.
        let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.tokens
            .iter()
            .find(|t| {
                t.digest()
                    .is_some_and(|digest| constant_time_eq(&digest, &presented))
            })
            .ok_or_else(|| ActionError::new(Code::Unauthenticated, "unknown bearer token"))
    }
}

impl TokenConfig {
    /// The SHA-256 of the token: `token_sha256` decoded, or the digest of `token`.
    fn digest(&self) -> Option<[u8; 32]> {
        match &self.token_sha256 {
            Some(hex) => hex_digest(hex),
            None => Some(Sha256::digest(self.token.as_bytes()).into()),
        }
    }

    /// The first of `scopes` (a verb's own, then those that also grant it) the token
    /// grants; `*` grants the first.
    pub fn authorize_any<'a>(
        &self,
        scopes: &[&'a str],
        verb: &str,
    ) -> Result<&'a str, ActionError> {
        if let Some(scope) = scopes
            .iter()
            .find(|scope| self.scopes.iter().any(|s| s == *scope || s == "*"))
        {
            return Ok(scope);
        }
        let named: Vec<String> = scopes.iter().map(|s| format!("'{s}'")).collect();
        Err(ActionError::new(
            Code::PermissionDenied,
            format!(
                "the token lacks the scope {} that {verb} needs",
                named.join(" or ")
            ),
        ))
    }

    /// Checks that the token grants `scope`.
    pub fn authorize(&self, scope: &str, verb: &str) -> Result<(), ActionError> {
        if self.scopes.iter().any(|s| s == scope || s == "*") {
            Ok(())
        } else {
            Err(ActionError::new(
                Code::PermissionDenied,
                format!("the token lacks the scope '{scope}' that {verb} needs"),
            ))
        }
    }
}

/// The SHA-256 of `text`, as `token_sha256` writes it: 64 lower-case hex digits.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// 64 hex digits (either case) as the 32 bytes they spell.
fn hex_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        digest[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(digest)
}

/// Compares without an early exit, so response times do not leak how much matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AuthConfig {
        AuthConfig {
            tokens: vec![TokenConfig {
                name: "ops".into(),
                token: "0123456789abcdef-ops".into(),
                token_sha256: None,
                scopes: vec!["jobs:read".into()],
                requests_per_minute: None,
                max_body_bytes: None,
            }],
        }
    }

    #[test]
    fn tokens_and_scopes() {
        let auth = config();
        assert_eq!(
            auth.authenticate(None).unwrap_err().code,
            Code::Unauthenticated
        );
        assert_eq!(
            auth.authenticate(Some("Basic x")).unwrap_err().code,
            Code::Unauthenticated
        );
        assert_eq!(
            auth.authenticate(Some("Bearer nope")).unwrap_err().code,
            Code::Unauthenticated
        );
        let token = auth
            .authenticate(Some("Bearer 0123456789abcdef-ops"))
            .unwrap();
        assert!(token.authorize("jobs:read", "get-job").is_ok());
        assert_eq!(
            token
                .authorize("jobs:complete", "complete-step")
                .unwrap_err()
                .code,
            Code::PermissionDenied
        );
        assert!(
            !format!("{token:?}").contains("0123456789abcdef"),
            "secrets stay out of logs"
        );
    }

    #[test]
    fn a_token_given_by_its_sha256_is_accepted_and_the_config_never_holds_it() {
        let mut auth = config();
        auth.tokens[0].token = String::new();
        auth.tokens[0].token_sha256 = Some(sha256_hex("0123456789abcdef-ops").to_uppercase());
        assert!(auth.check().is_ok());
        let token = auth
            .authenticate(Some("Bearer 0123456789abcdef-ops"))
            .unwrap();
        assert_eq!(token.name, "ops");
        assert_eq!(
            auth.authenticate(Some("Bearer 0123456789abcdef-opz"))
                .unwrap_err()
                .code,
            Code::Unauthenticated
        );
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );

        let mut both = auth.clone();
        both.tokens[0].token = "0123456789abcdef-ops".into();
        assert!(
            both.check()
                .unwrap_err()
                .contains("both token and token_sha256")
        );
        let mut malformed = auth;
        malformed.tokens[0].token_sha256 = Some("abc".into());
        assert!(malformed.check().unwrap_err().contains("64 hex digits"));
    }

    #[test]
    fn weak_configs_are_refused() {
        assert!(AuthConfig { tokens: vec![] }.check().is_err());
        let mut weak = config();
        weak.tokens[0].token = "short".into();
        assert!(weak.check().unwrap_err().contains("shorter than 16"));
        assert!(config().check().is_ok());
        for (bytes, needle) in [(0, "at least 1"), (9 * 1024 * 1024, "at most 8388608")] {
            let mut budget = config();
            budget.tokens[0].max_body_bytes = Some(bytes);
            let error = budget.check().unwrap_err();
            assert!(error.contains(needle), "{error}");
        }
    }
}
