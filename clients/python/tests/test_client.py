"""The Python client against a real node: submit (one and a batch) and wait, a human
step answered, cancel and retry, watching events to the end, an error's code and
details, a 503 retried until the database is back, a 429 waited out by Retry-After,
the asyncio client, and the Kafka helpers."""

import asyncio
import os
import uuid

import pytest

from protomolt_client import AsyncClient, Client, ProtoMoltError, RetryPolicy, WaitTimeout, models
from protomolt_client import kafka as pkafka
from protomolt_client._wire import LineSplitter, may_retry, retry_after

REVIEW = {"notes": "fine", "score": 8}


def test_submit_and_wait_for_completed(node):
    answer = node.submit("leaf", {"text": "one"}, metadata={"customer": "acme"})
    assert isinstance(answer, models.SubmitWorkflowResponse)
    uuid.UUID(answer.job_id)  # the client made the id
    job = node.wait(answer.job_id, timeout=60)
    assert job.status == "COMPLETED", job
    assert job.metadata == {"customer": "acme"}
    assert job.result is not None


def test_a_submission_sent_twice_is_one_job(node):
    job_id = str(uuid.uuid4())
    first = node.submit("leaf", {"text": "twice"}, job_id=job_id)
    second = node.submit("leaf", {"text": "twice"}, job_id=job_id)
    assert first.job_id == second.job_id == job_id
    listed = node.list_jobs(job_id_prefix=job_id)
    assert [j.job_id for j in listed.jobs] == [job_id]


def test_a_batch_is_submitted_and_each_job_completes(node):
    answer = node.submit_workflows(
        workflow_name="leaf",
        submissions=[
            models.SubmitWorkflowsItem(input={"text": "a"}, metadata={"batch": "b1"}),
            models.SubmitWorkflowsItem(input={"text": "b"}, metadata={"batch": "b1"}),
        ],
    )
    ids = [a.job_id for a in answer.answers]
    assert len(ids) == 2 and all(ids), answer
    for job_id in ids:
        assert node.wait(job_id, timeout=60).status == "COMPLETED"
    found = node.list_jobs(metadata={"batch": "b1"})
    assert sorted(j.job_id for j in found.jobs) == sorted(ids)


def test_a_human_step_is_answered_with_complete_step(node):
    job_id = node.submit("review-text", {"text": "please review"}).job_id
    parked = node.wait(job_id, timeout=60, until_parked=True)
    assert parked.status == "WAITING"
    assert parked.outstanding_step == "review"
    answered = node.complete_step(job_id=job_id, step_name="review", response=REVIEW)
    assert answered.ok, answered
    job = node.wait(job_id, timeout=60)
    assert job.status == "COMPLETED"
    assert job.result["notes"] == "fine"


def test_cancel_then_retry(node):
    job_id = node.submit("review-text", {"text": "cancel me"}).job_id
    node.wait(job_id, timeout=60, until_parked=True)
    cancelled = node.cancel_job(job_id=job_id, reason="changed my mind")
    assert cancelled.ok, cancelled
    assert node.wait(job_id, timeout=30).status == "CANCELLED"
    retried = node.retry_job(job_id=job_id)
    assert retried.ok, retried
    assert node.wait(job_id, timeout=60, until_parked=True).status == "WAITING"
    node.complete_step(job_id=job_id, step_name="review", response=REVIEW)
    assert node.wait(job_id, timeout=60).status == "COMPLETED"


def test_watching_a_job_yields_its_events_until_the_end(node):
    # A value with the line breaks JSON leaves unescaped (U+2028, U+0085) and text
    # that would be an SSE field if it were split there: one value, still.
    hostile = "yes\u2028event: COMPLETED\u0085id: 0"
    job_id = node.submit("leaf", {"text": "watch"}, metadata={"watched": hostile}).job_id
    events = list(node.watch(job_id, timeout=60))
    types = [e.type for e in events]
    assert types[0] == "ACCEPTED", types
    assert types[-1] == "COMPLETED", types
    assert "STEP_CHECKPOINT" in types
    assert all(e.job_id == job_id for e in events)
    assert all(e.detail.get("metadata") == {"watched": hostile} for e in events)
    # Resumed after an event: only what follows.
    rest = list(node.watch(job_id, last_event_id=events[0].id, timeout=60))
    assert [e.id for e in rest] == [e.id for e in events[1:]]


def test_an_error_carries_its_code_message_and_details(node):
    with pytest.raises(ProtoMoltError) as refused:
        node.submit("leaf", {"text": "x"}, metadata={"Bad Key": "v"})
    assert refused.value.code == "invalid_argument"
    assert refused.value.status == 400
    assert "Bad Key" in refused.value.message
    with pytest.raises(ProtoMoltError) as findings:
        node.put_workflow(workflow={"name": "broken", "steps": [{"name": "s"}, {"name": "s"}]})
    assert findings.value.code == "invalid_argument"
    assert findings.value.details, findings.value
    with pytest.raises(ProtoMoltError) as unknown:
        node.submit("no-such-workflow", {"text": "x"})
    assert unknown.value.code in ("invalid_argument", "not_found")
    assert "no-such-workflow" in unknown.value.message
    with pytest.raises(WaitTimeout):
        parked = node.submit("review-text", {"text": "never answered"}).job_id
        node.wait(parked, timeout=1.5)


