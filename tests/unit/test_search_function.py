"""The search function and its callers: requests staged in the blob store when large, errors kept apart (the
caller's mistakes as ValueError, the rest as Unavailable), bad requests refused, upkeep jobs run where the engine is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mcpbridge.adapters.aws.lambda_search_index as remote
from mcpbridge.adapters.aws.lambda_search_index import LambdaSearchIndex
from mcpbridge.adapters.lance.search_index import LanceSearchIndex
from mcpbridge.adapters.lance.tables import LanceLocation
from mcpbridge.adapters.local.files import FileBlobs
from mcpbridge.adapters.local.sqlite import SqliteStore
from mcpbridge.bootstrap import Container
from mcpbridge.errors import Unavailable
from mcpbridge.knowledge.index_requests import answer
from mcpbridge.search_entry import make_search_handler
from mcpbridge.settings import Settings
from tests.support.clock import FakeClock
from tests.support.lance import InProcessLambda
from tests.unit.test_lance_index import EMBEDDER, chunks


@pytest.fixture
def served(tmp_path: Path) -> tuple[LanceSearchIndex, FileBlobs, InProcessLambda]:
    clock = FakeClock()
    index = LanceSearchIndex(SqliteStore(tmp_path / "s.sqlite3", clock), LanceLocation.directory(tmp_path / "l"), clock)
    blobs = FileBlobs(tmp_path / "blobs")
    return index, blobs, InProcessLambda(lambda event, context: answer(index, index, blobs, event))


def test_a_large_write_is_staged_in_the_blob_store_and_removed(
    served: tuple[LanceSearchIndex, FileBlobs, InProcessLambda], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, blobs, client = served
    monkeypatch.setattr(remote, "INLINE_BYTES", 2000)
    caller = LambdaSearchIndex(client, "search", blobs)
    parts = chunks("doc_big", *[f"Paragraph {n} about walruses and their long tusks." for n in range(40)])
    caller.replace_document(
        "kb_1", "doc_big", parts, EMBEDDER.embed([c.text for c in parts], purpose="document"), EMBEDDER.name
    )
    assert max(size for _, size in client.invocations) < 2000  # the call named the staged request
    assert not list((tmp_path / "blobs").rglob("*.json"))  # and the search function removed it
    assert caller.count("kb_1", "doc_big") == 40
    assert index.count("kb_1", "doc_big") == 40


def test_the_callers_mistakes_come_back_as_value_errors(
    served: tuple[LanceSearchIndex, FileBlobs, InProcessLambda],
) -> None:
    index, blobs, client = served
    caller = LambdaSearchIndex(client, "search", blobs)
    parts = chunks("doc_a", "Walruses rest.")
    caller.replace_document("kb_1", "doc_a", parts, EMBEDDER.embed([parts[0].text], purpose="document"), EMBEDDER.name)
    with pytest.raises(ValueError, match="dimension"):
        caller.semantic(["kb_1"], [1.0, 2.0])
    with pytest.raises(ValueError, match="never mixes embedders"):
        caller.replace_document("kb_1", "doc_a", parts, [[1.0] * 4], "other:model")
    assert index.count("kb_1", "doc_a") == 1


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"op": "drop_everything", "args": {}}, "unknown search index operation"),
        ({"op": "count", "args": []}, "args must be an object"),
        ({"op": "count", "args": {"kb_id": "kb_1"}}, "document_id"),
        ({"request_key": "documents/x/source"}, "index-requests/"),
        ({"request_key": "index-requests/gone.json"}, "gone"),
    ],
)
def test_bad_requests_are_refused(
    served: tuple[LanceSearchIndex, FileBlobs, InProcessLambda], request_: dict[str, Any], message: str
) -> None:
    index, blobs, _ = served
    reply = answer(index, index, blobs, request_)
    assert reply["error"]["kind"] == "invalid"
    assert message in reply["error"]["message"]


def test_a_failed_function_is_unavailable(tmp_path: Path) -> None:
    def broken(event: dict[str, Any], context: object) -> dict[str, Any]:
        raise RuntimeError("out of memory")

    caller = LambdaSearchIndex(InProcessLambda(broken), "search", FileBlobs(tmp_path))
    with pytest.raises(Unavailable) as raised:
        caller.keyword(["kb_1"], "walrus")
    assert raised.value.code == "search_index_unavailable"


def test_the_search_function_answers_calls_and_runs_upkeep_jobs(tmp_path: Path) -> None:
    container = Container(Settings(data_dir=tmp_path, search_engine="lance", jobs="inline"))
    handler = make_search_handler(container)
    caller = LambdaSearchIndex(InProcessLambda(handler), "search", container.blobs)
    parts = chunks("doc_a", "Walruses rest on the ice.")
    caller.replace_document("kb_1", "doc_a", parts, None, None, language="english")
    assert [h.chunk.id for h in caller.keyword(["kb_1"], "walrus")] == ["doc_a#00000"]
    assert handler({"kind": "optimise_index", "payload": {"knowledge_base_id": "kb_1"}}, None) == {"status": "done"}
    index = container.search_index
    assert isinstance(index, LanceSearchIndex)
    pointer = index.pointer("kb_1")
    assert pointer is not None
    assert pointer.stats is not None
    container.close()
