// The TypeScript client against a real node (started by tests/tests/clients.rs, which
// sets the environment): submit (one and a batch) and wait, a human step answered,
// cancel and retry, watching events to the end, an error's code and details, a 503
// retried until the database is back, a 429 waited out by Retry-After.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { Client, ProtoMoltError, WaitTimeout, mayRetry } from "../dist/index.js";

function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: these tests run from tests/tests/clients.rs (./dev test)`);
  return value;
}

const url = env("PROTOMOLT_URL");
const token = env("PROTOMOLT_TOKEN");
const node = new Client(url, { token });
const REVIEW = { notes: "fine", score: 8 };

test("submit and wait for COMPLETED", async () => {
  const answer = await node.submit("leaf", { text: "one" }, { metadata: { customer: "acme" } });
  assert.match(answer.jobId, /^[0-9a-f-]{36}$/);
  const job = await node.wait(answer.jobId, { timeoutMs: 60_000 });
  assert.equal(job.status, "COMPLETED");
  assert.deepEqual(job.metadata, { customer: "acme" });
});

test("a submission sent twice is one job", async () => {
  const jobId = randomUUID();
  const first = await node.submit("leaf", { text: "twice" }, { jobId });
  const second = await node.submit("leaf", { text: "twice" }, { jobId });
  assert.equal(first.jobId, jobId);
  assert.equal(second.jobId, jobId);
  const listed = await node.listJobs({ jobIdPrefix: jobId });
  assert.deepEqual(listed.jobs.map((j) => j.jobId), [jobId]);
});

test("a batch is submitted and each job completes", async () => {
  const batch = randomUUID().slice(0, 8);
  const answer = await node.submitWorkflows({
    workflowName: "leaf",
    submissions: [
      { input: { text: "a" }, metadata: { batch } },
      { input: { text: "b" }, metadata: { batch } },
    ],
  });
  const ids = answer.answers.map((a) => a.jobId);
  assert.equal(ids.length, 2);
  for (const id of ids) assert.equal((await node.wait(id, { timeoutMs: 60_000 })).status, "COMPLETED");
  const found = await node.listJobs({ metadata: { batch } });
  assert.deepEqual(found.jobs.map((j) => j.jobId).sort(), [...ids].sort());
});

test("a human step is answered with complete-step", async () => {
  const { jobId } = await node.submit("review-text", { text: "please review" });
  const parked = await node.wait(jobId, { timeoutMs: 60_000, untilParked: true });
  assert.equal(parked.status, "WAITING");
  assert.equal(parked.outstandingStep, "review");
  const answered = await node.completeStep({ jobId, stepName: "review", response: REVIEW });
  assert.equal(answered.ok, true);
  const job = await node.wait(jobId, { timeoutMs: 60_000 });
  assert.equal(job.status, "COMPLETED");
  assert.equal(job.result.notes, "fine");
});

test("cancel, then retry", async () => {
  const { jobId } = await node.submit("review-text", { text: "cancel me" });
  await node.wait(jobId, { timeoutMs: 60_000, untilParked: true });
  assert.equal((await node.cancelJob({ jobId, reason: "changed my mind" })).ok, true);
  assert.equal((await node.wait(jobId, { timeoutMs: 30_000 })).status, "CANCELLED");
  assert.equal((await node.retryJob({ jobId })).ok, true);
  assert.equal((await node.wait(jobId, { timeoutMs: 60_000, untilParked: true })).status, "WAITING");
  await node.completeStep({ jobId, stepName: "review", response: REVIEW });
  assert.equal((await node.wait(jobId, { timeoutMs: 60_000 })).status, "COMPLETED");
});

test("watching a job yields its events until the end", async () => {
  // Line breaks JSON leaves unescaped, and text that would be an SSE field if split there.
  const hostile = "yes\u2028event: COMPLETED\u0085id: 0";
  const { jobId } = await node.submit("leaf", { text: "watch" }, { metadata: { watched: hostile } });
  const events = [];
  for await (const event of node.watch(jobId, { timeoutMs: 60_000 })) events.push(event);
  const types = events.map((e) => e.type);
  assert.equal(types[0], "ACCEPTED");
  assert.equal(types.at(-1), "COMPLETED");
  assert.ok(types.includes("STEP_CHECKPOINT"));
  for (const e of events) {
    assert.equal(e.jobId, jobId);
    assert.deepEqual(e.detail.metadata, { watched: hostile });
  }
  const rest = [];
  for await (const event of node.watch(jobId, { lastEventId: events[0].id, timeoutMs: 60_000 })) rest.push(event.id);
  assert.deepEqual(rest, events.slice(1).map((e) => e.id));
});

test("an error carries its code, message and details", async () => {
  await assert.rejects(node.submit("leaf", { text: "x" }, { metadata: { "Bad Key": "v" } }), (e) => {
    assert.ok(e instanceof ProtoMoltError);
    assert.equal(e.code, "invalid_argument");
    assert.equal(e.status, 400);
    assert.match(e.message, /Bad Key/);
    return true;
  });
  await assert.rejects(node.putWorkflow({ workflow: { name: "broken", steps: [{ name: "s" }, { name: "s" }] } }), (e) => {
    assert.equal(e.code, "invalid_argument");
    assert.ok(e.details.length > 0, JSON.stringify(e.details));
    return true;
  });
  const { jobId } = await node.submit("review-text", { text: "never answered" });
  await assert.rejects(node.wait(jobId, { timeoutMs: 1_500 }), WaitTimeout);
});

test("a 503 is retried until the node is back", async () => {
  const retries = [];
  const patient = new Client(url, { token, onRetry: (verb, error) => retries.push(error) });
  const control = env("CLIENTS_CONTROL_URL");
  const outage = await fetch(`${control}/outage?ms=2500`, { method: "POST" });
  assert.equal(outage.status, 200);
  const { jobId } = await patient.submit("leaf", { text: "through an outage" });
  assert.ok(retries.some((e) => e.code === "unavailable" && e.status === 503), JSON.stringify(retries));
  assert.equal((await patient.wait(jobId, { timeoutMs: 90_000 })).status, "COMPLETED");
});

test("a 429 is waited out by Retry-After", async () => {
  const limitedToken = env("CLIENTS_LIMITED_TOKEN");
  const waits = [];
  const limited = new Client(url, { token: limitedToken, onRetry: (verb, error, pauseMs) => waits.push({ error, pauseMs }) });
  for (let i = 0; i < 75; i++) await limited.getFleet();
  const refused = waits.filter((w) => w.error.status === 429);
  assert.ok(refused.length > 0, JSON.stringify(waits));
  for (const { error, pauseMs } of refused) {
    assert.equal(error.code, "resource_exhausted");
    assert.ok(error.retryAfter >= 1);
    assert.ok(pauseMs >= error.retryAfter * 1000);
  }
  const impatient = new Client(url, { token: limitedToken, retry: { maxAttempts: 1 } });
  await assert.rejects(
    (async () => {
      for (let i = 0; i < 75; i++) await impatient.getFleet();
    })(),
    (e) => e.code === "resource_exhausted" && e.retryAfter !== undefined,
  );
});

test("which failures are retried", () => {
  const unavailable = new ProtoMoltError("unavailable", "database away", [], 503);
  const budget = new ProtoMoltError("resource_exhausted", "over budget", [], 429, 1);
  const tooBig = new ProtoMoltError("resource_exhausted", "body too large", [], 429);
  const neverSent = new ProtoMoltError("connection", "refused");
  neverSent.sent = false;
  assert.ok(mayRetry("submit-workflow", unavailable));
  assert.ok(mayRetry("get-job", budget));
  assert.ok(!mayRetry("get-job", tooBig));
  for (const verb of ["run-workflow", "retry-job", "retry-jobs", "cancel-jobs"]) {
    assert.ok(!mayRetry(verb, unavailable), verb);
    assert.ok(mayRetry(verb, neverSent), verb);
    assert.ok(mayRetry(verb, budget), verb);
  }
});
