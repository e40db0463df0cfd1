//! How the store reaches PostgreSQL: `jobs.database_url` read the way libpq reads
//! `sslmode` and `sslrootcert`, over rustls (as the engine's gRPC calls are).
//!
//! | `sslmode`            | TLS                          | the server's certificate                  |
//! |----------------------|------------------------------|-------------------------------------------|
//! | `disable`            | never                        | -                                         |
//! | `prefer` (default)   | when the server offers it    | not checked (unless `sslrootcert` is set) |
//! | `require`            | always                       | not checked (unless `sslrootcert` is set) |
//! | `verify-ca`          | always                       | chains to a trusted root                  |
//! | `verify-full`        | always                       | chains to a trusted root and names the host |
//!
//! The trusted roots are the PEM file `sslrootcert` names, or the public web roots when
//! it is unset or `system` (libpq would read `~/.postgresql/root.crt`; a node has no
//! home worth trusting). `require` without `sslrootcert` encrypts but, as in libpq,
//! trusts whoever answers: use `verify-full` beyond a network you control.
//!
//! Two combinations are refused at start-up because they look safe and are not:
//! `verify-ca` without an `sslrootcert` of one's own (any certificate a public
//! authority signed, for any name, would pass), and `sslrootcert=system` with a mode
//! weaker than `verify-full` (libpq 16's rule; with `sslmode` left out it means
//! `verify-full`, as in libpq). `verify-full` needs a host name to check: a Unix
//! socket or `hostaddr` alone is refused with it.
//!
//! tokio-postgres itself knows only `disable`, `prefer` and `require`, and no
//! `sslrootcert`: both keys are taken out of the URL here and the rest is left to it.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verification {
    /// Nothing (libpq's `prefer` and `require`): encryption against a passive listener.
    Nothing,
    /// The chain to a trusted root, not the name (`verify-ca`).
    Chain,
    /// The chain and the host name (`verify-full`).
    Full,
}

/// The connection settings and the TLS connector `database_url` describes; the error
/// says what is wrong with it and the fix.
pub fn connect_options(
    database_url: &str,
) -> Result<(tokio_postgres::Config, DatabaseTls), String> {
    let (rest, sslmode, sslrootcert) = take_tls_keys(database_url)?;
    let mut config: tokio_postgres::Config = rest
        .parse()
        .map_err(|e| format!("it is not a PostgreSQL URL or connection string: {e}"))?;
    // Whatever tokio-postgres reads as sslmode from what is left, this module did not
    // see (a `?` or `@` in a password, an encoded key): it must not be silently
    // overridden by this module's reading, which could turn `require` into `prefer`.
    if config.get_ssl_mode() != SslMode::Prefer {
        return Err(
            "sslmode is given in a way this node reads differently from the PostgreSQL driver (a '?', '@' or '&' in the user name or password must be percent-encoded, and keys must be written plainly): write it as postgres://user:password@host/db?sslmode=verify-full"
                .to_owned(),
        );
    }
    let system_roots = sslrootcert.as_deref() == Some("system");
    let own_roots = sslrootcert.is_some() && !system_roots;
    // Without roots of one's own, chain-only checking would accept any certificate a
    // public authority signed for any name: libpq 16 refuses `sslrootcert=system`
    // with a mode weaker than verify-full for this reason, and so does verify-ca here.
    let (mode, verification) = match sslmode.as_deref() {
        None if system_roots => (SslMode::Require, Verification::Full),
        _ if system_roots && sslmode.as_deref() != Some("verify-full") => {
            return Err(format!(
                "sslrootcert=system trusts every public authority, which only protects a connection that checks the host's name too: use sslmode=verify-full (or leave sslmode out), not '{}'",
                sslmode.as_deref().unwrap_or_default().escape_debug()
            ));
        }
        Some("verify-ca") if !own_roots => {
            return Err(
                "sslmode=verify-ca checks the certificate's chain but not its name, which protects only with your own authority: add sslrootcert=<your CA's PEM file>, or use sslmode=verify-full"
                    .to_owned(),
            );
        }
        None | Some("prefer") if own_roots => (SslMode::Prefer, Verification::Chain),
        None | Some("prefer") | Some("allow") => (SslMode::Prefer, Verification::Nothing),
        Some("disable") => (SslMode::Disable, Verification::Nothing),
        Some("require") if own_roots => (SslMode::Require, Verification::Chain),
        Some("require") => (SslMode::Require, Verification::Nothing),
        Some("verify-ca") => (SslMode::Require, Verification::Chain),
        Some("verify-full") => (SslMode::Require, Verification::Full),
        Some(other) => {
            return Err(format!(
                "sslmode '{}' is not one of disable, allow, prefer, require, verify-ca, verify-full",
                other.escape_debug()
            ));
        }
    };
    if verification == Verification::Full {
        let named = |host: &Host| matches!(host, Host::Tcp(name) if !name.is_empty());
        if config.get_hosts().is_empty() || !config.get_hosts().iter().all(named) {
            return Err(
                "sslmode=verify-full checks the certificate against the host's name, and this connection names none (a Unix socket, or hostaddr alone): add host=<the name on the server's certificate>"
                    .to_owned(),
            );
        }
    }
    config.ssl_mode(mode);
    let roots = trusted_roots(sslrootcert.as_deref())?;
    Ok((
        config,
        DatabaseTls(MakeRustlsConnect::new(client_config(verification, roots)?)),
    ))
}

