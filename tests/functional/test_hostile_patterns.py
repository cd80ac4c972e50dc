"""Hostile regular expressions against the real ``mcpbridge serve``, at every place a caller's pattern enters: REST
``/api/v1/knowledge/grep`` and ``/api/v1/wiki/search``, MCP ``grep_chunks`` and ``wiki_search``.

The bug these guard against: Python's backtracking ``re`` ran ``refresh(\\s?\\w+)+!`` for hours while holding the
GIL, so ``/healthz`` stopped answering and SIGTERM was ignored. Every wait for an answer here is bounded by the CPU
serve spends on it (tests.support.readiness), so on such an engine the tests fail once serve has spun for seconds of
CPU, however busy the machine, rather than hang (the stuck server is then killed).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.support.hostile_patterns import CORPUS, DOCUMENT, REPORTED_GREP, REPORTED_WIKI, WIKI_PAGE
from tests.support.serve import SERVE_TEST_TIMEOUT, ServeProcess, cli_env, http_client, run_init

# Each test starts `serve` (a few CPU seconds each time): at load 20 on two cores that can take minutes, which the
# readiness waits allow (tests.support.readiness); this is only the last resort against a hang.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SERVE_TEST_TIMEOUT)]

ANSWER_CPU_SECONDS = 10.0
"""The CPU serve may spend on one answer before it counts as stuck in the pattern (RE2 answers in milliseconds)."""
CLIENT_TIMEOUT = SERVE_TEST_TIMEOUT / 2
"""A last resort against a hang (serve's CPU, above, fails a stuck answer first), inside the test's own timeout."""
ENTRIES = ("rest_grep", "rest_wiki", "mcp_grep", "mcp_wiki")
_T = TypeVar("_T")
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


@dataclass
class Served:
    server: ServeProcess
    key: str
    mcp_url: str
    mcp_token: str

    def rest(self) -> httpx.Client:
        client = http_client(self.server.base_url)
        client.headers["Authorization"] = f"Bearer {self.key}"
        client.timeout = httpx.Timeout(CLIENT_TIMEOUT)
        return client

    def answered(self, ask: Callable[[], _T], what: str) -> _T:
        """``ask()`` (requests to serve), waited for while serve works on it; fails once serve has spent
        :data:`ANSWER_CPU_SECONDS` on it (or made no progress for long) without an answer."""
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            asked = pool.submit(ask)
            self.server.wait_for(asked.done, what, cpu_budget=ANSWER_CPU_SECONDS)
            return asked.result()
        finally:
            pool.shutdown(wait=False)  # a request still stuck ends when the server is killed

    def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One ``tools/call`` as raw JSON-RPC (stateless, no handshake); the ``result`` object."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {self.mcp_token}"}
        with httpx.Client(timeout=CLIENT_TIMEOUT, trust_env=False) as client:
            response = client.post(self.mcp_url, json=body, headers=headers)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["result"]
        return result


def _serve(tmp_path: Path) -> Served:
    """``serve`` on a fresh data directory with a document and a wiki page holding what the patterns chew on."""
    env = cli_env()
    data_dir = tmp_path / "data"
    key = run_init(["--data-dir", str(data_dir)], cwd=tmp_path, env=env)["api_key"]
    server = ServeProcess.start(cwd=tmp_path, env=env, args=["--data-dir", str(data_dir)], log_dir=tmp_path, tag="s")
    try:
        server.wait_ready()
        with http_client(server.base_url) as client:
            client.headers["Authorization"] = f"Bearer {key}"
            kb = client.post("/api/v1/knowledge-bases", json={"name": "Tokens"}).json()
            created = client.post(
                f"/api/v1/knowledge-bases/{kb['id']}/documents", json={"title": "Token refresh", "content": DOCUMENT}
            ).json()
            server.wait_for(
                lambda: client.get(f"/api/v1/documents/{created['id']}").json()["parse_status"] == "completed",
                "indexing the document",
            )
            page = client.post(f"/api/v1/knowledge-bases/{kb['id']}/wiki/pages", json=WIKI_PAGE)
            assert page.status_code == 201, page.text
            endpoint = client.post(
                "/api/v1/mcp-endpoints",
                json={"name": "hostile", "knowledge_base_ids": [kb["id"]], "rate_limit_per_minute": 6000},
            ).json()
        assert {"grep_chunks", "wiki_search"} <= set(endpoint["tools"]), "both are on by default"
        return Served(server, key, endpoint["url"], endpoint["token"])
    except BaseException:
        server.kill()
        raise


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    started = _serve(tmp_path_factory.mktemp("hostile"))
    try:
        yield started
    finally:
        started.server.kill()


def _answer(served: Served, entry: str, pattern: str) -> str | None:
    """None for a normal answer, else the refusal's code; fails the test when serve spins without answering."""
    what = f"answering {entry} {pattern!r}"
    if entry.startswith("rest"):
        path, field = (
            ("/api/v1/knowledge/grep", "pattern") if entry == "rest_grep" else ("/api/v1/wiki/search", "query")
        )

        def ask() -> httpx.Response:
            with served.rest() as client:
                return client.post(path, json={field: pattern})

        response = served.answered(ask, what)
        if response.status_code == 200:
            return None
        assert 400 <= response.status_code < 500, f"{entry} {pattern!r}: {response.status_code} {response.text}"
        code: str = response.json()["code"]
        return code
    name, field = ("grep_chunks", "pattern") if entry == "mcp_grep" else ("wiki_search", "query")
    result = served.answered(lambda: served.call_tool(name, {field: pattern}), what)
    if not result.get("isError"):
        return None
    error: dict[str, str] = json.loads(result["content"][0]["text"])["error"]
    assert error["hint"], error
    return error["code"]


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_hostile_pattern_is_answered_or_refused_by_name(served: Served, entry: str) -> None:
    wrong = []
    for hostile in CORPUS:
        refusal = _answer(served, entry, hostile.pattern)
        expected = hostile.refused_by(entry)
        if (refusal is None) != (not expected) or (refusal is not None and refusal not in expected):
            wrong.append(f"{hostile.pattern[:60]!r}: {refusal or 'answered'}, expected {expected or 'an answer'}")
    assert not wrong, "\n".join(wrong)
    assert len(CORPUS) >= 50


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [("grep_chunks", {"pattern": REPORTED_GREP}), ("wiki_search", {"query": REPORTED_WIKI})],
    ids=["grep_chunks", "wiki_search"],
)
def test_a_hostile_call_leaves_health_and_other_calls_answered(
    served: Served, tool: str, arguments: dict[str, Any]
) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        hostile = [pool.submit(_call_or_none, served, tool, arguments) for _ in range(2)]
        time.sleep(1.0)  # not an assertion: on a backtracking engine both calls are deep in the regex by now

        def health_and_listing() -> tuple[httpx.Response, httpx.Response]:
            with served.rest() as client:
                return client.get("/healthz"), client.get("/api/v1/knowledge-bases")

        health, listed = served.answered(health_and_listing, "answering /healthz beside the hostile calls")
        assert health.json() == {"status": "ok"}
        assert listed.status_code == 200
        bases = served.answered(lambda: served.call_tool("list_knowledge_bases", {}), "listing knowledge bases")
        assert not bases.get("isError")
        assert bases["structuredContent"]["total"] == 1
        grep = served.answered(
            lambda: served.call_tool("grep_chunks", {"pattern": r"rotating\s+refresh\s+token"}), "a plain grep"
        )
        assert grep["structuredContent"]["matches"], grep
        served.server.wait_for(
            lambda: all(future.done() for future in hostile), f"answering the hostile {tool}", ANSWER_CPU_SECONDS
        )
        results = [future.result() for future in hostile]
    for result in results:
        assert result is not None, f"the hostile {tool} gave no answer (the connection failed)"
        assert not result.get("isError"), result
        assert result["structuredContent"]["matches"] == []
        assert result["structuredContent"]["truncated"] is False


def _call_or_none(served: Served, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return served.call_tool(tool, arguments)
    except httpx.HTTPError:
        return None


def test_sigterm_stops_serve_during_hostile_calls(tmp_path: Path) -> None:
    served = _serve(tmp_path)
    stop = threading.Event()

    def keep_calling() -> None:
        # Hostile calls back to back until the server is gone (or the test is over).
        while not stop.is_set() and _call_or_none(served, "grep_chunks", {"pattern": REPORTED_GREP}) is not None:
            pass

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            callers = [pool.submit(keep_calling) for _ in range(2)]
            time.sleep(1.0)  # not an assertion: let the calls get going
            served.server.process.terminate()
            try:
                # Stopping takes the CPU of the calls under way (each bounded); one that ignores SIGTERM keeps
                # answering new ones, and spends this budget.
                served.server.wait_for(
                    lambda: served.server.process.poll() is not None, "stopping after SIGTERM", cpu_budget=20
                )
            finally:
                stop.set()
            code = served.server.process.returncode
            for caller in callers:
                caller.result()
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert code in (0, -signal.SIGTERM), served.server.output()
    finally:
        stop.set()
        served.server.kill()
