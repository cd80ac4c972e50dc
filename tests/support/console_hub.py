"""A running mcpbridge for the console's browser tests and its screenshots: the app ``mcpbridge serve`` runs, on
real HTTP at 127.0.0.1, in the embedded mode (SQLite, in-process workflow and indexing), with the operator's admin
key and npm ``@modelcontextprotocol/server-everything`` over Streamable HTTP beside it for registering."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from mcpbridge.bootstrap import Container
from mcpbridge.http.apps import create_combined_app
from mcpbridge.outbound.policy import EgressPolicy
from tests.support.everything import Everything
from tests.support.live_server import live_server


@dataclass
class ConsoleHub:
    base: str
    container: Container
    admin_key: str
    everything: Everything

    def api(self, key: str | None = None) -> httpx.Client:
        """A REST client with ``key`` (the operator's by default), to set up and to check what the pages did."""
        return httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {key or self.admin_key}"}, timeout=60
        )


@contextlib.contextmanager
def console_hub(workdir: Path) -> Iterator[ConsoleHub]:
    from mcpbridge.settings import Settings

    container = Container(Settings(data_dir=workdir / "data"), egress=EgressPolicy(["127.0.0.1"]))
    (workdir / "everything").mkdir(parents=True, exist_ok=True)
    everything = Everything("streamableHttp", workdir / "everything")
    try:
        admin_key = container.identity.initialize().api_key
        assert admin_key is not None
        everything.start()
        with live_server(create_combined_app(container)) as base:
            yield ConsoleHub(base, container, admin_key, everything)
    finally:
        everything.kill()
        container.workflow.close()  # type: ignore[attr-defined]
        container.close()
