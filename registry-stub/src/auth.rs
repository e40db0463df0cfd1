//! Bearer tokens and scopes.
//!
//! Tokens come from the node's `[auth]` config, each with its scopes. Every verb
//! declares the scope it needs (`workflow:run`, `jobs:read`, `jobs:complete`,
//! `registry:read`, `registry:write`, ...); the scope `*` grants every verb. Without
//! `[auth]` the node accepts every call, and [`crate::config`] only lets it bind to
//! loopback addresses.

use serde::{Deserialize, Serialize};

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
    /// The bearer token itself.
    pub token: String,
    /// Scopes it grants; `*` grants all.
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("TokenConfig")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish()
    }
}

impl AuthConfig {
    /// Checks the config: at least one token, none blank, none shorter than 16
    /// characters.
    pub fn check(&self) -> Result<(), String> {
        if self.tokens.is_empty() {
            return Err("[auth] needs at least one token under [[auth.tokens]]".into());
        }
        for (i, token) in self.tokens.iter().enumerate() {
            if token.token.trim().chars().count() < 16 {
                return Err(format!(
                    "[auth] token #{} is shorter than 16 characters; use a long random token",
                    i + 1
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
        self.tokens
            .iter()
            .find(|t| constant_time_eq(t.token.as_bytes(), presented.as_bytes()))
            .ok_or_else(|| ActionError::new(Code::Unauthenticated, "unknown bearer token"))
    }
}

impl TokenConfig {
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
                scopes: vec!["jobs:read".into()],
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
    fn weak_configs_are_refused() {
        assert!(AuthConfig { tokens: vec![] }.check().is_err());
        let mut weak = config();
        weak.tokens[0].token = "short".into();
        assert!(weak.check().unwrap_err().contains("shorter than 16"));
        assert!(config().check().is_ok());
    }
}
