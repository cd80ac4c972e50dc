"""``/api/v1/docs``: Swagger UI for ``/api/v1/openapi.json``, served whole by the app itself, so the page works
offline and behind a firewall. Its script, style sheet and icon come from the installed ``swagger-ui-bundle-v2``
package (``/api/v1/docs/assets/...``), never from a CDN; its Content-Security-Policy lets the page load nothing from
anywhere else, and the online validator badge is off."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

from mcpbridge.errors import NotFound

DOCS_PATH = "/api/v1/docs"
ASSETS_PATH = f"{DOCS_PATH}/assets"

# The files of the Swagger UI distribution the page uses, and their media types.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; font-src 'self' data:; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


@cache
def _asset(name: str) -> bytes:
    from swagger_ui_bundle import swagger_ui_path

    return (Path(str(swagger_ui_path)) / name).read_bytes()


def install_docs(app: FastAPI, openapi_url: str) -> None:
    """Serve the docs page and its assets (the app is created with ``docs_url=None``)."""

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs_page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{app.title} API",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": False, "tryItOutEnabled": False},
        )
        page.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        page.headers["X-Content-Type-Options"] = "nosniff"
        page.headers["Referrer-Policy"] = "no-referrer"
        return page

    @app.get(f"{ASSETS_PATH}/{{name}}", include_in_schema=False)
    def docs_asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            raise NotFound("no such asset of the docs page", code="not_found")
        return Response(
            _asset(name),
            media_type=media_type,
            headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"},
        )
