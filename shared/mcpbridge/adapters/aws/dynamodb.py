"""The store on DynamoDB: one table (pk/sk), two GSIs, TTL on ``expires_at``.

Named conditions from ``domain.items`` become ConditionExpressions with aliased names and values. DynamoDB deletes
expired items lazily (moto never does), so every expression is TTL-aware: an item whose ``expires_at`` has passed
counts as absent, as the reference semantics say. ``ReturnValuesOnConditionCheckFailure=ALL_OLD`` turns a lost
condition into ``ConditionFailed`` carrying the current item, without a second read.
"""

# Over 400 lines: the one DynamoDB store: every primitive's expressions and error mapping side by side.

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import BotoCoreError, ClientError

from mcpbridge.domain.items import (
    INDEX_KEYS,
    TTL_ATTR,
    AllOf,
    AnyOf,
    AttrAbsent,
    AttrExists,
    Check,
    Clause,
    Compare,
    Condition,
    IndexName,
    Item,
    ItemAbsent,
    ItemExists,
    Key,
    Page,
    Patch,
    Put,
    Remove,
    Update,
    WriteOp,
    decode_cursor,
    encode_cursor,
    evaluate,
    is_live,
    position_of,
    validate_item,
    validate_transaction,
)
from mcpbridge.errors import ConditionFailed, InvalidInput, Unavailable
from mcpbridge.ports import Clock

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

_ATTEMPTS = 5
_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


