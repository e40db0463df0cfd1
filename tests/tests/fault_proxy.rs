//! The test kit's fault proxy itself, against the real PostgreSQL: it passes a
//! session through, cuts a connection right after a `COMMIT` reached the server (the
//! transaction lands, the client hears nothing), and refuses connections during an
//! outage.

use std::time::Duration;

use protomolt_e2e::TestDatabase;
use protomolt_e2e::proxy::{FaultProxy, Trigger};
use tokio_postgres::{Client, NoTls};

async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

#[tokio::test]
async fn a_commit_reaches_the_server_and_its_answer_never_comes_back() {
    let db = TestDatabase::create().await;
    let direct = db.connect().await;
    direct
        .batch_execute("CREATE TABLE t (n int)")
        .await
        .unwrap();
    let proxy = FaultProxy::postgres_for(&db.url).await;
    let url = proxy.database_url(&db.url);

    let mut client = connect(&url).await.expect("a session through the proxy");
    let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1, "bytes pass through");

    proxy.cut_after(Trigger::Commit, 1, Some(1));
    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (7)", &[]).await.unwrap();
    let committed = tx.commit().await;
    assert!(
        committed.is_err(),
        "the client hears no answer to its COMMIT"
    );
    assert_eq!(proxy.stats().cut_after_trigger, 1);
    let landed: i64 = direct
        .query_one("SELECT count(*) FROM t WHERE n = 7", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(landed, 1, "the transaction landed all the same");

    // Armed for one cut only: the next session commits and hears it.
    let mut client = connect(&url).await.unwrap();
    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO t VALUES (8)", &[]).await.unwrap();
    tx.commit().await.expect("answered");
}

#[tokio::test]
async fn an_outage_refuses_connections_and_cuts_the_open_ones() {
    let db = TestDatabase::create().await;
    let proxy = FaultProxy::postgres_for(&db.url).await;
    let url = proxy.database_url(&db.url);
    let open = connect(&url).await.unwrap();
    proxy.refuse();
    assert!(
        open.query_one("SELECT 1", &[]).await.is_err(),
        "the open session was cut"
    );
    assert!(connect(&url).await.is_err(), "a new one is refused");
    assert!(proxy.stats().refused >= 1);
    proxy.accept();
    let again = connect(&url).await.expect("answered again");
    again.query_one("SELECT 1", &[]).await.unwrap();

    let before = std::time::Instant::now();
    proxy.outage(Duration::from_millis(300)).await;
    assert!(before.elapsed() >= Duration::from_millis(300));
    connect(&url).await.expect("the outage ended");
}