/// The TLS connector of the pool and the listener. It is rustls's, except that a
/// connection naming no host (a Unix socket, or `hostaddr` alone) is given a
/// placeholder name, as rustls needs one even when no TLS is negotiated; such a
/// connection never checks a name ([`connect_options`] refuses verify-full for it).
#[derive(Clone)]
pub struct DatabaseTls(MakeRustlsConnect);

/// A name for connections that give none; never checked.
const UNNAMED_HOST: &str = "unnamed.invalid";

impl<S> MakeTlsConnect<S> for DatabaseTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, hostname: &str) -> Result<Self::TlsConnect, Self::Error> {
        let name = if hostname.is_empty() {
            UNNAMED_HOST
        } else {
            hostname
        };
        MakeTlsConnect::<S>::make_tls_connect(&mut self.0, name)
    }
}

/// `database_url` without `sslmode` and `sslrootcert`, and their values (URL query
/// parameters, keys and values percent-decoded, or `key=value` words, quoted or not).
/// A `key=value` string this cannot read is refused rather than passed on: its
/// `sslmode` would go unseen.
pub(super) fn take_tls_keys(
    database_url: &str,
) -> Result<(String, Option<String>, Option<String>), String> {
    let (mut sslmode, mut sslrootcert) = (None, None);
    let mut take = |key: &str, value: String| match key {
        "sslmode" => {
            sslmode = Some(value);
            true
        }
        "sslrootcert" => {
            sslrootcert = Some(value);
            true
        }
        _ => false,
    };
    let is_url =
        database_url.starts_with("postgres://") || database_url.starts_with("postgresql://");
    let rest = if is_url {
        // The query starts after the user information (which ends at the last '@'
        // before the path), as the driver reads it.
        let authority_start = database_url.find("//").map_or(0, |i| i + 2);
        let path_start = database_url[authority_start..]
            .find('/')
            .map_or(database_url.len(), |i| authority_start + i);
        let host_start = database_url[authority_start..path_start]
            .rfind('@')
            .map_or(authority_start, |i| authority_start + i + 1);
        let query_start = database_url[host_start..].find('?').map(|i| host_start + i);
        match query_start {
            Some(at) => {
                let (base, query) = (&database_url[..at], &database_url[at + 1..]);
                let kept: Vec<&str> = query
                    .split('&')
                    .filter(|pair| {
                        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                        !take(&percent_decode(key), percent_decode(value))
                    })
                    .collect();
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
            None => database_url.to_owned(),
        }
    } else {
        match key_value_words(database_url) {
            Some(words) => words
                .into_iter()
                .filter(|word| !take(&word.key, word.value.clone()))
                .map(|word| format!("{}={}", word.key, word.written))
                .collect::<Vec<_>>()
                .join(" "),
            None => {
                return Err(
                    "it is neither a postgres:// URL nor a key=value connection string this node can read (an unclosed quote, or a trailing backslash?)"
                        .to_owned(),
                );
            }
        }
    };
    Ok((rest, sslmode, sslrootcert))
}

/// One `key = value` of a libpq connection string.
struct KeyValue {
    key: String,
    /// The value, unquoted and unescaped.
    value: String,
    /// The value as written (quotes and escapes kept), to pass on unchanged.
    written: String,
}

/// A libpq `key=value` connection string's words: spaces around `=` allowed, a value
/// in single quotes may hold spaces, a backslash escapes the next character. None when
/// it is not one.
fn key_value_words(text: &str) -> Option<Vec<KeyValue>> {
    let mut words = Vec::new();
    let mut chars = text.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(key_start, _)) = chars.peek() else {
            return Some(words);
        };
        let mut key_end = key_start;
        while let Some((at, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key_end = at + c.len_utf8();
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        chars.next_if(|(_, c)| *c == '=')?;
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let (mut value, mut written) = (String::new(), String::new());
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        if quoted {
            written.push('\'');
        }
        loop {
            match chars.next() {
                None if quoted => return None,
                None => break,
                Some((_, c)) if !quoted && c.is_whitespace() => break,
                Some((_, '\'')) if quoted => {
                    written.push('\'');
                    break;
                }
                Some((_, '\\')) => {
                    let (_, escaped) = chars.next()?;
                    written.push('\\');
                    written.push(escaped);
                    value.push(escaped);
                }
                Some((_, c)) => {
                    written.push(c);
                    value.push(c);
                }
            }
        }
        words.push(KeyValue {
            key: text.get(key_start..key_end)?.to_owned(),
            value,
            written,
        });
    }
}

/// `%2F` and the like decoded; anything malformed left as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                i += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// The roots `sslrootcert` names, or the public web roots.
fn trusted_roots(sslrootcert: Option<&str>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match sslrootcert {
        None | Some("system") => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let certificates = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("sslrootcert '{path}' cannot be read: {e}"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("sslrootcert '{path}' is not a PEM certificate file: {e}"))?;
            let (added, _ignored) = roots.add_parsable_certificates(certificates);
            if added == 0 {
                return Err(format!("sslrootcert '{path}' holds no usable certificate"));
            }
        }
    }
    Ok(roots)
}

