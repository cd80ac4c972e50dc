"""``infra/build_artifacts.py`` as a module (it is a script, not part of a package), for the tests that check it."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.aws import REPO_ROOT

_NAME = "infra_build_artifacts"


def build_script() -> ModuleType:
    """The build that sam's ``make build-CoreLayer`` and ``make build`` run, imported once."""
    if _NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(_NAME, REPO_ROOT / "infra" / "build_artifacts.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[_NAME]
