"""What the sync and the asyncio client share: request bodies, answers, retry delays,
and the Server-Sent Events parser."""

from __future__ import annotations

import copy
import math
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .errors import ProtoMoltError

#: A job's statuses that end it (until an operator retries it).
TERMINAL = frozenset({"COMPLETED", "FAILED", "DEAD", "CANCELLED"})

#: Verbs whose request names its own id, which the client fills in when left out, so
#: a call retried after a lost answer is one job (one event, one tick).
_OWN_IDS = {
    "submit-workflow": "jobId",
    "trigger-schedule": "jobId",
    "send-event": "eventId",
}


@dataclass
class RetryPolicy:
    """When and how long to retry a call the node did not take.

    Retried: `unavailable` (503), 502/504 and a connection that broke, for every verb
    whose call is safe to send twice (all but those in `UNSAFE_TO_RESEND`, which are
    retried only when the request never left or was refused before it ran); a 429 that
    names its `Retry-After` (a request budget: waited out, plus jitter), for every
    verb. A 429 without it (a body over the token's limit, too many watchers) is not:
    sending the same again cannot pass. Other delays double from `base_delay` up to
    `max_delay`, each drawn at random below its bound (full jitter), so a fleet of
    clients does not retry in step. A call gives up after `max_attempts` tries or once
    `max_elapsed` seconds have passed (and, inside `wait`, at its deadline).
    """

    max_attempts: int = 12
    max_elapsed: float = 60.0
    base_delay: float = 0.1
    max_delay: float = 5.0

    def delay(self, attempt: int, error: ProtoMoltError) -> float:
        """The pause before try `attempt + 1` (attempt counts from 1)."""
        if error.retry_after is not None:
            # The node said when; jitter of up to half of it (at least half a second)
            # keeps clients refused in the same second from coming back together.
            return error.retry_after + random.uniform(0, max(0.5, error.retry_after / 2))
        bound = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(0, bound)


#: Called before each retry with (verb, the error, the pause in seconds, the attempt
#: that failed).
RetryHook = Callable[[str, ProtoMoltError, float, int], None]

#: Verbs whose effect is not keyed by an id, so a call sent twice may act twice:
#: `run-workflow` runs the steps again, `retry-job(s)` may retry a job that failed
#: again meanwhile, `cancel-jobs` with a filter takes the next batch. They are retried
#: only when the request never reached the node (no connection) or on a 429.
UNSAFE_TO_RESEND = frozenset({"run-workflow", "retry-job", "retry-jobs", "cancel-jobs"})


def may_retry(verb: str, error: ProtoMoltError) -> bool:
    """Whether `error` of a call of `verb` is worth a retry (see `RetryPolicy`)."""
    if error.code == "connection" and not error.sent:
        return True
    if error.status == 429:
        return error.retry_after is not None
    if verb in UNSAFE_TO_RESEND:
        return False
    return error.code in ("unavailable", "connection") or error.status in (502, 503, 504)


class Retries:
    """One call's retries (or one watch's reconnects): whether to retry and how long
    to pause first. `deadline` (a `time.monotonic()` value) ends them early."""

    def __init__(self, policy: RetryPolicy, hook: Optional[RetryHook], verb: str,
                 deadline: Optional[float] = None) -> None:
        self.policy, self.hook, self.verb, self.deadline = policy, hook, verb, deadline
        self.attempt = 0
        self.started = time.monotonic()

    def progress(self) -> None:
        """Something arrived (a watch's event): the count starts again."""
        self.attempt = 0
        self.started = time.monotonic()

    def opened(self) -> None:
        """A stream opened: failures in a row are timed from the next one (a job
        quiet for an hour is not an hour of failing), though the tries still count
        until an event arrives."""
        self.started = time.monotonic()

    def pause(self, error: ProtoMoltError) -> float:
        """The pause before the next try; raises `error` when it is not retried."""
        self.attempt += 1
        if not may_retry(self.verb, error) or self.attempt >= self.policy.max_attempts:
            raise error
        pause = self.policy.delay(self.attempt, error)
        now = time.monotonic()
        if now - self.started + pause > self.policy.max_elapsed:
            raise error
        if self.deadline is not None and now + pause >= self.deadline:
            # The deadline, not the failure, ends it: say so.
            raise ProtoMoltError("timeout", f"the deadline comes before the next try ({error})")
        if self.hook is not None:
            self.hook(self.verb, error, pause, self.attempt)
        return pause


def request_body(verb: str, request: Any) -> Dict[str, Any]:
    """The JSON of `request` (a copy: the caller's dicts are never changed), with the
    ids a retried call needs filled in."""
    body = request.to_json() if hasattr(request, "to_json") else copy.deepcopy(dict(request or {}))
    own = _OWN_IDS.get(verb)
    if own and not body.get(own):
        body[own] = str(uuid.uuid4())
    if verb == "submit-workflows":
        for submission in body.get("submissions") or []:
            if isinstance(submission, dict) and not submission.get("jobId"):
                submission["jobId"] = str(uuid.uuid4())
    return body


def retry_after(headers: Any) -> Optional[float]:
    """`Retry-After` in seconds when the node sent a usable one (positive, finite)."""
    value = headers.get("retry-after") if headers is not None else None
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: the node never sends one
    return seconds if math.isfinite(seconds) and seconds > 0 else None


#: Seconds a verb may take on the node beyond the client's timeout: `run-workflow`
#: runs the whole workflow before it answers (the node bounds it at 60 s).
_SLOW_VERBS = {"run-workflow": 65.0}


