#!/usr/bin/env python3
"""Build the deployable artifacts the way ``sam build`` does, for a chosen target, and check them.

    python3 infra/build_artifacts.py layer ARTIFACTS_DIR [--arch arm64] [--python 3.13] [--glibc 2.28]
    python3 infra/build_artifacts.py build [--out .aws-sam/build] [--arch ARCH | --for-interpreter PYTHON] ...
    python3 infra/build_artifacts.py find-python 3.13

``layer`` is what ``make build-CoreLayer`` runs (``sam build`` calls that target for ``CoreLayer``, whose
``BuildMethod`` is ``makefile``): the ``mcpbridge`` distribution and its runtime dependencies, pinned by
``requirements/constraints.txt``, installed as wheels for the target into ``ARTIFACTS_DIR/python``. Nothing is
compiled for the build host, so it works on any host OS and architecture. A dependency with no wheel for the target
fails the build, naming the package.

``build`` runs the steps ``sam build`` runs for the whole template and writes what it writes, where it writes it:

- every layer with ``BuildMethod: makefile``: ``make build-<LogicalId> ARTIFACTS_DIR=<out>/<LogicalId>`` with the
  Makefile of its ``ContentUri`` (``infra/sam/Makefile``), run there as ``sam build --build-in-source`` would;
- every Python function without a ``requirements.txt`` (all of ours: their dependencies are in the layer): with
  ``BuildMethod: makefile`` (ours), the Makefile of its ``ContextPath`` run in a copy of its ``CodeUri``, as sam runs
  it; otherwise its ``CodeUri`` copied to ``<out>/<LogicalId>`` without the files sam's Python builder leaves out;
- ``<out>/template.yaml``: the template with ``CodeUri``/``ContentUri`` pointing at those folders and
  ``DefinitionUri`` relative to ``<out>``, so ``sam deploy`` (or ``sam package``) takes it as sam build's output.

It then checks each function's unzipped size, code plus layers, against Lambda's limit and writes
``<out>/artifacts.json`` (target, sizes, the interpreter a smoke test should use).

The target defaults to the template's (``Architectures``, ``Runtime``; glibc 2.28: the Python 3.12+ runtimes run
on Amazon Linux 2023, glibc 2.34, and every dependency has manylinux_2_28 wheels). ``--for-interpreter`` builds for
another Python instead (its version and machine), e.g. the CI machine's, to import and invoke the built handlers.

Only the standard library is needed, except for ``build``, which parses the template with PyYAML.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = REPO_ROOT / "requirements" / "constraints.txt"
DISTRIBUTION = "mcpbridge"

# Lambda: "Deployment package (.zip file archive) ... 250 MB, unzipped, including layers"; the service reports it as
# "Unzipped size must be smaller than 262144000 bytes".
UNZIPPED_LIMIT = 262_144_000
# Direct uploads are capped at 50 MB zipped; sam deploy uploads through S3, so this is informative only.
ZIPPED_DIRECT_UPLOAD_LIMIT = 50 * 1024 * 1024

# The template's target (tests/unit/test_template.py holds the template to it).
# Installed as dependencies (of mcp and of mcpbridge's `serve`) but never imported by a Lambda function: `serve` and
# the CLI run uvicorn (on uvloop and httptools); sse_starlette and httpx/httpx2 import uvicorn and click only when they
# are there (a shutdown hook and a command line), which cost the MCP endpoint ~40 ms of cold start for nothing. The
# built handlers are imported and invoked without them (tests/functional/test_built_artifacts.py).
NOT_IN_LAMBDA = ("uvicorn", "click", "uvloop", "httptools")

DEFAULT_ARCH = "arm64"
DEFAULT_PYTHON = "3.13"
DEFAULT_GLIBC = "2.28"

MACHINES = {"arm64": "aarch64", "x86_64": "x86_64"}
ELF_MACHINES = {"aarch64": 183, "x86_64": 62}

# What sam's Python builder (aws-lambda-builders, python_pip workflow) leaves out when it copies a function's code.
SAM_PYTHON_EXCLUDES = (
    ".aws-sam", ".chalice", ".git", ".gitignore", "*.pyc", "__pycache__", "*.so", ".Python", "*.egg-info", "*.egg",
    "pip-log.txt", "pip-delete-this-directory.txt", "htmlcov", ".tox", ".nox", ".coverage", ".cache",
    ".pytest_cache", ".python-version", ".mypy_cache", ".dmypy.json", ".pyre", ".env", ".venv", "venv", "venv.bak",
    "env.bak", "ENV", "env", ".vscode", ".idea",
)  # fmt: skip


class BuildError(Exception):
    """A build that must not produce artifacts; the message says why."""


def log(message: str) -> None:
    print(f"build: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ target


@dataclass(frozen=True)
class Target:
    arch: str  # Lambda's name: arm64 or x86_64
    python: str  # "3.13"
    glibc: str  # the newest glibc the runtime has that wheels may require: "2.28"

    def __post_init__(self) -> None:
        if self.arch not in MACHINES:
            raise BuildError(f"unknown architecture {self.arch!r} (Lambda has {', '.join(MACHINES)})")
        if not re.fullmatch(r"3\.\d+", self.python):
            raise BuildError(f"--python must look like 3.13, not {self.python!r}")
        if not re.fullmatch(r"2\.\d+", self.glibc):
            raise BuildError(f"--glibc must look like 2.28, not {self.glibc!r}")

    @property
    def machine(self) -> str:
        return MACHINES[self.arch]

    @property
    def cp(self) -> str:
        return "cp" + self.python.replace(".", "")

    def platforms(self) -> list[str]:
        """Every manylinux platform tag the target accepts, newest first.

        pip takes ``--platform manylinux_2_28_aarch64`` literally (no older glibc), so each one is passed.
        """
        newest = int(self.glibc.split(".")[1])
        oldest = 17 if self.machine == "aarch64" else 5  # manylinux2014 is the first aarch64 policy
        tags = [f"manylinux_2_{minor}_{self.machine}" for minor in range(newest, oldest - 1, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        tags += [f"{name}_{self.machine}" for minor, name in legacy.items() if oldest <= minor <= newest]
        return tags

    def pip_args(self) -> list[str]:
        args = [arg for tag in self.platforms() for arg in ("--platform", tag)]
        return [*args, "--implementation", "cp", "--python-version", self.python, "--only-binary=:all:"]

    def describe(self) -> str:
        return f"{self.cp} {self.arch} (manylinux, glibc <= {self.glibc})"


def interpreter_target(python: str, glibc: str) -> Target:
    """The target that ``python`` (an interpreter on this machine) can import."""
    probe = "import platform, sys; print(platform.machine(), '%d.%d' % sys.version_info[:2])"
    answer = subprocess.run([python, "-I", "-c", probe], check=True, capture_output=True, text=True)  # noqa: S603
    machine, version = answer.stdout.split()
    arch = {"aarch64": "arm64", "arm64": "arm64", "x86_64": "x86_64", "amd64": "x86_64"}.get(machine.lower())
    if arch is None:
        raise BuildError(f"{python} runs on {machine}, which Lambda does not")
    return Target(arch, version, glibc)


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` on this machine: ``pythonX.Y`` on PATH, else a pyenv installation."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted((str(p) for p in pyenv_root.glob(f"versions/{version}*/bin/python{version}")), reverse=True)
    for candidate in candidates:
        if not candidate:
            continue
        try:
            found = subprocess.run(  # noqa: S603
                [candidate, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if found.returncode == 0 and found.stdout.strip() == version:
            return candidate
    return None


# ------------------------------------------------------------------------------------------------ the layer


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path = CONSTRAINTS) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_normalize(name)] = version.split(";", 1)[0].strip()
    return pins


def _stage_source(staging: Path) -> Path:
    """A clean copy of the distribution's source: no build/, egg-info or byte code left by earlier builds."""
    source = staging / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".mypy_cache", ".pytest_cache")
    shutil.copytree(REPO_ROOT / "shared", source / "shared", ignore=ignore)
    return source


