"""``/api/v1/openapi.json`` as a person and a generator read it: a valid OpenAPI 3.1 document (openapi-spec-validator)
for the combined app and every Lambda surface, in which every operation has a summary, a description, a readable
operationId and its security; every parameter a description; every JSON request body an example; every list route
the one paging convention (``?limit=&cursor=`` in, ``{"items", "next_cursor"}`` out); every time ``date-time``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from openapi_spec_validator import validate
from starlette.testclient import TestClient

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import Surface, create_app, create_combined_app
from mcpbridge.settings import Settings

PUBLIC = {
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/api/v1/mcp-oauth/callback"),
    ("get", "/api/v1/mcp-oauth/client-metadata.json"),
    ("post", "/api/v1/document-uploads/{upload_id}/content"),  # its one-time token, in the form, authenticates it
    ("get", "/r/{token}"),  # an image link from an MCP tool result: the token is the credential
}
API_KEY_SECURITY = [{"apiKeyBearer": []}, {"apiKeyHeader": []}]
OPERATION_ID = re.compile(r"^[a-z][a-zA-Z0-9]+$")
TIME_FIELD = re.compile(r"(^|_)at$")
METHODS = {"get", "put", "post", "delete", "patch"}


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    container = Container(Settings(data_dir=tmp_path_factory.mktemp("openapi"), jobs="inline"))
    with TestClient(create_combined_app(container)) as client:
        response = client.get("/api/v1/openapi.json")
    container.close()
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield method, path, operation


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = document
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def test_the_document_is_valid_openapi(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1")
    validate(document)


@pytest.mark.parametrize("surface", get_args(Surface))
def test_every_function_serves_a_valid_document(surface: Surface, tmp_path: Path) -> None:
    container = Container(Settings(data_dir=tmp_path, jobs="inline"))
    try:
        validate(create_app(container, surface).openapi())
    finally:
        container.close()


def test_every_operation_is_described_with_a_readable_id(document: dict[str, Any]) -> None:
    wrong, seen = [], set()
    for method, path, operation in operations(document):
        where = f"{method.upper()} {path}"
        operation_id = operation.get("operationId", "")
        if not OPERATION_ID.match(operation_id):
            wrong.append(f"{where}: operationId {operation_id!r} is not camelCase (set operation_id=...)")
        if operation_id in seen:
            wrong.append(f"{where}: operationId {operation_id!r} is used twice")
        seen.add(operation_id)
        if not operation.get("summary", "").strip():
            wrong.append(f"{where}: no summary")
        if len(operation.get("description", "").strip()) < 20:
            wrong.append(f"{where}: no description (the route's docstring)")
        if not operation.get("tags"):
            wrong.append(f"{where}: no tag")
    assert not wrong, "\n".join(wrong)


def test_every_operation_states_its_security(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes["apiKeyBearer"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "sk_...",
        "description": schemes["apiKeyBearer"]["description"],
    }
    assert (schemes["apiKeyHeader"]["in"], schemes["apiKeyHeader"]["name"]) == ("header", "X-API-Key")
    wrong = []
    for method, path, operation in operations(document):
        expected = [] if (method, path) in PUBLIC else API_KEY_SECURITY
        if operation.get("security", []) != expected:
            wrong.append(f"{method.upper()} {path}: security {operation.get('security')} (expected {expected})")
    assert not wrong, "\n".join(wrong)


def test_every_parameter_is_described_and_every_json_body_has_an_example(document: dict[str, Any]) -> None:
    wrong = []
    for method, path, operation in operations(document):
        where = f"{method.upper()} {path}"
        for parameter in operation.get("parameters", []):
            if not parameter.get("description", "").strip():
                wrong.append(f"{where}: parameter {parameter['name']!r} has no description")
        content = operation.get("requestBody", {}).get("content", {})
        if "application/json" in content:
            media = content["application/json"]
            schemas = [resolve(document, s) for s in media["schema"].get("anyOf", [media["schema"]])]
            if not (media.get("example") or media.get("examples") or any(s.get("examples") for s in schemas)):
                wrong.append(f"{where}: the JSON body has no example")
        for form in ("multipart/form-data", "application/x-www-form-urlencoded"):
            if form in content:
                schema = resolve(document, content[form]["schema"])
                for name, field in schema.get("properties", {}).items():
                    if not field.get("description"):
                        wrong.append(f"{where}: form field {name!r} has no description")
    assert not wrong, "\n".join(wrong)


def test_every_list_follows_the_paging_convention(document: dict[str, Any]) -> None:
    wrong, lists = [], 0
    for method, path, operation in operations(document):
        where = f"{method.upper()} {path}"
        ok = next((r for s, r in operation["responses"].items() if s.startswith("2")), {})
        schema = resolve(document, ok.get("content", {}).get("application/json", {}).get("schema", {}))
        if schema.get("type") == "array":
            if method == "get":
                wrong.append(f"{where}: a list answered as a bare array")
            continue
        properties = schema.get("properties", {})
        is_list = "items" in properties or operation.get("operationId", "").startswith("list")
        if method != "get" or not is_list:
            continue
        lists += 1
        if resolve(document, properties.get("items", {})).get("type") != "array":
            wrong.append(f"{where}: no items array")
        if set(schema.get("required", [])) < {"items", "next_cursor"} or "next_cursor" not in properties:
            wrong.append(f"{where}: no required next_cursor")
        elif {s.get("type") for s in properties["next_cursor"].get("anyOf", [])} != {"string", "null"}:
            wrong.append(f"{where}: next_cursor is not a string or null")
        parameters = {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "query"}
        for name in ("limit", "cursor"):
            if name not in parameters:
                wrong.append(f"{where}: no ?{name}=")
        if "limit" in parameters and parameters["limit"]["schema"].get("minimum") != 1:
            wrong.append(f"{where}: limit has no bounds")
        for old in ("page", "page_size", "offset"):
            if old in parameters or old in properties:
                wrong.append(f"{where}: {old} belongs to another paging convention")
        for old in ("total", "has_more"):
            if old in properties:
                wrong.append(f"{where}: {old} belongs to another paging convention")
    assert lists >= 15, f"only {lists} list routes found"
    assert not wrong, "\n".join(wrong)


def _time_fields(document: dict[str, Any], schema: dict[str, Any], where: str, seen: set[str]) -> Iterator[str]:
    """Every property named ``*_at`` (or ``at``), at any depth, that is not a date-time string."""
    if "$ref" in schema:
        if schema["$ref"] in seen:
            return
        seen = seen | {schema["$ref"]}
        schema = resolve(document, schema)
    for name, field in schema.get("properties", {}).items():
        if TIME_FIELD.search(name):
            variants = field.get("anyOf", [field])
            strings = [v for v in variants if v.get("type") != "null"]
            if not strings or any(v.get("type") != "string" or v.get("format") != "date-time" for v in strings):
                yield f"{where}.{name}"
        yield from _time_fields(document, field, f"{where}.{name}", seen)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _time_fields(document, schema[key], where + "[]", seen)
    for key in ("anyOf", "oneOf", "allOf"):
        for variant in schema.get(key, []):
            yield from _time_fields(document, variant, where, seen)


def test_every_time_is_a_date_time_string(document: dict[str, Any]) -> None:
    wrong, checked = [], 0
    for method, path, operation in operations(document):
        for status, response in operation["responses"].items():
            for media in response.get("content", {}).values():
                checked += 1
                wrong += _time_fields(document, media.get("schema", {}), f"{method.upper()} {path} {status}", set())
    assert checked > 100
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_every_answer_documents_its_request_id(document: dict[str, Any]) -> None:
    assert "request_id" in document["components"]["schemas"]["Problem"]["properties"]
    wrong = [
        f"{method.upper()} {path} {status}"
        for method, path, operation in operations(document)
        for status, response in operation["responses"].items()
        if "X-Request-Id" not in response.get("headers", {})
    ]
    assert not wrong, "\n".join(wrong)


def test_a_method_a_path_does_not_serve_is_answered_405_allowing_every_documented_one(tmp_path: Path) -> None:
    container = Container(Settings(data_dir=tmp_path, jobs="inline"))
    try:
        with TestClient(create_combined_app(container)) as client:
            document = client.get("/api/v1/openapi.json").json()
            # Every path where more than one operation is documented: Starlette alone names the first route's.
            for path, item in document["paths"].items():
                documented = sorted(method.upper() for method in item if method in METHODS)
                if len(documented) < 2:
                    continue
                concrete = re.sub(r"\{[^}]+\}", "x1", path)
                answer = client.request("TRACE", concrete)
                assert answer.status_code == 405, (path, answer.text)
                assert answer.headers["allow"] == ", ".join(documented), path
            # A literal path is its own, not that of a template it also matches.
            tools = client.request("TRACE", "/api/v1/mcp-endpoints/tools")
            assert tools.headers["allow"] == "GET"
    finally:
        container.close()
