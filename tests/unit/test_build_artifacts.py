"""``infra/build_artifacts.py``'s checks, on small layers made here: a layer holds only pinned distributions whose
wheels and binaries fit the target, and the platforms pip is offered are exactly those the target accepts.

The build itself (pip, make, the real dependencies) runs in ``make build`` / ``make smoke``.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from tests.support.aws import REPO_ROOT
from tests.support.build_script import build_script

script: Any = build_script()
ARM64 = script.Target("arm64", "3.13", "2.28")
PINS: dict[str, str] = script._pins()


def make_dist(site: Path, name: str, version: str, *tags: str) -> None:
    dist_info = site / f"{name}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    lines = ["Wheel-Version: 1.0", "Root-Is-Purelib: false", *(f"Tag: {tag}" for tag in tags)]
    (dist_info / "WHEEL").write_text("\n".join(lines) + "\n", encoding="utf-8")


def make_elf(path: Path, machine: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # e_ident (64-bit, little-endian), e_type ET_DYN, e_machine.
    path.write_bytes(b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + struct.pack("<HH", 3, machine) + bytes(40))


def fit_layer(site: Path) -> None:
    make_dist(site, "numpy", PINS["numpy"], "cp313-cp313-manylinux_2_27_aarch64", "cp313-cp313-manylinux_2_28_aarch64")
    make_dist(site, "idna", PINS["idna"], "py3-none-any")
    make_dist(site, "mcpbridge", "0.1.0", "py3-none-any")  # the project itself is not pinned
    make_elf(site / "numpy" / "_core" / "_multiarray_umath.cpython-313-aarch64-linux-gnu.so", 183)
    make_elf(site / "numpy.libs" / "libscipy_openblas64_-1234.so", 183)


def test_platforms_are_every_glibc_up_to_the_target() -> None:
    platforms = ARM64.platforms()
    assert platforms[0] == "manylinux_2_28_aarch64"
    assert "manylinux_2_17_aarch64" in platforms
    assert "manylinux2014_aarch64" in platforms
    assert not any(p.startswith(("manylinux_2_29", "manylinux_2_34", "manylinux1")) for p in platforms)
    assert all(p.endswith("_aarch64") for p in platforms)
    x86 = script.Target("x86_64", "3.13", "2.28").platforms()
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(x86)
    # pip is offered each of them (it takes a --platform literally), for CPython 3.13 wheels only.
    args = ARM64.pip_args()
    assert [args[i + 1] for i, arg in enumerate(args) if arg == "--platform"] == platforms
    assert args[-5:] == ["--implementation", "cp", "--python-version", "3.13", "--only-binary=:all:"]


@pytest.mark.parametrize(
    ("tag", "fits"),
    [
        ("py3-none-any", True),
        ("py2.py3-none-any", True),
        ("cp313-cp313-manylinux_2_28_aarch64", True),
        ("cp313-cp313-manylinux2014_aarch64", True),
        ("cp39-abi3-manylinux_2_17_aarch64", True),  # the stable ABI loads on later versions
        ("cp313-cp313-manylinux_2_34_aarch64", False),  # needs a newer glibc than the target promises
        ("cp313-cp313-manylinux_2_28_x86_64", False),
        ("cp312-cp312-manylinux_2_28_aarch64", False),
        ("cp314-abi3-manylinux_2_28_aarch64", False),
        ("cp313-cp313-musllinux_1_2_aarch64", False),
    ],
)
def test_wheel_tags(tag: str, fits: bool) -> None:
    assert script._tag_fits(tuple(tag.split("-")), ARM64) is fits


def test_a_layer_fit_for_the_target_passes(tmp_path: Path) -> None:
    fit_layer(tmp_path)
    script.check_layer(tmp_path, ARM64)


@pytest.mark.parametrize(
    ("spoil", "complaint"),
    [
        (lambda site: make_elf(site / "re2" / "_re2.cpython-313-aarch64-linux-gnu.so", 62), "ELF machine 62"),
        (lambda site: make_dist(site, "left-pad", "1.0", "py3-none-any"), "left-pad 1.0 is not pinned"),
        (
            lambda site: make_dist(site, "cffi", PINS["cffi"], "cp313-cp313-manylinux_2_28_x86_64"),
            "is built for cp313-cp313-manylinux_2_28_x86_64",
        ),
        (lambda site: (site / "sdist_only-1.0.dist-info").mkdir(), "was not installed from a wheel"),
        (
            lambda site: make_elf(site / "rpds" / "rpds.cpython-311-aarch64-linux-gnu.so", 183),
            "an extension for CPython 311",
        ),
    ],
)
def test_a_layer_unfit_for_the_target_fails_and_says_why(tmp_path: Path, spoil: Any, complaint: str) -> None:
    fit_layer(tmp_path)
    spoil(tmp_path)
    with pytest.raises(script.BuildError, match="not fit for cp313 arm64") as failure:
        script.check_layer(tmp_path, ARM64)
    assert complaint in str(failure.value)


def test_function_code_is_copied_as_sams_python_builder_copies_it(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "__pycache__").mkdir(parents=True)
    (source / "handler.py").write_text("handler = None\n", encoding="utf-8")
    (source / "__pycache__" / "handler.cpython-313.pyc").write_bytes(b"")
    (source / "stale.pyc").write_bytes(b"")
    script._copy_code(source, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == ["handler.py"]


def test_function_code_is_built_by_its_makefile_as_sam_builds_it(tmp_path: Path) -> None:
    """A function with BuildMethod makefile: infra/sam/Makefile's build-<LogicalId>, run in a copy of its code."""
    source = tmp_path / "src"
    (source / "__pycache__").mkdir(parents=True)
    (source / "handler.py").write_text("handler = None\n", encoding="utf-8")
    (source / "__pycache__" / "handler.cpython-313.pyc").write_bytes(b"")
    (source / "stale.pyc").write_bytes(b"")
    resource = {"Metadata": {"BuildMethod": "makefile", "ContextPath": "infra/sam"}}
    script._build_function_code(REPO_ROOT, "AdminApiFunction", resource, source, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == ["handler.py"]
    assert sorted(p.name for p in source.rglob("*")) == [
        "__pycache__",
        "handler.cpython-313.pyc",
        "handler.py",
        "stale.pyc",
    ]
    with pytest.raises(script.BuildError, match="make build-NoSuchResource failed"):
        script._build_function_code(REPO_ROOT, "NoSuchResource", resource, source, tmp_path / "none")


def test_sizes_count_the_bytes_lambda_counts(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 1000)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"y" * 24)
    assert script.tree_size(tmp_path) == 1024
    assert 0 < script.zipped_size(tmp_path) < 1024
