"""Tool-call events: EventBridge on AWS (moto, delivered through a rule to an SQS queue) and the local log stream."""

from __future__ import annotations

import json
import logging

import boto3
import pytest
from moto import mock_aws

from mcpbridge.adapters.aws.eventbridge import SOURCE, EventBridgeEvents
from mcpbridge.adapters.local.events import LogEvents

REGION = "eu-west-1"


@pytest.mark.usefixtures("aws_credentials")
def test_eventbridge_delivers_the_event() -> None:
    with mock_aws():
        events = boto3.client("events", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        queue_url = sqs.create_queue(QueueName="cards")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="cards", EventPattern=json.dumps({"source": [SOURCE]}))
        events.put_targets(Rule="cards", Targets=[{"Id": "q", "Arn": queue_arn}])

        EventBridgeEvents(events, "default").publish("tool_call.approval_required", {"pending_id": "call_1"})

        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1)["Messages"]
        body = json.loads(messages[0]["Body"])
        assert body["detail-type"] == "tool_call.approval_required"
        assert body["detail"] == {"pending_id": "call_1"}


@pytest.mark.usefixtures("aws_credentials")
def test_an_event_that_cannot_be_published_does_not_fail_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    with mock_aws():
        events = boto3.client("events", region_name=REGION)
        EventBridgeEvents(events, "no-such-bus").publish("tool_call.resolved", {"pending_id": "call_1"})
    assert any("tool_call.resolved" in r.getMessage() for r in caplog.records)


def test_local_events_are_json_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcpbridge.events")
    LogEvents().publish("tool_call.resolved", {"pending_id": "call_1", "status": "completed"})
    (line,) = [r.getMessage() for r in caplog.records if r.name == "mcpbridge.events"]
    assert json.loads(line) == {"kind": "tool_call.resolved", "detail": {"pending_id": "call_1", "status": "completed"}}
