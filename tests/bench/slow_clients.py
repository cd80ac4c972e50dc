"""How ``mcpbridge serve`` treats slow clients: seconds until a trickling request head and a trickling request body
are cut off, seconds until a body paced above the minimum rate is answered, and ``/healthz`` latency while
``--slow`` slowloris connections are open, against controls with none.

Starts ``mcpbridge serve`` on a fresh data directory on 127.0.0.1 (the working tree's code, or a revision's with
``--revision``, exported with ``git archive`` and put first on ``PYTHONPATH``). Every client is in this process, on
raw asyncio sockets; every wait is bounded by ``--cap`` seconds and everything stops by itself.

* head: ``GET /healthz HTTP/1.1`` and a ``Host`` line, then one byte of a header line a second;
* body: ``POST /api/v1/knowledge-bases`` declaring 100 KiB, then one byte of it a second;
* paced body: the same declaring ``--body-kib`` KiB, sent at ``--rate-kib`` KiB a second (answered 400 once
  whole, ``malformed_json``: the declared length ends inside the JSON);
* health: ``--probes`` sequential ``GET /healthz`` on fresh connections (``--gap`` s apart), in rounds that
  alternate a control (no slow connection) and a round with ``--slow`` connections that each send one header byte
  every 2 s (a connection the server closes is opened again, as an attacker would). Quoted: the median and p95 of
  the slow rounds as a ratio of the controls', and how many slow connections were open when the round ended.

    .venv/bin/python tests/bench/slow_clients.py                        # the working tree
    .venv/bin/python tests/bench/slow_clients.py --revision cd2c7fc     # a revision (e.g. before a change)
    .venv/bin/python tests/bench/slow_clients.py --workers 2 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from io import BytesIO
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def export(revision: str, into: Path) -> Path:
    """The ``shared/`` folder of ``revision``, exported from git into ``into``."""
    archive = subprocess.run(["git", "archive", revision, "shared"], cwd=REPO, capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "shared"


@contextmanager
def serving(tmp: Path, shared: Path | None, workers: int, env_extra: dict[str, str]) -> Iterator[tuple[int, str]]:
    """``mcpbridge serve`` on a fresh data directory: its port and admin key; stopped (SIGTERM, then kill) at exit."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPBRIDGE_")}
    env.update({"NO_PROXY": "127.0.0.1", "MCPBRIDGE_JOBS": "inline", "MCPBRIDGE_LOG_LEVEL": "WARNING", **env_extra})
    if shared is not None:
        env["PYTHONPATH"] = str(shared)
    command = [sys.executable, "-m", "mcpbridge.cli", "serve", "--json", "--host", HOST, "--port", str(port)]
    command += ["--data-dir", str(tmp / "data"), "--workers", str(workers)]
    with (tmp / "serve.log").open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=log)
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())
        wait_until_healthy(port)
        yield port, str(first["api_key"])
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_healthy(port: int, timeout: float = 60.0) -> None:
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        with suppress(OSError), socket.create_connection((HOST, port), timeout=2) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            if conn.recv(64).startswith(b"HTTP/1.1 200"):
                return
        time.sleep(0.2)
    raise RuntimeError("serve did not become healthy")


async def _read_until_closed(reader: asyncio.StreamReader) -> bytes:
    received = b""
    with suppress(ConnectionError):
        while chunk := await reader.read(65536):
            received += chunk
    return received


