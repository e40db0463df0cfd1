"""What the sync and the asyncio client share: request bodies, answers, retry delays,
and the Server-Sent Events parser."""

from __future__ import annotations

import random
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

    Retried: `unavailable` (503), `resource_exhausted` (429, waiting out
    `Retry-After` when the node sends it), 502/504, and a node that cannot be reached.
    Delays grow from `base_delay` by doubling up to `max_delay`, each drawn at random
    below its bound (full jitter), so a fleet of clients does not retry in step. A call
    gives up after `max_attempts` tries or once `max_elapsed` seconds have passed.
    """

    max_attempts: int = 12
    max_elapsed: float = 60.0
    base_delay: float = 0.1
    max_delay: float = 5.0

    def delay(self, attempt: int, error: ProtoMoltError) -> float:
        """The pause before try `attempt + 1` (attempt counts from 1)."""
        if error.retry_after is not None:
            # The node said when; a little jitter keeps many clients apart.
            return error.retry_after + random.uniform(0, min(1.0, error.retry_after * 0.1))
        bound = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(bound / 2, bound)


#: Called before each retry with (verb, the error, the pause in seconds, the attempt
#: that failed).
RetryHook = Callable[[str, ProtoMoltError, float, int], None]


def request_body(verb: str, request: Any) -> Dict[str, Any]:
    """The JSON of `request`, with the ids a retried call needs filled in."""
    body = request.to_json() if hasattr(request, "to_json") else dict(request or {})
    own = _OWN_IDS.get(verb)
    if own and not body.get(own):
        body[own] = str(uuid.uuid4())
    if verb == "submit-workflows":
        for submission in body.get("submissions") or []:
            if isinstance(submission, dict) and not submission.get("jobId"):
                submission["jobId"] = str(uuid.uuid4())
    return body


def retry_after(headers: Any) -> Optional[float]:
    value = headers.get("retry-after") if headers is not None else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: the node never sends one


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


def connection_error(error: Exception) -> ProtoMoltError:
    return ProtoMoltError("connection", f"the node could not be reached: {error}")


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
