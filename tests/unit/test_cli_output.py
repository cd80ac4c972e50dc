"""How the command line prints: tables, and the progress bar ``kb add`` draws on a terminal (plain lines elsewhere)."""

from __future__ import annotations

import io

import pytest

from mcpbridge.cli.output import Progress, field, table


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_redrawn_in_place_on_a_terminal() -> None:
    stream = Terminal()
    progress = Progress(4, "Indexing", stream=stream)
    progress.update(0, "a.md")
    progress.note("indexed    a.md (3 chunks)")
    progress.update(4, "")
    progress.close()
    text = stream.getvalue()
    assert "\r\x1b[2KIndexing [" in text
    assert "] 0/4 a.md" in text
    assert "indexed    a.md (3 chunks)\n" in text
    assert "] 4/4" in text
    assert text.endswith("\r\x1b[2K"), "the bar is cleared at the end"


@pytest.mark.parametrize("quiet", [False, True])
def test_plain_lines_elsewhere_and_nothing_when_quiet(quiet: bool) -> None:
    stream = io.StringIO()
    progress = Progress(2, "Indexing", stream=stream, quiet=quiet)
    progress.update(1, "a.md")
    progress.note("indexed    a.md (3 chunks)")
    progress.close()
    assert stream.getvalue() == ("" if quiet else "indexed    a.md (3 chunks)\n")


def test_a_table_pads_its_columns(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"id": "ws_1", "name": "Acme corp", "on": True}, {"id": "ws_22", "name": None, "on": False}]
    table(rows, [("ID", field("id")), ("NAME", field("name")), ("ON", field("on"))], empty="none")
    assert capsys.readouterr().out.splitlines() == [
        "ID     NAME       ON",
        "ws_1   Acme corp  yes",
        "ws_22  -          no",
    ]
    table([], [("ID", field("id"))], empty="No workspaces.")
    assert capsys.readouterr().out == "No workspaces.\n"
