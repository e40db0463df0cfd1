"""The sync client: every verb, `submit`, `wait` and `watch`, over `httpx`."""

from __future__ import annotations

import time
import urllib.parse
import uuid
from typing import Any, Dict, Iterator, Optional

import httpx

from . import models
from ._wire import (
    TERMINAL,
    Job,
    JobEvent,
    RetryHook,
    RetryPolicy,
    SseParser,
    connection_error,
    error_of,
    event_of,
    job_of,
    request_body,
)
from .errors import ProtoMoltError, WaitTimeout
from .verbs import Verbs

DEFAULT_URL = "http://127.0.0.1:8080"


class Client(Verbs):
    """A node's verbs, called over HTTP.

    `base_url` is the node (`PROTOMOLT_URL`'s form, `http://127.0.0.1:8080`), `token`
    a bearer token when the node has `[auth]`. Every call is retried by `retry` (see
    `RetryPolicy`); verbs that make something (`submit-workflow`, `submit-workflows`'
    items, `trigger-schedule`, `send-event`) get an id of the client's making when the
    caller gives none, so a retried call never makes it twice. Use it as a context
    manager, or call `close()`.
    """

    def __init__(self, base_url: str = DEFAULT_URL, token: Optional[str] = None, *,
                 timeout: float = 30.0, retry: Optional[RetryPolicy] = None,
                 on_retry: Optional[RetryHook] = None,
                 http: Optional[httpx.Client] = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = http or httpx.Client(timeout=timeout, headers=headers)
        if http is not None and token:
            self._http.headers.update(headers)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- calls ---------------------------------------------------------------------

    def call(self, verb: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Calls `verb` with a JSON body; answers the JSON (untyped: the typed methods
        are generated beside this)."""
        return self._send(verb, request_body(verb, body or {}))

    def _call(self, verb: str, request: Any, answer: Any) -> Any:
        return answer.from_json(self._send(verb, request_body(verb, request)))

    def _send(self, verb: str, body: Dict[str, Any]) -> Dict[str, Any]:
        url = f"{self.base_url}/v1/actions/{verb}"
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.post(url, json=body)
                if response.status_code == 200:
                    return response.json()
                error = error_of(response.status_code, response.headers, response.text)
            except httpx.TransportError as e:
                error = connection_error(e)
            pause = self._pause(verb, error, attempt, started)
            time.sleep(pause)

    def _pause(self, verb: str, error: ProtoMoltError, attempt: int, started: float) -> float:
        """The pause before the next try, or raises `error` when it is not retried."""
        if not error.retryable or attempt >= self.retry.max_attempts:
            raise error
        pause = self.retry.delay(attempt, error)
        if time.monotonic() - started + pause > self.retry.max_elapsed:
            raise error
        if self.on_retry is not None:
            self.on_retry(verb, error, pause, attempt)
        return pause

    # --- conveniences ------------------------------------------------------------

    def submit(self, workflow_name: Optional[str] = None, input: Optional[Dict[str, Any]] = None, *,
               workflow: Optional[Dict[str, Any]] = None, job_id: Optional[str] = None,
               metadata: Optional[Dict[str, str]] = None, **fields: Any) -> models.SubmitWorkflowResponse:
        """Submits a stored workflow by name (or an inline `workflow` envelope) under
        `job_id`, or an id the client makes: sent again, it is still one job."""
        return self.submit_workflow(
            workflow_name=workflow_name, workflow=workflow, input=input,
            job_id=job_id or str(uuid.uuid4()), metadata=metadata, **fields)

    def wait(self, job_id: str, timeout: float = 60.0, *, until_parked: bool = False) -> Job:
        """The job once it has finished (COMPLETED, FAILED, DEAD, CANCELLED), or with
        `until_parked` also once it waits on a step. Follows the job's event stream;
        where the stream cannot be had, polls `get-job` with `waitMs`. Raises
        `WaitTimeout` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        try:
            for event in self.watch(job_id, timeout=timeout):
                if event.terminal or (until_parked and event.type == "WAITING"):
                    job = self._done(job_id, until_parked)
                    if job is not None:
                        return job
                if time.monotonic() > deadline:
                    break
        except ProtoMoltError as e:
            if e.code == "timeout":
                raise WaitTimeout(job_id, timeout, None) from None
            # No stream here (too many watchers, a proxy that refuses streams): poll.
        return self._poll(job_id, deadline, timeout, until_parked)

    def _done(self, job_id: str, until_parked: bool) -> Optional[Job]:
        job = job_of(self.get_job(job_id=job_id))
        if job is not None and (job.status in TERMINAL or (until_parked and job.status == "WAITING")):
            return job
        return None

    def _poll(self, job_id: str, deadline: float, timeout: float, until_parked: bool) -> Job:
        job = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(job_id, timeout, job)
            try:
                job = job_of(self.get_job(job_id=job_id, wait_ms=int(min(remaining, 20.0) * 1000)))
            except ProtoMoltError as e:
                if e.code != "not_found":
                    raise
                job = None
            if job is not None and (job.status in TERMINAL or (until_parked and job.status == "WAITING")):
                return job
            if job is None or job.status == "WAITING":
                # get-job answers at once for a parked (or unknown) job: do not spin.
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def watch(self, job_id: str, *, last_event_id: Optional[str] = None,
              timeout: Optional[float] = None) -> Iterator[JobEvent]:
        """Yields the job's events as they commit, from its first (or after
        `last_event_id`), ending after the event that ends the job. A broken stream is
        resumed where it stopped; a refused one raises `ProtoMoltError`; past
        `timeout` seconds, `ProtoMoltError('timeout')`."""
        url = f"{self.base_url}/v1/jobs/{urllib.parse.quote(job_id, safe='')}/events"
        deadline = None if timeout is None else time.monotonic() + timeout
        started = time.monotonic()
        attempt = 0
        last = last_event_id
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                raise ProtoMoltError("timeout", f"no end of job {job_id} within {timeout:g} s")
            headers = {"Accept": "text/event-stream"}
            if last:
                headers["Last-Event-ID"] = last
            read = 30.0 if deadline is None else max(0.1, min(30.0, deadline - time.monotonic()))
            ended = False
            try:
                with self._http.stream("GET", url, headers=headers,
                                       timeout=httpx.Timeout(10.0, read=read)) as response:
                    if response.status_code == 204:
                        return
                    if response.status_code != 200:
                        response.read()
                        error = error_of(response.status_code, response.headers, response.text)
                        attempt += 1
                        time.sleep(self._pause("watch", error, attempt, started))
                        continue
                    attempt, started = 0, time.monotonic()
                    for sse_id, sse_type, data in SseParser().events(response.iter_lines()):
                        if sse_id:
                            last = sse_id
                        if sse_type == "resumed":
                            continue
                        event = event_of(sse_id, sse_type, data)
                        ended = event.terminal
                        yield event
            except (httpx.TimeoutException, httpx.TransportError) as e:
                if deadline is not None and time.monotonic() >= deadline:
                    raise ProtoMoltError("timeout", f"no end of job {job_id} within {timeout:g} s") from e
                attempt += 1
                time.sleep(self._pause("watch", connection_error(e), attempt, started))
                continue
            if ended:
                return
            # The stream closed before the job ended (a node going down): resume.
            attempt += 1
            time.sleep(self._pause("watch", ProtoMoltError("unavailable", "the event stream closed"),
                                   attempt, started))
