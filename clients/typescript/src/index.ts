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

import { type CallOptions, type SubmitWorkflowRequest, type SubmitWorkflowResponse, Verbs, type VerbTypes } from "./generated.js";

export * from "./generated.js";

/** A job's statuses that end it (until an operator retries it). */
export const TERMINAL: ReadonlySet<string> = new Set(["COMPLETED", "FAILED", "DEAD", "CANCELLED"]);

/**
 * A job as `get-job` shows it: every column of its row in camelCase (`result` once it
 * completes, `outstandingStep` while it waits on one, ...).
 */
export interface Job {
  jobId: string;
  workflowName: string;
  status: string;
  attempt?: number;
  maxAttempts?: number;
  outstandingStep?: string | null;
  result?: any;
  error?: string | null;
  verdict?: string | null;
  metadata?: Record<string, string> | null;
  [column: string]: any;
}

/** The node refused a call, or could not be reached (`code` "connection"). */
export class ProtoMoltError extends Error {
  /** The node's error code: `invalid_argument`, `not_found`, `unavailable`, `resource_exhausted`, ... */
  readonly code: string;
  /** One entry per violated rule or workflow finding. */
  readonly details: unknown[];
  /** The HTTP status (0 when the node could not be reached). */
  readonly status: number;
  /** Seconds the node asked to wait (429's `Retry-After`). */
  readonly retryAfter?: number;

  constructor(code: string, message: string, details: unknown[] = [], status = 0, retryAfter?: number) {
    super(`${code}: ${message}`);
    this.name = "ProtoMoltError";
    this.code = code;
    this.details = details;
    this.status = status;
    this.retryAfter = retryAfter;
  }

  /** The node's own sentence, without the code. */
  get reason(): string {
    return this.message.slice(this.code.length + 2);
  }

  /** True for what a later call may get past. */
  get retryable(): boolean {
    return ["unavailable", "resource_exhausted", "connection"].includes(this.code) || [502, 503, 504].includes(this.status);
  }
}

/** `wait` ran out of time before the job finished; `job` is its last read. */
export class WaitTimeout extends ProtoMoltError {
  readonly job?: Job;
  constructor(jobId: string, timeoutMs: number, job?: Job) {
    super("timeout", `job ${jobId} did not finish within ${timeoutMs} ms`);
    this.name = "WaitTimeout";
    this.job = job;
  }
}

/**
 * When and how long to retry a call the node did not take: `unavailable` (503),
 * `resource_exhausted` (429, waiting out `Retry-After`), 502/504, an unreachable node.
 * Delays double from `baseDelayMs` up to `maxDelayMs`, each drawn between half its
 * bound and the bound (jitter); a call gives up after `maxAttempts` tries or
 * `maxElapsedMs`.
 */
export interface RetryPolicy {
  maxAttempts: number;
  maxElapsedMs: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 12, maxElapsedMs: 60_000, baseDelayMs: 100, maxDelayMs: 5_000 };

/** How a client is made. */
export interface ClientOptions {
  /** A bearer token (a node with `[auth]`). */
  token?: string;
  retry?: Partial<RetryPolicy>;
  /** Called before each retry. */
  onRetry?: (verb: string, error: ProtoMoltError, pauseMs: number, attempt: number) => void;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
}

/** One event of a job, as the node's event stream carries it. */
export interface JobEvent {
  id?: string;
  /** `ACCEPTED`, `STEP_CHECKPOINT`, `WAITING`, `COMPLETED`, `FAILED`, `DEAD`, `CANCELLED`, `RETRIED`. */
  type: string;
  jobId: string;
  workflowName: string;
  step: string;
  attempt: number;
  verdict: string;
  error: string;
  /** Its status, the job's metadata, a result or a pending request. */
  detail: Record<string, unknown>;
  occurredAt: string;
  /** The whole event in proto3 JSON. */
  data: Record<string, unknown>;
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

function withIds(verb: string, request: unknown): Record<string, unknown> {
  const body: Record<string, unknown> = { ...((request ?? {}) as Record<string, unknown>) };
  const own = OWN_IDS[verb];
  if (own && !body[own]) body[own] = newId();
  if (verb === "submit-workflows" && Array.isArray(body.submissions)) {
    body.submissions = body.submissions.map((s: Record<string, unknown>) => (s && !s.jobId ? { ...s, jobId: newId() } : s));
  }
  return body;
}

async function errorOf(response: Response): Promise<ProtoMoltError> {
  const text = await response.text().catch(() => "");
  let body: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(text);
    if (parsed && typeof parsed === "object") body = parsed;
  } catch {
    // not JSON: the text is the message
  }
  const header = response.headers.get("retry-after");
  const retryAfter = header !== null && !Number.isNaN(Number(header)) ? Math.max(0, Number(header)) : undefined;
  const byStatus: Record<number, string> = {
    400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
    415: "unsupported_media_type", 429: "resource_exhausted", 502: "unavailable", 503: "unavailable", 504: "unavailable",
  };
  return new ProtoMoltError(
    typeof body.code === "string" ? body.code : (byStatus[response.status] ?? "internal"),
    typeof body.message === "string" ? body.message : text.slice(0, 500) || `HTTP ${response.status}`,
    Array.isArray(body.details) ? body.details : [],
    response.status,
    retryAfter,
  );
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(timer); reject(signal.reason); }, { once: true });
  });
}

