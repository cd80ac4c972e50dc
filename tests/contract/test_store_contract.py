"""The store contract: what every service relies on, held on SQLite and on DynamoDB alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mcpbridge.domain.items import (
    AttrAbsent,
    AttrExists,
    Check,
    Compare,
    Condition,
    Key,
    Patch,
    Put,
    Remove,
    Update,
    all_of,
    any_of,
)
from mcpbridge.errors import ConditionFailed, InvalidInput, Unavailable
from mcpbridge.ports import Store
from tests.support.clock import FakeClock
from tests.support.threads import run_together

K = Key("WS#1", "THING#a")


def item(key: Key = K, **attrs: Any) -> dict[str, Any]:
    return {"pk": key.pk, "sk": key.sk, **attrs}


# ---------------------------------------------------------------------------------------------------- get / put


def test_put_then_get_round_trips_json_values(store: Store) -> None:
    value = item(
        name="Ünïcode 知识库",
        count=3,
        ratio=0.25,
        on=True,
        off=False,
        nothing=None,
        tags=["a", "b"],
        nested={"k": [1, {"x": "y"}], "empty": ""},
    )
    store.put(value)
    assert store.get(K) == value


def test_get_of_a_missing_key_is_none(store: Store) -> None:
    assert store.get(Key("WS#1", "nope")) is None


def test_put_replaces_the_whole_item(store: Store) -> None:
    store.put(item(a=1, b=2))
    store.put(item(a=3))
    assert store.get(K) == item(a=3)


def test_put_if_absent_fails_on_an_existing_item_and_carries_it(store: Store) -> None:
    store.put(item(owner="first"), condition=Condition.absent("thing_unique"))
    with pytest.raises(ConditionFailed) as lost:
        store.put(item(owner="second"), condition=Condition.absent("thing_unique"))
    assert lost.value.condition == "thing_unique"
    assert lost.value.current == item(owner="first")
    assert store.get(K) == item(owner="first")


def test_bad_items_are_refused_before_reaching_the_backend(store: Store) -> None:
    with pytest.raises(ValueError, match="pk"):
        store.put({"sk": "x"})
    with pytest.raises(ValueError, match="gsi1pk"):
        store.put(item(gsi1pk=""))
    with pytest.raises(ValueError, match="expires_at"):
        store.put(item(expires_at="tomorrow"))


# ---------------------------------------------------------------------------------------------------- update


def test_update_creates_a_missing_item_and_returns_it(store: Store) -> None:
    written = store.update(K, Update(set={"name": "n"}, add={"hits": 2}))
    assert written == item(name="n", hits=2)
    assert store.get(K) == written


def test_update_sets_removes_and_adds(store: Store) -> None:
    store.put(item(keep=1, drop=2, hits=5))
    written = store.update(K, Update(set={"new": "v"}, remove=["drop"], add={"hits": 3, "fresh": 1}))
    assert written == item(keep=1, new="v", hits=8, fresh=1)
    assert store.get(K) == written


def test_update_with_a_version_condition_is_optimistic_locking(store: Store) -> None:
    store.put(item(version=1, body="v1"))
    store.update(K, Update(set={"body": "v2"}, add={"version": 1}), condition=Condition.equals("fresh", "version", 1))
    with pytest.raises(ConditionFailed) as lost:
        store.update(K, Update(set={"body": "stale"}), condition=Condition.equals("fresh", "version", 1))
    assert lost.value.condition == "fresh"
    assert lost.value.current == item(version=2, body="v2")
    assert store.get(K) == item(version=2, body="v2")


def test_update_requiring_existence_does_not_create(store: Store) -> None:
    with pytest.raises(ConditionFailed) as lost:
        store.update(K, Update(set={"a": 1}), condition=Condition.exists("must_exist"))
    assert lost.value.current is None
    assert store.get(K) is None


def test_update_can_move_an_item_between_index_partitions(store: Store) -> None:
    store.put(item(gsi1pk="STATUS#open", gsi1sk="1"))
    store.update(K, Update(set={"gsi1pk": "STATUS#closed"}))
    assert store.query("STATUS#open", index="gsi1").items == []
    assert [i["sk"] for i in store.query("STATUS#closed", index="gsi1").items] == [K.sk]
    store.update(K, Update(remove=["gsi1pk", "gsi1sk"]))
    assert store.query("STATUS#closed", index="gsi1").items == []


def test_update_refuses_bad_shapes(store: Store) -> None:
    with pytest.raises(ValueError, match="pk"):
        store.update(K, Update(set={"pk": "other"}))
    with pytest.raises(ValueError, match="change something"):
        store.update(K, Update())


# ---------------------------------------------------------------------------------------------------- delete


def test_delete_returns_the_old_item(store: Store) -> None:
    store.put(item(a=1))
    assert store.delete(K) == item(a=1)
    assert store.get(K) is None
    assert store.delete(K) is None


def test_a_write_that_would_wait_is_refused_at_once_and_writes_nothing(store: Store) -> None:
    """A durable write waits for a disk sync (SQLite) or the network (DynamoDB): inside ``writes_at_once`` it raises
    ``store_busy`` before anything lands, and the block leaves the store as usable as before."""
    store.put(item(a=1))
    with store.writes_at_once():
        with pytest.raises(Unavailable) as busy:
            store.put(item(a=2))
        assert busy.value.code == "store_busy"
        with pytest.raises(Unavailable):
            store.update(K, Update(set={"a": 3}))
        with pytest.raises(Unavailable):
            store.delete(K)
    assert store.get(K) == item(a=1)
    store.put(item(a=4))
    assert store.get(K) == item(a=4)


def test_conditional_delete_is_single_use(store: Store) -> None:
    """The OAuth state pattern: the first taker gets the item, the second gets a conflict."""
    store.put(item(state="s"))
    assert store.delete(K, condition=Condition.exists("state_unused")) == item(state="s")
    with pytest.raises(ConditionFailed) as lost:
        store.delete(K, condition=Condition.exists("state_unused"))
    assert lost.value.condition == "state_unused"
    assert lost.value.current is None


def test_lost_delete_condition_keeps_the_item(store: Store) -> None:
    store.put(item(status="approved"))
    with pytest.raises(ConditionFailed):
        store.delete(K, condition=Condition.equals("still_pending", "status", "pending"))
    assert store.get(K) == item(status="approved")


# ---------------------------------------------------------------------------------------------------- conditions

CASES: list[tuple[str, Condition, dict[str, Any] | None, bool]] = [
    ("lt", Condition("c", Compare("n", "<", 5)), {"n": 4}, True),
    ("lt-equal", Condition("c", Compare("n", "<", 5)), {"n": 5}, False),
    ("le", Condition("c", Compare("n", "<=", 5)), {"n": 5}, True),
    ("gt", Condition("c", Compare("n", ">", 5)), {"n": 5}, False),
    ("ge", Condition("c", Compare("n", ">=", 5)), {"n": 5}, True),
    ("string-order", Condition("c", Compare("s", "<", "b")), {"s": "a"}, True),
    ("kinds-never-order", Condition("c", Compare("n", "<", 5)), {"n": "4"}, False),
    ("bool-is-not-number", Condition("c", Compare("b", "=", 1)), {"b": True}, False),
    ("missing-attr-fails-compare", Condition("c", Compare("n", "<", 5)), {}, False),
    ("missing-attr-passes-ne", Condition("c", Compare("n", "<>", 5)), {}, True),
    ("ne", Condition("c", Compare("n", "<>", 5)), {"n": 5}, False),
    ("absent-item-passes-ne", Condition("c", Compare("n", "<>", 5)), None, True),
    ("absent-item-fails-eq", Condition("c", Compare("n", "=", 5)), None, False),
    ("attr-exists", Condition("c", AttrExists("lease")), {"lease": 1}, True),
    ("attr-absent", Condition("c", AttrAbsent("lease")), {"lease": 1}, False),
    ("attr-absent-on-absent-item", Condition("c", AttrAbsent("lease")), None, True),
    (
        "lease-free-or-expired",
        Condition("lease", any_of(AttrAbsent("lease_until"), Compare("lease_until", "<", 100))),
        {"lease_until": 99},
        True,
    ),
    (
        "lease-held",
        Condition("lease", any_of(AttrAbsent("lease_until"), Compare("lease_until", "<", 100))),
        {"lease_until": 150},
        False,
    ),
    (
        "all-of",
        Condition("c", all_of(Compare("status", "=", "pending"), Compare("owner", "=", "u1"))),
        {"status": "pending", "owner": "u2"},
        False,
    ),
    (
        "reserved-word-names",
        Condition("c", all_of(Compare("status", "=", "x"), Compare("name", "=", "y"), Compare("size", ">", 1))),
        {"status": "x", "name": "y", "size": 2},
        True,
    ),
]


# Where moto departs from DynamoDB, which compares the types of two values before the values themselves.
MOTO_DEVIATIONS = {
    "kinds-never-order": "moto raises TypeError ordering a string against a number; DynamoDB evaluates it as false",
    "bool-is-not-number": "moto finds BOOL true equal to N 1 (Python's True == 1); DynamoDB does not",
}


@pytest.mark.parametrize(("case", "condition", "attrs", "holds"), CASES, ids=[c[0] for c in CASES])
def test_condition_semantics(
    store: Store, backend: str, case: str, condition: Condition, attrs: dict[str, Any] | None, holds: bool
) -> None:
    if backend == "aws" and case in MOTO_DEVIATIONS:
        pytest.skip(MOTO_DEVIATIONS[case])
    if attrs is not None:
        store.put(item(**attrs))
    before = store.get(K)
    if holds:
        store.update(K, Update(set={"touched": True}), condition=condition)
        assert store.get(K) == {**(before or item()), "touched": True}
    else:
        with pytest.raises(ConditionFailed) as lost:
            store.update(K, Update(set={"touched": True}), condition=condition)
        assert lost.value.current == before
        assert store.get(K) == before


# ---------------------------------------------------------------------------------------------------- query


def _fill(store: Store, count: int, partition: str = "KB#1", prefix: str = "DOC#") -> list[str]:
    sks = [f"{prefix}{i:03d}" for i in range(count)]
    for sk in sks:
        store.put({"pk": partition, "sk": sk, "n": int(sk[-3:])})
    return sks


def _all_pages(fetch: Callable[[str | None], Any]) -> tuple[list[str], int]:
    seen: list[str] = []
    pages = 0
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        pages += 1
        seen += [i["sk"] for i in page.items]
        cursor = page.cursor
        if cursor is None:
            return seen, pages
        assert pages < 100


def test_query_by_prefix_in_sort_order(store: Store) -> None:
    sks = _fill(store, 5)
    store.put({"pk": "KB#1", "sk": "META"})
    store.put({"pk": "KB#2", "sk": "DOC#999"})
    assert [i["sk"] for i in store.query("KB#1", sk_prefix="DOC#").items] == sks
    assert [i["sk"] for i in store.query("KB#1", sk_prefix="DOC#", descending=True).items] == sks[::-1]
    assert [i["sk"] for i in store.query("KB#1").items] == [*sks, "META"]
    assert store.query("KB#3").items == []


def test_query_pages_with_cursors_without_gaps_or_repeats(store: Store) -> None:
    sks = _fill(store, 10)
    seen, pages = _all_pages(lambda c: store.query("KB#1", sk_prefix="DOC#", limit=3, cursor=c))
    assert seen == sks
    assert pages == 4
    seen_desc, _ = _all_pages(lambda c: store.query("KB#1", sk_prefix="DOC#", limit=4, cursor=c, descending=True))
    assert seen_desc == sks[::-1]


def test_exact_page_size_ends_without_an_empty_page(store: Store) -> None:
    _fill(store, 6)
    first = store.query("KB#1", limit=3)
    second = store.query("KB#1", limit=3, cursor=first.cursor)
    assert len(second.items) == 3
    assert second.cursor is None


def test_a_cursor_from_another_query_or_garbage_is_refused(store: Store) -> None:
    _fill(store, 4)
    _fill(store, 4, partition="KB#2")
    cursor = store.query("KB#1", limit=2).cursor
    assert cursor is not None
    with pytest.raises(InvalidInput):
        store.query("KB#2", limit=2, cursor=cursor)
    with pytest.raises(InvalidInput):
        store.query("KB#1", cursor="not-a-cursor!")
    with pytest.raises(InvalidInput):
        store.query("KB#1", cursor=cursor, index="gsi1")


def test_gsi_lookup_is_sparse_and_paged(store: Store) -> None:
    for i in range(7):
        store.put({"pk": f"EP#{i}", "sk": "META", "gsi1pk": "TOKEN#abc" if i % 2 else "TOKEN#other", "gsi1sk": f"{i}"})
    store.put({"pk": "EP#x", "sk": "META"})  # no index attributes: not in the index
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = store.query("TOKEN#abc", index="gsi1", limit=2, cursor=cursor)
        seen += [i["pk"] for i in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == ["EP#1", "EP#3", "EP#5"]
    assert store.query("TOKEN#abc", index="gsi2").items == []
    store.put({"pk": "EP#9", "sk": "META", "gsi2pk": "WS#1", "gsi2sk": "b"})
    assert [i["pk"] for i in store.query("WS#1", index="gsi2", sk_prefix="b").items] == ["EP#9"]


def test_limit_must_be_positive(store: Store) -> None:
    with pytest.raises(InvalidInput):
        store.query("KB#1", limit=0)


# ---------------------------------------------------------------------------------------------------- transactions


def test_transaction_writes_everything(store: Store) -> None:
    store.put(item(Key("WS#1", "B"), n=1))
    store.put(item(Key("WS#1", "C")))
    store.put(item(Key("WS#1", "D"), v=1))
    store.transact(
        [
            Put(item(Key("WS#1", "A"), v=1), Condition.absent("a_new")),
            Patch(Key("WS#1", "B"), Update(add={"n": 1}), Condition.exists("b_exists")),
            Remove(Key("WS#1", "C"), Condition.exists("c_exists")),
            Check(Key("WS#1", "D"), Condition.equals("d_v1", "v", 1)),
        ]
    )
    assert store.get(Key("WS#1", "A")) == item(Key("WS#1", "A"), v=1)
    assert store.get(Key("WS#1", "B")) == item(Key("WS#1", "B"), n=2)
    assert store.get(Key("WS#1", "C")) is None


def test_a_failed_transaction_writes_nothing_and_names_the_failure(store: Store) -> None:
    store.put(item(Key("WS#1", "B"), n=1))
    store.put(item(Key("WS#1", "D"), v=2))
    with pytest.raises(ConditionFailed) as lost:
        store.transact(
            [
                Put(item(Key("WS#1", "A"), v=1), Condition.absent("a_new")),
                Patch(Key("WS#1", "B"), Update(add={"n": 1})),
                Check(Key("WS#1", "D"), Condition.equals("d_v1", "v", 1)),
            ]
        )
    assert lost.value.condition == "d_v1"
    assert lost.value.operation_index == 2
    assert lost.value.current == item(Key("WS#1", "D"), v=2)
    assert store.get(Key("WS#1", "A")) is None
    assert store.get(Key("WS#1", "B")) == item(Key("WS#1", "B"), n=1)


def test_transaction_shape_rules(store: Store) -> None:
    with pytest.raises(ValueError, match="once"):
        store.transact([Put(item(a=1)), Remove(K)])
    with pytest.raises(ValueError, match="1 to 100"):
        store.transact([])


# ---------------------------------------------------------------------------------------------------- TTL


def test_expired_items_are_invisible_to_reads(store: Store, clock: FakeClock) -> None:
    now = int(clock.now())
    store.put(item(expires_at=now + 60, gsi1pk="STATE", gsi1sk="x"))
    store.put({"pk": K.pk, "sk": "THING#b", "expires_at": now + 600})
    assert store.get(K) is not None
    clock.advance(61)
    assert store.get(K) is None
    assert [i["sk"] for i in store.query(K.pk).items] == ["THING#b"]
    assert store.query("STATE", index="gsi1").items == []
    assert store.delete(K) is None


def test_expired_items_count_as_absent_for_conditions(store: Store, clock: FakeClock) -> None:
    now = int(clock.now())
    store.put(item(expires_at=now + 10, state="s1"))
    clock.advance(11)
    with pytest.raises(ConditionFailed) as lost:
        store.delete(K, condition=Condition.exists("state_unused"))
    assert lost.value.current is None
    store.put(item(expires_at=now + 600, state="s2"), condition=Condition.absent("state_new"))
    assert store.get(K) == item(expires_at=now + 600, state="s2")


def test_an_update_on_an_expired_item_starts_afresh(store: Store, clock: FakeClock) -> None:
    now = int(clock.now())
    store.put(item(expires_at=now + 60, hits=41, stale="old"))
    clock.advance(120)
    written = store.update(K, Update(set={"expires_at": now + 300}, add={"hits": 1}))
    assert written == item(expires_at=now + 300, hits=1)
    assert store.get(K) == written
    clock.advance(300)
    with pytest.raises(ConditionFailed):
        store.update(K, Update(add={"hits": 1}), condition=Condition.exists("window_open"))


def test_a_transaction_treats_expired_items_as_absent(store: Store, clock: FakeClock) -> None:
    now = int(clock.now())
    a, b = Key("WS#1", "A"), Key("WS#1", "B")
    store.put(item(a, expires_at=now + 1, n=10, junk=True))
    store.put(item(b, expires_at=now + 1))
    clock.advance(5)
    store.transact(
        [
            Patch(a, Update(add={"n": 1})),
            Put(item(b, fresh=True), Condition.absent("b_new")),
        ]
    )
    assert store.get(a) == item(a, n=1)
    assert store.get(b) == item(b, fresh=True)


# ---------------------------------------------------------------------------------------------------- races


def _race(workers: int, attempt: Callable[[int], None]) -> tuple[int, int]:
    """Run ``attempt`` in ``workers`` threads started together; count wins and ConditionFailed losses."""
    wins: list[int] = []
    losses: list[int] = []

    def run(i: int) -> None:
        try:
            attempt(i)
        except ConditionFailed:
            losses.append(i)
        else:
            wins.append(i)

    run_together(workers, run, timeout=30)
    return len(wins), len(losses)


def test_two_writers_with_the_same_condition_exactly_one_wins(store: Store) -> None:
    for round_ in range(5):
        key = Key("RACE", f"create#{round_}")
        wins, losses = _race(
            2, lambda i, key=key: store.put({"pk": key.pk, "sk": key.sk, "by": i}, condition=Condition.absent("new"))
        )
        assert (wins, losses) == (1, 1)


def test_racing_optimistic_updates_exactly_one_wins(store: Store) -> None:
    store.put(item(version=1))
    wins, losses = _race(
        6,
        lambda i: store.update(
            K, Update(set={"by": i}, add={"version": 1}), condition=Condition.equals("v", "version", 1)
        ),
    )
    assert (wins, losses) == (1, 5)
    assert store.get(K)["version"] == 2  # type: ignore[index]


def test_racing_conditional_counter_never_exceeds_its_limit(store: Store) -> None:
    """The rate-limit pattern: add one while count < limit."""
    limit = 4
    below = Condition("under_limit", any_of(AttrAbsent("count"), Compare("count", "<", limit)))
    wins, losses = _race(10, lambda i: store.update(K, Update(add={"count": 1}), condition=below))
    assert (wins, losses) == (limit, 10 - limit)
    assert store.get(K)["count"] == limit  # type: ignore[index]


def test_racing_single_use_delete_has_one_taker(store: Store) -> None:
    store.put(item(state="s"))
    wins, losses = _race(5, lambda i: store.delete(K, condition=Condition.exists("state_unused")))
    assert (wins, losses) == (1, 4)


# ---------------------------------------------------------------------------------------------------- durability


def test_writes_that_need_no_disk_sync_keep_every_other_promise(store: Store) -> None:
    """``durable=False`` only waives the disk sync: conditions, reads and races behave as for any write."""
    store.put(item(n=1), durable=False)
    assert store.get(K) == item(n=1)
    with pytest.raises(ConditionFailed) as lost:
        store.put(item(n=2), condition=Condition.absent("new"), durable=False)
    assert lost.value.current == item(n=1)
    assert store.update(K, Update(add={"n": 1}), durable=False) == item(n=2)
    below = Condition("under_limit", Compare("n", "<", 6))
    wins, losses = _race(8, lambda i: store.update(K, Update(add={"n": 1}), condition=below, durable=False))
    assert (wins, losses) == (4, 4)
    store.put(item(n=7))  # a durable write after them
    assert store.get(K) == item(n=7)
    store.update(K, Update(add={"n": 1}), durable=False)
    store.sync_soon()()  # made durable (SQLite), or was already (DynamoDB): either way, nothing else changes
    assert store.get(K) == item(n=8)
