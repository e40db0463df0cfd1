// The peer the bench measures ProtoMolt Jobs beside, in the same run, against the same
// PostgreSQL: graphile-worker (the version package.json pins) with its default settings
// but for a concurrency of 24, running a task that does nothing.
//
//   node peer.js <connection string> <jobs> <single adds> <pickups>
//
// Prints one JSON object: `add_jobs_per_s` (batches of 1,000 through addJobs, which
// also queue the backlog), `drain_jobs_per_s` (that backlog of <jobs> drained),
// `add_job_per_s` (<single adds> addJob calls from 32 concurrent clients) and
// `pickup_p50_ms` / `pickup_p95_ms` (an idle worker, one job at a time, from addJob's
// return to the task starting). Run by `bench peer`; ./dev installs its packages.
'use strict';

const { Pool } = require('pg');
const { run, makeWorkerUtils, Logger } = require('graphile-worker');

const [connectionString, jobsArg, addsArg, pickupsArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
const adds = Number(addsArg);
const pickups = Number(pickupsArg);
if (!connectionString || !(jobs > 0) || !(adds > 0) || !(pickups > 0)) {
  console.error('usage: node peer.js <connection string> <jobs> <single adds> <pickups>');
  process.exit(2);
}

const quiet = new Logger(() => () => {});
const BATCH = 1000;
const CLIENTS = 32;

const seconds = (start) => Number(process.hrtime.bigint() - start) / 1e9;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function queued(pool) {
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM graphile_worker.jobs');
  return rows[0].n;
}

async function main() {
  const pool = new Pool({ connectionString, max: CLIENTS + 2 });
  pool.on('error', (error) => console.error(`peer: an idle connection failed: ${error.message}`));
  const utils = await makeWorkerUtils({ pgPool: pool, logger: quiet });
  await utils.migrate();

  // Batched adds: they queue the backlog the drain then works off.
  let start = process.hrtime.bigint();
  for (let done = 0; done < jobs; done += BATCH) {
    const n = Math.min(BATCH, jobs - done);
    await utils.addJobs(Array.from({ length: n }, (_, i) => ({ identifier: 'noop', payload: { i: done + i } })));
  }
  const addJobsPerS = jobs / seconds(start);

  // The drain: a worker of concurrency 24 from a standing start until the queue is empty.
  start = process.hrtime.bigint();
  let picked = null;
  const runner = await run({
    pgPool: pool,
    concurrency: 24,
    noHandleSignals: true,
    logger: quiet,
    taskList: {
      noop: async () => {},
      timed: async () => {
        if (picked) picked(process.hrtime.bigint());
      },
    },
  });
  while ((await queued(pool)) > 0) await sleep(10);
  const drainPerS = jobs / seconds(start);

  // Idle pickup: one job at a time, from addJob's return to the task starting.
  const pickupMs = [];
  for (let i = 0; i < pickups; i++) {
    await sleep(20);
    picked = null;
    const ran = new Promise((resolve) => { picked = resolve; });
    await utils.addJob('timed', {});
    const added = process.hrtime.bigint();
    const at = await ran;
    pickupMs.push(Number(at - added) / 1e6);
  }
  await runner.stop();

  // Single adds from 32 concurrent clients (no worker running).
  start = process.hrtime.bigint();
  let next = 0;
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (next < adds) {
      next += 1;
      await utils.addJob('noop', {});
    }
  }));
  const addJobPerS = adds / seconds(start);

  pickupMs.sort((a, b) => a - b);
  const at = (p) => pickupMs[Math.min(pickupMs.length - 1, Math.floor(p * pickupMs.length))];
  await utils.release();
  await pool.end();
  console.log(JSON.stringify({
    version: require('graphile-worker/package.json').version,
    add_jobs_per_s: addJobsPerS,
    drain_jobs_per_s: drainPerS,
    add_job_per_s: addJobPerS,
    pickup_p50_ms: at(0.5),
    pickup_p95_ms: at(0.95),
  }));
}

main().catch((error) => {
  console.error(`peer: ${error.stack || error}`);
  process.exit(1);
});
