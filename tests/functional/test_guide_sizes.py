"""The sizes infra/README.md gives for the deployable artifacts (How the artifacts are built) are those of the last
``make build`` (``.aws-sam/build/artifacts.json``, or ``MCPBRIDGE_BUILD``), within 2 %: new pins that move them
fail here, with the row to write. Skips where nothing was built (CI builds before it tests)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.aws import REPO_ROOT

BUILD = Path(os.environ.get("MCPBRIDGE_BUILD") or REPO_ROOT / ".aws-sam" / "build")
GUIDE = REPO_ROOT / "infra" / "README.md"
TOLERANCE = 0.02
MIB = 2**20


def _report() -> dict[str, Any]:
    path = BUILD / "artifacts.json"
    if not path.is_file():
        pytest.skip(f"no {path}: run make build")
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if report["target"]["arch"] != "arm64" or report["smoke_python"]:
        pytest.skip(f"{path} is not the template's build")
    return report


def _row(label: str) -> str:
    found = re.search(rf"^\| {re.escape(label)} \|(.*)\|$", GUIDE.read_text(encoding="utf-8"), re.M)
    assert found, f"infra/README.md has no row {label!r}"
    return found[1]


def _mib(text: str) -> float:
    return float(text.replace(",", ""))


def _near(written: float, measured: float) -> bool:
    return abs(written - measured) <= TOLERANCE * measured


def expected_rows(report: dict[str, Any]) -> str:
    layer = report["layers"]["CoreLayer"]
    functions = report["functions"].values()
    code = [f["code_bytes"] for f in functions]
    total = max(f["unzipped_bytes"] for f in functions)
    limit = report["limits"]["unzipped_bytes"]
    return (
        f"`CoreLayer` (arm64, cp313): {layer['unzipped_bytes'] / MIB:.1f} MiB ({layer['unzipped_bytes']:,} bytes), "
        f"{layer['zipped_bytes'] / MIB:.1f} MiB zipped; code {min(code)} to {max(code)} bytes; code + layer "
        f"{total / MIB:.1f} MiB: {100 * total / limit:.0f}% of the limit, {(limit - total) / MIB:.1f} MiB to spare"
    )


def test_the_guides_layer_and_function_sizes_are_the_builds() -> None:
    report = _report()
    hint = f"infra/README.md's sizes are out of date; the build measured: {expected_rows(report)}"
    layer = report["layers"]["CoreLayer"]
    cells = _row("`CoreLayer` (arm64, cp313)")
    found = re.search(r"([\d.]+) MiB \(([\d,]+) bytes\).*\| ([\d.]+) MiB $", cells)
    assert found, cells
    assert _near(_mib(found[1]) * MIB, layer["unzipped_bytes"]), hint
    assert _near(_mib(found[2]), layer["unzipped_bytes"]), hint
    assert _near(_mib(found[3]) * MIB, layer["zipped_bytes"]), hint

    functions = report["functions"].values()
    code = [f["code_bytes"] for f in functions]
    found = re.search(r"(\d+) to (\d+) bytes", _row("each function's code"))
    assert found
    assert (int(found[1]), int(found[2])) == (min(code), max(code)), hint

    total = max(f["unzipped_bytes"] for f in functions)
    limit = report["limits"]["unzipped_bytes"]
    found = re.search(r"([\d.]+) MiB: (\d+)% of the limit, ([\d.]+) MiB to spare", _row("each function, code + layer"))
    assert found
    assert _near(_mib(found[1]) * MIB, total), hint
    assert abs(int(found[2]) - 100 * total / limit) <= 100 * TOLERANCE, hint
    assert _near(_mib(found[3]) * MIB, limit - total), hint
