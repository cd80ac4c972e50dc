"""Load one built Lambda function the way the Python runtime does, from its artifacts only, and invoke it.

Run by ``tests/functional/test_built_artifacts.py`` as a script, in a fresh interpreter started with ``-I -S``
(no site-packages, no PYTHONPATH, not even this file's folder on ``sys.path``)::

    python -I -S lambda_runtime.py REQUEST.json RESULT.json

``REQUEST.json`` names the function's code folder, its layers' folders, the handler (``module.attribute``) and
the events. ``sys.path`` becomes what Lambda gives a function (the code folder, then each layer's ``python/``,
then the standard library); the handler module is imported by name (the init phase), then every event is invoked,
twice (a warm sandbox answers more than once). It imports nothing from the repository: this file uses the standard
library only.

``RESULT.json`` gets, per event, the handler's return value or the error Lambda would report (``errorType`` is the
exception's class name); the init and invocation times; every loaded module that came from outside the artifacts
and the standard library; and every compiled extension module of the layers that fails to import.
"""

from __future__ import annotations

import importlib
import json
import sys
import sysconfig
import time
import uuid
from pathlib import Path
from typing import Any


class LambdaContext:
    """The attributes of the runtime's ``context`` that handlers (and Powertools) read."""

    def __init__(self, function_name: str) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.function_name = function_name
        self.function_version = "1"
        self.invoked_function_arn = f"arn:aws:lambda:eu-west-1:123456789012:function:{function_name}:live"
        self.memory_limit_in_mb = 1024
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2026/01/01/[1]0123456789abcdef"
        self._deadline = time.monotonic() + 29

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def extension_modules(site: Path) -> list[str]:
    """Dotted names of the compiled extension modules under a layer's ``python/`` folder."""
    names = []
    for path in sorted(site.rglob("*.so")):
        relative = path.relative_to(site)
        if any(part.endswith((".libs", ".dist-info")) or "-" in part for part in relative.parts[:-1]):
            continue  # vendored shared libraries (numpy.libs/...), not modules
        stem = path.name.split(".", 1)[0]
        names.append(".".join([*relative.parts[:-1], stem]))
    return names


def main(request_path: str, result_path: str) -> None:
    request: dict[str, Any] = json.loads(Path(request_path).read_text(encoding="utf-8"))
    code = Path(request["code_dir"]).resolve()
    layers = [Path(layer).resolve() / "python" for layer in request["layer_dirs"]]
    stdlib = [Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib")]
    sys.path[:] = [str(code), *(str(layer) for layer in layers), *(p for p in sys.path if p and Path(p).exists())]

    module_name, _, attribute = request["handler"].rpartition(".")
    started = time.perf_counter()
    module = importlib.import_module(module_name)
    handler = getattr(module, attribute)
    init_seconds = time.perf_counter() - started

    invocations = []
    for event in request["events"]:
        for attempt in range(2):
            started = time.perf_counter()
            try:
                outcome: dict[str, Any] = {"response": handler(event, LambdaContext(request["function_name"]))}
            except Exception as exc:
                # What Lambda reports for an unhandled error (and Step Functions matches on): the class name.
                outcome = {"errorType": type(exc).__name__, "errorMessage": str(exc)[:500]}
            outcome |= {"attempt": attempt, "seconds": time.perf_counter() - started}
            invocations.append(outcome)

    allowed = [code, *layers, *stdlib]
    this_file = Path(__file__).resolve()
    foreign = sorted(
        f"{name}: {file}"
        for name, loaded in list(sys.modules.items())
        if (file := getattr(loaded, "__file__", None))
        and Path(file).resolve() != this_file  # __main__ (and multiprocessing's alias of it)
        and not any(Path(file).resolve().is_relative_to(root) for root in allowed)
    )
    broken = []
    for layer in layers:
        for name in extension_modules(layer):
            try:
                importlib.import_module(name)
            except Exception as exc:
                broken.append(f"{name}: {type(exc).__name__}: {exc}")

    mcpbridge = sys.modules.get("mcpbridge")
    result = {
        "python": sys.version,
        "sys_path": sys.path,
        "init_seconds": init_seconds,
        "invocations": invocations,
        "foreign_modules": foreign,
        "broken_extensions": broken,
        "extension_count": sum(len(extension_modules(layer)) for layer in layers),
        "mcpbridge_file": getattr(mcpbridge, "__file__", None),
    }
    Path(result_path).write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