function eventOf(id: string | undefined, type: string, data: string): JobEvent {
  let body: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(data);
    if (parsed && typeof parsed === "object") body = parsed;
  } catch {
    // an event without JSON: its type alone
  }
  let kind = type || String(body.type ?? "");
  if (kind.startsWith("TYPE_")) kind = kind.slice(5);
  return {
    id, type: kind,
    jobId: String(body.jobId ?? ""), workflowName: String(body.workflowName ?? ""), step: String(body.step ?? ""),
    attempt: Number(body.attempt ?? 0), verdict: String(body.verdict ?? ""), error: String(body.error ?? ""),
    detail: (body.detail && typeof body.detail === "object" ? body.detail : {}) as Record<string, unknown>,
    occurredAt: String(body.occurredAt ?? ""), data: body,
  };
}

/** A node's verbs, called over HTTP. */
export class Client extends Verbs {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;
  private readonly onRetry?: ClientOptions["onRetry"];

  constructor(baseUrl = "http://127.0.0.1:8080", options: ClientOptions = {}) {
    super();
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.headers = options.token ? { Authorization: `Bearer ${options.token}` } : {};
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.onRetry = options.onRetry;
  }

  /** Calls `verb` with `request`, retrying what the node did not take. */
  async call<V extends keyof VerbTypes>(verb: V, request: VerbTypes[V]["request"], options: CallOptions = {}): Promise<VerbTypes[V]["response"]> {
    const body = JSON.stringify(withIds(verb, request));
    const started = Date.now();
    for (let attempt = 1; ; attempt++) {
      let error: ProtoMoltError;
      try {
        const response = await this.fetchImpl(`${this.baseUrl}/v1/actions/${verb}`, {
          method: "POST", body, signal: options.signal,
          headers: { ...this.headers, "Content-Type": "application/json" },
        });
        if (response.status === 200) return (await response.json()) as VerbTypes[V]["response"];
        error = await errorOf(response);
      } catch (e) {
        if (options.signal?.aborted) throw e;
        error = new ProtoMoltError("connection", `the node could not be reached: ${String(e)}`);
      }
      await sleep(this.pause(verb, error, attempt, started), options.signal);
    }
  }

  /** The pause before the next try, or throws `error` when it is not retried. */
  private pause(verb: string, error: ProtoMoltError, attempt: number, started: number): number {
    if (!error.retryable || attempt >= this.retry.maxAttempts) throw error;
    let pause: number;
    if (error.retryAfter !== undefined) {
      pause = error.retryAfter * 1000 + Math.random() * Math.min(1000, error.retryAfter * 100);
    } else {
      const bound = Math.min(this.retry.maxDelayMs, this.retry.baseDelayMs * 2 ** (attempt - 1));
      pause = bound / 2 + (Math.random() * bound) / 2;
    }
    if (Date.now() - started + pause > this.retry.maxElapsedMs) throw error;
    this.onRetry?.(verb, error, pause, attempt);
    return pause;
  }

  /** Submits a stored workflow by name under an id the client makes (or `extra.jobId`): sent again, still one job. */
  submit(workflowName: string, input?: Record<string, unknown>, extra: SubmitWorkflowRequest = {}, options?: CallOptions): Promise<SubmitWorkflowResponse> {
    return this.submitWorkflow({ ...extra, workflowName, input, jobId: extra.jobId || newId() }, options);
  }