class _Expression:
    """Builds one expression with ``#n`` name and ``:v`` value aliases (so reserved words never bite)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attr: str) -> str:
        for alias, existing in self.names.items():
            if existing == attr:
                return alias
        alias = f"#n{len(self.names)}"
        self.names[alias] = attr
        return alias

    def value(self, value: Any) -> str:
        alias = f":v{len(self.values)}"
        self.values[alias] = _serializer.serialize(_to_dynamo(value))
        return alias

    def clause(self, clause: Clause) -> str:
        match clause:
            case ItemExists():
                return f"attribute_exists({self.name('pk')})"
            case ItemAbsent():
                return f"attribute_not_exists({self.name('pk')})"
            case AttrExists(attr):
                return f"attribute_exists({self.name(attr)})"
            case AttrAbsent(attr):
                return f"attribute_not_exists({self.name(attr)})"
            case Compare(attr, "<>", value):
                # A missing attribute differs from every value (reference semantics), so say it explicitly.
                n = self.name(attr)
                return f"(attribute_not_exists({n}) OR {n} <> {self.value(value)})"
            case Compare(attr, op, value):
                return f"{self.name(attr)} {op} {self.value(value)}"
            case AllOf(clauses):
                return "(" + " AND ".join(self.clause(c) for c in clauses) + ")"
            case AnyOf(clauses):
                return "(" + " OR ".join(self.clause(c) for c in clauses) + ")"
        raise TypeError(f"unknown clause {clause!r}")

    def not_expired(self, now: int) -> str:
        n = self.name(TTL_ATTR)
        return f"(attribute_not_exists({n}) OR {n} > {self.value(now)})"

    def expired(self, now: int) -> str:
        n = self.name(TTL_ATTR)
        return f"(attribute_exists({n}) AND {n} <= {self.value(now)})"

    def on_live_view(self, condition: Condition | None, now: int) -> str | None:
        """The condition as it must hold on the live item, where an expired item counts as absent."""
        if condition is None:
            return None
        if evaluate(condition.clause, None):
            # Holds on an absent item, so it holds on an expired one too.
            return f"({self.expired(now)} OR {self.clause(condition.clause)})"
        return f"({self.not_expired(now)} AND {self.clause(condition.clause)})"

    def kwargs(self, condition: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if condition:
            out["ConditionExpression"] = condition
        if self.names:
            out["ExpressionAttributeNames"] = self.names
        if self.values:
            out["ExpressionAttributeValues"] = self.values
        return out


class DynamoStore:
    """``ports.Store`` on one DynamoDB table (see ``template.yaml`` for its key schema and indexes)."""

    reads_are_local = False  # every read is a call to DynamoDB
    indexes_are_consistent = False  # global secondary indexes are eventually consistent

    def __init__(self, client: DynamoDBClient, table_name: str, clock: Clock) -> None:
        self._client = client
        self._table = table_name
        self._clock = clock
        self._at_once = threading.local()

    def _now(self) -> int:
        return math.floor(self._clock.now())

    # ------------------------------------------------------------------------------------------ the port

    def get(self, key: Key) -> Item | None:
        response = self._call("get_item", TableName=self._table, Key=_key(key), ConsistentRead=True)
        item = _from_dynamo(response.get("Item"))
        return item if is_live(item, self._clock.now()) else None

    def put(self, item: Item, *, condition: Condition | None = None, durable: bool = True) -> None:
        # Every DynamoDB write is durable once acknowledged: ``durable`` changes nothing here.
        validate_item(item)
        expr = _Expression()
        kwargs = expr.kwargs(expr.on_live_view(condition, self._now()))
        self._conditional(
            condition,
            "put_item",
            TableName=self._table,
            Item=_item(item),
            **kwargs,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )

    def update(self, key: Key, update: Update, *, condition: Condition | None = None, durable: bool = True) -> Item:
        for _ in range(_ATTEMPTS):
            now = self._now()
            expr = _Expression()
            update_expression = _update_expression(expr, update)
            # The update itself only ever lands on a live or absent item: an expired one is replaced below.
            guard = expr.not_expired(now)
            if condition is not None:
                guard = f"({guard} AND {expr.clause(condition.clause)})"
            try:
                response = self._call(
                    "update_item",
                    TableName=self._table,
                    Key=_key(key),
                    UpdateExpression=update_expression,
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **expr.kwargs(guard),
                )
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise
                raw = _from_dynamo(exc.response.get("Item"))  # type: ignore[arg-type]
                if is_live(raw, now):
                    raise ConditionFailed(condition.name if condition else "live", raw) from None
                if raw is None:
                    if condition is not None and not evaluate(condition.clause, None):
                        raise ConditionFailed(condition.name, None) from None
                    continue  # deleted while we looked: try again
                # An expired leftover: the update applies to an absent item, so write it whole in its place.
                if condition is not None and not evaluate(condition.clause, None):
                    raise ConditionFailed(condition.name, None) from None
                fresh = update.apply(key, None)
                if self._replace_expired(fresh, now):
                    return fresh
                continue
            new_item = _from_dynamo(response["Attributes"])
            assert new_item is not None
            return new_item
        raise Unavailable("the item kept changing during the update; try again", code="store_contention")

    def _replace_expired(self, item: Item, now: int) -> bool:
        validate_item(item)
        expr = _Expression()
        guard = f"(attribute_not_exists({expr.name('pk')}) OR {expr.expired(now)})"
        try:
            self._call("put_item", TableName=self._table, Item=_item(item), **expr.kwargs(guard))
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def delete(self, key: Key, *, condition: Condition | None = None) -> Item | None:
        expr = _Expression()
        kwargs = expr.kwargs(expr.on_live_view(condition, self._now()))
        response = self._conditional(
            condition,
            "delete_item",
            TableName=self._table,
            Key=_key(key),
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **kwargs,
        )
        old = _from_dynamo(response.get("Attributes"))
        return old if is_live(old, self._clock.now()) else None

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
        if limit < 1:
            raise InvalidInput("limit must be at least 1")
        pk_attr, sk_attr = INDEX_KEYS[index] if index else ("pk", "sk")
        expr = _Expression()
        key_condition = f"{expr.name(pk_attr)} = {expr.value(partition)}"
        if sk_prefix:
            key_condition += f" AND begins_with({expr.name(sk_attr)}, {expr.value(sk_prefix)})"
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": key_condition,
            "FilterExpression": expr.not_expired(self._now()),
            "ScanIndexForward": not descending,
            "ExpressionAttributeNames": expr.names,
            "ExpressionAttributeValues": expr.values,
        }
        if index:
            request["IndexName"] = index
        else:
            request["ConsistentRead"] = True
        if cursor:
            try:
                position = decode_cursor(cursor, partition=partition, index=index)
            except ValueError as exc:
                raise InvalidInput(str(exc), code="invalid_cursor") from exc
            request["ExclusiveStartKey"] = {k: {"S": v} for k, v in position.items()}
        items: list[Item] = []
        # Ask for one more than needed: seeing it is how we know a next page exists.
        while True:
            request["Limit"] = limit + 1 - len(items)
            response = self._call("query", **request)
            for raw in response.get("Items", []):
                item = _from_dynamo(raw)
                assert item is not None
                items.append(item)
            if len(items) > limit:
                items = items[:limit]
                return Page(items=items, cursor=encode_cursor(position_of(items[-1], index)))
            last = response.get("LastEvaluatedKey")
            if not last:
                return Page(items=items, cursor=None)
            request["ExclusiveStartKey"] = last

    def transact(self, ops: Sequence[WriteOp]) -> None:
        validate_transaction(ops)
        pending = list(ops)
        replaced: set[int] = set()
        for attempt in range(_ATTEMPTS):
            now = self._now()
            request = [self._transact_item(op, now, position in replaced) for position, op in enumerate(pending)]
            try:
                self._call("transact_write_items", TransactItems=request)
                return
            except ClientError as exc:
                if _code(exc) != "TransactionCanceledException":
                    raise
                reasons = exc.response.get("CancellationReasons", [])
                failed = [(i, r) for i, r in enumerate(reasons) if r.get("Code") == "ConditionalCheckFailed"]
                if not failed:
                    if any(r.get("Code") == "TransactionConflict" for r in reasons):
                        time.sleep(0.02 * 2**attempt)
                        continue
                    raise
                position, reason = failed[0]
                op = pending[position]
                raw = _from_dynamo(reason.get("Item"))
                current = raw if is_live(raw, now) else None
                condition = op.condition
                holds_when_absent = condition is None or evaluate(condition.clause, None)
                if isinstance(op, Patch) and current is None and holds_when_absent and position not in replaced:
                    # An expired leftover under an update: write the whole new item in its place and try again.
                    pending[position] = Put(op.update.apply(op.key, None), condition)
                    replaced.add(position)
                    continue
                name = condition.name if condition else "live"
                raise ConditionFailed(name, current, operation_index=position) from None
        raise Unavailable("the transaction kept conflicting with other writes; try again", code="store_contention")

    def _transact_item(self, op: WriteOp, now: int, replacing_expired: bool) -> dict[str, Any]:
        expr = _Expression()
        common = {"TableName": self._table, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
        match op:
            case Put(item=item, condition=condition):
                validate_item(item)
                if replacing_expired:
                    guard = f"(attribute_not_exists({expr.name('pk')}) OR {expr.expired(now)})"
                else:
                    guard = expr.on_live_view(condition, now)  # type: ignore[assignment]
                return {"Put": {**common, "Item": _item(item), **expr.kwargs(guard)}}
            case Patch(key=key, update=update, condition=condition):
                update_expression = _update_expression(expr, update)
                guard = expr.not_expired(now)
                if condition is not None:
                    guard = f"({guard} AND {expr.clause(condition.clause)})"
                return {
                    "Update": {**common, "Key": _key(key), "UpdateExpression": update_expression, **expr.kwargs(guard)}
                }
            case Remove(key=key, condition=condition):
                return {"Delete": {**common, "Key": _key(key), **expr.kwargs(expr.on_live_view(condition, now))}}
            case Check(key=key, condition=condition):
                return {
                    "ConditionCheck": {**common, "Key": _key(key), **expr.kwargs(expr.on_live_view(condition, now))}
                }
        raise TypeError(f"unknown operation {op!r}")

    def ping(self) -> None:
        self._call("get_item", TableName=self._table, Key=_key(Key("HEALTH", "PING")))

    def reclaim(self) -> None:
        """A deleted item is gone from DynamoDB's reads, backups aside (point-in-time recovery keeps 35 days)."""

    # ------------------------------------------------------------------------------------------ plumbing

    def _conditional(self, condition: Condition | None, operation: str, **kwargs: Any) -> dict[str, Any]:
        try:
            return self._call(operation, **kwargs)
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException" or condition is None:
                raise
            raw = _from_dynamo(exc.response.get("Item"))  # type: ignore[arg-type]
            current = raw if is_live(raw, self._clock.now()) else None
            raise ConditionFailed(condition.name, current) from None

    def sync_soon(self, *, within: float = 0.0) -> Callable[[], None]:
        """Every acknowledged write is durable already: nothing to wait for."""
        return _synced

    @contextmanager
    def writes_at_once(self) -> Iterator[None]:
        """Every write is a call over the network, which waits: in the block, each one raises ``store_busy``."""
        self._at_once.active = True
        try:
            yield
        finally:
            self._at_once.active = False

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        if operation in _WRITES and getattr(self._at_once, "active", False):
            raise Unavailable("a DynamoDB write waits for the network, so not at once", code="store_busy")
        try:
            response: dict[str, Any] = getattr(self._client, operation)(**kwargs)
        except ClientError as exc:
            if _code(exc) in _UNAVAILABLE_CODES:
                raise Unavailable(f"DynamoDB is not available ({_code(exc)})", code="store_unavailable") from exc
            raise
        except BotoCoreError as exc:
            raise Unavailable(f"DynamoDB cannot be reached ({type(exc).__name__})", code="store_unavailable") from exc
        return response


