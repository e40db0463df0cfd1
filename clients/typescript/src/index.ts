/**
 * ProtoMolt Jobs' TypeScript client: every verb of a node as a typed method over
 * `fetch`, retries with backoff and jitter (and `Retry-After` on 429), errors as
 * `ProtoMoltError` with the node's `code`, `message` and `details`, `wait` for a job
 * over its Server-Sent Events stream (polling `get-job` where the stream cannot be
 * had) and `watch` its events. ESM, types included; Node 18+ and browsers.
 *
 * ```ts
 * import { Client } from "@protomolt/client";
 * const node = new Client("http://127.0.0.1:8080", { token });
 * const { jobId } = await node.submit("summarize", { text: "..." });
 * const job = await node.wait(jobId!, { timeoutMs: 60_000 });
 * console.log(job.status, job.result);
 * ```
 */

import { ProtoMoltError, WaitTimeout, connectionError, errorOf } from "./errors.js";
import { type CallOptions, type SubmitWorkflowRequest, type SubmitWorkflowResponse, Verbs, type VerbTypes } from "./generated.js";
import { DEFAULT_RETRY, Retries, type RetryHook, type RetryPolicy, linkedAbort, sleep } from "./retry.js";
import { type Job, type JobEvent, TERMINAL, eventOf, sseEvents } from "./sse.js";

export * from "./generated.js";
export { ProtoMoltError, WaitTimeout } from "./errors.js";
export { DEFAULT_RETRY, UNSAFE_TO_RESEND, mayRetry, type RetryHook, type RetryPolicy } from "./retry.js";
export { TERMINAL, type Job, type JobEvent } from "./sse.js";

/** Milliseconds a verb may take on the node beyond the client's timeout: `run-workflow` runs the whole workflow first (the node bounds it at 60 s). */
const SLOW_VERBS: Record<string, number> = { "run-workflow": 65_000 };

/** A stream with no byte for this long is taken as broken and resumed (the node sends a keep-alive every 15 s). */
const STREAM_IDLE_MS = 45_000;

/** How a client is made. */
export interface ClientOptions {
  /** A bearer token (a node with `[auth]`). */
  token?: string;
  retry?: Partial<RetryPolicy>;
  /** Called before each retry. */
  onRetry?: RetryHook;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
}

/** Verbs whose request names its own id, filled in when left out so a retried call makes one thing. */
const OWN_IDS: Record<string, string> = { "submit-workflow": "jobId", "trigger-schedule": "jobId", "send-event": "eventId" };

function newId(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return c.randomUUID();
  // Node 18 without the global crypto: a version-4 id from Math.random.
  const hex = [...Array(32)].map(() => Math.floor(Math.random() * 16).toString(16));
  hex[12] = "4";
  hex[16] = ((parseInt(hex[16]!, 16) & 3) | 8).toString(16);
  const s = hex.join("");
  return `${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20)}`;
}

/** A copy of `request` (the caller's objects are never changed) with the ids a retried call needs. */
function withIds(verb: string, request: unknown): Record<string, unknown> {
  const body = JSON.parse(JSON.stringify(request ?? {})) as Record<string, unknown>;
  const own = OWN_IDS[verb];
  if (own && !body[own]) body[own] = newId();
  if (verb === "submit-workflows" && Array.isArray(body.submissions)) {
    for (const s of body.submissions as Record<string, unknown>[]) if (s && typeof s === "object" && !s.jobId) s.jobId = newId();
  }
  return body;
}

const settled = (job: Job | undefined, untilParked: boolean) =>
  !!job && (TERMINAL.has(String(job.status)) || (untilParked && job.status === "WAITING"));

/** A node's verbs, called over HTTP. */
export class Client extends Verbs {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;
  private readonly onRetry?: RetryHook;

  constructor(baseUrl = "http://127.0.0.1:8080", options: ClientOptions = {}) {
    super();
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.headers = options.token ? { Authorization: `Bearer ${options.token}` } : {};
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.onRetry = options.onRetry;
  }

  /** Calls `verb` with `request`, retrying what the node did not take. */
  call<V extends keyof VerbTypes>(verb: V, request: VerbTypes[V]["request"], options: CallOptions = {}): Promise<VerbTypes[V]["response"]> {
    return this.send(verb, withIds(verb, request), options.signal) as Promise<VerbTypes[V]["response"]>;
  }

  /** Sends one call's body until it is answered or not retried; `deadline` (epoch ms) bounds it all. */
  private async send(verb: string, body: Record<string, unknown>, signal?: AbortSignal, deadline?: number): Promise<unknown> {
    const text = JSON.stringify(body);
    const retries = new Retries(this.retry, this.onRetry, verb, deadline);
    const waitMs = typeof body.waitMs === "number" && body.waitMs > 0 ? body.waitMs : 0;
    for (;;) {
      let limit = this.retry.timeoutMs + waitMs + (SLOW_VERBS[verb] ?? 0);
      if (deadline !== undefined) limit = Math.min(limit, Math.max(500, deadline - Date.now() + 1_000));
      const attempt = linkedAbort(signal, limit, () => new ProtoMoltError("connection", `no answer to ${verb} within ${limit} ms`));
      let error: ProtoMoltError;
      try {
        const response = await this.fetchImpl(`${this.baseUrl}/v1/actions/${verb}`, {
          method: "POST", body: text, signal: attempt.signal,
          headers: { ...this.headers, "Content-Type": "application/json" },
        });
        if (response.status === 200) return await response.json();
        error = await errorOf(response);
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        error = e instanceof ProtoMoltError ? e : connectionError(e);
      } finally {
        attempt.done();
      }
      await sleep(retries.pause(error), signal);
    }
  }

