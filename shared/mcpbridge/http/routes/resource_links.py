"""``GET /r/{token}``: an image of a document behind a time-limited link from an MCP tool result
(:mod:`mcpbridge.publishing.image_links`). The token is the credential: no other authentication, the link's
endpoint scope checked again; a redirect to the blob store (AWS) or the image itself (``serve``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import RedirectResponse, Response

from mcpbridge.bootstrap import Container
from mcpbridge.http.openapi import problems
from mcpbridge.http.store_reads import store_read

router = APIRouter(tags=["knowledge"])


@router.get(
    "/r/{token}",
    operation_id="getImageLink",
    summary="An image behind a time-limited link",
    response_model=None,
    responses={
        200: {
            "description": "The image",
            "content": {t: {} for t in ("image/png", "image/jpeg", "image/gif", "image/webp")},
        },
        302: {"description": "To the image in the blob store (AWS: a presigned S3 GET)"},
        **problems(403, 404),
    },
)
async def image_link(
    token: Annotated[str, Path(max_length=100, description="The link's token, as handed out in a tool result.")],
    request: Request,
) -> Response:
    """The image a link from an MCP tool result names: 404 unknown or expired, 403 when the endpoint that issued it
    no longer reaches the document."""
    container: Container = request.app.state.container
    served = await store_read(container, container.image_links.open, token)
    headers = {"Cache-Control": f"private, max-age={served.max_age}", "X-Content-Type-Options": "nosniff"}
    if served.url is not None:
        return RedirectResponse(served.url, status_code=302, headers={"Cache-Control": "no-store"})
    assert served.data is not None
    return Response(served.data, media_type=served.content_type, headers=headers)
