"""What the store says of a knowledge base's Lance index: one item per knowledge base.

    KB#<kb> / LANCE_INDEX   table       the dataset searches read (``tables.new_dataset_name``)
                            state       ``ready``; ``migrating`` while a copy from the SQLite file index fills
                                        ``table`` (searches keep reading the file index until it is complete)
                            language, analyser   the keyword analysis ``table``'s terms hold
                            embedder, dimension  the embedder its vectors come from (once there are vectors)
                            writes      how many writes changed it (readers reopen the dataset when it moved)
                            optimised_writes     ``writes`` at the last optimisation
                            stats       the dataset of term frequencies and vector statistics (``maintenance``)
                            building_table, building_language, building_after, building_source
                                        a re-analysis (source ``table``) or a migration (``files``) copying into
                                        a new dataset, which every write also feeds; ``building_after`` = the
                                        last document copied
                            retired     [[name, when]]: datasets no search reads any more, dropped after a grace

Changes of ``table``, ``state`` and ``building`` are conditional writes on what the changer read, so two jobs
never both switch an index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcpbridge.domain.items import Item, Key

READY = "ready"
MIGRATING = "migrating"


def pointer_key(kb_id: str) -> Key:
    return Key(f"KB#{kb_id}", "LANCE_INDEX")


@dataclass(frozen=True)
class Building:
    table: str
    language: str
    after: str
    """The last document id copied so far ("" before the first)."""
    source: str
    """``table`` (a re-analysis of the current dataset) or ``files`` (a migration from the SQLite file index)."""


@dataclass(frozen=True)
class Pointer:
    kb_id: str
    table: str
    state: str
    language: str | None
    analyser: str | None
    embedder: str | None
    dimension: int | None
    writes: int
    optimised_writes: int
    stats: str | None
    building: Building | None
    retired: tuple[tuple[str, float], ...]

    @property
    def searchable(self) -> bool:
        return self.state == READY

    @staticmethod
    def of(kb_id: str, item: Item) -> Pointer:
        return Pointer(
            kb_id=kb_id,
            table=str(item["table"]),
            state=str(item.get("state", READY)),
            language=_text(item.get("language")),
            analyser=_text(item.get("analyser")),
            embedder=_text(item.get("embedder")),
            dimension=None if item.get("dimension") is None else int(item["dimension"]),
            writes=int(item.get("writes", 0)),
            optimised_writes=int(item.get("optimised_writes", 0)),
            stats=_text(item.get("stats")),
            building=None
            if not item.get("building_table")
            else Building(
                str(item["building_table"]),
                str(item.get("building_language")),
                str(item.get("building_after", "")),
                str(item.get("building_source", "table")),
            ),
            retired=tuple((str(name), float(when)) for name, when in item.get("retired", [])),
        )


BUILDING_ATTRS = ("building_table", "building_language", "building_after", "building_source")


def building_item(building: Building) -> dict[str, str]:
    return {
        "building_table": building.table,
        "building_language": building.language,
        "building_after": building.after,
        "building_source": building.source,
    }


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
