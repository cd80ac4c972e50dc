"""``/api/v1/webhooks``: receivers told when a call waits for someone, is decided, or times out
(:mod:`mcpbridge.agent.webhooks`). Admin keys with ``approve_calls``. The signing secret is in the creation's answer
only; a receiver's URL is shown as scheme and host (a chat webhook's path is its credential)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from anyio import to_thread
from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from mcpbridge.agent.webhooks import Delivery, Webhook
from mcpbridge.http.auth import CurrentPrincipal, service_of
from mcpbridge.http.openapi import problems
from mcpbridge.http.paging import cursor_query, limit_query, next_cursor_field, page_of
from mcpbridge.http.views import Timestamp

if TYPE_CHECKING:
    from mcpbridge.agent.webhooks import Webhooks

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])


async def _webhooks(request: Request) -> Webhooks:
    return cast("Webhooks", await service_of(request, "webhooks"))


WebhooksDep = Annotated["Webhooks", Depends(_webhooks)]
WebhookId = Annotated[str, Path(description="The webhook's id (`whk_...`).")]


class WebhookIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"url": "https://hooks.example.com/mcpbridge", "format": "slack"}]},
    )

    url: str = Field(description="Where events are POSTed; checked by the SSRF guard, https unless allowlisted.")
    format: str = Field(default="json", description="json (default), slack or teams (incoming-webhook messages).")
    events: list[str] | None = Field(
        default=None, description="Any of call.waiting, call.decided, call.timed_out (default: all three)."
    )
    description: str = Field(default="", description="A note for admins, at most 500 characters.")


class WebhookOut(BaseModel):
    id: str
    url: str = Field(description="Scheme and host only.")
    format: Literal["json", "slack", "teams"]
    events: list[str]
    description: str
    created_at: Timestamp
    created_by: str

    @classmethod
    def of(cls, webhook: Webhook) -> WebhookOut:
        return cls(
            id=webhook.id,
            url=webhook.url,
            format=webhook.format,
            events=list(webhook.events),
            description=webhook.description,
            created_at=webhook.created_at,
            created_by=webhook.created_by,
        )


class CreatedWebhook(WebhookOut):
    signing_secret: str = Field(
        description="Shown once. Verify `X-Mcpbridge-Signature: v1=<hex>`, the HMAC-SHA256 of "
        "`<X-Mcpbridge-Timestamp>.<body>` with this secret."
    )


class WebhookList(BaseModel):
    items: list[WebhookOut]
    next_cursor: str | None = next_cursor_field()


class DeliveryOut(BaseModel):
    id: str
    event: str
    call_id: str
    status: Literal["pending", "delivered", "failed"]
    created_at: Timestamp
    attempts: list[dict[str, Any]] = Field(description="Each attempt: `at`, and `status_code` or an `error` code.")

    @classmethod
    def of(cls, delivery: Delivery) -> DeliveryOut:
        return cls(
            id=delivery.id,
            event=delivery.event,
            call_id=delivery.call_id,
            status=delivery.status,
            created_at=delivery.created_at,
            attempts=delivery.attempts,
        )


class DeliveryList(BaseModel):
    items: list[DeliveryOut]
    next_cursor: str | None = next_cursor_field()


@router.post(
    "", operation_id="createWebhook", summary="Register a webhook", status_code=201, responses=problems(400, 403)
)
async def create_webhook(body: WebhookIn, principal: CurrentPrincipal, webhooks: WebhooksDep) -> CreatedWebhook:
    """Registers a receiver of call events; its signing secret is in this answer only."""
    created = await to_thread.run_sync(
        lambda: webhooks.create(
            principal, url=body.url, format=body.format, events=body.events, description=body.description
        )
    )
    return CreatedWebhook(**WebhookOut.of(created.webhook).model_dump(), signing_secret=created.secret)


@router.get("", operation_id="listWebhooks", summary="List the webhooks")
def list_webhooks(
    principal: CurrentPrincipal,
    webhooks: WebhooksDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> WebhookList:
    """The workspace's webhooks, oldest first (their URLs as scheme and host only)."""
    found, next_cursor = page_of(
        webhooks.list(principal), key=lambda w: (w.id,), limit=limit, cursor=cursor, listing="webhooks"
    )
    return WebhookList(items=[WebhookOut.of(w) for w in found], next_cursor=next_cursor)


@router.get("/{webhook_id}", operation_id="getWebhook", summary="A webhook", responses=problems(404))
def get_webhook(webhook_id: WebhookId, principal: CurrentPrincipal, webhooks: WebhooksDep) -> WebhookOut:
    """One webhook (never its signing secret)."""
    return WebhookOut.of(webhooks.get(principal, webhook_id))


@router.delete("/{webhook_id}", operation_id="deleteWebhook", summary="Delete a webhook", responses=problems(404))
def delete_webhook(webhook_id: WebhookId, principal: CurrentPrincipal, webhooks: WebhooksDep) -> Response:
    """Deletes the webhook; deliveries still queued for it are dropped."""
    webhooks.delete(principal, webhook_id)
    return Response(status_code=204)


@router.get(
    "/{webhook_id}/deliveries",
    operation_id="listWebhookDeliveries",
    summary="A webhook's delivery log",
    responses=problems(404),
)
def list_deliveries(
    webhook_id: WebhookId,
    principal: CurrentPrincipal,
    webhooks: WebhooksDep,
    limit: int = limit_query(),
    cursor: str | None = cursor_query(),
) -> DeliveryList:
    """The webhook's deliveries, newest first (the last 100, kept 30 days), each with its attempts."""
    found, next_cursor = page_of(
        webhooks.deliveries(principal, webhook_id),
        key=lambda d: (d.id,),
        limit=limit,
        cursor=cursor,
        listing=f"webhooks/{webhook_id}/deliveries",
        descending=True,
    )
    return DeliveryList(items=[DeliveryOut.of(d) for d in found], next_cursor=next_cursor)
