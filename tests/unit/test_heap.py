"""Freezing start-up's objects: once per process, and what is made afterwards is still collected."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import gc, weakref
from mcpbridge.heap import freeze_startup_objects

class Node:
    pass

before = Node()
before.self = before
assert freeze_startup_objects(collect=True) is True
frozen = gc.get_freeze_count()
assert frozen > 0
assert all(o is not before for o in gc.get_objects()), "an object alive at start-up is still collected"

# Only the first call freezes: objects of later requests stay collectable.
assert freeze_startup_objects(collect=False) is False
assert gc.get_freeze_count() == frozen
after = Node()
after.self = after
gone = weakref.ref(after)
del after
gc.collect()
assert gone() is None, "a cycle made after the freeze was not collected"
print("ok")
"""


def test_freezing_happens_once_and_later_cycles_are_still_collected() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
