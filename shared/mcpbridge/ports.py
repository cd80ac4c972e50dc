"""The capabilities the core needs from the outside world, as ``typing.Protocol``s.

Adapters in ``mcpbridge.adapters`` implement them (AWS and embedded); ``mcpbridge.bootstrap`` wires them. Fakes in
tests match a Protocol without inheriting from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mcpbridge.domain.items import Condition, IndexName, Item, Key, Page, Update, WriteOp
from mcpbridge.domain.secrets import SecretContext


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class Store(Protocol):
    """Items under (pk, sk) with conditional writes, prefix queries, two secondary indexes and TTL.

    Every read hides items whose ``expires_at`` has passed; every condition treats them as absent. A condition
    that does not hold raises ``errors.ConditionFailed`` carrying the condition's name and the live item.
    Infrastructure failures raise ``errors.Unavailable``.
    """

    def get(self, key: Key) -> Item | None:
        """The live item, read consistently, or None."""
        ...

    def put(self, item: Item, *, condition: Condition | None = None) -> None:
        """Create or replace the whole item."""
        ...

    def update(self, key: Key, update: Update, *, condition: Condition | None = None) -> Item:
        """Change some attributes (creating the item when absent) and return the item as written."""
        ...

    def delete(self, key: Key, *, condition: Condition | None = None) -> Item | None:
        """Delete and return the live item that was there (None when there was none)."""
        ...

    def query(
        self,
        partition: str,
        *,
        sk_prefix: str = "",
        index: IndexName | None = None,
        limit: int = 100,
        cursor: str | None = None,
        descending: bool = False,
    ) -> Page:
        """Live items of one partition (of the table or of an index) whose sort key starts with ``sk_prefix``,
        in sort-key order. Reads through an index may lag a write by a moment on DynamoDB."""
        ...

    def transact(self, ops: Sequence[WriteOp]) -> None:
        """All of the writes or none of them (at most 100, at most one per key)."""
        ...

    def ping(self) -> None:
        """Raise ``errors.Unavailable`` when the store cannot be reached."""
        ...


class SecretBox(Protocol):
    """Seals secrets for storage (``enc:v1:...``) bound to a ``SecretContext``."""

    def seal(self, plaintext: str, context: SecretContext) -> str: ...

    def open(self, sealed: str, context: SecretContext) -> str:
        """Raise ``domain.secrets.SecretUnreadable`` for a wrong context, tampered bytes or an unknown format."""
        ...

    def ping(self) -> None:
        """Raise ``errors.Unavailable`` when the key material cannot be reached."""
        ...
