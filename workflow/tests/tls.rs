//! TLS steps against a real TLS server whose certificates a test CA signed: the CA
//! bundle and the client certificate come from the runner's per-target settings, and
//! a certificate failure is not retried.

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::json;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status};
use workflow::grpc::TlsTarget;
use workflow::testkit::proto::tokenizer_server::{Tokenizer, TokenizerServer};
use workflow::testkit::proto::{Text, Tokens};
use workflow::testkit::{step, workflow};
use workflow::{CompiledWorkflow, FailureKind, RunError, Runner};

struct Pki {
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_pem = params.self_signed(&key).unwrap().pem();
        Pki {
            ca_pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `names`, signed by this CA: (cert PEM, key PEM).
    fn issue(&self, names: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

struct Echo;

#[tonic::async_trait]
impl Tokenizer for Echo {
    async fn tokenize(&self, request: Request<Text>) -> Result<Response<Tokens>, Status> {
        let text = request.into_inner().text;
        Ok(Response::new(Tokens {
            ids: text.chars().map(|c| i64::from(u32::from(c))).collect(),
            fail: false,
        }))
    }
}

/// A TLS Tokenizer on 127.0.0.1 with a certificate from `pki`; with `client_ca`, it
/// requires a client certificate that CA signed.
async fn tls_server(pki: &Pki, client_ca: Option<&str>) -> String {
    let (cert, key) = pki.issue(&["127.0.0.1"]);
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
    if let Some(ca) = client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(ca));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tonic::transport::Server::builder()
        .tls_config(tls)
        .unwrap()
        .add_service(TokenizerServer::new(Echo));
    tokio::spawn(server.serve_with_incoming(TcpListenerStream::new(listener)));
    addr.to_string()
}

fn tls_workflow(target: &str) -> CompiledWorkflow {
    let mut tokenize = step(
        "tokenize",
        target,
        "jobs.test.Tokenizer/Tokenize",
        &["text = input.text"],
    );
    tokenize["tls"] = json!(true);
    CompiledWorkflow::compile(&workflow("tls", vec![tokenize], None)).unwrap()
}

async fn run(runner: &Runner, target: &str) -> Result<(), RunError> {
    let wf = tls_workflow(target);
    let input = wf.parse_input(&json!({ "text": "hi" })).unwrap();
    runner.run(&wf, &input).await.map(|_| ())
}

#[tokio::test]
async fn a_tls_step_trusts_the_ca_configured_for_its_target() {
    let pki = Pki::new();
    let target = tls_server(&pki, None).await;
    let runner = Runner::new().with_tls_targets(vec![TlsTarget {
        pattern: "127.0.0.1:*".into(),
        ca_pem: Some(pki.ca_pem.clone()),
        identity: None,
    }]);
    run(&runner, &target).await.expect("the CA is trusted");
}

#[tokio::test]
async fn an_untrusted_server_certificate_fails_the_step_without_retry() {
    let pki = Pki::new();
    let target = tls_server(&pki, None).await;
    // Public roots only: the test CA is unknown.
    let Err(RunError::Failed(failure)) = run(&Runner::new(), &target).await else {
        panic!("the handshake must fail")
    };
    assert_eq!(failure.kind, FailureKind::Workflow, "{failure}");
    assert!(!failure.is_retryable());
    let said = failure.to_string();
    assert!(
        said.contains("the TLS handshake with") && said.contains("[[registry.tls]]"),
        "{said}"
    );
}

#[tokio::test]
async fn mutual_tls_presents_the_configured_client_certificate() {
    let pki = Pki::new();
    let target = tls_server(&pki, Some(&pki.ca_pem)).await;
    let with_identity = Runner::new().with_tls_targets(vec![TlsTarget {
        pattern: "127.0.0.1:*".into(),
        ca_pem: Some(pki.ca_pem.clone()),
        identity: Some(pki.issue(&["client"])),
    }]);
    run(&with_identity, &target)
        .await
        .expect("the client certificate is accepted");

    let without = Runner::new().with_tls_targets(vec![TlsTarget {
        pattern: "127.0.0.1:*".into(),
        ca_pem: Some(pki.ca_pem.clone()),
        identity: None,
    }]);
    let Err(RunError::Failed(failure)) = run(&without, &target).await else {
        panic!("the server requires a client certificate")
    };
    assert!(!failure.is_retryable(), "{failure}");
}

#[test]
fn patterns_match_hosts_and_ports() {
    let entry = |pattern: &str| TlsTarget {
        pattern: pattern.into(),
        ca_pem: None,
        identity: None,
    };
    assert!(entry("*.internal:443").matches("models.internal:443"));
    assert!(!entry("*.internal:443").matches("models.internal:8443"));
    assert!(entry("10.0.0.7:*").matches("10.0.0.7:50051"));
    assert!(entry("*").matches("anything:1"));
    assert!(!entry("a:1").matches("a:12"));
    assert!(entry("*.*.internal:443").matches("a.b.internal:443"));
    assert!(!entry("*.*.internal:443").matches("ab.internal:443"));
    assert!(entry("a*b*c").matches("axxbyyc") && !entry("a*b*c").matches("axxbyy"));
    // Many stars against a long target: pattern × text steps at most (the old
    // backtracking matcher took minutes here).
    let long = format!("{}:1", "a.".repeat(20_000));
    assert!(!entry("*.*.*.*.*.internal:443").matches(&long));
}

/// A plain-text target whose own answer mentions certificates.
async fn answering_about_certificates() -> String {
    use workflow::testkit::proto::Review;
    use workflow::testkit::proto::review_desk_server::{ReviewDesk, ReviewDeskServer};
    struct Desk;
    #[tonic::async_trait]
    impl ReviewDesk for Desk {
        async fn review(&self, _: Request<Text>) -> Result<Response<Review>, Status> {
            Err(Status::unavailable(
                "certificate service is restarting, try again",
            ))
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ReviewDeskServer::new(Desk))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    addr.to_string()
}

#[tokio::test]
async fn a_servers_own_answer_about_certificates_is_not_a_tls_failure() {
    let target = answering_about_certificates().await;
    let envelope = workflow(
        "review",
        vec![step(
            "review",
            &target,
            "jobs.test.ReviewDesk/Review",
            &["text = input.text"],
        )],
        None,
    );
    let wf = CompiledWorkflow::compile(&envelope).unwrap();
    let input = wf.parse_input(&json!({ "text": "x" })).unwrap();
    let Err(RunError::Failed(failure)) = Runner::new().run(&wf, &input).await else {
        panic!("the target answers UNAVAILABLE")
    };
    assert!(
        matches!(
            failure.kind,
            FailureKind::Grpc {
                code: tonic::Code::Unavailable,
                transport: false,
                ..
            }
        ),
        "{failure}"
    );
    assert!(failure.is_retryable(), "{failure}");
}
