"""The vocabulary of the store port: items, keys, named conditions, updates, pages and transactions.

The store speaks DynamoDB's model. An item is a JSON-like dict with string keys ``pk`` and ``sk``; it may carry
``gsi1pk``/``gsi1sk`` and ``gsi2pk``/``gsi2sk`` to appear in the two secondary indexes, and ``expires_at`` (epoch
seconds) to expire. An item whose ``expires_at`` is in the past is *absent* for every read and every condition,
whether or not the backend has deleted it yet.

Conditions are small trees of clauses wrapped in a ``Condition`` that names them, so a lost write says which rule
it broke (``ConditionFailed.condition``). ``evaluate`` is the reference semantics: the SQLite adapter runs it, the
DynamoDB adapter translates the same tree into a ConditionExpression, and one contract suite holds both to it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Item: TypeAlias = dict[str, Any]

KEY_ATTRS = ("pk", "sk")
INDEX_KEYS: dict[str, tuple[str, str]] = {"gsi1": ("gsi1pk", "gsi1sk"), "gsi2": ("gsi2pk", "gsi2sk")}
TTL_ATTR = "expires_at"
INDEX_ATTRS = frozenset(a for pair in INDEX_KEYS.values() for a in pair)
IndexName = Literal["gsi1", "gsi2"]


@dataclass(frozen=True)
class Key:
    pk: str
    sk: str

    def as_dict(self) -> dict[str, str]:
        return {"pk": self.pk, "sk": self.sk}


def key_of(item: Mapping[str, Any]) -> Key:
    return Key(item["pk"], item["sk"])


def is_live(item: Mapping[str, Any] | None, now: float) -> bool:
    """True when the item exists and has not expired."""
    if item is None:
        return False
    expires_at = item.get(TTL_ATTR)
    return expires_at is None or expires_at > now


# ---------------------------------------------------------------------------------------------------- clauses


@dataclass(frozen=True)
class ItemExists:
    """The item is present (and not expired)."""


@dataclass(frozen=True)
class ItemAbsent:
    """No live item under this key."""


@dataclass(frozen=True)
class AttrExists:
    attr: str


@dataclass(frozen=True)
class AttrAbsent:
    attr: str


CompareOp = Literal["=", "<>", "<", "<=", ">", ">="]


@dataclass(frozen=True)
class Compare:
    """``attr <op> value``. A missing attribute fails every comparison except ``<>``, which it passes."""

    attr: str
    op: CompareOp
    value: Any


@dataclass(frozen=True)
class AllOf:
    clauses: tuple[Clause, ...]


@dataclass(frozen=True)
class AnyOf:
    clauses: tuple[Clause, ...]


Clause: TypeAlias = ItemExists | ItemAbsent | AttrExists | AttrAbsent | Compare | AllOf | AnyOf


@dataclass(frozen=True)
class Condition:
    """A named clause. The name shows up in ``ConditionFailed`` and in logs, never the values."""

    name: str
    clause: Clause

    @classmethod
    def absent(cls, name: str) -> Condition:
        return cls(name, ItemAbsent())

    @classmethod
    def exists(cls, name: str) -> Condition:
        return cls(name, ItemExists())

    @classmethod
    def equals(cls, name: str, attr: str, value: Any) -> Condition:
        return cls(name, AllOf((ItemExists(), Compare(attr, "=", value))))


def all_of(*clauses: Clause) -> AllOf:
    if not clauses:
        raise ValueError("all_of needs at least one clause")
    return AllOf(tuple(clauses))


def any_of(*clauses: Clause) -> AnyOf:
    if not clauses:
        raise ValueError("any_of needs at least one clause")
    return AnyOf(tuple(clauses))


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _compare(left: Any, op: CompareOp, right: Any) -> bool:
    # Values of different kinds are never equal (True is not 1), as in DynamoDB.
    if op == "=":
        return _kind(left) == _kind(right) and bool(left == right)
    if op == "<>":
        return not (_kind(left) == _kind(right) and bool(left == right))
    # Ordering between different kinds (str vs number) is false, as in DynamoDB.
    numeric = (int, float)
    same_kind = (isinstance(left, numeric) and not isinstance(left, bool) and isinstance(right, numeric)) or (
        isinstance(left, str) and isinstance(right, str)
    )
    if not same_kind:
        return False
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def evaluate(clause: Clause, item: Mapping[str, Any] | None) -> bool:
    """Reference semantics of a clause against the *live* item (None when absent or expired)."""
    match clause:
        case ItemExists():
            return item is not None
        case ItemAbsent():
            return item is None
        case AttrExists(attr):
            return item is not None and attr in item
        case AttrAbsent(attr):
            return item is None or attr not in item
        case Compare(attr, op, value):
            if item is None or attr not in item:
                return op == "<>"
            return _compare(item[attr], op, value)
        case AllOf(clauses):
            return all(evaluate(c, item) for c in clauses)
        case AnyOf(clauses):
            return any(evaluate(c, item) for c in clauses)
    raise TypeError(f"unknown clause {clause!r}")


# ---------------------------------------------------------------------------------------------------- updates


@dataclass(frozen=True)
class Update:
    """Changes to one item: ``set`` attributes, ``remove`` attributes, ``add`` numbers (missing counts as 0).

    Updating a key with no live item creates it from the changes (upsert), unless a condition forbids it.
    """

    set: Mapping[str, Any] = field(default_factory=dict)
    remove: Sequence[str] = ()
    add: Mapping[str, int | float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        touched = [*self.set, *self.remove, *self.add]
        if len(touched) != len(set(touched)):
            raise ValueError("an attribute may appear only once in an update")
        if any(a in KEY_ATTRS for a in touched):
            raise ValueError("pk and sk cannot be updated")
        if not touched:
            raise ValueError("an update must change something")
        for attr, value in self.set.items():
            _validate_reserved(attr, value)
        if TTL_ATTR in self.add or any(a in INDEX_ATTRS for a in self.add):
            raise ValueError("index and TTL attributes can only be set or removed")

    def apply(self, key: Key, current: Mapping[str, Any] | None, *, owned: bool = False) -> Item:
        """The item after this update (reference semantics used by the SQLite adapter and the DynamoDB fallback).
        ``owned``: ``current`` is the caller's own copy (just read from storage), changed in place instead of copied.
        """
        if current is None:
            item: Item = key.as_dict()
        elif owned and isinstance(current, dict):
            item = current
        else:
            item = copy.deepcopy(dict(current))
        for attr, value in self.set.items():
            item[attr] = copy.deepcopy(value)
        for attr in self.remove:
            item.pop(attr, None)
        for attr, amount in self.add.items():
            base = item.get(attr, 0)
            if not isinstance(base, (int, float)) or isinstance(base, bool):
                raise ValueError(f"cannot add to non-numeric attribute {attr!r}")
            item[attr] = base + amount
        return item


# ---------------------------------------------------------------------------------------------------- pages


@dataclass(frozen=True)
class Page:
    """One page of a query. ``cursor`` is None on the last page; pass it back to get the next one."""

    items: list[Item]
    cursor: str | None


def _position_attrs(index: IndexName | None) -> list[str]:
    return [*KEY_ATTRS, *(INDEX_KEYS[index] if index else ())]


def position_of(item: Mapping[str, Any], index: IndexName | None) -> dict[str, str]:
    """The key attributes that locate an item in the table or in an index (what a cursor remembers)."""
    return {name: item[name] for name in _position_attrs(index)}


def encode_cursor(position: Mapping[str, str]) -> str:
    raw = json.dumps(dict(position), separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *, partition: str, index: IndexName | None) -> dict[str, str]:
    """Read back a cursor, refusing one that does not belong to this query (ValueError)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        position = json.loads(raw)
    except (ValueError, binascii.Error) as exc:
        raise ValueError("malformed cursor") from exc
    names = _position_attrs(index)
    if (
        not isinstance(position, dict)
        or sorted(position) != sorted(names)
        or not all(isinstance(position[n], str) for n in names)
    ):
        raise ValueError("malformed cursor")
    partition_attr = INDEX_KEYS[index][0] if index else "pk"
    if position[partition_attr] != partition:
        raise ValueError("cursor belongs to another query")
    return position


