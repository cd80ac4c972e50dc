"""An ASGI app served by uvicorn on 127.0.0.1 in a background thread, for clients that need real HTTP."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from tests.support.readiness import Worker, wait_until


@contextlib.contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields the base URL (``http://127.0.0.1:<port>``)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, Worker.thread("the test server", thread), what="starting")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
