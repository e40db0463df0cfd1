"""The sync client: every verb, `submit`, `wait` and `watch`, over `httpx`."""

from __future__ import annotations

import contextlib
import random
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
    LineSplitter,
    Retries,
    RetryHook,
    RetryPolicy,
    SseParser,
    connection_error,
    error_of,
    event_of,
    request_body,
    request_timeout,
)
from .errors import ProtoMoltError, WaitTimeout
from .verbs import Verbs

DEFAULT_URL = "http://127.0.0.1:8080"

#: A stream with no byte for this long is taken as broken and resumed (the node sends
#: a keep-alive every 15 s).
STREAM_IDLE_SECONDS = 45.0


def settled(job: Optional[Job], until_parked: bool) -> bool:
    """Whether `wait` is done with `job`."""
    return job is not None and (job.status in TERMINAL or (until_parked and job.status == "WAITING"))


class Client(Verbs):
    """A node's verbs, called over HTTP.

    `base_url` is the node (`PROTOMOLT_URL`'s form, `http://127.0.0.1:8080`), `token`
    a bearer token when the node has `[auth]`, `timeout` each request's (a long poll's
    `waitMs` is added to it). Calls are retried as `RetryPolicy` says; verbs that make
    something (`submit-workflow`, `submit-workflows`' items, `trigger-schedule`,
    `send-event`) get an id of the client's making when the caller gives none, so a
    retried call never makes it twice. Use it as a context manager, or call `close()`.
    """

    def __init__(self, base_url: str = DEFAULT_URL, token: Optional[str] = None, *,
                 timeout: float = 30.0, retry: Optional[RetryPolicy] = None,
                 on_retry: Optional[RetryHook] = None,
                 http: Optional[httpx.Client] = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        self.timeout = timeout
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

    def _send(self, verb: str, body: Dict[str, Any], deadline: Optional[float] = None) -> Dict[str, Any]:
        url = f"{self.base_url}/v1/actions/{verb}"
        retries = Retries(self.retry, self.on_retry, verb, deadline)
        while True:
            try:
                response = self._http.post(url, json=body, timeout=request_timeout(self.timeout, body, deadline, verb))
                if response.status_code == 200:
                    return response.json()
                error = error_of(response.status_code, response.headers, response.text)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                error = connection_error(e, sent=False)
            except httpx.TransportError as e:
                error = connection_error(e)
            time.sleep(retries.pause(error))

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
        where the stream cannot be had, polls `get-job`. Raises `WaitTimeout` after
        `timeout` seconds (every call inside is bounded by it)."""
        deadline = time.monotonic() + timeout
        try:
            with contextlib.closing(self.watch(job_id, timeout=timeout)) as events:
                for event in events:
                    if event.terminal or (until_parked and event.type == "WAITING"):
                        job = self._read(job_id, deadline)
                        if settled(job, until_parked):
                            return job  # type: ignore[return-value]
        except ProtoMoltError as e:
            if e.code == "timeout" or time.monotonic() >= deadline:
                raise WaitTimeout(job_id, timeout, None) from None
            # No stream here (too many watchers, a proxy that refuses streams): poll.
        return self._poll(job_id, deadline, timeout, until_parked)

    def _read(self, job_id: str, deadline: float, wait_ms: int = 0) -> Optional[Job]:
        body: Dict[str, Any] = {"jobId": job_id}
        if wait_ms > 0:
            body["waitMs"] = wait_ms
        answer = self._send("get-job", body, deadline)
        return Job(answer["job"]) if isinstance(answer.get("job"), dict) else None

    def _poll(self, job_id: str, deadline: float, timeout: float, until_parked: bool) -> Job:
        job: Optional[Job] = None
        long_polls = True
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(job_id, timeout, job)
            wait_ms = int(min(remaining, 20.0) * 1000) if long_polls else 0
            try:
                job = self._read(job_id, deadline, wait_ms)
            except ProtoMoltError as e:
                if e.code == "timeout" or time.monotonic() >= deadline:
                    raise WaitTimeout(job_id, timeout, job) from None
                if e.code != "resource_exhausted" or not long_polls:
                    raise
                # No watcher slot for a long poll either: plain reads, spaced out.
                long_polls = False
                continue
            if settled(job, until_parked):
                return job  # type: ignore[return-value]
            if job is None or job.status == "WAITING" or not long_polls:
                # A read that answers at once (a parked or unknown job, a plain read):
                # never spin, and never in step with other clients.
                pause = random.uniform(1.0, 2.0) if not long_polls else 0.5
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))

    def watch(self, job_id: str, *, last_event_id: Optional[str] = None,
              timeout: Optional[float] = None) -> Iterator[JobEvent]:
        """Yields the job's events as they commit, from its first (or after
        `last_event_id`), ending after the event that ends the job. A broken stream is
        resumed where it stopped (giving up after `RetryPolicy`'s tries without an
        event); a refused one raises `ProtoMoltError`; past `timeout` seconds,
        `ProtoMoltError('timeout')`."""
        url = f"{self.base_url}/v1/jobs/{urllib.parse.quote(job_id, safe='')}/events"
        deadline = None if timeout is None else time.monotonic() + timeout
        retries = Retries(self.retry, self.on_retry, "watch", deadline)
        last = last_event_id

        def timed_out() -> ProtoMoltError:
            return ProtoMoltError("timeout", f"no end of job {job_id} within {timeout:g} s")

        while True:
            if deadline is not None and time.monotonic() >= deadline:
                raise timed_out()
            headers = {"Accept": "text/event-stream"}
            if last:
                headers["Last-Event-ID"] = last
            read = STREAM_IDLE_SECONDS if deadline is None else max(
                0.1, min(STREAM_IDLE_SECONDS, deadline - time.monotonic()))
            ended = False
            try:
                with self._http.stream("GET", url, headers=headers,
                                       timeout=httpx.Timeout(min(10.0, read), read=read)) as response:
                    if response.status_code == 204:
                        return
                    retries.opened()
                    if response.status_code != 200:
                        response.read()
                        error = error_of(response.status_code, response.headers, response.text)
                    else:
                        splitter, parser = LineSplitter(), SseParser()
                        for chunk in response.iter_text():
                            for line in splitter.feed(chunk):
                                parsed = parser.feed(line)
                                if parsed is None:
                                    continue
                                sse_id, sse_type, data = parsed
                                if sse_id:
                                    last = sse_id
                                if sse_type == "resumed":
                                    continue
                                event = event_of(sse_id, sse_type, data)
                                ended = event.terminal
                                retries.progress()
                                yield event
                        if ended:
                            return
                        error = ProtoMoltError("unavailable", "the event stream closed before the job ended")
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                error = connection_error(e, sent=False)
            except httpx.TransportError as e:
                error = connection_error(e)
            time.sleep(self._reconnect_pause(retries, error, deadline, timed_out))

    def _reconnect_pause(self, retries: Retries, error: ProtoMoltError, deadline: Optional[float],
                         timed_out: Any) -> float:
        """The pause before a watch reconnects; past its deadline, its timeout."""
        if deadline is not None and time.monotonic() >= deadline:
            raise timed_out()
        try:
            return retries.pause(error)
        except ProtoMoltError as given_up:
            if given_up.code == "timeout":
                raise timed_out() from None  # retried, but not within the deadline
            raise