  /** Submits a stored workflow by name under an id the client makes (or `extra.jobId`): sent again, still one job. */
  submit(workflowName: string, input?: Record<string, unknown>, extra: SubmitWorkflowRequest = {}, options?: CallOptions): Promise<SubmitWorkflowResponse> {
    return this.submitWorkflow({ ...extra, workflowName, input, jobId: extra.jobId || newId() }, options);
  }

  /** The job as `get-job` answers it now (or after `waitMs`), within `deadline`. */
  private async read(jobId: string, deadline: number, waitMs = 0): Promise<Job | undefined> {
    const body: Record<string, unknown> = { jobId };
    if (waitMs > 0) body.waitMs = waitMs;
    const answer = (await this.send("get-job", body, undefined, deadline)) as { job?: Job };
    return answer.job ?? undefined;
  }

  /**
   * The job once it has finished (or, with `untilParked`, also once it waits on a
   * step), following its event stream; where no stream can be had, polling
   * `get-job`. Throws `WaitTimeout` after `timeoutMs` (every call inside is bounded by it).
   */
  async wait(jobId: string, { timeoutMs = 60_000, untilParked = false }: { timeoutMs?: number; untilParked?: boolean } = {}): Promise<Job> {
    const deadline = Date.now() + timeoutMs;
    try {
      for await (const event of this.watch(jobId, { timeoutMs })) {
        if (TERMINAL.has(event.type) || (untilParked && event.type === "WAITING")) {
          const job = await this.read(jobId, deadline);
          if (settled(job, untilParked)) return job!;
        }
      }
    } catch (e) {
      if (!(e instanceof ProtoMoltError)) throw e;
      if (e.code === "timeout" || Date.now() >= deadline) throw new WaitTimeout(jobId, timeoutMs);
      // No stream here: poll below.
    }
    let job: Job | undefined;
    let longPolls = true;
    for (;;) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new WaitTimeout(jobId, timeoutMs, job);
      try {
        job = await this.read(jobId, deadline, longPolls ? Math.floor(Math.min(remaining, 20_000)) : 0);
      } catch (e) {
        if (!(e instanceof ProtoMoltError)) throw e;
        if (e.code === "timeout" || Date.now() >= deadline) throw new WaitTimeout(jobId, timeoutMs, job);
        if (e.code !== "resource_exhausted" || !longPolls) throw e;
        // No watcher slot for a long poll either: plain reads, spaced out.
        longPolls = false;
        continue;
      }
      if (settled(job, untilParked)) return job!;
      if (!job || job.status === "WAITING" || !longPolls) {
        // A read that answers at once: never spin, and never in step with other clients.
        const pause = longPolls ? 500 : 1_000 + Math.random() * 1_000;
        await sleep(Math.min(pause, Math.max(0, deadline - Date.now())));
      }
    }
  }

  /**
   * The job's events as they commit, from its first (or after `lastEventId`), ending
   * after the event that ends the job. A broken or idle stream is resumed where it
   * stopped (giving up after the retry policy's tries without an event); a refused
   * one throws `ProtoMoltError`; past `timeoutMs`, `ProtoMoltError("timeout")`.
   */
  async *watch(jobId: string, { lastEventId, timeoutMs, signal }: { lastEventId?: string; timeoutMs?: number; signal?: AbortSignal } = {}): AsyncGenerator<JobEvent> {
    const url = `${this.baseUrl}/v1/jobs/${encodeURIComponent(jobId)}/events`;
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    const retries = new Retries(this.retry, this.onRetry, "watch", deadline);
    const timedOut = () => new ProtoMoltError("timeout", `no end of job ${jobId} within ${timeoutMs} ms`);
    let last = lastEventId;
    for (;;) {
      if (deadline !== undefined && Date.now() >= deadline) throw timedOut();
      const idle = () => Math.min(STREAM_IDLE_MS, deadline === undefined ? STREAM_IDLE_MS : Math.max(1, deadline - Date.now()));
      const stream = linkedAbort(signal, idle(), () => new ProtoMoltError("connection", "the event stream went quiet"));
      let ended = false;
      let failure: ProtoMoltError;
      try {
        const response = await this.fetchImpl(url, {
          headers: { ...this.headers, Accept: "text/event-stream", ...(last ? { "Last-Event-ID": last } : {}) },
          signal: stream.signal,
        });
        if (response.status === 204) return;
        if (response.status !== 200) {
          failure = await errorOf(response);
        } else {
          retries.opened();
          for await (const [id, type, data] of sseEvents(response.body!, () => stream.restart(idle()))) {
            if (id) last = id;
            if (type === "resumed") continue;
            const event = eventOf(id, type, data);
            ended = TERMINAL.has(event.type);
            retries.progress();
            yield event;
          }
          if (ended) return;
          failure = new ProtoMoltError("unavailable", "the event stream closed before the job ended");
        }
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        failure = e instanceof ProtoMoltError ? e : connectionError(e, "the event stream broke");
      } finally {
        stream.done();
      }
      if (deadline !== undefined && Date.now() >= deadline) throw timedOut();
      let pause: number;
      try {
        pause = retries.pause(failure);
      } catch (e) {
        if (e instanceof ProtoMoltError && e.code === "timeout") throw timedOut();
        throw e;
      }
      await sleep(pause, signal);
    }
  }
}