_WRITES = frozenset({"put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item"})

_UNAVAILABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "ResourceNotFoundException",
        "AccessDeniedException",
        "UnrecognizedClientException",
    }
)


def _synced() -> None:
    return None


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _update_expression(expr: _Expression, update: Update) -> str:
    parts = []
    if update.set:
        parts.append("SET " + ", ".join(f"{expr.name(a)} = {expr.value(v)}" for a, v in update.set.items()))
    if update.remove:
        parts.append("REMOVE " + ", ".join(expr.name(a) for a in update.remove))
    if update.add:
        parts.append("ADD " + ", ".join(f"{expr.name(a)} {expr.value(v)}" for a, v in update.add.items()))
    return " ".join(parts)


def _key(key: Key) -> dict[str, Any]:
    return {"pk": {"S": key.pk}, "sk": {"S": key.sk}}


def _item(item: Item) -> dict[str, Any]:
    return {name: _serializer.serialize(_to_dynamo(value)) for name, value in item.items()}


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("numbers must be finite")
        return Decimal(repr(value))
    if isinstance(value, Mapping):
        return {k: _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_dynamo(v) for v in value]
    return value


def _from_python(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_python(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_python(v) for v in value]
    return value


def _from_dynamo(raw: Mapping[str, Any] | None) -> Item | None:
    if not raw:
        return None
    return {name: _from_python(_deserializer.deserialize(value)) for name, value in raw.items()}
