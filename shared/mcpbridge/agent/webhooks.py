"""Webhooks: a workspace's HTTPS receivers told when a call waits for someone, is decided, or times out.

* **Registration** (admins with ``approve_calls``): a URL accepted by the SSRF guard (:class:`~mcpbridge.outbound.
  policy.EgressPolicy`; ``https`` unless the host is on the allowlist), a format (``json``, ``slack``, ``teams``), the
  events wanted. A signing secret (``whsec_`` + 32 random bytes) is made at creation, returned once, and kept sealed
  (:class:`~mcpbridge.ports.SecretBox`, bound to the webhook's row).
* **Events**: ``call.waiting`` (a call waits for an approval or its user's authorization), ``call.decided`` (an
  approval or a rejection by a person), ``call.timed_out`` (nobody decided in time). Each carries the call's id,
  tool, service, status, user and deadline, and the link to its page in the console (``/console/approvals/{id}``
  under ``MCPBRIDGE_PUBLIC_BASE_URL``); never its arguments or result.
* **Signature** (:mod:`mcpbridge.agent.webhook_bodies`, beside the bodies): ``X-Mcpbridge-Timestamp: <unix
  seconds>`` and ``X-Mcpbridge-Signature: v1=<hex>``, the HMAC-SHA256 with the secret over ``<timestamp>.<body>``. A
  receiver recomputes it and refuses old timestamps (replays).
* **Delivery, off the call's path.** :class:`WebhookEvents` wraps the events port: after the event is published it
  records one delivery per webhook wanting it (``WS#<ws> / WHDLV#<webhook>#<delivery>``, kept 30 days) and queues a
  ``webhook.deliver`` job (:class:`~mcpbridge.ports.Jobs`: the in-process pool locally, an asynchronous invocation of
  the indexer function on AWS). Any failure there is logged and swallowed: a call never waits for, or fails
  because of, a receiver. The job sends the body, up to :data:`MAX_ATTEMPTS` times with doubling pauses, while the
  answer is not 2xx; each attempt (status or error kind, never a body) goes to the delivery log. A job run twice
  sends nothing once its delivery is no longer pending. A delivery whose job was lost (a Lambda sandbox frozen
  with it, on the functions that run jobs on threads) stays pending; the periodic sweep queues it again
  (:meth:`Webhooks.redrive`).
"""

from __future__ import annotations

import builtins
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcpbridge.agent.webhook_bodies import event_of, render, signature
from mcpbridge.domain.identity import Principal, timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import Key, Update
from mcpbridge.domain.secrets import SecretContext
from mcpbridge.errors import Forbidden, InvalidInput, MCPBridgeError, NotFound
from mcpbridge.paging import every_item
from mcpbridge.ports import Clock, Events, Jobs, SecretBox, Store

log = logging.getLogger("mcpbridge.webhooks")

Format = Literal["json", "slack", "teams"]
FORMATS: Final[tuple[Format, ...]] = ("json", "slack", "teams")
EVENTS: Final = ("call.waiting", "call.decided", "call.timed_out")
DELIVER_JOB: Final = "webhook.deliver"
ID_PREFIX: Final = "whk"
DELIVERY_PREFIX: Final = "whd"
SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - a prefix, not a secret
MAX_WEBHOOKS: Final = 20
MAX_URL_CHARS: Final = 2048
MAX_DESCRIPTION_CHARS: Final = 500
MAX_ATTEMPTS: Final = 4
BACKOFF_SECONDS: Final = 1.0
DELIVERY_DAYS: Final = 30
MAX_LOG_ENTRIES: Final = 100
PENDING_PARTITION: Final = "WHDLV#PENDING"
REDRIVE_AFTER_SECONDS: Final = 300.0
"""Longer than a delivery job can take (4 attempts of at most 10 s, and 7 s of pauses): a job still running is never
queued twice."""
_PENDING: Final = ["gsi1pk", "gsi1sk"]


def webhook_key(workspace_id: str, webhook_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"WEBHOOK#{webhook_id}")


def delivery_key(workspace_id: str, webhook_id: str, delivery_id: str) -> Key:
    return Key(f"WS#{workspace_id}", f"WHDLV#{webhook_id}#{delivery_id}")


