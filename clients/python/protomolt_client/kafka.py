"""Submitting through Kafka and reading the events topic.

The node consumes `WorkflowRunRequest` records (binary protobuf, keyed by the job id)
from its requests topic and publishes a `WorkflowRunEvent` per state change to its
events topic. The message classes are built at import time from the contract's
descriptor set shipped with this package (`contract.binpb`, kept equal to the node's
by a test), so any `protobuf` 4.21 or later reads them; no generated code.

`produce_request` takes a `confluent_kafka.Producer` (install `confluent-kafka`);
the encoders and decoders need only `protobuf`.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Dict, Optional

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

_POOL = descriptor_pool.DescriptorPool()
for _file in descriptor_pb2.FileDescriptorSet.FromString(
        (Path(__file__).parent / "contract.binpb").read_bytes()).file:
    _POOL.Add(_file)

#: `protomolt.jobs.v1.WorkflowRunRequest`: a submission on the requests topic.
WorkflowRunRequest = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("protomolt.jobs.v1.WorkflowRunRequest"))
#: `protomolt.jobs.v1.WorkflowRunEvent`: one state change on the events topic.
WorkflowRunEvent = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("protomolt.jobs.v1.WorkflowRunEvent"))

#: The node's default topics (`[jobs] requests_topic`, `events_topic`).
REQUESTS_TOPIC = "workflow-run-requests"
EVENTS_TOPIC = "workflow-run-events"


def encode_request(workflow_name: str, input: Optional[Dict[str, Any]] = None, *,
                   job_id: Optional[str] = None, metadata: Optional[Dict[str, str]] = None,
                   dedupe_key: str = "", dedupe_mode: str = "", dedupe_window_ms: int = 0) -> bytes:
    """A `WorkflowRunRequest` record's value. `job_id` defaults to a new UUID (the
    node makes one job of every record with the same id)."""
    request = WorkflowRunRequest(
        job_id=job_id or str(uuid.uuid4()), workflow_name=workflow_name,
        dedupe_key=dedupe_key, dedupe_mode=dedupe_mode, dedupe_window_ms=dedupe_window_ms)
    if input is not None:
        json_format.ParseDict(input, request.input)
    for key, value in (metadata or {}).items():
        request.metadata[key] = value
    return request.SerializeToString()


def produce_request(producer: Any, workflow_name: str, input: Optional[Dict[str, Any]] = None, *,
                    topic: str = REQUESTS_TOPIC, job_id: Optional[str] = None,
                    metadata: Optional[Dict[str, str]] = None, timeout: float = 30.0, **fields: Any) -> str:
    """Produces one submission keyed by its job id and waits until the broker has it;
    answers the job id. Raises `RuntimeError` when the broker refused the record."""
    job_id = job_id or str(uuid.uuid4())
    value = encode_request(workflow_name, input, job_id=job_id, metadata=metadata, **fields)
    failures = []

    def delivered(error: Any, _record: Any) -> None:
        if error is not None:
            failures.append(error)

    producer.produce(topic, key=job_id.encode(), value=value, on_delivery=delivered)
    left = producer.flush(timeout)
    if left or failures:
        raise RuntimeError(f"the request for job {job_id} was not delivered: {failures or 'timed out'}")
    return job_id


def decode_event(value: bytes) -> Dict[str, Any]:
    """An events-topic record's value as proto3 JSON (`jobId`, `type`,
    `detail`, ...), as the node's event stream shows it."""
    return json_format.MessageToDict(WorkflowRunEvent.FromString(value))