  /**
   * The job once it has finished (or, with `untilParked`, also once it waits on a
   * step), following its event stream; where no stream can be had, polling
   * `get-job` with `waitMs`. Throws `WaitTimeout` after `timeoutMs`.
   */
  async wait(jobId: string, { timeoutMs = 60_000, untilParked = false }: { timeoutMs?: number; untilParked?: boolean } = {}): Promise<Job> {
    const deadline = Date.now() + timeoutMs;
    const done = (job?: Job | null) =>
      !!job && (TERMINAL.has(String(job.status)) || (untilParked && job.status === "WAITING"));
    try {
      for await (const event of this.watch(jobId, { timeoutMs })) {
        if (TERMINAL.has(event.type) || (untilParked && event.type === "WAITING")) {
          const job = (await this.getJob({ jobId })).job as Job | undefined;
          if (done(job)) return job!;
        }
      }
    } catch (e) {
      if (e instanceof ProtoMoltError && e.code === "timeout") throw new WaitTimeout(jobId, timeoutMs);
      if (!(e instanceof ProtoMoltError)) throw e;
      // No stream here: poll below.
    }
    let job: Job | undefined;
    for (;;) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new WaitTimeout(jobId, timeoutMs, job);
      try {
        job = ((await this.getJob({ jobId, waitMs: Math.floor(Math.min(remaining, 20_000)) })).job ?? undefined) as Job | undefined;
      } catch (e) {
        if (!(e instanceof ProtoMoltError) || e.code !== "not_found") throw e;
        job = undefined;
      }
      if (done(job)) return job!;
      if (!job || job.status === "WAITING") await sleep(Math.min(500, Math.max(0, deadline - Date.now())));
    }
  }

  /**
   * The job's events as they commit, from its first (or after `lastEventId`), ending
   * after the event that ends the job. A broken stream is resumed where it stopped;
   * a refused one throws `ProtoMoltError`; past `timeoutMs`, `ProtoMoltError("timeout")`.
   */
  async *watch(jobId: string, { lastEventId, timeoutMs, signal }: { lastEventId?: string; timeoutMs?: number; signal?: AbortSignal } = {}): AsyncGenerator<JobEvent> {
    const url = `${this.baseUrl}/v1/jobs/${encodeURIComponent(jobId)}/events`;
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    let last = lastEventId;
    let started = Date.now();
    let attempt = 0;
    const timedOut = () => new ProtoMoltError("timeout", `no end of job ${jobId} within ${timeoutMs} ms`);
    for (;;) {
      if (deadline !== undefined && Date.now() >= deadline) throw timedOut();
      const abort = new AbortController();
      const timer = deadline === undefined ? undefined : setTimeout(() => abort.abort(timedOut()), deadline - Date.now());
      signal?.addEventListener("abort", () => abort.abort(signal.reason), { once: true });
      let ended = false;
      let failure: ProtoMoltError;
      try {
        const response = await this.fetchImpl(url, {
          headers: { ...this.headers, Accept: "text/event-stream", ...(last ? { "Last-Event-ID": last } : {}) },
          signal: abort.signal,
        });
        if (response.status === 204) return;
        if (response.status !== 200) {
          failure = await errorOf(response);
        } else {
          attempt = 0;
          started = Date.now();
          for await (const [id, type, data] of sseEvents(response.body!)) {
            if (id) last = id;
            if (type === "resumed") continue;
            const event = eventOf(id, type, data);
            ended = TERMINAL.has(event.type);
            yield event;
          }
          if (ended) return;
          failure = new ProtoMoltError("unavailable", "the event stream closed");
        }
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        if (deadline !== undefined && Date.now() >= deadline) throw timedOut();
        failure = e instanceof ProtoMoltError ? e : new ProtoMoltError("connection", `the stream broke: ${String(e)}`);
      } finally {
        if (timer !== undefined) clearTimeout(timer);
      }
      attempt += 1;
      await sleep(this.pause("watch", failure, attempt, started), signal);
    }
  }
}

/** Server-Sent Events from a body: (id, type, data) per event. */
async function* sseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<[string | undefined, string, string]> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let id: string | undefined;
  let type = "";
  let data: string[] = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(buffer[end] === "\r" && buffer[end + 1] === "\n" ? end + 2 : end + 1);
        if (line === "") {
          if (data.length || type) yield [id, type, data.join("\n")];
          id = undefined;
          type = "";
          data = [];
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const name = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (name === "id") id = value;
          else if (name === "event") type = value;
          else if (name === "data") data.push(value);
        }
      }
    }
  } finally {
    // Closes the stream (a consumer that stops early frees the connection).
    await reader.cancel().catch(() => undefined);
  }
}
