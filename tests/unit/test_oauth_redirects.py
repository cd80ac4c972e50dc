"""Front-end redirects after the OAuth callback: only app-relative paths and URLs on configured origins."""

from __future__ import annotations

import logging

import pytest

from mcpbridge.errors import InvalidInput
from mcpbridge.http.routes.oauth_callback import RedactCallbackQueries
from mcpbridge.oauth.redirects import allowed_origins, callback_url, validate_frontend_redirect, with_result

ORIGINS = allowed_origins(["https://app.example", "http://127.0.0.1:8080/base", "https://admin.example:8443/x"])


@pytest.mark.parametrize(
    "value",
    [
        "/",
        "/settings/mcp",
        "/settings/mcp?tab=oauth&x=1",
        "https://app.example",
        "https://app.example/settings",
        "https://APP.example:443/settings",
        "http://127.0.0.1:8080/ui",
        "https://admin.example:8443/anything",
    ],
)
def test_accepted(value: str) -> None:
    assert validate_frontend_redirect(value, ORIGINS) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "//evil.example",
        "//evil.example/path",
        "/\\evil.example",
        "\\\\evil.example",
        "/%2f%2fevil.example",
        "/%2F%2Fevil.example",
        "/%5cevil.example",
        "/ok%0d%0aSet-Cookie:x",
        "/ok%00",
        "/ok%23frag",
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "data:text/html,hi",
        "vbscript:x",
        "/settings\r\nLocation: https://evil.example",
        "/settings\t",
        "/set tings",
        "/settings\x7f",
        "https://app.example/#frag",
        "/settings#frag",
        "https://user@app.example/",
        "https://user:pass@app.example/",
        "https://evil.example/",
        "https://app.example.evil.example/",
        "https://evil.example#@app.example",
        "http://app.example/",
        "https://app.example:444/",
        "https://admin.example/",
        "settings/relative",
        "app.example/settings",
        "https:///nohost",
        "https://app.example:99999/",
        "/" + "a" * 2048,
    ],
)
def test_refused(value: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        validate_frontend_redirect(value, ORIGINS)
    assert refused.value.code == "invalid_frontend_redirect"
    if len(value) > 3:
        assert value not in refused.value.message


def test_no_configured_origin_allows_only_paths() -> None:
    none = allowed_origins([])
    assert validate_frontend_redirect("/x", none) == "/x"
    with pytest.raises(InvalidInput):
        validate_frontend_redirect("https://app.example/", none)


def test_result_fragment_and_callback_url() -> None:
    assert with_result("/settings", error=None) == "/settings#mcp_oauth_result=success"
    assert with_result("https://app.example/s?a=1", error="access_denied") == (
        "https://app.example/s?a=1#mcp_oauth_error=access_denied"
    )
    assert callback_url("https://hub.example/") == "https://hub.example/api/v1/mcp-oauth/callback"


def test_access_log_filter_blanks_the_callback_query() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/api/v1/mcp-oauth/callback?code=c0de&state=st4te", "1.1", 303),
        None,
    )
    assert RedactCallbackQueries().filter(record) is True
    message = record.getMessage()
    assert "c0de" not in message
    assert "st4te" not in message
    assert "/api/v1/mcp-oauth/callback?[redacted]" in message
    other = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, "%s %s %s", ("a", "GET", "/api/v1/x?q=1"), None
    )
    RedactCallbackQueries().filter(other)
    assert other.getMessage() == "a GET /api/v1/x?q=1"


def test_a_host_with_a_trailing_dot_is_not_the_configured_origin() -> None:
    # ``localhost.`` is a fully qualified name a resolver may answer otherwise than ``localhost``.
    origins = allowed_origins(["http://localhost:3000", "https://app.example"])
    assert validate_frontend_redirect("http://localhost:3000/x", origins) == "http://localhost:3000/x"
    for value in ("http://localhost.:3000/x", "https://app.example./settings"):
        with pytest.raises(InvalidInput) as refused:
            validate_frontend_redirect(value, origins)
        assert refused.value.code == "invalid_frontend_redirect"
