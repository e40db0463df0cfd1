"""ProtoMolt Jobs' Python client.

    from protomolt_client import Client

    with Client("http://127.0.0.1:8080", token="...") as node:
        job_id = node.submit("summarize", {"text": "..."}).job_id
        job = node.wait(job_id, timeout=60)
        print(job.status, job.result)

`Client` (sync) and `AsyncClient` (asyncio) carry every verb of the node as a typed
method (`models` holds the dataclasses), retry what the node did not take
(`RetryPolicy`), raise `ProtoMoltError` with the node's `code`, `message` and
`details`, wait for a job over its event stream, and `watch` its events.
`protomolt_client.kafka` submits through the requests topic and decodes events.
"""

from . import models
from ._wire import TERMINAL, Job, JobEvent, RetryPolicy
from .aio import AsyncClient
from .client import Client
from .errors import ProtoMoltError, WaitTimeout

__all__ = [
    "AsyncClient",
    "Client",
    "Job",
    "JobEvent",
    "ProtoMoltError",
    "RetryPolicy",
    "TERMINAL",
    "WaitTimeout",
    "models",
]
