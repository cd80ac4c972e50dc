"""The MCP SDK's server side without its client side.

The ``mcp`` package's ``__init__`` imports the client (``mcp.client``), and ``mcp.server``'s imports the high-level
``MCPServer`` with its resources and their HTTP client: together over half the MCP endpoint function's cold start,
none of which a published endpoint uses. :func:`defer_package_inits` registers both packages without running their
``__init__``, so ``import mcp.server.lowlevel`` loads the low-level server alone. The first use of a name only the
``__init__`` defines (``from mcp import Client``, as the outbound side does) runs it then, in the same module
object, so every importer still gets the whole package; a submodule (``from mcp import types``) is imported as
such, without it. Packages already imported are left as they are.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType

DEFERRED = ("mcp", "mcp.server")
_lock = threading.RLock()


def defer_package_inits(names: tuple[str, ...] = DEFERRED) -> None:
    """Register each package (parents first) without running its ``__init__``, unless it is already imported."""
    with _lock:
        for name in names:
            if name in sys.modules:
                continue
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or spec.submodule_search_locations is None:
                return  # not an installed package: let the ordinary import report it
            module = importlib.util.module_from_spec(spec)
            module.__dict__["__getattr__"] = _on_first_use(module)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)


def _on_first_use(module: ModuleType) -> object:
    def __getattr__(attribute: str) -> object:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        name = f"{module.__name__}.{attribute}"
        with _lock:
            if importlib.util.find_spec(name) is not None:
                return importlib.import_module(name)
            run_init(module)
        return getattr(module, attribute)

    return __getattr__


def run_init(module: ModuleType) -> None:
    """Run a deferred package's ``__init__`` in its module (once); nothing for a package imported as usual."""
    with _lock:
        if module.__dict__.pop("__getattr__", None) is None:
            return
        loader = module.__spec__.loader if module.__spec__ is not None else None
        if loader is None:
            raise ImportError(f"{module.__name__} cannot be loaded", name=module.__name__)
        loader.exec_module(module)  # a deferred parent runs its own on its first use