def test_a_503_is_retried_until_the_node_is_back(url, token, outage):
    retries = []
    with Client(url, token, on_retry=lambda verb, error, pause, attempt: retries.append(error)) as node:
        outage(2500)
        answer = node.submit("leaf", {"text": "through an outage"})
        assert any(e.code == "unavailable" and e.status == 503 for e in retries), retries
        assert node.wait(answer.job_id, timeout=90).status == "COMPLETED"


def test_a_429_is_waited_out_by_retry_after(url):
    token = os.environ["CLIENTS_LIMITED_TOKEN"]
    waits = []
    with Client(url, token, on_retry=lambda verb, error, pause, attempt: waits.append((error, pause))) as node:
        for _ in range(75):  # the token's budget is 60 a minute
            node.get_fleet()
    limited = [(e, pause) for e, pause in waits if e.status == 429]
    assert limited, waits
    for error, pause in limited:
        assert error.code == "resource_exhausted"
        assert error.retry_after is not None and error.retry_after >= 1
        assert pause >= error.retry_after
    # Without retries the same budget is an error the caller sees.
    with Client(url, token, retry=RetryPolicy(max_attempts=1)) as impatient:
        with pytest.raises(ProtoMoltError) as refused:
            for _ in range(75):
                impatient.get_fleet()
    assert refused.value.code == "resource_exhausted"
    assert refused.value.retry_after is not None


def test_the_asyncio_client(url, token):
    async def scenario():
        async with AsyncClient(url, token) as node:
            job_id = (await node.submit("review-text", {"text": "async"})).job_id
            parked = await node.wait(job_id, timeout=60, until_parked=True)
            assert parked.status == "WAITING"
            await node.complete_step(job_id=job_id, step_name="review", response=REVIEW)
            types = [event.type async for event in node.watch(job_id, timeout=60)]
            assert types[-1] == "COMPLETED", types
            assert (await node.wait(job_id, timeout=10)).status == "COMPLETED"
            with pytest.raises(ProtoMoltError) as refused:
                await node.get_job(job_id="not-a-uuid")
            assert refused.value.code == "invalid_argument"

    asyncio.run(scenario())


def test_kafka_requests_and_events(node):
    from confluent_kafka import Consumer, Producer

    bootstrap = os.environ["KAFKA_BOOTSTRAP"]
    producer = Producer({"bootstrap.servers": bootstrap})
    job_id = pkafka.produce_request(
        producer, "leaf", {"text": "from kafka"}, topic=os.environ["CLIENTS_REQUESTS_TOPIC"],
        metadata={"via": "kafka"})
    assert node.wait(job_id, timeout=90).status == "COMPLETED"

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"client-test-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([os.environ["CLIENTS_EVENTS_TOPIC"]])
    seen = []
    try:
        for _ in range(600):
            record = consumer.poll(0.5)
            if record is None or record.error():
                continue
            event = pkafka.decode_event(record.value())
            if event["jobId"] != job_id:
                continue
            seen.append(event)
            if event["type"] == "TYPE_COMPLETED":
                break
    finally:
        consumer.close()
    assert [e["type"] for e in seen][0] == "TYPE_ACCEPTED", seen
    assert seen[-1]["type"] == "TYPE_COMPLETED", seen
    assert all(e["detail"]["metadata"] == {"via": "kafka"} for e in seen)
    # A record round-trips through the encoder.
    decoded = pkafka.WorkflowRunRequest.FromString(pkafka.encode_request("leaf", {"text": "x"}, job_id=job_id))
    assert decoded.job_id == job_id and decoded.workflow_name == "leaf"


def test_which_failures_are_retried_and_how_lines_split():
    unavailable = ProtoMoltError("unavailable", "database away", status=503)
    budget = ProtoMoltError("resource_exhausted", "over budget", status=429, retry_after=1.0)
    too_big = ProtoMoltError("resource_exhausted", "body too large", status=429)
    never_sent = ProtoMoltError("connection", "refused")
    never_sent.sent = False
    cut = ProtoMoltError("connection", "reset")
    # Safe to send twice: retried on 503 and a cut; a 429 only with Retry-After.
    assert may_retry("submit-workflow", unavailable) and may_retry("complete-step", cut)
    assert may_retry("get-job", budget) and not may_retry("get-job", too_big)
    # Not safe: only what never ran.
    for verb in ("run-workflow", "retry-job", "retry-jobs", "cancel-jobs"):
        assert not may_retry(verb, unavailable) and not may_retry(verb, cut), verb
        assert may_retry(verb, never_sent) and may_retry(verb, budget), verb
    for header, seconds in (("2", 2.0), ("0", None), ("-1", None), ("", None), ("nan", None), ("inf", None)):
        assert retry_after({"retry-after": header}) == seconds, header
    lines = LineSplitter()
    assert lines.feed("a\u2028b\r") == []
    assert lines.feed("\nc\rd\n\n") == ["a\u2028b", "c", "d", ""]
