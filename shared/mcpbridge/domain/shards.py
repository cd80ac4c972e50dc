"""One logical list spread over several partitions of a secondary index, so that no partition is hot.

A list every workspace writes to (documents waiting to be indexed, tool calls not finished yet) under one constant
partition key would send all of its writes to one partition of the index. Each member goes instead to one of
:data:`SHARD_COUNT` partitions, ``<prefix>#<digit>``, chosen from its id (stable across processes and releases);
a reader of the whole list reads every shard, and the unsharded ``<prefix>`` partition that releases before the
sharding wrote to, until the members left there are done.
"""

from __future__ import annotations

import hashlib
from typing import Final

SHARD_COUNT: Final = 16
_DIGITS: Final = "0123456789abcdef"


def shard_partition(prefix: str, member_id: str) -> str:
    """The partition of ``member_id`` in the list ``prefix``."""
    digit = hashlib.sha256(member_id.encode()).hexdigest()[0]
    return f"{prefix}#{digit}"


def list_partitions(prefix: str) -> list[str]:
    """Every partition a reader of the list ``prefix`` reads: the shards, then the unsharded one of older releases."""
    return [*(f"{prefix}#{digit}" for digit in _DIGITS[:SHARD_COUNT]), prefix]