fn client_config(
    verification: Verification,
    roots: RootCertStore,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS to PostgreSQL: {e}"))?;
    let full = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("the trusted roots cannot verify certificates: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = match verification {
        Verification::Full => full,
        Verification::Chain => Arc::new(ChainOnly(full)),
        Verification::Nothing => Arc::new(Unverified(provider)),
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without roots: any certificate is accepted (libpq's own
/// behaviour), the handshake's signatures still checked.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_keys_are_taken_out_of_urls_and_connection_strings() {
        let (rest, mode, root) = take_tls_keys(
            "postgres://app@db.internal:5432/jobs?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(
            rest,
            "postgres://app@db.internal:5432/jobs?application_name=x"
        );
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/etc/ca.pem"));
        let (rest, mode, root) =
            take_tls_keys("host=db user=app sslmode=require dbname=jobs").unwrap();
        assert_eq!(rest, "host=db user=app dbname=jobs");
        assert_eq!(mode.as_deref(), Some("require"));
        assert_eq!(root, None);
        let (rest, mode, root) = take_tls_keys(
            "host=db password='it\\'s a secret' sslmode = 'verify-full' sslrootcert='/etc/my ca.pem'",
        )
        .unwrap();
        assert_eq!(rest, "host=db password='it\\'s a secret'");
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/etc/my ca.pem"));
        let (rest, mode, _) = take_tls_keys("postgres://app@db/jobs").unwrap();
        assert_eq!((rest.as_str(), mode), ("postgres://app@db/jobs", None));
    }

    #[test]
    fn every_sslmode_maps_to_a_mode_or_a_clear_error() {
        for (url, mode) in [
            ("postgres://a@h/d", SslMode::Prefer),
            ("postgres://a@h/d?sslmode=disable", SslMode::Disable),
            ("postgres://a@h/d?sslmode=require", SslMode::Require),
            (
                "postgres://a@h/d?sslmode=verify-full&sslrootcert=system",
                SslMode::Require,
            ),
            ("postgres://a@h/d?sslrootcert=system", SslMode::Require),
            // An encoded key is read as the driver would read it.
            ("postgres://a@h/d?ssl%6Dode=require", SslMode::Require),
            // A '?' in the password (the driver reads user information first).
            ("postgres://a:p?w@h/d?sslmode=require", SslMode::Require),
            ("host=/var/run/postgresql dbname=d", SslMode::Prefer),
            (
                "host=/var/run/postgresql dbname=d sslmode=disable",
                SslMode::Disable,
            ),
        ] {
            let (config, _) = connect_options(url).unwrap();
            assert_eq!(config.get_ssl_mode(), mode, "{url}");
        }
        let error = connect_options("postgres://a@h/d?sslmode=verify_full")
            .err()
            .unwrap();
        assert!(
            error.contains("sslmode 'verify_full' is not one of"),
            "{error}"
        );
        for (url, needle) in [
            (
                "postgres://a@h/d?sslmode=verify-ca",
                "add sslrootcert=<your CA's PEM file>",
            ),
            (
                "postgres://a@h/d?sslmode=require&sslrootcert=system",
                "use sslmode=verify-full (or leave sslmode out), not 'require'",
            ),
            (
                "host=/var/run/postgresql sslmode=verify-full",
                "add host=<the name on the server's certificate>",
            ),
            (
                "hostaddr=10.0.0.5 sslmode=verify-full",
                "add host=<the name on the server's certificate>",
            ),
            // Found in review: read as `prefer`, it connected in plain text to a
            // server without TLS (so did the '?' in a password and the encoded key
            // above).
            (
                "host=db sslmode=require password=abc\\",
                "a trailing backslash",
            ),
        ] {
            let error = connect_options(url).err().unwrap();
            assert!(error.contains(needle), "{url}: {error}");
        }
        let error = connect_options("postgres://a@h/d?sslmode=require&sslrootcert=/no/such.pem")
            .err()
            .unwrap();
        assert!(
            error.contains("sslrootcert '/no/such.pem' cannot be read"),
            "{error}"
        );
    }
}
