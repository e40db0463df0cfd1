//! Wake-ups over LISTEN/NOTIFY.
//!
//! One connection per listener subscribes to a channel and wakes every waiter when a
//! notification arrives: the worker waits on `protomolt_jobs_queued` (submissions,
//! requeues, answered steps), the relay on `protomolt_jobs_outbox` (every outbox row),
//! and the worker's cancel listener on `protomolt_jobs_cancel` (the id of a RUNNING job
//! an operator cancelled, so the task holding it stops at once).
//! An idle fleet so starts work in milliseconds instead of at the next poll; polling
//! stays as the fallback and covers the time a listener spends reconnecting.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use crate::store::Store;

/// Listens with `listen` (a `LISTEN ...` statement) until `shutdown`, reconnecting
/// after failures, and wakes `wake`'s waiters on every notification.
pub async fn listen_loop(
    store: Store,
    listen: &'static str,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    listen_with(store, listen, move |_| wake.notify_waiters(), shutdown).await
}

/// Listens with `listen` until `shutdown`, reconnecting after failures, and hands
/// every notification's payload to `heard`; after each (re)subscription it hears an
/// empty payload once, since notifications sent while it was away are lost.
pub async fn listen_with(
    store: Store,
    listen: &'static str,
    heard: impl Fn(&str) + Send + Sync,
    shutdown: CancellationToken,
) {
    while !shutdown.is_cancelled() {
        if let Err(e) = listen_once(&store, listen, &heard, &shutdown, std::future::pending()).await
        {
            tracing::warn!(error = %e, %listen, "a wake-up listener lost its connection; polling covers until it reconnects");
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = shutdown.cancelled() => {}
        }
    }
}

/// [`listen_with`], connected only while `wanted` holds, and for `linger` after it
/// stops holding (so watchers coming and going do not open a connection each). A
/// LISTEN is not free: every commit that notifies its channel signals the listening
/// backend, which on a small machine costs the workers measurable time, so a channel
/// nobody needs is not listened to. On connecting it calls `heard("")`, which covers
/// whatever committed before the LISTEN.
pub async fn listen_while(
    store: Store,
    listen: &'static str,
    heard: impl Fn(&str) + Send + Sync,
    mut wanted: tokio::sync::watch::Receiver<bool>,
    linger: Duration,
    shutdown: CancellationToken,
) {
    while !shutdown.is_cancelled() {
        // Disconnected until someone wants it.
        while !*wanted.borrow_and_update() {
            tokio::select! {
                changed = wanted.changed() => if changed.is_err() { return },
                () = shutdown.cancelled() => return,
            }
        }
        let mut watching = wanted.clone();
        let unwanted = async move {
            loop {
                if *watching.borrow_and_update() {
                    if watching.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                // Unwanted: wait out the linger, unless wanted again meanwhile.
                tokio::select! {
                    () = tokio::time::sleep(linger) => return,
                    changed = watching.changed() => if changed.is_err() { return },
                }
            }
        };
        if let Err(e) = listen_once(&store, listen, &heard, &shutdown, unwanted).await {
            tracing::warn!(error = %e, %listen, "a wake-up listener lost its connection; polling covers until it reconnects");
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = shutdown.cancelled() => {}
            }
        }
    }
}

/// Listens on one connection until it fails, `shutdown`, or `until` completes.
async fn listen_once(
    store: &Store,
    listen: &str,
    heard: &(impl Fn(&str) + Send + Sync),
    shutdown: &CancellationToken,
    until: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let (client, mut connection) = store.listen_for_work().await.map_err(|e| e.to_string())?;
    let subscribe = async {
        client
            .batch_execute(listen)
            .await
            .map_err(|e| e.to_string())?;
        // Wake everyone once subscribed: work may have arrived while we were away.
        heard("");
        // Keep the client alive as long as the connection is polled.
        std::future::pending::<()>().await;
        Ok::<(), String>(())
    };
    let poll = async {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => heard(n.payload()),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("the connection closed".to_owned()),
            }
        }
    };
    tokio::select! {
        result = subscribe => result,
        result = poll => result,
        () = until => Ok(()),
        () = shutdown.cancelled() => Ok(()),
    }
}
