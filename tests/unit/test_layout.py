"""The layout's contract, read from the source (every import, at any depth, TYPE_CHECKING ones included):

* ``domain/`` imports only itself and ``errors`` (and no web, AWS, HTTP or MCP library);
* no service imports the edges (``http/``, ``cli``, ``lambda_entry``) or ``bootstrap``;
* only ``bootstrap`` imports the adapters (adapters may use each other);
* no package cycles (a package is a first-level folder or root module of ``mcpbridge``);
* no module over 400 lines without a one-line reason at its top (``# Over 400 lines: ...``), no function over 65.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "shared" / "mcpbridge"
EDGES = frozenset({"http", "cli", "lambda_entry", "search_entry"})
COMPOSITION = "bootstrap"
ADAPTERS = "adapters"
NOT_SERVICES = EDGES | {COMPOSITION, ADAPTERS}
DOMAIN_MAY_IMPORT = frozenset({"domain", "errors"})
DOMAIN_FORBIDS = frozenset({"boto3", "botocore", "fastapi", "starlette", "httpx", "httpx2", "mcp", "mangum", "uvicorn"})
MODULE_LINES = 400
FUNCTION_LINES = 65
REASON = "# Over 400 lines:"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def sources() -> Iterator[tuple[Path, str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        yield path, text, ast.parse(text, filename=str(path))


def imports_of(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def graph() -> dict[str, set[str]]:
    """Module -> the mcpbridge modules it imports (``from x import name`` counts ``x.name`` when it is a module)."""
    trees = {module_name(path): tree for path, _, tree in sources()}
    known = set(trees)
    return {
        module: {name for name in imports_of(tree) if name in known and name != module}
        for module, tree in trees.items()
    }


def third_party_of(tree: ast.Module) -> set[str]:
    return {name.split(".")[0] for name in imports_of(tree) if not name.startswith("mcpbridge")}


def test_domain_imports_only_itself_and_errors() -> None:
    wrong = []
    for path, _, tree in sources():
        module = module_name(path)
        if package_of(module) != "domain":
            continue
        inside = {package_of(name) for name in imports_of(tree) if name.startswith("mcpbridge.")}
        wrong += [f"{module} imports mcpbridge.{p}" for p in sorted(inside - DOMAIN_MAY_IMPORT)]
        wrong += [f"{module} imports {lib}" for lib in sorted(third_party_of(tree) & DOMAIN_FORBIDS)]
    assert wrong == []


def test_no_service_imports_an_edge_or_the_composition_root() -> None:
    wrong = [
        f"{module} imports {name}"
        for module, imported in graph().items()
        if package_of(module) not in NOT_SERVICES
        for name in sorted(imported)
        if package_of(name) in EDGES | {COMPOSITION}
    ]
    assert wrong == []


def test_only_the_composition_root_imports_adapters() -> None:
    wrong = [
        f"{module} imports {name}"
        for module, imported in graph().items()
        if package_of(module) not in {ADAPTERS, COMPOSITION}
        for name in sorted(imported)
        if package_of(name) == ADAPTERS
    ]
    assert wrong == []


def test_no_package_cycles() -> None:
    packages: dict[str, set[str]] = defaultdict(set)
    for module, imported in graph().items():
        for name in imported:
            if package_of(name) != package_of(module):
                packages[package_of(module)].add(package_of(name))
    cycles = []
    for start in sorted(packages):
        # Depth-first from each package: reaching it again is a cycle (reported with its path).
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for following in sorted(packages.get(node, ())):
                if following == start:
                    cycles.append(" -> ".join([*path, start]))
                elif following not in seen:
                    seen.add(following)
                    stack.append((following, [*path, following]))
    assert cycles == []


def test_no_long_module_without_a_reason_and_no_long_function() -> None:
    long_modules, long_functions = [], []
    for path, text, tree in sources():
        relative = path.relative_to(PACKAGE)
        if text.count("\n") > MODULE_LINES and REASON not in "\n".join(text.split("\n")[:60]):
            long_modules.append(f"{relative} ({text.count(chr(10))} lines)")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > FUNCTION_LINES:
                    long_functions.append(f"{relative}:{node.lineno} {node.name} ({size} lines)")
    assert long_modules == [], f"add '{REASON} <why>' under the module docstring, or split the module"
    assert long_functions == []


@pytest.mark.parametrize("edge", sorted(EDGES))
def test_the_contract_names_packages_that_exist(edge: str) -> None:
    names = {package_of(module_name(path)) for path, _, _ in sources()}
    assert edge in names
    assert {"domain", "adapters", COMPOSITION} <= names
