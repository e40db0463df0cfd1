"""The asyncio client: the sync client's surface, each call awaited."""

from __future__ import annotations

import asyncio
import random
import time
import urllib.parse
import uuid
from typing import Any, AsyncIterator, Dict, Optional

import httpx

from . import models
from ._wire import (
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
from .client import DEFAULT_URL, STREAM_IDLE_SECONDS, settled
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
        self.timeout = timeout
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

    async def _send(self, verb: str, body: Dict[str, Any], deadline: Optional[float] = None) -> Dict[str, Any]:
        url = f"{self.base_url}/v1/actions/{verb}"
        retries = Retries(self.retry, self.on_retry, verb, deadline)
        while True:
            try:
                response = await self._http.post(
                    url, json=body, timeout=request_timeout(self.timeout, body, deadline, verb))
                if response.status_code == 200:
                    return response.json()
                error = error_of(response.status_code, response.headers, response.text)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                error = connection_error(e, sent=False)
            except httpx.TransportError as e:
                error = connection_error(e)
            await asyncio.sleep(retries.pause(error))

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
        events = self.watch(job_id, timeout=timeout)
        try:
            async for event in events:
                if event.terminal or (until_parked and event.type == "WAITING"):
                    job = await self._read(job_id, deadline)
                    if settled(job, until_parked):
                        return job  # type: ignore[return-value]
        except ProtoMoltError as e:
            if e.code == "timeout" or time.monotonic() >= deadline:
                raise WaitTimeout(job_id, timeout, None) from None
        finally:
            # Closes the stream now, not when the generator is collected: it holds a
            # watcher slot on the node.
            await events.aclose()  # type: ignore[attr-defined]
        job: Optional[Job] = None
        long_polls = True
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(job_id, timeout, job)
            wait_ms = int(min(remaining, 20.0) * 1000) if long_polls else 0
            try:
                job = await self._read(job_id, deadline, wait_ms)
            except ProtoMoltError as e:
                if e.code == "timeout" or time.monotonic() >= deadline:
                    raise WaitTimeout(job_id, timeout, job) from None
                if e.code != "resource_exhausted" or not long_polls:
                    raise
                long_polls = False
                continue
            if settled(job, until_parked):
                return job  # type: ignore[return-value]
            if job is None or job.status == "WAITING" or not long_polls:
                pause = random.uniform(1.0, 2.0) if not long_polls else 0.5
                await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))

    async def _read(self, job_id: str, deadline: float, wait_ms: int = 0) -> Optional[Job]:
        body: Dict[str, Any] = {"jobId": job_id}
        if wait_ms > 0:
            body["waitMs"] = wait_ms
        answer = await self._send("get-job", body, deadline)
        return Job(answer["job"]) if isinstance(answer.get("job"), dict) else None

    async def watch(self, job_id: str, *, last_event_id: Optional[str] = None,
                    timeout: Optional[float] = None) -> AsyncIterator[JobEvent]:
        """`Client.watch`, as an async iterator."""
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
                async with self._http.stream("GET", url, headers=headers,
                                             timeout=httpx.Timeout(min(10.0, read), read=read)) as response:
                    if response.status_code == 204:
                        return
                    retries.opened()
                    if response.status_code != 200:
                        await response.aread()
                        error = error_of(response.status_code, response.headers, response.text)
                    else:
                        splitter, parser = LineSplitter(), SseParser()
                        async for chunk in response.aiter_text():
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
            if deadline is not None and time.monotonic() >= deadline:
                raise timed_out()
            try:
                pause = retries.pause(error)
            except ProtoMoltError as given_up:
                if given_up.code == "timeout":
                    raise timed_out() from None
                raise
            await asyncio.sleep(pause)