@dataclass(frozen=True)
class Webhook:
    id: str
    workspace_id: str
    url: str
    """Scheme and host only (:func:`shown_url`)."""
    format: Format
    events: tuple[str, ...]
    description: str
    created_at: str
    created_by: str


@dataclass(frozen=True)
class Created:
    webhook: Webhook
    secret: str
    """Shown once."""


@dataclass(frozen=True)
class Delivery:
    id: str
    webhook_id: str
    event: str
    call_id: str
    status: Literal["pending", "delivered", "failed"]
    created_at: str
    attempts: list[dict[str, Any]]


Sender = Callable[[str, bytes, Mapping[str, str]], int]
"""``(url, body, headers) -> HTTP status``; raises :class:`~mcpbridge.errors.MCPBridgeError` when nothing answered
(refused by the SSRF guard, unreachable, timed out)."""


class Webhooks:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        secrets_box: SecretBox,
        jobs: Callable[[], Jobs],
        check_url: Callable[[str], None],
        send: Sender,
        *,
        public_base_url: str = "",
        backoff_seconds: float = BACKOFF_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``check_url``: the SSRF guard's verdict on a receiver's URL (raises InvalidInput); ``send``: one POST
        through the guarded client; ``jobs``: asked for on first use."""
        self._store = store
        self._clock = clock
        self._secrets = secrets_box
        self._jobs = jobs
        self._check_url = check_url
        self._send = send
        self._base_url = public_base_url.rstrip("/")
        self._backoff = backoff_seconds
        self._sleep = sleep

    # ------------------------------------------------------------------------------------------ registration

    def create(
        self,
        principal: Principal,
        *,
        url: object,
        format: object = "json",
        events: object = None,
        description: object = "",
    ) -> Created:
        _require_admin(principal)
        if not isinstance(url, str) or not url.strip() or len(url) > MAX_URL_CHARS:
            raise InvalidInput(f"url is required, at most {MAX_URL_CHARS} characters", code="invalid_url")
        url = url.strip()
        if format not in FORMATS:
            raise InvalidInput(f"format must be one of {', '.join(FORMATS)}", code="invalid_format")
        chosen = _events(events)
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
            raise InvalidInput(f"description is at most {MAX_DESCRIPTION_CHARS} characters", code="invalid_description")
        self._check_url(url)  # the SSRF guard: scheme, host, every address it resolves to
        if len(self._items(principal.workspace_id)) >= MAX_WEBHOOKS:
            raise InvalidInput(f"a workspace has at most {MAX_WEBHOOKS} webhooks", code="too_many_webhooks")
        webhook_id = new_id(ID_PREFIX)
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        item = {
            **webhook_key(principal.workspace_id, webhook_id).as_dict(),
            "id": webhook_id,
            "workspace_id": principal.workspace_id,
            "url_shown": shown_url(url),
            "secret_url": self._secrets.seal(url, _context(principal.workspace_id, webhook_id, "webhook_url")),
            "format": format,
            "events": list(chosen),
            "description": description.strip(),
            "created_at": timestamp(self._clock.now()),
            "created_by": principal.user_id,
            "secret_signing": self._secrets.seal(
                secret, _context(principal.workspace_id, webhook_id, "webhook_secret")
            ),
        }
        self._store.put(item)
        log.info("webhook %s created (%s)", webhook_id, format)
        return Created(_webhook_of(item), secret)

    def list(self, principal: Principal) -> builtins.list[Webhook]:
        _require_admin(principal)
        return [_webhook_of(item) for item in self._items(principal.workspace_id)]

    def get(self, principal: Principal, webhook_id: str) -> Webhook:
        _require_admin(principal)
        return _webhook_of(self._item(principal.workspace_id, webhook_id))

    def delete(self, principal: Principal, webhook_id: str) -> None:
        _require_admin(principal)
        self._item(principal.workspace_id, webhook_id)
        self._store.delete(webhook_key(principal.workspace_id, webhook_id))
        log.info("webhook %s deleted", webhook_id)

    def deliveries(self, principal: Principal, webhook_id: str) -> builtins.list[Delivery]:
        """The webhook's deliveries, newest first (at most :data:`MAX_LOG_ENTRIES`)."""
        _require_admin(principal)
        self._item(principal.workspace_id, webhook_id)
        items = every_item(self._store, f"WS#{principal.workspace_id}", sk_prefix=f"WHDLV#{webhook_id}#")
        found = sorted((_delivery_of(i) for i in items), key=lambda d: d.id, reverse=True)
        return found[:MAX_LOG_ENTRIES]

    # ------------------------------------------------------------------------------------------ events

    def note(self, kind: str, detail: Mapping[str, Any]) -> None:
        """An event of a call: a delivery recorded and queued for each webhook that wants it (never raises)."""
        event = event_of(kind, detail)
        if event is None:
            return
        workspace_id = str(detail.get("workspace_id") or "")
        try:
            wanted = [i for i in self._items(workspace_id) if event in i.get("events", ())]
        except MCPBridgeError as exc:
            log.warning("could not read the webhooks of a workspace: %s", exc.code)
            return
        for item in wanted:
            try:
                self._queue(workspace_id, item, event, detail)
            except Exception:
                log.warning("could not queue a delivery of webhook %s", item.get("id"), exc_info=True)

    def _queue(self, workspace_id: str, item: Mapping[str, Any], event: str, detail: Mapping[str, Any]) -> None:
        delivery_id = new_id(DELIVERY_PREFIX)
        now = self._clock.now()
        body = render(str(item.get("format", "json")), event, delivery_id, timestamp(now), detail, self._base_url)
        self._store.put(
            {
                **delivery_key(workspace_id, str(item["id"]), delivery_id).as_dict(),
                "id": delivery_id,
                "webhook_id": item["id"],
                "event": event,
                "call_id": str(detail.get("pending_id") or ""),
                "status": "pending",
                "created_at": timestamp(now),
                "body": body.decode(),
                "attempts": [],
                "expires_at": int(now) + DELIVERY_DAYS * 86_400,
                "gsi1pk": PENDING_PARTITION,
                "gsi1sk": f"{timestamp(now)}#{workspace_id}#{item['id']}#{delivery_id}",
            }
        )
        self._jobs().submit(
            DELIVER_JOB, {"workspace_id": workspace_id, "webhook_id": str(item["id"]), "delivery_id": delivery_id}
        )

    # ------------------------------------------------------------------------------------------ delivery (a job)

    def deliver(self, workspace_id: str, webhook_id: str, delivery_id: str) -> None:
        """Send one delivery until a 2xx answer or :data:`MAX_ATTEMPTS` attempts, recording each attempt."""
        key = delivery_key(workspace_id, webhook_id, delivery_id)
        delivery = self._store.get(key)
        if delivery is None or delivery.get("status") != "pending":
            return
        hook = self._store.get(webhook_key(workspace_id, webhook_id))
        if hook is None:
            self._store.update(
                key, Update(set={"status": "failed", "failed_reason": "webhook_deleted"}, remove=_PENDING)
            )
            return
        try:
            secret = self._secrets.open(hook["secret_signing"], _context(workspace_id, webhook_id, "webhook_secret"))
            url = self._secrets.open(hook["secret_url"], _context(workspace_id, webhook_id, "webhook_url"))
        except Exception:
            self._store.update(
                key, Update(set={"status": "failed", "failed_reason": "secret_unreadable"}, remove=_PENDING)
            )
            log.warning("webhook %s: its signing secret cannot be opened", webhook_id)
            return
        body = str(delivery["body"]).encode()
        attempts: builtins.list[dict[str, Any]] = list(delivery.get("attempts") or [])
        while len(attempts) < MAX_ATTEMPTS:
            if attempts:
                self._sleep(self._backoff * 2 ** (len(attempts) - 1))
            sent_at = str(int(self._clock.now()))
            headers = {
                "content-type": "application/json",
                "user-agent": "mcpbridge-webhooks",
                "x-mcpbridge-event": str(delivery["event"]),
                "x-mcpbridge-delivery": delivery_id,
                "x-mcpbridge-timestamp": sent_at,
                "x-mcpbridge-signature": signature(secret, sent_at, body),
            }
            attempt: dict[str, Any] = {"at": timestamp(self._clock.now())}
            try:
                status = self._send(url, body, headers)
                attempt["status_code"] = status
            except MCPBridgeError as exc:
                status = 0
                attempt["error"] = exc.code
            attempts.append(attempt)
            done = 200 <= status < 300
            final = done or len(attempts) >= MAX_ATTEMPTS or attempt.get("error", "").startswith("url_")
            sets: dict[str, Any] = {"attempts": attempts}
            if final:
                sets["status"] = "delivered" if done else "failed"
            self._store.update(key, Update(set=sets, remove=_PENDING if final else []))
            if final:
                log.info("webhook %s delivery %s: %s", webhook_id, delivery_id, sets["status"])
                return

    def redrive(self, older_than_seconds: float = REDRIVE_AFTER_SECONDS) -> int:
        """Queue again the deliveries still pending after ``older_than_seconds`` (their job was lost: a frozen or
        failed sandbox); each goes on from the attempts it has logged. How many were queued (the periodic sweep)."""
        cutoff = timestamp(self._clock.now() - older_than_seconds)
        queued = 0
        for item in list(every_item(self._store, PENDING_PARTITION, index="gsi1")):
            if str(item.get("created_at", "")) > cutoff or item.get("status") != "pending":
                continue
            payload = {"workspace_id": "", "webhook_id": str(item["webhook_id"]), "delivery_id": str(item["id"])}
            payload["workspace_id"] = str(item["pk"]).removeprefix("WS#")
            try:
                self._jobs().submit(DELIVER_JOB, payload)
            except MCPBridgeError as exc:
                log.warning("could not queue a pending webhook delivery again: %s", exc.code)
                break
            queued += 1
        return queued

    def _items(self, workspace_id: str) -> builtins.list[dict[str, Any]]:
        return list(every_item(self._store, f"WS#{workspace_id}", sk_prefix="WEBHOOK#"))

    def _item(self, workspace_id: str, webhook_id: str) -> dict[str, Any]:
        item = self._store.get(webhook_key(workspace_id, webhook_id)) if is_id(webhook_id, ID_PREFIX) else None
        if item is None:
            raise NotFound("no such webhook", code="webhook_not_found")
        return item


