//! # The testkit of the end-to-end tests
//!
//! Tests here talk to the real services `./dev up` starts (or that `DATABASE_URL` and
//! `KAFKA_BOOTSTRAP` point at). Each test owns its data: [`TestDatabase`] is a fresh
//! database dropped when the test ends, and [`unique_topic`] names a topic no other
//! test uses, so tests run in parallel and in any order.

#![deny(unsafe_code)]
#![warn(missing_docs)]
// A testkit: failing loudly with the reason is its whole job.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod browser;
pub mod charts;
pub mod cluster;
pub mod hostile;
pub mod invariants;
pub mod jobs;
pub mod kafka;
pub mod process;
pub mod proxy;

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use tokio_postgres::{Client, NoTls};

/// Reads a variable the set-up script exports, or stops the test with the fix.
fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests with ./dev test, or `./dev up && source target/dev/env` first")
    })
}

/// The URL of a PostgreSQL database whose role may create databases.
pub fn database_url() -> String {
    required_env("DATABASE_URL")
}

/// The bootstrap address of the Kafka-protocol broker.
pub fn kafka_bootstrap() -> String {
    required_env("KAFKA_BOOTSTRAP")
}

/// Opens a connection and drives it on the current runtime.
pub async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    tokio::spawn(async move {
        // The connection ends when the client is dropped; an error then is expected.
        let _ = connection.await;
    });
    client
}

/// A database created for one test and dropped (forcibly) when the value is dropped.
pub struct TestDatabase {
    /// Connection URL of the fresh database.
    pub url: String,
    name: String,
    admin_url: String,
}

impl TestDatabase {
    /// Creates an empty database with a unique name.
    pub async fn create() -> TestDatabase {
        let admin_url = database_url();
        let name = format!("pm_test_{}", uuid::Uuid::new_v4().simple());
        let admin = connect(&admin_url).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let url = with_database(&admin_url, &name);
        TestDatabase {
            url,
            name,
            admin_url,
        }
    }

    /// A new connection to this database.
    pub async fn connect(&self) -> Client {
        connect(&self.url).await
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An outage of this database alone: new connections are refused and the open
    /// sessions cut. [`TestDatabase::allow_connections`] ends it.
    pub async fn refuse_connections(&self) {
        let admin = connect(&self.admin_url).await;
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {} ALLOW_CONNECTIONS false",
                self.name
            ))
            .await
            .expect("refusing connections");
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                &[&self.name],
            )
            .await
            .expect("cutting the sessions");
    }

    /// Ends [`TestDatabase::refuse_connections`]' outage.
    pub async fn allow_connections(&self) {
        connect(&self.admin_url)
            .await
            .batch_execute(&format!(
                "ALTER DATABASE {} ALLOW_CONNECTIONS true",
                self.name
            ))
            .await
            .expect("allowing connections");
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop runs inside the test's runtime, which cannot be blocked on: use a
        // thread with its own small runtime and wait for it.
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let admin = connect(&admin_url).await;
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .map_err(std::io::Error::other)
            })
        });
        let _ = dropper.join();
    }
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].rfind('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

/// A topic name no other test uses.
pub fn unique_topic(purpose: &str) -> String {
    format!("test-{purpose}-{}", uuid::Uuid::new_v4().simple())
}

/// Creates a topic through the admin API (the broker does not auto-create topics) and
/// waits until its metadata shows every partition.
pub async fn create_topic(name: &str, partitions: i32) {
    create_topic_at(&kafka_bootstrap(), name, partitions).await;
}

/// [`create_topic`] on the broker at `bootstrap` (the chaos run's own broker).
pub async fn create_topic_at(bootstrap: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let results = admin
        .create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create_topics request");
    for result in results {
        result.unwrap_or_else(|(topic, code)| panic!("creating topic {topic}: {code}"));
    }
    // Metadata fetches block: poll them off the runtime.
    let name = name.to_owned();
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let metadata = admin
                .inner()
                .fetch_metadata(Some(&name), Duration::from_secs(5))
                .expect("metadata");
            let ready = metadata.topics().iter().any(|t| {
                t.name() == name
                    && t.error().is_none()
                    && t.partitions().len() == partitions as usize
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "topic {name} never showed {partitions} partitions"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .expect("metadata poll");
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/protomolt", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/db?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:1", "x"), "postgres://h:1/x");
    }
}
