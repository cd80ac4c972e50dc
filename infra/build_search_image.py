"""The search function's container image (``functions/search_index/Dockerfile``), built without Docker: what the
Dockerfile's ``pip install`` puts into ``LAMBDA_TASK_ROOT``, installed as wheels for the image's target (Python 3.13
on arm64, the Lambda base image), plus the handler; its size checked against Lambda's limit for images.

    python infra/build_search_image.py build --out .aws-sam/search-image
    python infra/build_search_image.py build --out .aws-sam/search-image-smoke --for-interpreter auto
    python infra/build_search_image.py smoke --from .aws-sam/search-image-smoke

``--for-interpreter auto`` builds for this machine's Python instead, so that ``smoke`` can import the handler from
the built tree alone (``python -I`` with only that tree on the path) and answer a write and a search on a local
Lance dataset. ``infra/oci_image.py`` makes the tree ``build`` writes into the image itself, on the Lambda base
image (``make search-image-push``); ``docker build`` with the Dockerfile makes the same. Only the standard library
is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from build_artifacts import (  # the sibling script
    CONSTRAINTS,
    DEFAULT_GLIBC,
    REPO_ROOT,
    BuildError,
    Target,
    _stage_source,
    check_layer,
    interpreter_target,
    log,
    tree_size,
)

# Lambda: "Container image code package size: 10 GB (maximum uncompressed image size, including all layers)".
IMAGE_LIMIT = 10 * 1024**3
# The public.ecr.aws/lambda/python:3.13-arm64 base image, uncompressed (its layers as docker reports them, rounded
# up): counted into the image's size with what this build installs on top.
BASE_IMAGE_BYTES = 600 * 1024**2
HANDLER = REPO_ROOT / "functions" / "search_index" / "handler.py"
IMAGE_TARGET = Target("arm64", "3.13", DEFAULT_GLIBC)


def build(out: Path, target: Target, *, python: str = sys.executable) -> dict[str, int]:
    """Install mcpbridge[lance] and its pinned dependencies for ``target`` into ``out/var/task`` with the handler."""
    task_root = out / "var" / "task"
    if out.exists():
        shutil.rmtree(out)
    task_root.mkdir(parents=True)
    log(f"search image for {target.describe()} -> {task_root}")
    with tempfile.TemporaryDirectory(prefix="mcpbridge-search-image-") as tmp:
        source = _stage_source(Path(tmp))
        command = [
            python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-compile",
            "--no-warn-conflicts", "--no-warn-script-location",
            "--target", str(task_root), *target.pip_args(), "-c", str(CONSTRAINTS), f"{source}[lance]",
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)  # noqa: S603
        if result.returncode != 0:
            sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
            raise BuildError("pip could not install the search image's packages (see its output above)")
    for cache in list(task_root.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(task_root / "bin", ignore_errors=True)
    check_layer(task_root, target)
    shutil.copy2(HANDLER, task_root / "handler.py")
    installed = tree_size(task_root)
    total = installed + BASE_IMAGE_BYTES
    report = {"installed_bytes": installed, "base_image_bytes": BASE_IMAGE_BYTES, "image_bytes": total}
    (out / "image-size.json").write_text(json.dumps(report, indent=2) + "\n")
    log(
        f"search image: {installed / 2**20:.1f} MiB installed + {BASE_IMAGE_BYTES / 2**20:.0f} MiB base image = "
        f"{total / 2**20:.1f} MiB of Lambda's {IMAGE_LIMIT / 2**30:.0f} GiB"
    )
    if total > IMAGE_LIMIT:
        raise BuildError(f"the search image would be {total} bytes, over Lambda's {IMAGE_LIMIT}")
    return report


_SMOKE = """
import json, sys, time
started = time.perf_counter()
sys.path.insert(0, {task_root!r})
import handler
init = time.perf_counter() - started
modules = sorted(m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("lance", "pyarrow"))
assert all(m.__file__ and m.__file__.startswith({task_root!r}) for n, m in sys.modules.items()
           if n in ("lance", "pyarrow", "mcpbridge") and getattr(m, "__file__", None)), "imported from outside"
chunk = {{"id": "doc_1#00000", "knowledge_base_id": "kb_1", "document_id": "doc_1", "document_title": "Doc",
          "seq": 0, "text": "Walruses rest on the ice.", "start_line": 1, "end_line": 1, "start_offset": 0,
          "end_offset": 25, "heading_path": [], "type": "text"}}
write = handler.handler({{"op": "replace_document", "args": {{"kb_id": "kb_1", "document_id": "doc_1",
                         "chunks": [chunk], "vectors": [[1.0, 0.0, 0.0, 0.0]], "embedder_name": "test:4"}}}}, None)
assert write == {{"result": None}}, write
started = time.perf_counter()
found = handler.handler({{"op": "keyword", "args": {{"kb_ids": ["kb_1"], "query": "walrus", "limit": 5}}}}, None)
first = time.perf_counter() - started
assert [h["chunk"]["id"] for h in found["result"]] == ["doc_1#00000"], found
near = handler.handler({{"op": "semantic", "args": {{"kb_ids": ["kb_1"], "vector": [1, 0, 0, 0], "limit": 1}}}}, None)
assert near["result"][0]["chunk"]["id"] == "doc_1#00000", near
bad = handler.handler({{"op": "drop_everything", "args": {{}}}}, None)
assert bad["error"]["kind"] == "invalid", bad
print(json.dumps({{"init_seconds": round(init, 3), "first_search_seconds": round(first, 3)}}))
"""


def smoke(built: Path) -> dict[str, float]:
    """Import the handler from the built tree alone, in a fresh isolated interpreter, and use it (local backend)."""
    # Absolute: the interpreter runs in a scratch directory, where a relative --from would name nothing.
    task_root = built.resolve() / "var" / "task"
    with tempfile.TemporaryDirectory(prefix="mcpbridge-search-smoke-") as data:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": data,
            "MCPBRIDGE_DATA_DIR": data,
            "MCPBRIDGE_SEARCH_ENGINE": "lance",
            "MCPBRIDGE_JOBS": "inline",
        }
        code = _SMOKE.format(task_root=str(task_root))
        result = subprocess.run(  # noqa: S603
            [sys.executable, "-I", "-c", code], capture_output=True, text=True, env=env, cwd=data, timeout=300
        )
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
        raise BuildError("the search image's handler did not import and answer from the built tree alone")
    timings: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    init, first = timings["init_seconds"], timings["first_search_seconds"]
    log(f"search image smoke: handler init {init} s, first search {first} s")
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    built = commands.add_parser("build")
    built.add_argument("--out", type=Path, required=True)
    built.add_argument("--for-interpreter", help="'auto': this Python's version and machine instead of the image's")
    smoked = commands.add_parser("smoke")
    smoked.add_argument("--from", dest="source", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            target = IMAGE_TARGET
            if args.for_interpreter == "auto":
                target = interpreter_target(sys.executable, DEFAULT_GLIBC)
            build(args.out, target, python=os.environ.get("PYTHON", sys.executable))
        else:
            smoke(args.source)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