def build_layer(artifacts_dir: Path, target: Target, *, python: str = sys.executable) -> int:
    """Install the distribution and its pinned runtime dependencies into ``artifacts_dir/python``; its size."""
    if not CONSTRAINTS.is_file():
        raise BuildError(f"{CONSTRAINTS} is missing")
    site = artifacts_dir / "python"
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    log(f"layer for {target.describe()} -> {site}")
    with tempfile.TemporaryDirectory(prefix="mcpbridge-layer-") as tmp:
        source = _stage_source(Path(tmp))
        command = [
            python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-compile",
            # With --target, pip would compare against the build host's environment, which is irrelevant.
            "--no-warn-conflicts", "--no-warn-script-location",
            "--target", str(site), *target.pip_args(), "-c", str(CONSTRAINTS), str(source),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)  # noqa: S603
        if result.returncode != 0:
            sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
            missing = _missing_wheels(target, source, python)
            if missing:
                raise BuildError(
                    f"no wheel for {target.describe()} of: {', '.join(missing)}. Pin a release that publishes one "
                    f"(accepted platforms: {', '.join(target.platforms())}), or drop the dependency."
                )
            raise BuildError("pip could not install the layer (see its output above)")
    # Byte code is written by the Lambda runtime itself; console scripts point at the build host's interpreter.
    for cache in list(site.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(site / "bin", ignore_errors=True)
    _remove_distributions(site, NOT_IN_LAMBDA)
    check_layer(site, target)
    size = tree_size(site)
    log(f"layer: {_mib(size)} unzipped ({size} bytes) in {site}")
    return size


def _remove_distributions(site: Path, names: tuple[str, ...]) -> None:
    """Remove installed distributions: the files their RECORD lists, the folders that leaves empty, their metadata."""
    wanted = {_normalize(name) for name in names}
    for dist_info in sorted(site.glob("*.dist-info")):
        if _normalize(dist_info.name.removesuffix(".dist-info").rpartition("-")[0]) not in wanted:
            continue
        folders: set[Path] = set()
        for line in (dist_info / "RECORD").read_text().splitlines():
            path = (site / line.split(",", 1)[0]).resolve()
            if site.resolve() in path.parents and path.is_file():
                path.unlink()
                folders.update(p for p in path.parents if site.resolve() in p.parents)
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        shutil.rmtree(dist_info, ignore_errors=True)
        log(f"layer: {dist_info.name.removesuffix('.dist-info')} removed (never imported in Lambda)")


def _missing_wheels(target: Target, source: Path, python: str) -> list[str]:
    """After a failed install: which of the resolved dependencies has no wheel for the target."""
    with tempfile.TemporaryDirectory(prefix="mcpbridge-probe-") as tmp:
        report = Path(tmp) / "report.json"
        command = [
            python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--quiet", "--dry-run",
            "--ignore-installed", "--report", str(report), "-c", str(CONSTRAINTS), str(source),
        ]  # fmt: skip
        resolved = subprocess.run(command, capture_output=True, text=True)  # noqa: S603
        if resolved.returncode != 0 or not report.is_file():
            log("could not resolve the dependencies for this host either; no per-package diagnosis")
            return []
        packages = []
        for item in json.loads(report.read_text(encoding="utf-8")).get("install", []):
            name, version = item["metadata"]["name"], item["metadata"]["version"]
            url = str(item.get("download_info", {}).get("url", ""))
            if _normalize(name) == DISTRIBUTION or url.endswith("-none-any.whl"):
                continue  # pure Python wheels install anywhere
            packages.append(f"{name}=={version}")
        log(f"checking which of {len(packages)} platform-specific dependencies lack a wheel: {', '.join(packages)}")

        def has_wheel(requirement: str) -> bool:
            command = [
                python, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "--quiet", "--no-deps",
                "--dest", str(Path(tmp) / "wheels"), *target.pip_args(), requirement,
            ]  # fmt: skip
            return subprocess.run(command, capture_output=True, text=True).returncode == 0  # noqa: S603

        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            found = dict(zip(packages, pool.map(has_wheel, packages), strict=True))
    return [requirement for requirement, ok in found.items() if not ok]


def _wheel_tags(dist_info: Path) -> list[tuple[str, str, str]]:
    wheel = dist_info / "WHEEL"
    if not wheel.is_file():
        return []
    tags = []
    for line in wheel.read_text(encoding="utf-8").splitlines():
        if line.startswith("Tag:"):
            interpreter, abi, plat = line.split(":", 1)[1].strip().split("-")
            tags.append((interpreter, abi, plat))
    return tags


def _tag_fits(tag: tuple[str, str, str], target: Target) -> bool:
    interpreter, abi, plat = tag
    if plat != "any" and plat not in target.platforms():
        return False
    minor = int(target.python.split(".")[1])
    interpreters = interpreter.split(".")
    if abi == "abi3":  # stable ABI: built for cp3N, loads on every later 3.x
        return any(i.startswith("cp3") and int(i[3:] or 0) <= minor for i in interpreters)
    if abi == "none":
        return any(i in ("py3", f"py3{minor}", target.cp) for i in interpreters)
    return abi == target.cp and target.cp in interpreters


def _elf_machine(path: Path) -> int | None:
    with path.open("rb") as file:
        header = file.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    endian = "<" if header[5] == 1 else ">"
    machine: int = struct.unpack(endian + "H", header[18:20])[0]
    return machine


def check_layer(site: Path, target: Target) -> None:
    """Every installed distribution is pinned and built for the target; every binary is for its machine."""
    pins = _pins()
    problems = []
    for dist_info in sorted(site.glob("*.dist-info")):
        name, _, version = dist_info.name.removesuffix(".dist-info").rpartition("-")
        if _normalize(name) != DISTRIBUTION and pins.get(_normalize(name)) != version:
            problems.append(f"{name} {version} is not pinned in requirements/constraints.txt")
        tags = _wheel_tags(dist_info)
        if not tags:
            problems.append(f"{name} {version} was not installed from a wheel")
        elif not any(_tag_fits(tag, target) for tag in tags):
            problems.append(f"{name} {version} is built for {', '.join('-'.join(t) for t in tags)}")
    wanted = ELF_MACHINES[target.machine]
    for path in site.rglob("*"):
        if path.is_file() and ".so" in path.name:
            machine = _elf_machine(path)
            if machine is not None and machine != wanted:
                problems.append(f"{path.relative_to(site)} is a binary for ELF machine {machine}, not {wanted}")
        tag = re.search(r"\.cpython-(\d+)-", path.name)
        if tag and tag.group(1) != target.cp.removeprefix("cp"):
            problems.append(f"{path.relative_to(site)} is an extension for CPython {tag.group(1)}, not {target.cp}")
    if problems:
        raise BuildError("the layer is not fit for " + target.describe() + ":\n  " + "\n  ".join(problems))


# ------------------------------------------------------------------------------------------------ sizes


def tree_size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def zipped_size(root: Path) -> int:
    """The size of the .zip sam would upload (deflate, as sam's own packaging uses)."""
    with tempfile.TemporaryFile() as sink:
        with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(root.rglob("*")):
                if path.is_file():
                    archive.write(path, path.relative_to(root).as_posix())
        return sink.tell()


# ------------------------------------------------------------------------------------------------ the template


def _yaml_loader() -> Any:
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - the project's venv has it
        raise BuildError("`build` reads template.yaml with PyYAML: run it with the project's venv") from exc

    class Loader(yaml.SafeLoader):
        pass

    def construct(loader: Any, suffix: str, node: Any) -> dict[str, Any]:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        if suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
        key = suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}"
        return {key: value}

    Loader.add_multi_constructor("!", construct)
    return Loader


