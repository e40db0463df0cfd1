"""What a refused call raises."""

from __future__ import annotations

from typing import Any, List, Optional


class ProtoMoltError(Exception):
    """The node refused a call (or could not be reached).

    `code` is the node's error code (`invalid_argument`, `not_found`,
    `unavailable`, `resource_exhausted`, ...; `connection` when the node could not be
    reached at all), `message` its sentence (the refused field named first),
    `details` one entry per violated rule or workflow finding, and `status` the HTTP
    status (0 for `connection`).
    """

    def __init__(self, code: str, message: str, details: Optional[List[Any]] = None,
                 status: int = 0, retry_after: Optional[float] = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details: List[Any] = list(details or [])
        self.status = status
        self.retry_after = retry_after
        #: False only for a connection never made: the request did not leave.
        self.sent = True

    @property
    def retryable(self) -> bool:
        """True for what a later call may get past: the node unavailable, a budget
        over (429), the node unreachable."""
        return self.code in ("unavailable", "resource_exhausted", "connection") or self.status in (502, 503, 504)


class WaitTimeout(ProtoMoltError):
    """`wait` ran out of time before the job finished; `job` is its last read."""

    def __init__(self, job_id: str, timeout: float, job: Any = None) -> None:
        super().__init__("timeout", f"job {job_id} did not finish within {timeout:g} s")
        self.job_id = job_id
        self.job = job
