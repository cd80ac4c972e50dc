"""Reading (or deleting) every item of a partition, page after page."""

from __future__ import annotations

from collections.abc import Iterator

from mcpbridge.domain.items import IndexName, Item, Key
from mcpbridge.ports import Store


def every_item(
    store: Store, partition: str, *, sk_prefix: str = "", index: IndexName | None = None, page_size: int = 200
) -> Iterator[Item]:
    """All live items of a partition (of the table or an index) in sort-key order, fetched a page at a time."""
    cursor: str | None = None
    while True:
        page = store.query(partition, sk_prefix=sk_prefix, index=index, limit=page_size, cursor=cursor)
        yield from page.items
        cursor = page.cursor
        if cursor is None:
            return


def delete_every_item(store: Store, partition: str, *, sk_prefix: str) -> int:
    """Delete every live item of a table partition whose sort key starts with ``sk_prefix``; how many went."""
    items = list(every_item(store, partition, sk_prefix=sk_prefix))
    for item in items:
        store.delete(Key(item["pk"], item["sk"]))
    return len(items)