def load_template(path: Path) -> dict[str, Any]:
    import yaml

    template: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), Loader=_yaml_loader())  # noqa: S506
    return template


def _function_property(template: dict[str, Any], name: str, prop: str) -> Any:
    own = template["Resources"][name].get("Properties", {})
    if prop in own:
        return own[prop]
    return template.get("Globals", {}).get("Function", {}).get(prop)


def template_target(template: dict[str, Any]) -> Target:
    """The one target every function and layer of the template runs on."""
    resources = template["Resources"]
    archs: set[str] = set()
    runtimes: set[str] = set()
    for name, resource in resources.items():
        if resource["Type"] == "AWS::Serverless::Function":
            archs.update(_function_property(template, name, "Architectures") or ["x86_64"])
            runtimes.add(_function_property(template, name, "Runtime"))
        elif resource["Type"] == "AWS::Serverless::LayerVersion":
            archs.add(resource.get("Metadata", {}).get("BuildArchitecture", "x86_64"))
    if len(archs) != 1 or len(runtimes) != 1:
        raise BuildError(f"the template mixes architectures {sorted(archs)} or runtimes {sorted(runtimes)}")
    (runtime,) = runtimes
    if not str(runtime).startswith("python3."):
        raise BuildError(f"unsupported runtime {runtime}")
    return Target(archs.pop(), str(runtime).removeprefix("python"), DEFAULT_GLIBC)


