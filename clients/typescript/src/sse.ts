/** A job and its events as the node shows them: `get-job`'s row, the SSE stream. */

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

export function eventOf(id: string | undefined, type: string, data: string): JobEvent {
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

/**
 * Server-Sent Events from a body: (id, type, data) per event, lines split at CR, LF
 * and CRLF only. `onChunk` runs on every chunk (a stream's idle timer).
 */
export async function* sseEvents(body: ReadableStream<Uint8Array>, onChunk: () => void): AsyncGenerator<[string | undefined, string, string]> {
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
      onChunk();
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
        // A CR at the very end may be the first half of a CRLF: wait for more.
        if (buffer[end] === "\r" && end === buffer.length - 1) break;
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
