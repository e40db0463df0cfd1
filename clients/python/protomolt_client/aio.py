"""The asyncio client: the sync client's surface, each call awaited."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
import uuid
from typing import Any, AsyncIterator, Dict, Optional

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
from .client import DEFAULT_URL
from .errors import ProtoMoltError, WaitTimeout
from .verbs import AsyncVerbs


class AsyncClient(AsyncVerbs):
    """`Client` for asyncio: `await client.get_job(job_id=...)`, `async for event in
    client.watch(job_id)`. Use it as an async context manager, or `await aclose()`."""

    def __init__(self, base_url: str = DEFAULT_URL, token: Optional[str] = None, *,
                 timeout: float = 30.0, retry: Optional[RetryPolicy] = None,
                 on_retry: Optional[RetryHook] = None,
                 http: Optional[httpx.AsyncClient] = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.on_retry = on_retry
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = http or httpx.AsyncClient(timeout=timeout, headers=headers)
        if http is not None and token:
            self._http.headers.update(headers)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, verb: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Calls `verb` with a JSON body; answers the JSON."""
        return await self._send(verb, request_body(verb, body or {}))

    async def _call(self, verb: str, request: Any, answer: Any) -> Any:
        return answer.from_json(await self._send(verb, request_body(verb, request)))

    async def _send(self, verb: str, body: Dict[str, Any]) -> Dict[str, Any]:
        url = f"{self.base_url}/v1/actions/{verb}"
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.post(url, json=body)
                if response.status_code == 200:
                    return response.json()
                error = error_of(response.status_code, response.headers, response.text)
            except httpx.TransportError as e:
                error = connection_error(e)
            await asyncio.sleep(self._pause(verb, error, attempt, started))

    def _pause(self, verb: str, error: ProtoMoltError, attempt: int, started: float) -> float:
        if not error.retryable or attempt >= self.retry.max_attempts:
            raise error
        pause = self.retry.delay(attempt, error)
        if time.monotonic() - started + pause > self.retry.max_elapsed:
            raise error
        if self.on_retry is not None:
            self.on_retry(verb, error, pause, attempt)
        return pause

    async def submit(self, workflow_name: Optional[str] = None, input: Optional[Dict[str, Any]] = None, *,
                     workflow: Optional[Dict[str, Any]] = None, job_id: Optional[str] = None,
                     metadata: Optional[Dict[str, str]] = None, **fields: Any) -> models.SubmitWorkflowResponse:
        """`Client.submit`, awaited."""
        return await self.submit_workflow(
            workflow_name=workflow_name, workflow=workflow, input=input,
            job_id=job_id or str(uuid.uuid4()), metadata=metadata, **fields)

    async def wait(self, job_id: str, timeout: float = 60.0, *, until_parked: bool = False) -> Job:
        """`Client.wait`, awaited."""
        deadline = time.monotonic() + timeout
        try:
            async for event in self.watch(job_id, timeout=timeout):
                if event.terminal or (until_parked and event.type == "WAITING"):
                    job = await self._done(job_id, until_parked)
                    if job is not None:
                        return job
                if time.monotonic() > deadline:
                    break
        except ProtoMoltError as e:
            if e.code == "timeout":
                raise WaitTimeout(job_id, timeout, None) from None
        job = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(job_id, timeout, job)
            try:
                job = job_of(await self.get_job(job_id=job_id, wait_ms=int(min(remaining, 20.0) * 1000)))
            except ProtoMoltError as e:
                if e.code != "not_found":
                    raise
                job = None
            if job is not None and (job.status in TERMINAL or (until_parked and job.status == "WAITING")):
                return job
            if job is None or job.status == "WAITING":
                await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    async def _done(self, job_id: str, until_parked: bool) -> Optional[Job]:
        job = job_of(await self.get_job(job_id=job_id))
        if job is not None and (job.status in TERMINAL or (until_parked and job.status == "WAITING")):
            return job
        return None

    async def watch(self, job_id: str, *, last_event_id: Optional[str] = None,
                    timeout: Optional[float] = None) -> AsyncIterator[JobEvent]:
        """`Client.watch`, as an async iterator."""
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
                async with self._http.stream("GET", url, headers=headers,
                                             timeout=httpx.Timeout(10.0, read=read)) as response:
                    if response.status_code == 204:
                        return
                    if response.status_code != 200:
                        await response.aread()
                        error = error_of(response.status_code, response.headers, response.text)
                        attempt += 1
                        await asyncio.sleep(self._pause("watch", error, attempt, started))
                        continue
                    attempt, started = 0, time.monotonic()
                    parser = SseParser()
                    async for line in response.aiter_lines():
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
                        yield event
            except (httpx.TimeoutException, httpx.TransportError) as e:
                if deadline is not None and time.monotonic() >= deadline:
                    raise ProtoMoltError("timeout", f"no end of job {job_id} within {timeout:g} s") from e
                attempt += 1
                await asyncio.sleep(self._pause("watch", connection_error(e), attempt, started))
                continue
            if ended:
                return
            attempt += 1
            await asyncio.sleep(self._pause("watch", ProtoMoltError("unavailable", "the event stream closed"),
                                            attempt, started))
