//! The node config: `[node]`, `[auth]`, `[registry]`, `[parse]`, `[jobs]`, `[telemetry]`, loaded from TOML with
//! environment overrides.
//!
//! The environment forms ([`EnvOverrides`]):
//!
//! - `PROTOMOLT_<SECTION>__<KEY>=value` sets `<section>.<key>` (`__` separates the
//!   parts, names are lower-cased): `PROTOMOLT_NODE__BIND=127.0.0.1:9000`. Values stay
//!   strings until the key's type asks for more, so `PROTOMOLT_JOBS__WORKER_ID=123` is
//!   the string `"123"` while `PROTOMOLT_JOBS__WORKER_COUNT=2` is the number 2. A value
//!   written as `[a, b]` is a list (`PROTOMOLT_NODE__ROLES=[registry,jobs]`).
//! - `PROTOMOLT_KAFKA_OPTION_<NAME>=value` sets `jobs.kafka_options."<name>"`: the name
//!   is lower-cased and each `_` becomes a `.` (`__` stands for a literal `_`), so
//!   `PROTOMOLT_KAFKA_OPTION_SASL_PASSWORD=s3cret` is `"sasl.password" = "s3cret"`. The
//!   value is taken verbatim.
//! - Either form with `_FILE` appended reads the value from that file, verbatim but for
//!   a trailing newline: `PROTOMOLT_JOBS__DATABASE_URL_FILE=/run/secrets/db`. When both
//!   forms of one key are set, the file wins.
//!
//! Other `PROTOMOLT_*` variables are not config. The project's own (the set-up
//! script's `PROTOMOLT_DEV`, for example) are listed in `env::NOT_CONFIG_VARIABLES`; any
//! other draws a warning naming the variable probably meant
//! ([`EnvOverrides::warnings`]), since `PROTOMOLT_JOBS_WORKER_ID` (one underscore) is
//! an easy slip.
//!
//! Errors are one line naming the full dotted key, where its value came from, and for
//! an unknown key the closest valid one ([`HostConfig::load_with`]);
//! [`HostConfig::to_masked_toml`] prints the effective config with its secrets masked.
//!
//! | module    | concept                                                             |
//! |-----------|---------------------------------------------------------------------|
//! | this one  | loading (file, then environment, then checks) and printing          |
//! | `model`   | the sections and the checks types cannot make                       |
//! | `keys`    | every key, read from the types; how a key and its variable are named |
//! | `env`     | the environment forms and `_FILE` secrets; warnings for slips       |
//! | `errors`  | figment's errors as one line naming the key and its source          |
//! | `masking` | the secrets masked in printed config                                |

mod env;
mod errors;
mod keys;
mod masking;
mod model;
#[cfg(test)]
mod tests;

use std::path::Path;

use figment::Figment;
use figment::providers::{Format, Toml};

pub use env::EnvOverrides;
use errors::describe;
use masking::{MASK, mask_secrets};
pub use model::{HostConfig, TelemetrySection};

impl HostConfig {
    /// Loads the file (when given) with `env` over it (the process environment is
    /// [`EnvOverrides::from_process`]), and checks the result; the error is one line
    /// naming the key, where its value came from, and the fix.
    pub fn load_with(path: Option<&Path>, env: EnvOverrides) -> Result<HostConfig, String> {
        let mut figment = Figment::new();
        if let Some(path) = path {
            if !path.exists() {
                return Err(format!("config file {} does not exist", path.display()));
            }
            figment = figment.merge(Toml::file(path));
        }
        // Lossy: the environment provides strings, and a string that spells a number or
        // a boolean becomes one where the key's type asks for it.
        let config: HostConfig = figment
            .merge(env.clone())
            .extract_lossy()
            .map_err(|e| format!("invalid config: {}", describe(&e, &env)))?;
        config.check()?;
        Ok(config)
    }

    /// Every key a config file may set, with the variable that overrides it (see
    /// `keys::key_listing`): what `config-keys` prints.
    pub fn key_listing() -> Vec<(String, String)> {
        keys::key_listing()
    }

    /// The config as TOML, every default filled in and the secrets masked (see
    /// `masking::mask_secrets`); optional keys that are not set are left out (TOML has no
    /// null). What `check-config` prints.
    pub fn to_masked_toml(&self) -> Result<String, String> {
        let mut value = toml::Value::try_from(self)
            .map_err(|e| format!("cannot print the config as TOML: {e}"))?;
        mask_secrets(&mut value);
        let toml =
            toml::to_string(&value).map_err(|e| format!("cannot print the config as TOML: {e}"))?;
        Ok(format!(
            "# The effective config (file, environment, defaults); secrets masked ({MASK}), unset optional keys left out.\n{toml}"
        ))
    }
}
