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
//! tokio-postgres itself knows only `disable`, `prefer` and `require`, and no
//! `sslrootcert`: both keys are taken out of the URL here and the rest is left to it.
//! In a `key=value` connection string the two values must not be quoted.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
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
) -> Result<(tokio_postgres::Config, MakeRustlsConnect), String> {
    let (rest, sslmode, sslrootcert) = take_tls_keys(database_url);
    let mut config: tokio_postgres::Config = rest
        .parse()
        .map_err(|e| format!("it is not a PostgreSQL URL or connection string: {e}"))?;
    let has_roots = sslrootcert.as_deref().is_some_and(|r| r != "system");
    let (mode, verification) = match sslmode.as_deref() {
        None | Some("prefer") => (
            SslMode::Prefer,
            if has_roots {
                Verification::Chain
            } else {
                Verification::Nothing
            },
        ),
        Some("disable") => (SslMode::Disable, Verification::Nothing),
        Some("allow") => (SslMode::Prefer, Verification::Nothing),
        Some("require") => (
            SslMode::Require,
            if has_roots {
                Verification::Chain
            } else {
                Verification::Nothing
            },
        ),
        Some("verify-ca") => (SslMode::Require, Verification::Chain),
        Some("verify-full") => (SslMode::Require, Verification::Full),
        Some(other) => {
            return Err(format!(
                "sslmode '{}' is not one of disable, allow, prefer, require, verify-ca, verify-full",
                other.escape_debug()
            ));
        }
    };
    config.ssl_mode(mode);
    let roots = trusted_roots(sslrootcert.as_deref())?;
    Ok((
        config,
        MakeRustlsConnect::new(client_config(verification, roots)?),
    ))
}

/// `database_url` without `sslmode` and `sslrootcert`, and their values (URL query
/// parameters, percent-decoded, or `key=value` words).
pub(super) fn take_tls_keys(database_url: &str) -> (String, Option<String>, Option<String>) {
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
        match database_url.split_once('?') {
            Some((base, query)) => {
                let kept: Vec<&str> = query
                    .split('&')
                    .filter(|pair| {
                        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                        !take(key, percent_decode(value))
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
        database_url
            .split_whitespace()
            .filter(|word| {
                let (key, value) = word.split_once('=').unwrap_or((word, ""));
                !take(key.trim(), value.trim().to_owned())
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    (rest, sslmode, sslrootcert)
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
        );
        assert_eq!(
            rest,
            "postgres://app@db.internal:5432/jobs?application_name=x"
        );
        assert_eq!(mode.as_deref(), Some("verify-full"));
        assert_eq!(root.as_deref(), Some("/etc/ca.pem"));
        let (rest, mode, root) = take_tls_keys("host=db user=app sslmode=require dbname=jobs");
        assert_eq!(rest, "host=db user=app dbname=jobs");
        assert_eq!(mode.as_deref(), Some("require"));
        assert_eq!(root, None);
        let (rest, mode, _) = take_tls_keys("postgres://app@db/jobs");
        assert_eq!((rest.as_str(), mode), ("postgres://app@db/jobs", None));
    }

    #[test]
    fn every_sslmode_maps_to_a_mode_or_a_clear_error() {
        for (url, mode) in [
            ("postgres://a@h/d", SslMode::Prefer),
            ("postgres://a@h/d?sslmode=disable", SslMode::Disable),
            ("postgres://a@h/d?sslmode=require", SslMode::Require),
            ("postgres://a@h/d?sslmode=verify-ca", SslMode::Require),
            (
                "postgres://a@h/d?sslmode=verify-full&sslrootcert=system",
                SslMode::Require,
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
        let error = connect_options("postgres://a@h/d?sslmode=require&sslrootcert=/no/such.pem")
            .err()
            .unwrap();
        assert!(
            error.contains("sslrootcert '/no/such.pem' cannot be read"),
            "{error}"
        );
    }
}