def request_timeout(base: float, body: Dict[str, Any], deadline: Optional[float], verb: str = "") -> float:
    """One request's timeout: the client's, plus a long poll's `waitMs` or a slow
    verb's time, cut at `deadline`."""
    wait_ms = body.get("waitMs")
    timeout = base + (wait_ms / 1000 if isinstance(wait_ms, (int, float)) and wait_ms > 0 else 0)
    timeout += _SLOW_VERBS.get(verb, 0.0)
    if deadline is not None:
        timeout = min(timeout, max(0.5, deadline - time.monotonic() + 1.0))
    return timeout


def error_of(status: int, headers: Any, text: str) -> ProtoMoltError:
    """The error a non-200 answer says."""
    import json

    try:
        body = json.loads(text) if text else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = body.get("code") if isinstance(body.get("code"), str) else _code_of(status)
    message = body.get("message") if isinstance(body.get("message"), str) else (text[:500] or f"HTTP {status}")
    details = body.get("details") if isinstance(body.get("details"), list) else []
    return ProtoMoltError(code, message, details, status=status, retry_after=retry_after(headers))


def _code_of(status: int) -> str:
    return {
        400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied",
        404: "not_found", 405: "method_not_allowed", 415: "unsupported_media_type",
        429: "resource_exhausted", 503: "unavailable",
    }.get(status, "unavailable" if status in (502, 504) else "internal")


def connection_error(error: Exception, sent: bool = True) -> ProtoMoltError:
    """A connection that failed; `sent` False when the request never left (no
    connection was made), so even a verb unsafe to send twice may be retried."""
    failure = ProtoMoltError("connection", f"the node could not be reached: {error}")
    failure.sent = sent
    return failure


class Job(dict):
    """A job as `get-job` shows it: a dict of its columns in camelCase (`status`,
    `outstandingStep`, `result`, `metadata`, ...), also readable as snake_case
    attributes (`job.status`, `job.outstanding_step`); a column the job does not have
    (a `result` before it completes) reads as None."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        head, *rest = name.split("_")
        key = head + "".join(part[:1].upper() + part[1:] for part in rest)
        return self.get(key, self.get(name))


def job_of(answer: Any) -> Optional[Job]:
    """The job of a `get-job` answer (None when it has none)."""
    job = getattr(answer, "job", None)
    return Job(job) if isinstance(job, dict) else None


@dataclass
class JobEvent:
    """One event of a job, as the node's event stream carries it.

    `type` is the event's type without its `TYPE_` prefix (`ACCEPTED`,
    `STEP_CHECKPOINT`, `WAITING`, `COMPLETED`, `FAILED`, `DEAD`, `CANCELLED`,
    `RETRIED`); `detail` holds its status, the job's metadata, a result or a pending
    request; `data` is the whole event in proto3 JSON.
    """

    id: Optional[str]
    type: str
    job_id: str = ""
    workflow_name: str = ""
    step: str = ""
    attempt: int = 0
    verdict: str = ""
    error: str = ""
    detail: Dict[str, Any] = field(default_factory=dict)
    occurred_at: str = ""
    data: Dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        """True for an event that ends the job (COMPLETED, FAILED, DEAD, CANCELLED)."""
        return self.type in TERMINAL


def event_of(sse_id: Optional[str], sse_type: str, data: str) -> JobEvent:
    import json

    try:
        body = json.loads(data) if data else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    kind = sse_type or str(body.get("type", ""))
    kind = kind[len("TYPE_"):] if kind.startswith("TYPE_") else kind
    return JobEvent(
        id=sse_id,
        type=kind,
        job_id=str(body.get("jobId", "")),
        workflow_name=str(body.get("workflowName", "")),
        step=str(body.get("step", "")),
        attempt=int(body.get("attempt", 0) or 0),
        verdict=str(body.get("verdict", "")),
        error=str(body.get("error", "")),
        detail=body.get("detail") if isinstance(body.get("detail"), dict) else {},
        occurred_at=str(body.get("occurredAt", "")),
        data=body,
    )


_LINE_END = re.compile(r"\r\n|\r|\n")


class LineSplitter:
    """Splits a stream's text at CR, LF and CRLF only, as Server-Sent Events do (not
    at U+2028 and the other breaks `str.splitlines` knows: a job's metadata or result
    may hold them, inside an event's JSON)."""

    def __init__(self) -> None:
        self._buffer = ""

    def feed(self, chunk: str) -> List[str]:
        self._buffer += chunk
        lines = []
        while True:
            found = _LINE_END.search(self._buffer)
            # A CR at the very end may be the first half of a CRLF: wait for more.
            if found is None or (found.group() == "\r" and found.end() == len(self._buffer)):
                return lines
            lines.append(self._buffer[:found.start()])
            self._buffer = self._buffer[found.end():]

    def flush(self) -> List[str]:
        rest, self._buffer = self._buffer, ""
        return [rest.rstrip("\r")] if rest else []


class SseParser:
    """Server-Sent Events, line by line (the WHATWG rules this node's stream uses)."""

    def __init__(self) -> None:
        self._id: Optional[str] = None
        self._type = ""
        self._data: List[str] = []

    def feed(self, line: str) -> Optional[Tuple[Optional[str], str, str]]:
        """One line (without its end); answers (id, type, data) when it ends an event."""
        if line == "":
            if not self._data and not self._type:
                return None
            out = (self._id, self._type, "\n".join(self._data))
            self._id, self._type, self._data = None, "", []
            return out
        if line.startswith(":"):
            return None  # a keep-alive comment
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            self._id = value
        elif name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        return None

    def events(self, lines: Iterable[str]) -> Iterator[Tuple[Optional[str], str, str]]:
        for line in lines:
            event = self.feed(line)
            if event is not None:
                yield event