async def trickle(
    port: int, head: bytes, piece: bytes, every: float, cap: float, total: int | None = None
) -> dict[str, Any]:
    """Send ``head``, then ``piece`` every ``every`` seconds (``total`` bytes in all at most): seconds until the
    server answered or closed."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(head)
    answer = asyncio.ensure_future(_read_until_closed(reader))
    sent = len(head)
    while not answer.done() and time.monotonic() - started < cap:
        part = piece if total is None else piece[: total - sent]
        with suppress(ConnectionError):
            writer.write(part)
            await writer.drain()
            sent += len(part)
        await asyncio.wait([answer], timeout=every)
    elapsed = time.monotonic() - started
    cut = answer.done()
    writer.close()
    received = answer.result() if cut else b""
    answer.cancel()
    status = received.split(b"\r\n", 1)[0].decode(errors="replace") if received else ""
    return {"seconds": round(elapsed, 1), "cut off": cut, "status line": status, "bytes sent": sent}


async def trickling_head(port: int, cap: float) -> dict[str, Any]:
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    return await trickle(port, head, b"a", 1.0, cap)


async def trickling_body(port: int, key: str, size: int, piece: int, cap: float) -> dict[str, Any]:
    """A knowledge base's JSON declared ``size`` bytes long, sent ``piece`` bytes a second: once whole it is
    answered 400 malformed_json (the declared length ends inside the description), and the connection closed."""
    head = (
        f"POST /api/v1/knowledge-bases HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
    ).encode()
    body = b'{"name": "slow", "description": "'
    return await trickle(port, head + body, b"a" * piece, 1.0, cap, total=len(head) + size)


async def healthz_once(port: int) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(_read_until_closed(reader), 30)
    writer.close()
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"/healthz answered {answer[:40]!r}")
    return (time.perf_counter() - started) * 1000


class Slowloris:
    """``count`` connections, each sending one header byte every 2 s; reopened when the server closes one."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.count = count
        self.open = 0
        self.closed_by_server = 0
        self.tasks: list[asyncio.Task[None]] = []

    async def _one(self) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection(HOST, self.port)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            self.open += 1
            try:
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                while not reader.at_eof():
                    writer.write(b"a")
                    await writer.drain()
                    with suppress(TimeoutError):
                        await asyncio.wait_for(reader.read(65536), 2.0)
            except ConnectionError:
                pass
            finally:
                self.open -= 1
                writer.close()
            self.closed_by_server += 1

    async def __aenter__(self) -> Slowloris:
        self.tasks = [asyncio.ensure_future(self._one()) for _ in range(self.count)]
        ends = time.monotonic() + 30
        while self.open < self.count and time.monotonic() < ends:
            await asyncio.sleep(0.1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


async def probes(port: int, count: int, gap: float) -> list[float]:
    latencies = []
    for _ in range(count):
        latencies.append(await healthz_once(port))
        await asyncio.sleep(gap)
    return latencies


async def health_rounds(port: int, slow: int, rounds: int, count: int, gap: float) -> dict[str, Any]:
    control: list[float] = []
    loaded: list[float] = []
    open_at_end: list[int] = []
    closed: list[int] = []
    for _ in range(rounds):
        control += await probes(port, count, gap)
        async with Slowloris(port, slow) as attack:
            await asyncio.sleep(2.5)  # every slow connection has sent a byte or two
            loaded += await probes(port, count, gap)
            open_at_end.append(attack.open)
            closed.append(attack.closed_by_server)
    return {
        "control p50 ms": round(statistics.median(control), 2),
        "control p95 ms": round(p95(control), 2),
        "slow p50 ms": round(statistics.median(loaded), 2),
        "slow p95 ms": round(p95(loaded), 2),
        "p50 ratio": round(statistics.median(loaded) / statistics.median(control), 2),
        "p95 ratio": round(p95(loaded) / p95(control), 2),
        "slow connections open at round end": open_at_end,
        "slow connections closed by serve per round": closed,
    }


async def measure(port: int, key: str, args: argparse.Namespace) -> dict[str, Any]:
    head, body, paced = await asyncio.gather(
        trickling_head(port, args.cap),
        trickling_body(port, key, 100 * 1024, 1, args.cap),
        trickling_body(port, key, args.body_kib * 1024, args.rate_kib * 1024, args.cap),
    )
    health = await health_rounds(port, args.slow, args.rounds, args.probes, args.gap)
    return {"trickling head": head, "trickling body": body, "paced body": paced, "healthz": health}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revision", help="measure this git revision's code instead of the working tree's")
    parser.add_argument("--workers", type=int, default=1, help="serve --workers")
    parser.add_argument("--slow", type=int, default=300, help="slow connections in the loaded rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probes", type=int, default=40, help="/healthz requests per round")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between two /healthz requests")
    parser.add_argument("--cap", type=float, default=60.0, help="longest a trickle is kept up, in seconds")
    parser.add_argument("--body-kib", type=int, default=1024, help="size of the paced body")
    parser.add_argument("--rate-kib", type=int, default=64, help="rate of the paced body, KiB a second")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for serve's environment")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    env_extra = dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory(prefix="mcpbridge-slow-") as tmp:
        shared = export(args.revision, Path(tmp) / "tree") if args.revision else None
        with serving(Path(tmp), shared, args.workers, env_extra) as (port, key):
            result = asyncio.run(measure(port, key, args))
    result = {"code": args.revision or "working tree", "workers": args.workers, **result}
    if args.json:
        print(json.dumps(result))
        return
    for name, value in result.items():
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
