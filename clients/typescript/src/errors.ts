/** What a refused call throws. */

import type { Job } from "./sse.js";

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
  /** False only for a connection never made: the request did not leave. */
  sent = true;

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

  /** True for what a later call may get past (whether it is retried depends on the verb: see `RetryPolicy`). */
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

const BY_STATUS: Record<number, string> = {
  400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
  415: "unsupported_media_type", 429: "resource_exhausted", 502: "unavailable", 503: "unavailable", 504: "unavailable",
};

/** `Retry-After` in seconds when the node sent a usable one (positive, finite). */
export function retryAfterOf(header: string | null): number | undefined {
  if (header === null || header.trim() === "") return undefined;
  const seconds = Number(header);
  return Number.isFinite(seconds) && seconds > 0 ? seconds : undefined;
}

/** The error a non-200 answer says. */
export async function errorOf(response: Response): Promise<ProtoMoltError> {
  const text = await response.text().catch(() => "");
  let body: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(text);
    if (parsed && typeof parsed === "object") body = parsed;
  } catch {
    // not JSON: the text is the message
  }
  return new ProtoMoltError(
    typeof body.code === "string" ? body.code : (BY_STATUS[response.status] ?? "internal"),
    typeof body.message === "string" ? body.message : text.slice(0, 500) || `HTTP ${response.status}`,
    Array.isArray(body.details) ? body.details : [],
    response.status,
    retryAfterOf(response.headers.get("retry-after")),
  );
}

/** Connection failures that mean the request never left (no connection was made). */
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

/** A failed `fetch` as a `connection` error, `sent` false when it never connected. */
export function connectionError(error: unknown, what = "the node could not be reached"): ProtoMoltError {
  const failure = new ProtoMoltError("connection", `${what}: ${String(error)}`);
  const cause = (error as { cause?: { code?: string } } | undefined)?.cause;
  failure.sent = !(cause?.code && NOT_SENT.has(cause.code));
  return failure;
}
