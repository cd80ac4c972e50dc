"""Pure rules: credentials, ids, scopes, updates and cursors."""

from __future__ import annotations

import pytest

from mcpbridge.domain import credentials
from mcpbridge.domain.identity import Scope, scope_of, timestamp
from mcpbridge.domain.ids import is_id, new_id
from mcpbridge.domain.items import Key, Update, decode_cursor, encode_cursor, validate_item


def test_issued_credentials_have_the_documented_shape() -> None:
    issued = credentials.issue(credentials.API_KEY_PREFIX)
    assert issued.plaintext.startswith("sk_")
    assert len(issued.plaintext) == 3 + 43
    assert credentials.well_formed(issued.plaintext, credentials.API_KEY_PREFIX)
    assert not credentials.well_formed(issued.plaintext, credentials.ENDPOINT_TOKEN_PREFIX)
    assert issued.sha256 == credentials.digest(issued.plaintext)
    assert len(issued.sha256) == 64
    assert issued.hint == issued.plaintext[:12]
    token = credentials.issue(credentials.ENDPOINT_TOKEN_PREFIX)
    assert token.plaintext.startswith("mcp_")
    assert len(token.plaintext) == 4 + 43
    assert credentials.issue("sk_").plaintext != issued.plaintext


@pytest.mark.parametrize(
    "bad", ["", "sk_", "sk_" + "a" * 42, "sk_" + "a" * 44, "sk_" + "a" * 42 + "=", " sk_" + "a" * 43]
)
def test_malformed_keys_are_not_well_formed(bad: str) -> None:
    assert not credentials.well_formed(bad, credentials.API_KEY_PREFIX)


def test_ids_sort_by_creation_and_validate() -> None:
    ids = [new_id("ws") for _ in range(3)]
    assert all(is_id(i, "ws") for i in ids)
    assert not is_id(ids[0], "usr")
    assert not is_id("ws_short", "ws")
    assert len(set(ids)) == 3
    assert new_id("key")[:14] <= new_id("key")[:14]


def test_timestamps_are_fixed_width_utc() -> None:
    assert timestamp(0) == "1970-01-01T00:00:00Z"
    assert timestamp(1_800_000_000.9) == "2027-01-15T08:00:00Z"


@pytest.mark.parametrize(
    ("outer", "inner", "covers"),
    [
        (scope_of(None, None), scope_of(None, None), True),
        (scope_of(None, None), scope_of(["read"], ["kb1"]), True),
        (scope_of(["read"], None), scope_of(None, None), False),
        (scope_of(["read"], None), scope_of(["read"], ["kb1"]), True),
        (scope_of(["read"], None), scope_of(["read", "write"], None), False),
        (scope_of(None, ["kb1"]), scope_of(None, ["kb1", "kb2"]), False),
        (scope_of(None, ["kb1"]), scope_of(None, []), True),
        (scope_of(None, ["kb1"]), scope_of(None, None), False),
    ],
)
def test_scope_cover(outer: Scope, inner: Scope, covers: bool) -> None:
    assert outer.covers(inner) is covers


def test_update_applies_to_absent_and_present_items() -> None:
    key = Key("P", "S")
    assert Update(set={"a": 1}, add={"n": 2}).apply(key, None) == {"pk": "P", "sk": "S", "a": 1, "n": 2}
    current = {"pk": "P", "sk": "S", "a": {"deep": [1]}, "n": 1, "gone": True}
    updated = Update(set={"b": 2}, remove=["gone"], add={"n": 1}).apply(key, current)
    assert updated == {"pk": "P", "sk": "S", "a": {"deep": [1]}, "n": 2, "b": 2}
    updated["a"]["deep"].append(2)
    assert current["a"] == {"deep": [1]}, "apply must not alias the current item"


def test_update_changes_an_owned_item_in_place_and_never_aliases_its_own_values() -> None:
    key = Key("P", "S")
    values = {"deep": [1]}
    owned = {"pk": "P", "sk": "S", "n": 1, "gone": True}
    updated = Update(set={"v": values}, remove=["gone"], add={"n": 1}).apply(key, owned, owned=True)
    assert updated is owned
    assert updated == {"pk": "P", "sk": "S", "n": 2, "v": {"deep": [1]}}
    updated["v"]["deep"].append(2)
    assert values == {"deep": [1]}, "the update's own values are still copied"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"set": {"pk": "x"}},
        {"set": {"a": 1}, "remove": ["a"]},
        {"set": {"gsi1pk": ""}},
        {"set": {"expires_at": 1.5}},
        {"add": {"expires_at": 1}},
        {},
    ],
)
def test_bad_updates_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies by rule
        Update(**kwargs)  # type: ignore[arg-type]


def test_adding_to_a_non_number_is_refused() -> None:
    with pytest.raises(ValueError, match="non-numeric"):
        Update(add={"name": 1}).apply(Key("P", "S"), {"pk": "P", "sk": "S", "name": "x"})


def test_items_need_string_keys_and_integer_expiry() -> None:
    validate_item({"pk": "a", "sk": "b", "expires_at": 5, "gsi2pk": "x"})
    for bad in ({"pk": "a"}, {"pk": "", "sk": "b"}, {"pk": "a", "sk": "b", "expires_at": True}):
        with pytest.raises(ValueError):  # noqa: PT011
            validate_item(bad)


def test_cursors_round_trip_and_belong_to_their_query() -> None:
    position = {"pk": "KB#1", "sk": "DOC#9"}
    cursor = encode_cursor(position)
    assert decode_cursor(cursor, partition="KB#1", index=None) == position
    with pytest.raises(ValueError, match="another query"):
        decode_cursor(cursor, partition="KB#2", index=None)
    with pytest.raises(ValueError, match="malformed"):
        decode_cursor(cursor, partition="KB#1", index="gsi1")
    with pytest.raises(ValueError, match="malformed"):
        decode_cursor("%%%", partition="KB#1", index=None)
    indexed = {"pk": "EP#1", "sk": "META", "gsi1pk": "T#x", "gsi1sk": "1"}
    assert decode_cursor(encode_cursor(indexed), partition="T#x", index="gsi1") == indexed
