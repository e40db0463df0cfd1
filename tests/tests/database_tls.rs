//! TLS to PostgreSQL: a cluster this test starts with a certificate from a CA it made,
//! reached with each `sslmode` of `jobs.database_url`. `pg_stat_ssl` says whether the
//! server saw TLS, so "encrypted" is observed, not assumed.

use jobs_role::store::Store;
use jobs_role::store::tls::connect_options;
use protomolt_e2e::cluster::{PgCluster, TestPki};

/// Whether the session `url` opens is encrypted, as the server sees it.
async fn encrypted(url: &str) -> Result<bool, String> {
    let (config, tls) = connect_options(url)?;
    let (client, connection) = config.connect(tls).await.map_err(|e| {
        let mut text = e.to_string();
        let mut next = std::error::Error::source(&e);
        while let Some(cause) = next {
            text.push_str(&format!(": {cause}"));
            next = cause.source();
        }
        text
    })?;
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

#[tokio::test]
async fn every_sslmode_reaches_a_cluster_serving_a_test_ca_s_certificate() {
    let pki = TestPki::new(&["localhost"]);
    let cluster = tokio::task::spawn_blocking(move || {
        let cluster = PgCluster::start(Some(&pki));
        (cluster, pki.ca_pem)
    })
    .await
    .unwrap();
    let (cluster, ca_pem) = cluster;
    let ca = cluster.dir().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    let ca = ca.display().to_string();
    let port = cluster.port;

    // require: encrypted, the certificate not checked (libpq's meaning).
    assert_eq!(encrypted(&cluster.url("sslmode=require")).await, Ok(true));
    assert_eq!(
        encrypted(&cluster.url("")).await,
        Ok(true),
        "prefer is the default"
    );
    assert_eq!(encrypted(&cluster.url("sslmode=disable")).await, Ok(false));
    // verify-full: the CA and the name.
    let localhost = format!("postgres://postgres@localhost:{port}/postgres");
    assert_eq!(
        encrypted(&format!("{localhost}?sslmode=verify-full&sslrootcert={ca}")).await,
        Ok(true)
    );
    // The certificate names localhost, not 127.0.0.1: verify-ca accepts it, verify-full
    // does not.
    assert_eq!(
        encrypted(&cluster.url(&format!("sslmode=verify-ca&sslrootcert={ca}"))).await,
        Ok(true)
    );
    let wrong_name = encrypted(&cluster.url(&format!("sslmode=verify-full&sslrootcert={ca}")))
        .await
        .unwrap_err();
    assert!(
        wrong_name.to_lowercase().contains("certificate"),
        "{wrong_name}"
    );
    // Not signed by a public root.
    let untrusted = encrypted(&format!("{localhost}?sslmode=verify-full"))
        .await
        .unwrap_err();
    assert!(
        untrusted.to_lowercase().contains("certificate"),
        "{untrusted}"
    );

    // The store itself (its pool, migrations and listener) over verify-full.
    let store = Store::connect(
        &format!("{localhost}?sslmode=verify-full&sslrootcert={ca}"),
        2,
    )
    .await
    .expect("the store connects over TLS and migrates");
    let (client, connection) = store.listen_for_work().await.expect("a listener over TLS");
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(
        row.get::<_, bool>(0),
        "the listener's connection is encrypted"
    );
    drop(cluster);
}

#[tokio::test]
async fn a_cluster_without_tls_refuses_sslmode_require_in_one_clear_error_and_its_socket_connects()
{
    let cluster = tokio::task::spawn_blocking(|| PgCluster::start(None))
        .await
        .unwrap();
    assert_eq!(
        encrypted(&cluster.url("")).await,
        Ok(false),
        "prefer falls back"
    );
    // Through the cluster's Unix socket, a connection string naming no TCP host: every
    // mode but verify-full (which has no name to check) connects.
    let socket = format!(
        "host={} port={} user=postgres dbname=postgres",
        cluster.dir().display(),
        cluster.port
    );
    for mode in ["", " sslmode=disable", " sslmode=prefer"] {
        assert_eq!(
            encrypted(&format!("{socket}{mode}")).await,
            Ok(false),
            "over the Unix socket,{mode}"
        );
    }
    let store = Store::connect(&socket, 2).await;
    assert!(
        store.is_ok(),
        "the store over the socket: {:?}",
        store.err()
    );
    let refused = connect_options(&format!("{socket} sslmode=verify-full"))
        .err()
        .unwrap_or_default();
    assert!(refused.contains("names none (a Unix socket"), "{refused}");
    let error = match Store::connect(&cluster.url("sslmode=require"), 2).await {
        Ok(_) => panic!("require must not fall back to plain text"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains(&format!("127.0.0.1:{}", cluster.port)),
        "{error}"
    );
    assert!(
        error.to_lowercase().contains("tls") || error.contains("SSL"),
        "{error}"
    );
}
