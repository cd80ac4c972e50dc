"""The size DynamoDB bills an item at, by the rules of its developer guide ("Item sizes and formats").

Attribute names count their UTF-8 bytes; strings their UTF-8 bytes; a number about one byte per two significant
digits plus one; booleans and null one byte; a list or map 3 bytes plus one byte per element, plus the elements
(a map's elements carry their names). A write costs one write unit per started KB of the item (two inside a
transaction); a strongly consistent read, one read unit per started 4 KB.
"""

from __future__ import annotations

import math
from typing import Any


def value_size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, int | float):
        digits = str(abs(value)).replace(".", "").lstrip("0").rstrip("0") or "0"
        return math.ceil(len(digits) / 2) + 1
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, list | tuple):
        return 3 + sum(1 + value_size(v) for v in value)
    if isinstance(value, dict):
        return 3 + sum(1 + len(str(k).encode()) + value_size(v) for k, v in value.items())
    raise TypeError(f"no DynamoDB type for {type(value).__name__}")


def item_size(item: dict[str, Any]) -> int:
    """Bytes of the whole item, attribute names included."""
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def write_units(item: dict[str, Any]) -> int:
    return max(1, math.ceil(item_size(item) / 1024))
