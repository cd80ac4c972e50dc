"""The search function's image written as an OCI layout without Docker (``infra/oci_image.py``): read by skopeo as
the image it should be (the base's layers, then ``var/task``; the Dockerfile's CMD on the base's settings), the same
digest for the same tree, and carried through a real registry (Debian's docker-registry on 127.0.0.1) unchanged.

skopeo and docker-registry come from ``make oci-tools`` (CI installs them); without them the tests skip."""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.aws import REPO_ROOT

pytestmark = pytest.mark.skipif(
    shutil.which("skopeo") is None or shutil.which("docker-registry") is None,
    reason="skopeo and docker-registry are not installed (make oci-tools)",
)


def _oci_script() -> ModuleType:
    name = "infra_oci_image"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "infra" / "oci_image.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


oci = _oci_script()


def skopeo_json(*args: str) -> dict[str, object]:
    result = subprocess.run(["skopeo", *args], capture_output=True, text=True, check=True)
    value: dict[str, object] = json.loads(result.stdout)
    return value


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in base image's layout (one layer, an ENTRYPOINT and ENV as Lambda's base has) and an image tree as
    ``build_search_image.py build`` leaves it (``var/task`` and its size report beside it)."""
    base_tree = tmp_path / "base-tree"
    (base_tree / "var" / "runtime").mkdir(parents=True)
    (base_tree / "var" / "runtime" / "bootstrap").write_text('#!/bin/sh\nexec python3 -m awslambdaric "$@"\n')
    (base_tree / "var" / "runtime" / "bootstrap").chmod(0o755)
    (base_tree / "var" / "task").mkdir()
    (base_tree / "var" / "task" / ".keep").write_text("")
    image = tmp_path / "image"
    (image / "var" / "task" / "mcpbridge").mkdir(parents=True)
    (image / "var" / "task" / "handler.py").write_text("def handler(event, context):\n    return {}\n")
    (image / "var" / "task" / "mcpbridge" / "__init__.py").write_text("")
    (image / "image-size.json").write_text("{}")
    return base_tree, image


def _base_layout(base_tree: Path, out: Path) -> str:
    oci.write_image(base_tree, out, "base", base="none")
    # Lambda's base image sets these; the written image must keep them.
    index = json.loads((out / "index.json").read_text())
    manifest_path = oci._blob_path(out, index["manifests"][0]["digest"])
    manifest = json.loads(manifest_path.read_bytes())
    config = json.loads(oci._blob_path(out, manifest["config"]["digest"]).read_bytes())
    config["config"] = {"Entrypoint": ["/lambda-entrypoint.sh"], "Env": ["LAMBDA_TASK_ROOT=/var/task"]}
    manifest["config"] = {"mediaType": oci.CONFIG, **oci._write_blob(out, oci._json_bytes(config))}
    descriptor = {"mediaType": oci.MANIFEST, **oci._write_blob(out, oci._json_bytes(manifest))}
    index["manifests"] = [descriptor | {"annotations": {oci.REF_NAME: "base"}}]
    (out / "index.json").write_text(json.dumps(index))
    return f"{out}:base"


def _layer_names(layout: Path, digest: str) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(oci._blob_path(layout, digest).read_bytes()))) as tar:
        return tar.getnames()


def test_the_written_image_is_the_base_then_var_task(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    base_tree, image = trees
    base = _base_layout(base_tree, tmp_path / "base")
    digest = oci.write_image(image, tmp_path / "oci", "search-index", base=base)

    inspected = skopeo_json("inspect", f"oci:{tmp_path / 'oci'}:search-index")
    assert inspected["Digest"] == digest
    assert (inspected["Architecture"], inspected["Os"]) == ("arm64", "linux")
    base_layers = skopeo_json("inspect", f"oci:{base}")["Layers"]
    assert isinstance(base_layers, list)
    assert len(base_layers) == 1
    layers = inspected["Layers"]
    assert isinstance(layers, list)
    assert layers[:-1] == base_layers
    assert len(layers) == 2
    config = skopeo_json("inspect", "--config", f"oci:{tmp_path / 'oci'}:search-index")["config"]
    assert config == {
        "Entrypoint": ["/lambda-entrypoint.sh"],
        "Env": ["LAMBDA_TASK_ROOT=/var/task"],
        "Cmd": ["handler.handler"],
    }
    # The new layer holds var/task and nothing else of the tree (not the build's size report).
    assert _layer_names(tmp_path / "oci", layers[-1]) == [
        "var", "var/task", "var/task/handler.py", "var/task/mcpbridge", "var/task/mcpbridge/__init__.py",
    ]  # fmt: skip

    # The same tree gives the same image; a changed file a new one.
    assert oci.write_image(image, tmp_path / "again", "search-index", base=base) == digest
    (image / "var" / "task" / "handler.py").write_text("def handler(event, context):\n    return None\n")
    assert oci.write_image(image, tmp_path / "changed", "search-index", base=base) != digest


def test_an_image_goes_through_a_registry_unchanged(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    _base_tree, image = trees
    digest = oci.write_image(image, tmp_path / "oci", "search-index", base="none")
    checked = oci.check_registry(f"{tmp_path / 'oci'}:search-index", tmp_path / "work")
    assert checked["digest"] == digest
    assert checked["registry"]["Digest"] == digest
    pulled = tmp_path / "work" / "pulled"
    (layer,) = checked["layers"]
    assert "var/task/handler.py" in _layer_names(pulled, layer)


def test_bad_input_is_refused_with_its_reason(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    _base_tree, image = trees
    with pytest.raises(oci.ImageError, match="var/task: no such directory"):
        oci.write_image(tmp_path / "nothing", tmp_path / "oci", "t", base="none")
    with pytest.raises(oci.ImageError, match="not an OCI image layout"):
        oci.write_image(image, tmp_path / "oci", "t", base=f"{tmp_path / 'nothing'}:base")
    oci.write_image(image, tmp_path / "amd", "base", base="none", arch="amd64")
    with pytest.raises(oci.ImageError, match=r"is linux/amd64, not linux/arm64"):
        oci.write_image(image, tmp_path / "oci", "t", base=f"{tmp_path / 'amd'}:base")
    with pytest.raises(oci.ImageError, match="expected <layout directory>:<tag>"):
        oci.split_reference("no-tag")