class WebhookEvents:
    """The events port, with each call event also handed to the webhooks (after the inner port has it)."""

    def __init__(self, inner: Events, webhooks: Callable[[], Webhooks]) -> None:
        self._inner = inner
        self._webhooks = webhooks

    def publish(self, kind: str, detail: Mapping[str, Any]) -> None:
        self._inner.publish(kind, detail)
        if event_of(kind, detail) is None:
            return
        try:
            self._webhooks().note(kind, detail)
        except Exception:
            log.warning("webhook notification failed", exc_info=True)


def _events(events: object) -> tuple[str, ...]:
    if events is None:
        return EVENTS
    if not isinstance(events, list) or not events or not all(isinstance(e, str) and e in EVENTS for e in events):
        raise InvalidInput(f"events is a non-empty list of {', '.join(EVENTS)}", code="invalid_events")
    return tuple(e for e in EVENTS if e in events)


def _require_admin(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden("this needs an admin API key", code="admin_required")
    if not principal.scope.allows("approve_calls"):
        raise Forbidden("this API key lacks the approve_calls capability", code="capability_missing")


def _context(workspace_id: str, webhook_id: str, kind: str) -> SecretContext:
    return SecretContext(workspace_id, kind, webhook_id)


def shown_url(url: str) -> str:
    """A receiver's URL fit to show: scheme and host only (a Slack or Teams webhook's path is its credential)."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
    return f"{scheme}://{host}/…"


def _webhook_of(item: Mapping[str, Any]) -> Webhook:
    return Webhook(
        id=str(item["id"]),
        workspace_id=str(item["workspace_id"]),
        url=str(item["url_shown"]),
        format=item["format"],
        events=tuple(item.get("events") or EVENTS),
        description=str(item.get("description") or ""),
        created_at=str(item["created_at"]),
        created_by=str(item["created_by"]),
    )


def _delivery_of(item: Mapping[str, Any]) -> Delivery:
    return Delivery(
        id=str(item["id"]),
        webhook_id=str(item["webhook_id"]),
        event=str(item["event"]),
        call_id=str(item.get("call_id") or ""),
        status=item["status"],
        created_at=str(item["created_at"]),
        attempts=list(item.get("attempts") or []),
    )
