/** When a call is retried, and after how long. */

import { ProtoMoltError } from "./errors.js";

/**
 * When and how long to retry a call the node did not take. Retried: `unavailable`
 * (503), 502/504 and a broken connection, for every verb safe to send twice (all but
 * `UNSAFE_TO_RESEND`, retried only when the request never left or was refused before
 * it ran); a 429 that names its `Retry-After` (a request budget: waited out, plus
 * jitter), for every verb. A 429 without it (a body over the token's limit, too many
 * watchers) is not: the same request cannot pass. Other delays double from
 * `baseDelayMs` up to `maxDelayMs`, each drawn at random below its bound (full
 * jitter); a call gives up after `maxAttempts` tries or `maxElapsedMs` (and, inside
 * `wait`, at its deadline). `timeoutMs` bounds each request (a long poll's `waitMs`
 * is added to it).
 */
export interface RetryPolicy {
  maxAttempts: number;
  maxElapsedMs: number;
  baseDelayMs: number;
  maxDelayMs: number;
  timeoutMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 12, maxElapsedMs: 60_000, baseDelayMs: 100, maxDelayMs: 5_000, timeoutMs: 30_000 };

/**
 * Verbs whose effect is not keyed by an id, so a call sent twice may act twice:
 * `run-workflow` runs the steps again, `retry-job(s)` may retry a job that failed
 * again meanwhile, `cancel-jobs` with a filter takes the next batch.
 */
export const UNSAFE_TO_RESEND: ReadonlySet<string> = new Set(["run-workflow", "retry-job", "retry-jobs", "cancel-jobs"]);

/** Whether `error` of a call of `verb` is worth a retry. */
export function mayRetry(verb: string, error: ProtoMoltError): boolean {
  if (error.code === "connection" && !error.sent) return true;
  if (error.status === 429) return error.retryAfter !== undefined;
  if (UNSAFE_TO_RESEND.has(verb)) return false;
  return ["unavailable", "connection"].includes(error.code) || [502, 503, 504].includes(error.status);
}

/** Called before each retry. */
export type RetryHook = (verb: string, error: ProtoMoltError, pauseMs: number, attempt: number) => void;

/** One call's retries (or one watch's reconnects); `deadline` (epoch ms) ends them early. */
export class Retries {
  private attempt = 0;
  private started = Date.now();

  constructor(
    private readonly policy: RetryPolicy,
    private readonly hook: RetryHook | undefined,
    private readonly verb: string,
    private readonly deadline?: number,
  ) {}

  /** Something arrived (a watch's event): the count starts again. */
  progress(): void {
    this.attempt = 0;
    this.started = Date.now();
  }

  /** A stream opened: failures in a row are timed from the next one, though the tries still count until an event arrives. */
  opened(): void {
    this.started = Date.now();
  }

  /** The pause before the next try; throws `error` when it is not retried. */
  pause(error: ProtoMoltError): number {
    this.attempt += 1;
    if (!mayRetry(this.verb, error) || this.attempt >= this.policy.maxAttempts) throw error;
    let pause: number;
    if (error.retryAfter !== undefined) {
      // The node said when; jitter of up to half of it (at least half a second).
      pause = error.retryAfter * 1000 + Math.random() * Math.max(500, error.retryAfter * 500);
    } else {
      pause = Math.random() * Math.min(this.policy.maxDelayMs, this.policy.baseDelayMs * 2 ** (this.attempt - 1));
    }
    const now = Date.now();
    if (now - this.started + pause > this.policy.maxElapsedMs) throw error;
    // The deadline, not the failure, ends it: say so.
    if (this.deadline !== undefined && now + pause >= this.deadline) {
      throw new ProtoMoltError("timeout", `the deadline comes before the next try (${error.message})`);
    }
    this.hook?.(this.verb, error, pause, this.attempt);
    return pause;
  }
}

/** Waits `ms`, or rejects when `signal` aborts (its listener removed either way). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * An abort controller that follows `parent` and aborts by itself after `ms`
 * (undefined: never); `done()` removes its listener and timer.
 */
export function linkedAbort(parent: AbortSignal | undefined, ms: number | undefined, reason: () => unknown) {
  const controller = new AbortController();
  const onAbort = () => controller.abort(parent!.reason);
  if (parent?.aborted) controller.abort(parent.reason);
  else parent?.addEventListener("abort", onAbort, { once: true });
  let timer = ms === undefined ? undefined : setTimeout(() => controller.abort(reason()), ms);
  return {
    signal: controller.signal,
    /** Starts the timer again with `ms` (a stream's idle timer after each chunk). */
    restart(next: number) {
      if (timer !== undefined) clearTimeout(timer);
      timer = setTimeout(() => controller.abort(reason()), next);
    },
    done() {
      if (timer !== undefined) clearTimeout(timer);
      parent?.removeEventListener("abort", onAbort);
    },
  };
}