# ---------------------------------------------------------------------------------------------------- transactions


@dataclass(frozen=True)
class Put:
    item: Item
    condition: Condition | None = None


@dataclass(frozen=True)
class Patch:
    key: Key
    update: Update
    condition: Condition | None = None


@dataclass(frozen=True)
class Remove:
    key: Key
    condition: Condition | None = None


@dataclass(frozen=True)
class Check:
    key: Key
    condition: Condition


WriteOp: TypeAlias = Put | Patch | Remove | Check


MAX_TRANSACTION_OPS = 100


def op_key(op: WriteOp) -> Key:
    return key_of(op.item) if isinstance(op, Put) else op.key


def validate_transaction(ops: Sequence[WriteOp]) -> None:
    """DynamoDB's rules, held on both backends: 1 to 100 operations, each key at most once."""
    if not ops or len(ops) > MAX_TRANSACTION_OPS:
        raise ValueError(f"a transaction holds 1 to {MAX_TRANSACTION_OPS} operations")
    keys = [op_key(op) for op in ops]
    if len(set(keys)) != len(keys):
        raise ValueError("a transaction may touch each key only once")


def _validate_reserved(attr: str, value: Any) -> None:
    if attr in KEY_ATTRS or attr in INDEX_ATTRS:
        if not isinstance(value, str) or not value:
            raise ValueError(f"key attribute {attr!r} must be a non-empty string")
    elif attr == TTL_ATTR and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValueError(f"{TTL_ATTR!r} must be integer epoch seconds")


def validate_item(item: Mapping[str, Any]) -> None:
    """Shape rules shared by both adapters (the backends would reject these, each in its own way)."""
    for attr in KEY_ATTRS:
        if attr not in item:
            raise ValueError(f"item attribute {attr!r} is required")
    for attr, value in item.items():
        _validate_reserved(attr, value)
