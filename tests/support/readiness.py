"""Waiting for a server the tests started: for as long as it is alive and working, not for a fixed time.

A fixed wall-clock bound fails on a busy machine: a server that needs 3 s of CPU to start gets a tenth of a core at
load 20 on two cores, and takes 30 s. So a wait here goes on while the worker it waits for (a child process, or a
thread of this one) is alive and making progress (using CPU, writing output), and gives up when the worker has
exited, when it has made no progress at all for ``STALL_SECONDS`` (it is stuck, not slow), or when it has used more
CPU than its budget (the work of a start many times over: it is spinning). A failure says which, with the worker's
output. The test's own timeout (pytest-timeout) stays the last resort.

CPU time comes from ``/proc`` (Linux). Elsewhere the wall time stands in for it, so the budget bounds the wait.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

STALL_SECONDS = 45.0
"""No CPU used and no output written for this long: the worker is stuck (a scheduler never starves one this long)."""
START_CPU_SECONDS = 60.0
"""The CPU a server's start (or a step of its work) may use: tens of times what one needs."""
POLL_SECONDS = 0.05

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_cpu_seconds(stat: Path, *, with_children: bool) -> float | None:
    """User + system CPU seconds from a /proc stat file (the children's too, for a process); None if unreadable."""
    try:
        text = stat.read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count fields after the last ")".
    fields = text[text.rindex(")") + 2 :].split()
    used = fields[11:15] if with_children else fields[11:13]  # utime stime [cutime cstime]: fields 14-17
    return sum(int(value) for value in used) / _TICKS


def thread_cpu_seconds(native_id: int) -> float | None:
    """CPU seconds of a thread of this process (by its ``native_id``); None once it has ended, or without /proc."""
    return _stat_cpu_seconds(Path(f"/proc/self/task/{native_id}/stat"), with_children=False)


def _tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of a process and of its descendants, live or ended; None without /proc."""
    total = _stat_cpu_seconds(Path(f"/proc/{pid}/stat"), with_children=True)
    if total is None:
        return None
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            total += _tree_cpu_seconds(int(child)) or 0.0
    return total


@dataclass
class Worker:
    """What a wait depends on: whether it is alive, the CPU it has used so far, and its output."""

    name: str
    alive: Callable[[], bool]
    cpu_seconds: Callable[[], float]
    output: Callable[[], str]

    @classmethod
    def process(cls, name: str, process: subprocess.Popen[Any], output: Callable[[], str]) -> Worker:
        """A child process, with the processes it started (``serve --workers``)."""
        started = time.monotonic()

        def cpu() -> float:
            used = _tree_cpu_seconds(process.pid)
            return time.monotonic() - started if used is None else used

        return cls(name, lambda: process.poll() is None, cpu, output)

    @classmethod
    def pid(cls, name: str, pid: int, output: Callable[[], str] = lambda: "") -> Worker:
        """A process that is not this one's child (found by its id), with the processes it started."""
        started = time.monotonic()

        def alive() -> bool:
            try:
                text = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                if Path("/proc/self/stat").exists():
                    return False
                try:  # no /proc: whether the id is taken
                    os.kill(pid, 0)
                except OSError:
                    return False
                return True
            return text[text.rindex(")") + 2 :].split()[0] not in ("Z", "X")  # a zombie has exited

        def cpu() -> float:
            used = _tree_cpu_seconds(pid)
            return time.monotonic() - started if used is None else used

        return cls(name, alive, cpu, output)

    @classmethod
    def thread(cls, name: str, thread: threading.Thread, output: Callable[[], str] = lambda: "") -> Worker:
        started = time.monotonic()
        native_id = thread.native_id

        def cpu() -> float:
            used = None if native_id is None else thread_cpu_seconds(native_id)
            return time.monotonic() - started if used is None else used

        return cls(name, thread.is_alive, cpu, output)


def wait_until(
    ready: Callable[[], bool],
    worker: Worker,
    *,
    what: str,
    cpu_budget: float = START_CPU_SECONDS,
    stall_seconds: float = STALL_SECONDS,
) -> None:
    """Return once ``ready()`` is true; fail (with the worker's output) once the worker has exited, is stuck or has
    used more than ``cpu_budget`` CPU seconds while waited for, whichever comes first."""
    started = last_progress = time.monotonic()
    last = (worker.cpu_seconds(), len(worker.output()))
    cpu_at_start = last[0]
    while not ready():
        alive = worker.alive()
        if not alive and ready():  # it may have answered just before it exited
            return
        now = time.monotonic()
        progress = (worker.cpu_seconds(), len(worker.output()))
        if progress != last:
            last, last_progress = progress, now
        used = progress[0] - cpu_at_start
        waited = f"after {now - started:.1f} s and {used:.1f} s of its CPU"
        if not alive:
            _fail(worker, f"{worker.name} exited before {what} ({waited})")
        if used > cpu_budget:
            _fail(worker, f"{worker.name} used more than {cpu_budget:g} s of CPU without {what} ({waited})")
        if now - last_progress > stall_seconds:
            _fail(worker, f"{worker.name} made no progress for {stall_seconds:g} s without {what} ({waited})")
        time.sleep(POLL_SECONDS)


def _fail(worker: Worker, reason: str) -> None:
    output = worker.output()
    pytest.fail(f"{reason}\n{output}" if output else reason)


RUN_CPU_SECONDS = 120.0
"""The CPU a command run to its end may use (its own and its children's): many times what the slowest one needs."""


def run_to_end(
    command: Sequence[str],
    *,
    what: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    cpu_budget: float = RUN_CPU_SECONDS,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end, for as long as it (with the processes it starts) is working: the wait of
    ``wait_until``, not a fixed timeout. A command that is stuck or spinning is killed with its process group and
    fails the test with its output. The output goes to files, so a full pipe never blocks the command."""
    with tempfile.TemporaryDirectory(prefix="run-") as folder:
        out_path, err_path = Path(folder) / "stdout", Path(folder) / "stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(
                list(command),
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group, killed whole if it must be
            )

        def output() -> str:
            return f"--- stdout\n{_read(out_path)[-4000:]}\n--- stderr\n{_read(err_path)[-4000:]}"

        try:
            wait_until(
                lambda: process.poll() is not None,
                Worker.process(what, process, output),
                what="ending",
                cpu_budget=cpu_budget,
            )
        finally:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        return subprocess.CompletedProcess(list(command), process.returncode, _read(out_path), _read(err_path))


def _read(path: Path) -> str:
    return path.read_bytes().decode(errors="replace")
