"""The admin API's routers included on demand (an on-demand Lambda cold start) answer as the app built whole.

A request includes the routers with routes under its path's segment (``/api/v1/<segment>``, or the first segment of a
path outside ``/api/v1``: ``/console``), each in its place;
``app.routes`` and the OpenAPI document include them all. Compared here with the app built whole, path by path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import _SEGMENTS, _SURFACES, _segment, create_app
from mcpbridge.settings import Settings

METHODS = {"get", "put", "post", "delete", "patch", "options", "head"}


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Container]:
    wired = Container(Settings(data_dir=tmp_path, jobs="inline"))
    yield wired
    wired.close()


@pytest.fixture
def whole_document(container: Container) -> dict[str, Any]:
    document: dict[str, Any] = create_app(container, "admin_api").openapi()
    return document


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", path)


def _answer(client: TestClient, method: str, path: str) -> tuple[int, str, str]:
    answer = client.request(method, path)
    return answer.status_code, answer.headers.get("allow", ""), answer.headers.get("content-type", "")


def test_nothing_is_included_before_a_request_needs_it(container: Container) -> None:
    whole = len(create_app(container, "admin_api").router.routes)
    app = create_app(container, "admin_api", lazy=True)
    own = len(app.router.routes)
    assert own < whole
    with TestClient(app) as client:
        assert _answer(client, "GET", "/healthz")[0] == 200
        assert len(app.router.routes) == own  # the health routes are the app's own
        assert _answer(client, "GET", "/api/v1/api-keys")[0] == 401
        assert own < len(app.router.routes) < whole  # the api-keys router, not the others
    assert len(app.routes) == whole


def test_the_first_request_under_each_segment_answers_as_the_whole_app(
    container: Container, whole_document: dict[str, Any]
) -> None:
    by_segment: dict[str, list[tuple[str, list[str]]]] = {}
    for path, item in whole_document["paths"].items():
        documented = sorted(method.upper() for method in item if method in METHODS)
        by_segment.setdefault((path.split("/") + [""] * 4)[3], []).append((path, documented))
    with TestClient(create_app(container, "admin_api"), raise_server_exceptions=False) as whole:
        for paths in by_segment.values():
            # A fresh app per segment, whose first request answers 405 naming every method its path serves (that
            # needs all the path's routers); then each path's 405 and, without a key, each route's 401.
            fresh = create_app(container, "admin_api", lazy=True)
            with TestClient(fresh, raise_server_exceptions=False) as client:
                for path, documented in paths:
                    concrete = _concrete(path)
                    for method in ["TRACE", *documented]:
                        assert _answer(client, method, concrete) == _answer(whole, method, concrete), (method, path)


def test_paths_no_router_serves_answer_alike(container: Container) -> None:
    with TestClient(create_app(container, "admin_api"), raise_server_exceptions=False) as whole:
        for path in ["/api/v1/nothing", "/api/v1/users/", "/api/v1", "/api/v1/", "/nowhere", "/api/v1/agent/x/y"]:
            with TestClient(create_app(container, "admin_api", lazy=True), raise_server_exceptions=False) as fresh:
                assert _answer(fresh, "GET", path) == _answer(whole, "GET", path), path


def test_routers_included_in_any_order_keep_the_whole_apps_order(
    container: Container, whole_document: dict[str, Any]
) -> None:
    app = create_app(container, "admin_api", lazy=True)
    with TestClient(app, raise_server_exceptions=False) as client:
        for path in ["/api/v1/users/x1", "/api/v1/agent/pending", "/api/v1/wiki/search", "/api/v1/api-keys"]:
            _answer(client, "GET", path)
    # The document walks app.routes, which includes the rest: the same operations, in the same order.
    assert json.dumps(app.openapi()) == json.dumps(whole_document)


def test_each_router_is_filed_under_exactly_the_segments_of_its_routes() -> None:
    whole = create_app(Container(Settings()), "admin_api")
    assert set(_SEGMENTS) == set(_SURFACES["admin_api"])
    for name in _SURFACES["admin_api"]:
        module = __import__(f"mcpbridge.http.routes.{name}", fromlist=["router"])
        segments = set()
        for route in module.router.routes:
            segment = _segment(route.path)
            assert segment, (name, route.path)
            assert "{" not in segment, (name, route.path)
            segments.add(segment)
        assert segments == _SEGMENTS[name], name
    # The app's own routes (health, docs, the document) are under no router's segment.
    filed = set().union(*_SEGMENTS.values())
    own = [str(getattr(r, "path", "")) for r in whole.router.routes if getattr(r, "path", None)]
    assert own
    assert not any(_segment(path) in filed for path in own)