def _copy_code(source: Path, destination: Path) -> None:
    def ignore(_directory: str, names: list[str]) -> set[str]:
        return {n for n in names if any(fnmatch.fnmatch(n, pattern) for pattern in SAM_PYTHON_EXCLUDES)}

    shutil.copytree(source, destination, ignore=ignore)


def _layers_of(template: dict[str, Any], function: str) -> list[str]:
    layers = []
    for layer in _function_property(template, function, "Layers") or []:
        if not (isinstance(layer, dict) and set(layer) == {"Ref"}):
            raise BuildError(f"{function}: only layers of this template (!Ref) can be measured, not {layer!r}")
        layers.append(layer["Ref"])
    return layers


@dataclass
class FunctionReport:
    code_bytes: int
    layer_bytes: int
    unzipped_bytes: int
    limit_bytes: int
    headroom_bytes: int
    code_zipped_bytes: int | None
    layers: list[str]
    code_dir: str
    handler: str


def _make(name: str, makefile: Path, cwd: Path, artifacts: Path, env: dict[str, str] | None = None) -> None:
    """``make -f makefile build-<name> ARTIFACTS_DIR=artifacts`` in ``cwd``, as sam's makefile builder runs it."""
    log(f"{name}: make -f {makefile} build-{name} ARTIFACTS_DIR={artifacts}")
    command = ["make", "--no-print-directory", "-f", str(makefile), f"build-{name}", f"ARTIFACTS_DIR={artifacts}"]
    made = subprocess.run(command, cwd=cwd, env=env)  # noqa: S603 - make from PATH, as sam runs it
    if made.returncode != 0:
        raise BuildError(f"{name}: make build-{name} failed")


