//! The dispatch loop: claims as many jobs as there are free slots, one task per job,
//! and gives back the jobs of a claim whose answer was lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Worker;
use super::flusher::Flusher;

/// The most jobs one claim statement takes (the free slots decide, up to this).
const MAX_CLAIM_BATCH: usize = 128;

impl Worker {
    /// Claims as many eligible jobs as there are free slots, spawns a task per job,
    /// and sleeps on the wake-up (or the poll interval) when the queue has no more.
    pub(super) async fn dispatch(self: Arc<Self>, flusher: Flusher, shutdown: CancellationToken) {
        let owner = self.config.worker_id.clone();
        let slots = Arc::new(Semaphore::new(self.config.max_in_flight));
        let mut running = JoinSet::new();
        // The job each running task holds, by task.
        let mut held: HashMap<tokio::task::Id, Uuid> = HashMap::new();
        // The claims whose answer was lost, by nonce: jobs may be RUNNING under this
        // node with no task holding them, to be given back (tried a few times, a
        // second apart: a claim the server was still running may commit late).
        let mut unheard: Vec<UnheardClaim> = Vec::new();
        while !shutdown.is_cancelled() {
            // Register for the wake-up before looking, so a NOTIFY that lands between
            // an empty claim and the wait is not missed.
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let first_slot = tokio::select! {
                slot = slots.clone().acquire_owned() => slot,
                () = shutdown.cancelled() => break,
            };
            // The semaphore is never closed; a closed one would mean no more slots.
            let Ok(first_slot) = first_slot else { break };
            while let Some(done) = running.try_join_next_with_id() {
                let task = match &done {
                    Ok((task, ())) => *task,
                    Err(e) => e.id(),
                };
                held.remove(&task);
                report_panic(done.map(|_| ()));
            }
            if unheard.iter().any(UnheardClaim::due) {
                let mine: Vec<Uuid> = held.values().copied().collect();
                let nonces: Vec<Uuid> = unheard.iter().map(|claim| claim.nonce).collect();
                match self
                    .store
                    .release_unheard_claims(&owner, &nonces, &mine)
                    .await
                {
                    Ok(released) => {
                        if released > 0 {
                            tracing::warn!(%owner, released, "a claim's answer was lost; gave back the jobs it took (attempts returned)");
                        }
                        for claim in &mut unheard {
                            claim.tried();
                        }
                        unheard.retain(|claim| !claim.done());
                    }
                    Err(e) => {
                        tracing::debug!(%owner, error = %e, "giving back unheard claims failed; trying again")
                    }
                }
            }
            // After giving back lost claims: a draining node still hands those back.
            self.drain.set_running(held.len());
            if self.drain.is_draining() {
                // Claim nothing; look again when the mode changes or a job ends.
                drop(first_slot);
                tokio::select! {
                    () = self.drain.changed() => {}
                    () = tokio::time::sleep(self.config.poll_interval()) => {}
                    () = shutdown.cancelled() => {}
                }
                continue;
            }
            let free = (1 + slots.available_permits()).min(MAX_CLAIM_BATCH);
            let nonce = Uuid::new_v4();
            match self
                .store
                .claim_jobs_stamped(&owner, self.config.lease(), free, nonce)
                .await
            {
                Ok(jobs) => {
                    self.metrics.claims.inc_by(jobs.len() as u64);
                    let queue_has_more = jobs.len() == free;
                    let mut first_slot = Some(first_slot);
                    for job in jobs {
                        // Only this loop takes slots, so the free ones counted above
                        // are still free.
                        let slot = match first_slot.take() {
                            Some(slot) => slot,
                            None => match slots.clone().acquire_owned().await {
                                Ok(slot) => slot,
                                Err(_) => break,
                            },
                        };
                        let (worker, flusher, shutdown) =
                            (self.clone(), flusher.clone(), shutdown.clone());
                        let job_id = job.claim.job_id;
                        let task = running.spawn(async move {
                            worker.run_job(job, &flusher, &shutdown).await;
                            drop(slot);
                        });
                        held.insert(task.id(), job_id);
                    }
                    self.drain.set_running(held.len());
                    if queue_has_more {
                        continue;
                    }
                }
                Err(e) => {
                    // Not answered by the server: the claim may have been sent and
                    // committed, its answer lost on the way back.
                    if !e.is_answered_by_server() {
                        unheard.push(UnheardClaim::new(nonce));
                    }
                    tracing::warn!(%owner, error = %e, "claiming failed; retrying after the poll interval")
                }
            }
            tokio::select! {
                () = &mut woken => {}
                () = tokio::time::sleep(self.config.poll_interval()) => {}
                () = shutdown.cancelled() => {}
            }
        }
        while let Some(done) = running.join_next().await {
            report_panic(done);
        }
        tracing::debug!(%owner, "dispatcher stopped");
    }
}

/// A claim statement whose answer was lost, to be given back by its nonce.
struct UnheardClaim {
    nonce: Uuid,
    /// Give-backs tried so far.
    tries: u32,
    /// When the next may be tried.
    next: std::time::Instant,
}

impl UnheardClaim {
    /// Give-backs tried per lost claim: a claim the server was still running when the
    /// first ran may commit after it.
    const TRIES: u32 = 3;

    fn new(nonce: Uuid) -> UnheardClaim {
        UnheardClaim {
            nonce,
            tries: 0,
            next: std::time::Instant::now(),
        }
    }

    fn due(&self) -> bool {
        std::time::Instant::now() >= self.next
    }

    fn tried(&mut self) {
        self.tries += 1;
        self.next = std::time::Instant::now() + Duration::from_secs(1);
    }

    fn done(&self) -> bool {
        self.tries >= Self::TRIES
    }
}

/// Logs a job task that panicked (a defect: its claim is swept when the lease passes).
fn report_panic(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::error!(error = %e, "a job's task panicked; the sweeper requeues the job when its lease passes");
    }
}
