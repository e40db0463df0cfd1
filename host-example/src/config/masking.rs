//! Secrets masked in the config `check-config` prints: URL passwords, PostgreSQL's
//! `password=`, secret-like librdkafka options, bearer tokens.

/// What stands for a secret in printed config.
pub(super) const MASK: &str = "***";

/// Masks the secrets of the config as a TOML value, in place:
///
/// - every URL's password (`postgres://user:***@host/db`) and its query parameters
///   named like a secret (`?password=***`): `jobs.database_url`,
///   `jobs.schema_registry_url`, `telemetry.otlp_endpoint`, whatever else holds one;
/// - the `password` of `jobs.database_url` in PostgreSQL's `key=value` form;
/// - the value of every `jobs.kafka_options` entry named like a secret
///   (`sasl.*`, or containing `password`, `secret`, `token` or `key`);
/// - every `auth.tokens[].token`.
pub(super) fn mask_secrets(config: &mut toml::Value) {
    mask_urls(config);
    if let Some(url) = config
        .get_mut("jobs")
        .and_then(|jobs| jobs.get_mut("database_url"))
        && let toml::Value::String(url) = url
        && !url.contains("://")
    {
        *url = mask_key_value_password(url);
    }
    if let Some(toml::Value::Table(options)) = config
        .get_mut("jobs")
        .and_then(|jobs| jobs.get_mut("kafka_options"))
    {
        for (name, value) in options.iter_mut() {
            if is_secret_name(name) {
                *value = toml::Value::from(MASK);
            }
        }
    }
    if let Some(toml::Value::Array(tokens)) = config
        .get_mut("auth")
        .and_then(|auth| auth.get_mut("tokens"))
    {
        for token in tokens {
            if let Some(secret) = token.get_mut("token") {
                *secret = toml::Value::from(MASK);
            }
        }
    }
}

/// Whether a name (a librdkafka option, a URL's query parameter) holds a secret.
fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.starts_with("sasl.")
        || ["password", "passwd", "secret", "token", "key"]
            .iter()
            .any(|word| name.contains(word))
}

fn mask_urls(value: &mut toml::Value) {
    match value {
        toml::Value::String(text) if text.contains("://") => *text = mask_url(text),
        toml::Value::Array(items) => items.iter_mut().for_each(mask_urls),
        toml::Value::Table(table) => table.iter_mut().for_each(|(_, value)| mask_urls(value)),
        _ => {}
    }
}

/// `scheme://user:password@host/path?password=x` with the passwords masked; the user
/// stays (it says who connects). A password holding `/`, `?` or `#` unencoded still
/// ends at an `@` for the drivers, so everything after `user:` up to the last `@` is
/// masked: masking too much is harmless here, too little is a leak.
pub(super) fn mask_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let (scheme, rest) = url.split_at(scheme_end + 3);
    let (authority, tail) = match rest.rsplit_once('@') {
        Some((userinfo, after)) => {
            let host_end = after.find(['/', '?', '#']).unwrap_or(after.len());
            let (host, tail) = after.split_at(host_end);
            let authority = match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:{MASK}@{host}"),
                None => format!("{userinfo}@{host}"),
            };
            (authority, tail)
        }
        None => {
            let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (host, tail) = rest.split_at(host_end);
            (host.to_owned(), tail)
        }
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = match query.split_once('#') {
                Some((query, fragment)) => (query, format!("#{fragment}")),
                None => (query, String::new()),
            };
            let query = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if is_secret_name(name) => format!("{name}={MASK}"),
                    _ => pair.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("&");
            format!("{path}?{query}{fragment}")
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

/// PostgreSQL's `host=db user=app password='s e'` with every `...password=` value
/// masked (quoted values may hold spaces and `\'`).
pub(super) fn mask_key_value_password(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.to_ascii_lowercase().find("password") {
        let after_name = at + "password".len();
        let value_start = rest[after_name..]
            .trim_start()
            .strip_prefix('=')
            .map(|value| rest.len() - value.trim_start().len());
        let Some(start) = value_start else {
            out.push_str(&rest[..after_name]);
            rest = &rest[after_name..];
            continue;
        };
        let value = &rest[start..];
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let close = quoted.char_indices().find(|&(_, c)| {
                let closes = c == '\'' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            });
            close.map_or(value.len(), |(i, _)| i + 2)
        } else {
            // Unquoted, a backslash escapes the next character (a space among them).
            let mut escaped = false;
            value
                .char_indices()
                .find(|&(_, c)| {
                    let ends = c.is_whitespace() && !escaped;
                    escaped = c == '\\' && !escaped;
                    ends
                })
                .map_or(value.len(), |(i, _)| i)
        };
        out.push_str(&rest[..start]);
        out.push_str(MASK);
        rest = &rest[start + end..];
    }
    out.push_str(rest);
    out
}