def _build_function_code(base: Path, name: str, resource: dict[str, Any], source: Path, out: Path) -> None:
    """The function's code into ``out``: by its Makefile (``BuildMethod: makefile``, the one in ``ContextPath``,
    run in a copy of ``CodeUri`` as sam runs it), else as sam's Python builder copies it."""
    metadata = resource.get("Metadata", {})
    if metadata.get("BuildMethod") != "makefile":
        _copy_code(source, out)
        return
    makefile = (base / metadata.get("ContextPath", source) / "Makefile").resolve()
    out.mkdir()
    with tempfile.TemporaryDirectory(prefix="mcpbridge-build-") as scratch:
        shutil.copytree(source, scratch, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".aws-sam", ".git"))
        _make(name, makefile, Path(scratch), out.resolve())


def build_template(
    template_path: Path, out: Path, target: Target | None, *, zip_sizes: bool, smoke_python: str | None
) -> dict[str, Any]:
    template = load_template(template_path)
    base = template_path.parent
    target = target or template_target(template)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    resources: dict[str, Any] = template["Resources"]
    layer_sizes: dict[str, dict[str, int | None]] = {}
    for name, resource in resources.items():
        if resource["Type"] != "AWS::Serverless::LayerVersion":
            continue
        properties = resource["Properties"]
        method = resource.get("Metadata", {}).get("BuildMethod")
        if method != "makefile":
            raise BuildError(f"{name}: BuildMethod {method!r} is not built by this script (only makefile)")
        source = (base / properties["ContentUri"]).resolve()
        artifacts = (out / name).resolve()
        artifacts.mkdir()
        env = os.environ | {"LAYER_ARCH": target.arch, "LAYER_PYTHON": target.python, "LAYER_GLIBC": target.glibc}
        _make(name, source / "Makefile", source, artifacts, env)
        layer_sizes[name] = {
            "unzipped_bytes": tree_size(artifacts),
            "zipped_bytes": zipped_size(artifacts) if zip_sizes else None,
        }
        properties["ContentUri"] = name
        resource.setdefault("Metadata", {})["SamResourceId"] = name

    functions: dict[str, FunctionReport] = {}
    for name, resource in resources.items():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::StateMachine" and "DefinitionUri" in properties:
            definition = (base / properties["DefinitionUri"]).resolve()
            properties["DefinitionUri"] = os.path.relpath(definition, out.resolve())
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        source = (base / properties["CodeUri"]).resolve()
        if (source / "requirements.txt").exists():
            raise BuildError(f"{name}: {source}/requirements.txt: functions take their dependencies from the layer")
        handler = str(_function_property(template, name, "Handler"))
        module = handler.rpartition(".")[0]
        if not (source / f"{module.replace('.', '/')}.py").is_file():
            raise BuildError(f"{name}: handler {handler} has no module in {source}")
        _build_function_code(base, name, resource, source, out / name)
        properties["CodeUri"] = name
        resource.setdefault("Metadata", {})["SamResourceId"] = name
        layers = _layers_of(template, name)
        code = tree_size(out / name)
        layer_bytes = sum(int(layer_sizes[layer]["unzipped_bytes"] or 0) for layer in layers)
        functions[name] = FunctionReport(
            code_bytes=code,
            layer_bytes=layer_bytes,
            unzipped_bytes=code + layer_bytes,
            limit_bytes=UNZIPPED_LIMIT,
            headroom_bytes=UNZIPPED_LIMIT - code - layer_bytes,
            code_zipped_bytes=zipped_size(out / name) if zip_sizes else None,
            layers=layers,
            code_dir=name,
            handler=handler,
        )

    # JSON is YAML: sam deploy reads <out>/template.yaml either way.
    (out / "template.yaml").write_text(json.dumps(template, indent=1) + "\n", encoding="utf-8")
    report = {
        "target": asdict(target) | {"platforms": target.platforms()},
        "smoke_python": smoke_python,
        "limits": {"unzipped_bytes": UNZIPPED_LIMIT, "zipped_direct_upload_bytes": ZIPPED_DIRECT_UPLOAD_LIMIT},
        "layers": layer_sizes,
        "functions": {name: asdict(r) for name, r in functions.items()},
    }
    (out / "artifacts.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print_report(report, out)
    too_big = [name for name, r in functions.items() if r.unzipped_bytes > UNZIPPED_LIMIT]
    if too_big:
        raise BuildError(f"over Lambda's unzipped limit of {UNZIPPED_LIMIT} bytes (code + layers): {too_big}")
    return report


def _mib(value: int) -> str:
    return f"{value / 1024 / 1024:.1f} MiB"


def print_report(report: dict[str, Any], out: Path) -> None:
    target = report["target"]
    limit = report["limits"]["unzipped_bytes"]
    lines = [
        f"artifacts in {out} for cp{target['python'].replace('.', '')} {target['arch']}"
        f" (Lambda's limit: {_mib(limit)} unzipped, code + layers):"
    ]
    for name, layer in report["layers"].items():
        zipped = "" if layer["zipped_bytes"] is None else f", {_mib(layer['zipped_bytes'])} zipped"
        lines.append(
            f"  layer {name}: {_mib(layer['unzipped_bytes'])} unzipped ({layer['unzipped_bytes']} bytes){zipped}"
        )
    for name, r in report["functions"].items():
        lines.append(
            f"  {name:<22} code {r['code_bytes']:>7} bytes + layers {_mib(r['layer_bytes'])}"
            f" = {_mib(r['unzipped_bytes'])}"
            f" ({100 * r['unzipped_bytes'] / limit:.0f}% of the limit, {_mib(r['headroom_bytes'])} to spare)"
        )
    print("\n".join(lines), flush=True)


# ------------------------------------------------------------------------------------------------ command line


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    layer = commands.add_parser("layer", help="build the CoreLayer into ARTIFACTS_DIR/python (make build-CoreLayer)")
    layer.add_argument("artifacts_dir", type=Path)
    layer.add_argument("--arch", default=os.environ.get("LAYER_ARCH") or DEFAULT_ARCH, choices=sorted(MACHINES))
    layer.add_argument("--python", default=os.environ.get("LAYER_PYTHON") or DEFAULT_PYTHON)
    layer.add_argument("--glibc", default=os.environ.get("LAYER_GLIBC") or DEFAULT_GLIBC)

    build = commands.add_parser("build", help="build every function and layer of the template, as sam build does")
    build.add_argument("--template", type=Path, default=REPO_ROOT / "template.yaml")
    build.add_argument("--out", type=Path, default=REPO_ROOT / ".aws-sam" / "build")
    build.add_argument("--arch", choices=sorted(MACHINES), help="default: the template's")
    build.add_argument("--python", help="default: the template's runtime")
    build.add_argument("--glibc", default=DEFAULT_GLIBC)
    build.add_argument(
        "--for-interpreter",
        metavar="PYTHON",
        help="build for this interpreter's version and machine (to import the handlers with it); "
        "'auto': the template runtime's Python on this machine if there is one, else this one",
    )
    build.add_argument("--no-zip-sizes", action="store_true", help="skip measuring the zipped sizes")

    find = commands.add_parser("find-python", help="print an interpreter of VERSION on this machine")
    find.add_argument("version")

    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        if args.command == "layer":
            build_layer(args.artifacts_dir.resolve(), Target(args.arch, args.python, args.glibc))
        elif args.command == "find-python":
            found = find_python(args.version)
            if found is None:
                log(f"no Python {args.version} on this machine")
                return 1
            print(found)
        else:
            target, smoke_python = None, None
            if args.for_interpreter:
                smoke_python = args.for_interpreter
                if smoke_python == "auto":
                    runtime = template_target(load_template(args.template)).python
                    smoke_python = find_python(runtime) or sys.executable
                    if Path(smoke_python) == Path(sys.executable):
                        log(f"no Python {runtime} here: building for {sys.executable} instead")
                target = interpreter_target(smoke_python, args.glibc)
            elif args.arch or args.python:
                default = template_target(load_template(args.template))
                target = Target(args.arch or default.arch, args.python or default.python, args.glibc)
            build_template(
                args.template.resolve(), args.out, target, zip_sizes=not args.no_zip_sizes, smoke_python=smoke_python
            )
    except BuildError as exc:
        log(f"FAILED: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
