"""Webhooks of paused calls, on both backends: a real receiver on 127.0.0.1 gets signed deliveries when a call waits,
is decided and times out (JSON, Slack and Teams bodies, a link to the call's console page), a 500 is retried and
logged; the real SSRF guard refuses private receivers; bad input changes nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send

from mcpbridge.agent.steps import event_detail
from mcpbridge.agent.webhooks import Webhooks
from mcpbridge.bootstrap import Container
from mcpbridge.domain import credentials
from mcpbridge.domain.identity import Scope as KeyScope
from mcpbridge.http.apps import create_combined_app
from mcpbridge.identity.accounts import _api_key_item
from mcpbridge.outbound.policy import EgressPolicy
from mcpbridge.paging import every_item
from tests.functional.test_agent_calls import Upstream, settled
from tests.support.clock import FakeClock
from tests.support.containers import container_on
from tests.support.everything import free_port, serve
from tests.support.readiness import Worker, wait_until

WEBHOOKS = "/api/v1/webhooks"
SERVICES = "/api/v1/mcp-services"
CALLS = "/api/v1/agent/tool-calls"
APPROVALS = "/api/v1/agent/tool-approvals"
BASE_URL = "https://hub.example.test"


@dataclass
class Receiver:
    """An HTTP receiver that records every request and answers the statuses queued per path (then 200)."""

    received: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, list[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        with self.lock:
            queued = self.failures.get(scope["path"], [])
            status = queued.pop(0) if queued else 200
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            self.received.append({"path": scope["path"], "headers": headers, "body": body, "answered": status})
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    def at(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.received if r["path"] == path]


@dataclass
class World:
    container: Container
    client: TestClient
    receiver: Receiver
    upstream: Upstream
    service_id: str


@pytest.fixture(params=["local", "aws"])
def world(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    receiver = Receiver()
    upstream = Upstream()
    with serve(receiver, lifespan="off") as hooks, serve(upstream, lifespan="off") as mcp:
        receiver.url = hooks
        # The test's own servers are allowed by address and port, nothing else of 127.0.0.1: the guard stays real.
        egress = EgressPolicy([hooks.removeprefix("http://"), mcp.removeprefix("http://")])
        with container_on(
            request.param,
            tmp_path,
            monkeypatch,
            settings={"public_base_url": BASE_URL},
            clock=FakeClock(),
            egress=egress,
        ) as container:
            with TestClient(create_combined_app(container), raise_server_exceptions=False) as client:
                client.headers["Authorization"] = f"Bearer {container.identity.initialize().api_key}"
                created = client.post(SERVICES, json={"name": "pages", "url": f"{mcp}/mcp"})
                assert created.status_code == 201, created.text
                service_id = created.json()["id"]
                assert client.post(f"{SERVICES}/{service_id}/metadata/refresh").status_code == 200
                body = {"require_approval": True}
                assert client.put(f"{SERVICES}/{service_id}/tool-approvals/delete_page", json=body).status_code == 200
                yield World(container, client, receiver, upstream, service_id)
            container.workflow.close()  # type: ignore[attr-defined]


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


def create(world: World, path: str, **body: Any) -> dict[str, Any]:
    created = world.client.post(WEBHOOKS, json={"url": world.receiver.url + path, **body})
    assert created.status_code == 201, created.text
    answer: dict[str, Any] = created.json()
    return answer


def paused_call(world: World, **extra: Any) -> str:
    described = world.client.get(
        "/api/v1/agent/tools/describe", params={"service_id": world.service_id, "tool_name": "delete_page"}
    )
    paused = world.client.post(CALLS, json={"tool_ref": described.json()["tool_ref"], "arguments": {"id": 7}, **extra})
    assert paused.status_code == 202, paused.text
    return str(paused.json()["pending_id"])


def wait_for(world: World, path: str, count: int) -> list[dict[str, Any]]:
    """The requests ``path`` received once there are ``count`` of them (deliveries run on the job threads)."""
    wait_until(lambda: len(world.receiver.at(path)) >= count, _jobs(), what=f"{count} deliveries to {path}")
    return world.receiver.at(path)


def _jobs() -> Worker:
    """This process (deliveries run on its job threads): a wait goes on while it works."""
    return Worker("the delivery jobs", lambda: True, time.process_time, lambda: "")


def verified(secret: str, request: dict[str, Any]) -> dict[str, Any]:
    headers = request["headers"]
    signed = headers["x-mcpbridge-timestamp"].encode() + b"." + request["body"]
    expected = "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["x-mcpbridge-signature"], expected)
    body: dict[str, Any] = json.loads(request["body"])
    return body


def test_a_waiting_call_is_delivered_signed_retried_after_a_500_and_logged(world: World) -> None:
    hook = create(world, "/json", description="approvers")
    assert hook["signing_secret"].startswith("whsec_")
    assert hook["url"] == world.receiver.url + "/…"  # never the path: a chat webhook's path is its credential
    assert hook["events"] == ["call.waiting", "call.decided", "call.timed_out"]
    assert "signing_secret" not in world.client.get(f"{WEBHOOKS}/{hook['id']}").json()
    slack = create(world, "/slack", format="slack", events=["call.waiting"])
    teams = create(world, "/teams", format="teams", events=["call.waiting"])
    world.receiver.failures["/json"] = [500]

    call_id = paused_call(world)
    link = f"{BASE_URL}/console/approvals/{call_id}"

    first, retried = wait_for(world, "/json", 2)
    assert (first["answered"], retried["answered"]) == (500, 200)
    assert first["body"] == retried["body"]
    event = verified(hook["signing_secret"], retried)
    assert event["type"] == "call.waiting"
    assert event["url"] == link
    assert event["call"]["id"] == call_id
    assert event["call"]["tool"] == "delete_page"
    assert event["call"]["waiting_for"] == "approval"
    assert "arguments" not in json.dumps(event)
    assert retried["headers"]["x-mcpbridge-event"] == "call.waiting"
    with pytest.raises(AssertionError):
        verified(slack["signing_secret"], retried)  # another webhook's secret does not verify it

    (slack_request,) = wait_for(world, "/slack", 1)
    slack_body = verified(slack["signing_secret"], slack_request)
    assert link in slack_body["text"]
    assert slack_body["blocks"][1]["elements"][0]["url"] == link
    (teams_request,) = wait_for(world, "/teams", 1)
    teams_body = verified(teams["signing_secret"], teams_request)
    assert teams_body["@type"] == "MessageCard"
    assert teams_body["potentialAction"][0]["targets"][0]["uri"] == link

    # The log, for admins: the failed attempt and the one that went through.
    def logged() -> dict[str, Any] | None:
        items = world.client.get(f"{WEBHOOKS}/{hook['id']}/deliveries").json()["items"]
        return items[0] if items and items[0]["status"] == "delivered" else None

    wait_until(lambda: logged() is not None, _jobs(), what="the delivery logged")
    entry = logged()
    assert entry is not None
    assert [a.get("status_code") for a in entry["attempts"]] == [500, 200]
    assert (entry["event"], entry["call_id"]) == ("call.waiting", call_id)

    # Decided: a person approves; the JSON webhook hears it (the chat ones asked for call.waiting only).
    decided = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    assert settled(world.client, call_id)["status"] == "completed"
    third = wait_for(world, "/json", 3)[2]
    assert verified(hook["signing_secret"], third)["type"] == "call.decided"
    assert verified(hook["signing_secret"], third)["call"]["status"] == "approved"
    assert len(world.receiver.at("/slack")) == 1


def test_a_call_nobody_decides_in_time_is_delivered_as_timed_out(world: World) -> None:
    hook = create(world, "/timeouts", events=["call.timed_out"])
    agent = world.client.post("/api/v1/agents", json={"name": "quick", "approval_timeout_seconds": 30}).json()
    call_id = paused_call(world, agent_id=agent["id"])
    world.container.clock.advance(31)  # type: ignore[attr-defined]
    assert settled(world.client, call_id)["status"] == "rejected"
    (request,) = wait_for(world, "/timeouts", 1)
    event = verified(hook["signing_secret"], request)
    assert event["type"] == "call.timed_out"
    assert event["url"] == f"{BASE_URL}/console/approvals/{call_id}"
    assert world.upstream.ran == []


def test_a_receiver_that_keeps_failing_is_tried_a_bounded_number_of_times_and_never_holds_up_the_call(
    world: World,
) -> None:
    hook = create(world, "/down", events=["call.waiting"])
    world.receiver.failures["/down"] = [500] * 10
    call_id = paused_call(world)
    decided = world.client.post(f"{APPROVALS}/{call_id}", json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    assert settled(world.client, call_id)["status"] == "completed"

    def failed() -> dict[str, Any] | None:
        items = world.client.get(f"{WEBHOOKS}/{hook['id']}/deliveries").json()["items"]
        return items[0] if items and items[0]["status"] == "failed" else None

    wait_until(lambda: failed() is not None, _jobs(), what="the delivery given up")
    entry = failed()
    assert entry is not None
    assert [a.get("status_code") for a in entry["attempts"]] == [500, 500, 500, 500]
    assert len(world.receiver.at("/down")) == 4


def _webhook_rows(world: World) -> list[dict[str, Any]]:
    workspace_id = world.container.identity.installed_workspace_id()
    return list(every_item(world.container.store, f"WS#{workspace_id}", sk_prefix="WEBHOOK#"))


def test_the_ssrf_guard_refuses_private_receivers_and_bad_input_changes_nothing(world: World) -> None:
    create(world, "/kept")
    before = _webhook_rows(world)
    other_port = free_port()
    for url, code in (
        ("http://10.0.0.7/hook", "url_forbidden_address"),
        ("https://192.168.1.20/hook", "url_forbidden_address"),
        ("http://169.254.169.254/latest/meta-data/", "url_forbidden_address"),
        (f"http://127.0.0.1:{other_port}/hook", "url_forbidden_address"),  # allowed only on the receiver's port
        (f"http://localhost:{other_port}/hook", "url_forbidden_address"),  # a name resolving to a private address
        ("http://8.8.8.8/hook", "url_scheme_not_allowed"),  # public, but plain http
        ("ftp://files.example/hook", "url_scheme_not_allowed"),
    ):
        refused = problem(world.client.post(WEBHOOKS, json={"url": url}), 400, code)
        assert "hook" not in refused["detail"] or code == "url_scheme_not_allowed"
    problem(
        world.client.post(WEBHOOKS, json={"url": world.receiver.url + "/x", "format": "xml"}), 400, "invalid_format"
    )
    for events in ([], ["call.nope"], "call.waiting"):
        answer = world.client.post(WEBHOOKS, json={"url": world.receiver.url + "/x", "events": events})
        assert answer.status_code in (400, 422), answer.text
    problem(world.client.post(WEBHOOKS, json={}), 422, "validation_failed")
    problem(world.client.post(WEBHOOKS, json={"url": world.receiver.url, "extra": 1}), 422, "validation_failed")
    problem(world.client.get(f"{WEBHOOKS}/whk_nope"), 404, "webhook_not_found")
    problem(world.client.delete(f"{WEBHOOKS}/whk_nope"), 404, "webhook_not_found")
    problem(world.client.get(f"{WEBHOOKS}/whk_nope/deliveries"), 404, "webhook_not_found")
    viewer = _viewer_key(world.container)
    problem(
        world.client.post(WEBHOOKS, json={"url": world.receiver.url}, headers={"Authorization": f"Bearer {viewer}"}),
        403,
        "admin_required",
    )
    assert _webhook_rows(world) == before
    # No secret at rest in clear: the URL and the signing secret are sealed.
    (row,) = _webhook_rows(world)
    assert "/kept" not in json.dumps(row)
    assert row["secret_signing"].startswith("enc:")


def _viewer_key(container: Container) -> str:
    workspace_id = container.identity.installed_workspace_id()
    assert workspace_id is not None
    issued = credentials.issue(credentials.API_KEY_PREFIX)
    container.store.put(
        _api_key_item(
            workspace_id, "key_viewer", "usr_viewer", "viewer", "viewer", KeyScope(), issued, "2027-01-01T00:00:00Z"
        )
    )
    return issued.plaintext


class _LostJobs:
    """A job queue whose jobs are lost (a Lambda sandbox frozen with its thread): ``ports.Jobs``, running nothing."""

    def __init__(self) -> None:
        self.lost: list[tuple[str, dict[str, str]]] = []

    def submit(self, kind: str, payload: dict[str, str]) -> None:
        self.lost.append((kind, payload))


def test_a_delivery_whose_job_was_lost_is_sent_by_the_next_sweep(world: World) -> None:
    hook = create(world, "/lost", events=["call.waiting"])
    call_id = paused_call(world)
    (delivered,) = wait_for(world, "/lost", 1)  # the normal path first

    container = world.container
    lost = _LostJobs()
    unlucky = Webhooks(
        container.store,
        container.clock,
        container.secrets,
        lambda: lost,
        lambda url: None,
        lambda url, body, headers: 599,
        public_base_url=BASE_URL,
    )
    call = container.tool_call_records.find(container.identity.installed_workspace_id() or "", call_id)
    unlucky.note("tool_call.approval_required", event_detail(call))
    assert [kind for kind, _ in lost.lost] == ["webhook.deliver"]
    assert len(world.receiver.at("/lost")) == 1

    container.sweep.run()  # too soon: the job may still be running
    container.clock.advance(301)  # type: ignore[attr-defined]
    container.sweep.run()
    again = wait_for(world, "/lost", 2)[1]
    event = verified(hook["signing_secret"], again)
    assert event["type"] == "call.waiting"
    assert event["call"]["id"] == call_id
    assert again["headers"]["x-mcpbridge-delivery"] != delivered["headers"]["x-mcpbridge-delivery"]
