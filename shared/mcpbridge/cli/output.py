"""How commands print: a REST body as one line of JSON (``--json``), tables and short sentences for people, and a
progress bar on standard error while something runs in the background."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

Column = tuple[str, Callable[[dict[str, Any]], Any]]


def emit(args: argparse.Namespace, body: Any, human: Callable[[Any], None]) -> None:
    """``body`` as JSON with ``--json``, else as ``human`` prints it."""
    if args.json:
        print(json.dumps(body, ensure_ascii=False))
    else:
        human(body)


def deleted(args: argparse.Namespace, kind: str, identifier: str, detail: str = "") -> None:
    """What a deletion answers (the API's 204 has no body): ``{"id": ..., "deleted": true}``."""
    emit(args, {"id": identifier, "deleted": True}, lambda _: print(f"Deleted {kind} {identifier}.{detail}"))


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(cell(v) for v in value) or "-"
    return " ".join(str(value).split())


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], *, empty: str) -> None:
    """Rows under their headers, columns padded to their widest cell (the last one is not padded)."""
    if not rows:
        print(empty)
        return
    cells = [[header for header, _ in columns], *([cell(pick(row)) for _, pick in columns] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip())


def field(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: row.get(name)


def shorten(text: str | None, limit: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else f"{flat[: limit - 1]}…"


class Progress:
    """A bar on a terminal (redrawn in place), plain lines elsewhere; always on standard error."""

    def __init__(self, total: int, label: str, *, stream: TextIO | None = None, quiet: bool = False) -> None:
        self._stream = stream or sys.stderr
        self._total = total
        self._label = label
        self._tty = self._stream.isatty()
        self._quiet = quiet and not self._tty
        self._drawn = False
        self._last = 0.0

    def update(self, done: int, current: str = "") -> None:
        if not self._tty or (time.monotonic() - self._last < 0.1 and done < self._total):
            return
        import shutil  # on a terminal only

        self._last = time.monotonic()
        width = max(10, min(30, shutil.get_terminal_size().columns - 50))
        filled = width * done // max(1, self._total)
        bar = "#" * filled + "-" * (width - filled)
        self._stream.write(f"\r\x1b[2K{self._label} [{bar}] {done}/{self._total} {shorten(current, 40)}")
        self._stream.flush()
        self._drawn = True

    def note(self, line: str) -> None:
        """A line that stays (a document indexed or failed), above the bar."""
        if self._quiet:
            return
        if self._drawn:
            self._stream.write("\r\x1b[2K")
            self._drawn = False
        self._stream.write(f"{line}\n")
        self._stream.flush()

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
            self._drawn = False
