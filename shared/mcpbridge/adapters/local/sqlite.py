"""The store on SQLite: one table of JSON items, WAL journal, the same contract as DynamoDB.

Every write runs in a ``BEGIN IMMEDIATE`` transaction: it reads the current row, evaluates the named condition with
the reference semantics of ``domain.items.evaluate`` and writes. SQLite lets one writer in at a time (across
threads and processes), so two writers racing on the same condition cannot both win. Threads of one process wait
for each other on a lock of their own, woken the moment the writer before them commits, rather than in SQLite's
busy handler, which polls with sleeps of up to 100 ms; the busy handler is left for writers of other processes.

Durability. A write returns once it is durable, so neither a crash of the process nor a power cut loses it: every
commit is made with ``synchronous=NORMAL`` (the WAL is written, not synced), then, outside the write lock, the WAL
file is synced before the write returns (group commit, :mod:`.wal_sync`): one ``fsync`` makes every commit made
before it durable, so writers that commit while a sync is under way share the next one instead of each holding the
write lock through a sync of its own, as ``synchronous=FULL`` would. Nothing acknowledged is unsynced, and WAL
frames carry checksums, so a power cut during a sync rolls back only writes not yet acknowledged, never corrupting
the file. A write made with ``durable=False`` returns without waiting for the sync: a crash of the process still
loses nothing (the commit is in the operating system's cache), while a power cut or a crash of the operating system
may roll back the last such writes, never anything acknowledged as durable (the next sync covers them too). That
is for records worth less than a disk sync on every request: the rate limit's log, the time an endpoint or a key
was last used. :meth:`SqliteStore.sync_soon` has the store's sync thread sync what was written so far while the
caller goes on, and hands back the wait for it: an agent tool call that runs at once is recorded ``running`` without
a sync, that record is synced while the tool runs upstream, and its agent is answered once it is on disk; the
outcome is written without waiting and synced at once behind it. Everything else is durable: what a person or an
agent was told is done (a key, an endpoint, a document, a paused call waiting for an approval) survives a power cut.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcpbridge.adapters.local.sqlite_schema import COLUMNS, initialise, rewrite
from mcpbridge.adapters.local.wal_sync import WalSync, nothing_to_sync
from mcpbridge.domain.items import (
    INDEX_KEYS,
    Check,
    Condition,
    IndexName,
    Item,
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
    key_of,
    op_key,
    position_of,
    validate_item,
    validate_transaction,
)
from mcpbridge.errors import ConditionFailed, InvalidInput, Unavailable
from mcpbridge.ports import Clock

_WRITER_WAIT_SECONDS = 30.0  # as long as SQLite's own busy timeout

# Larger than any character, so "prefix || _TOP" bounds every string that starts with prefix.
_TOP = "\U0010ffff"


class SqliteStore:
    """``ports.Store`` on a SQLite file. One connection per thread; safe across processes."""

    # Readers take no lock of this process, and WAL lets them read while another connection writes: a read is a
    # few tens of microseconds in the page cache (the data directory is on a local disk).
    reads_are_local = True
    indexes_are_consistent = True  # an index is columns of the item's row, read in the same statement

    def __init__(self, path: Path, clock: Clock) -> None:
        self._path = path
        self._clock = clock
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._writer = threading.Lock()  # one writer of this process at a time (see the module docstring)
        self._wal_sync = WalSync(path.with_name(path.name + "-wal"))
        self._ready = False

    # ------------------------------------------------------------------------------------------ connections

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        try:
            self._create_file()
            conn = sqlite3.connect(self._path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=30000")
            # Deleted and overwritten rows are zeroed, not left in free pages: a replaced or deleted credential (or
            # a deleted workspace's data) is not readable from the file afterwards; the old table of a file moved
            # to the current layout neither.
            conn.execute("PRAGMA secure_delete=ON")
            with self._lock:
                if not self._ready:
                    initialise(conn)
                    self._ready = True
            # In WAL mode, NORMAL: SQLite does not sync commits, a durable write syncs the WAL itself (group commit).
            # A file system without WAL support leaves the file in rollback-journal mode: FULL, SQLite syncs.
            wal = conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            conn.execute(f"PRAGMA synchronous={'NORMAL' if wal else 'FULL'}")
            self._local.syncs_itself = not wal
        except (sqlite3.Error, OSError) as exc:
            raise Unavailable(f"cannot open the SQLite store at {self._path}: {exc}", code="store_unavailable") from exc
        self._local.conn = conn
        with self._lock:
            self._connections.append(conn)
        return conn

    def _create_file(self) -> None:
        # The file holds key hashes and sealed secrets: readable by its owner only.
        self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self._path.exists():
            fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def sync_soon(self, *, within: float = 0.0) -> Callable[[], None]:
        """Start making every write of this process so far durable, without waiting (see the module docstring), at
        once or within ``within`` seconds; the returned function waits until they are (blocking; raises
        ``Unavailable`` if the sync failed)."""
        if getattr(self._local, "syncs_itself", False):
            return nothing_to_sync  # no WAL: SQLite synced each commit
        wait = self._wal_sync.soon(within)

        def synced() -> None:
            try:
                wait()
            except OSError as exc:
                raise Unavailable(
                    f"the SQLite store could not sync its journal: {exc}", code="store_unavailable"
                ) from exc

        return synced

    @contextmanager
    def writes_at_once(self) -> Iterator[None]:
        """Writes of this thread in the block never wait: not for another writer (of this process or another), not
        for a disk sync. One that would raises ``Unavailable`` (``store_busy``) and writes nothing, and a durable
        one is refused: for an event loop, which writes what it can at once and hands the rest to a worker thread.
        The loop's connection also leaves checkpoints (which sync the database file) to the others."""
        conn = self._connection()
        if getattr(self._local, "checkpoints", True):
            conn.execute("PRAGMA wal_autocheckpoint=0")
            self._local.checkpoints = False
        conn.execute("PRAGMA busy_timeout=0")
        self._local.at_once = True
        try:
            yield
        finally:
            self._local.at_once = False
            conn.execute("PRAGMA busy_timeout=30000")

    @contextmanager
    def _write_lock(self) -> Iterator[None]:
        at_once = getattr(self._local, "at_once", False)
        if not self._writer.acquire(timeout=0 if at_once else _WRITER_WAIT_SECONDS):
            raise Unavailable(
                "the SQLite store is busy: another write of this process takes too long", code="store_busy"
            )
        try:
            yield
        finally:
            self._writer.release()

    @contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction under the write lock; a durable one returns once the WAL holding it is synced."""
        conn = self._connection()
        if getattr(self._local, "at_once", False) and (durable or self._local.syncs_itself):
            raise Unavailable("this write waits for a disk sync, so not at once", code="store_busy")
        with self._write_lock():
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise Unavailable(f"the SQLite store is busy: {exc}", code="store_busy") from exc
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            ticket = self._wal_sync.committed()
        if durable and not self._local.syncs_itself:
            try:
                self._wal_sync.wait(ticket)
            except OSError as exc:
                message = f"the SQLite store could not sync its journal: {exc}"
                raise Unavailable(message, code="store_unavailable") from exc

    # ------------------------------------------------------------------------------------------ rows

    def _raw(self, conn: sqlite3.Connection, key: Key) -> Item | None:
        row = conn.execute("SELECT body FROM items WHERE pk = ? AND sk = ?", (key.pk, key.sk)).fetchone()
        return None if row is None else _load(row[0])

    def _live(self, conn: sqlite3.Connection, key: Key) -> Item | None:
        item = self._raw(conn, key)
        return item if is_live(item, self._clock.now()) else None

    def _check(self, condition: Condition | None, current: Item | None, index: int | None = None) -> None:
        if condition is not None and not evaluate(condition.clause, current):
            raise ConditionFailed(condition.name, current, operation_index=index)

    def _write_row(self, conn: sqlite3.Connection, item: Item) -> None:
        validate_item(item)
        values = [item.get(c) for c in COLUMNS[:-1]]
        conn.execute(
            f"INSERT OR REPLACE INTO items ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",  # noqa: S608 - fixed column names
            (*values, _dump(item)),
        )

    def _delete_row(self, conn: sqlite3.Connection, key: Key) -> None:
        conn.execute("DELETE FROM items WHERE pk = ? AND sk = ?", (key.pk, key.sk))

    # ------------------------------------------------------------------------------------------ the port

    def get(self, key: Key) -> Item | None:
        return self._live(self._connection(), key)

    def put(self, item: Item, *, condition: Condition | None = None, durable: bool = True) -> None:
        validate_item(item)
        with self._write(durable=durable) as conn:
            self._check(condition, self._live(conn, key_of(item)))
            self._write_row(conn, item)

    def update(self, key: Key, update: Update, *, condition: Condition | None = None, durable: bool = True) -> Item:
        with self._write(durable=durable) as conn:
            current = self._live(conn, key)
            self._check(condition, current)
            item = update.apply(key, current, owned=True)  # parsed from the row just now: no one else holds it
            self._write_row(conn, item)
        return item

    def delete(self, key: Key, *, condition: Condition | None = None) -> Item | None:
        with self._write() as conn:
            current = self._live(conn, key)
            self._check(condition, current)
            self._delete_row(conn, key)
        return current

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
        sql, order_cols = _query_sql(index, bool(sk_prefix), bool(cursor), descending)
        params: list[Any] = [partition, self._clock.now()]
        if sk_prefix:
            params += [sk_prefix, sk_prefix + _TOP]
        if cursor:
            try:
                position = decode_cursor(cursor, partition=partition, index=index)
            except ValueError as exc:
                raise InvalidInput(str(exc), code="invalid_cursor") from exc
            params += [position[c] for c in order_cols]
        rows = self._connection().execute(sql, (*params, limit + 1)).fetchall()
        items = [_load(r[0]) for r in rows[:limit]]
        next_cursor = encode_cursor(position_of(items[-1], index)) if len(rows) > limit else None
        return Page(items=items, cursor=next_cursor)

    def transact(self, ops: Sequence[WriteOp]) -> None:
        validate_transaction(ops)
        with self._write() as conn:
            for position, op in enumerate(ops):
                key = op_key(op)
                current = self._live(conn, key)
                self._check(op.condition, current, position)
                match op:
                    case Put(item=item):
                        self._write_row(conn, item)
                    case Patch(update=update):
                        self._write_row(conn, update.apply(key, current, owned=True))
                    case Remove():
                        self._delete_row(conn, key)
                    case Check():
                        pass

    def ping(self) -> None:
        try:
            self._connection().execute("SELECT 1 FROM items LIMIT 1").fetchall()
        except sqlite3.Error as exc:
            raise Unavailable(f"the SQLite store does not answer: {exc}", code="store_unavailable") from exc

    def reclaim(self) -> None:
        """Rewrite the file from its live rows (``VACUUM``), after the deletion of a whole workspace: a deleted
        row's body is zeroed at once (``secure_delete``), but its key may linger as a divider in an index page."""
        conn = self._connection()
        with self._write_lock():
            try:
                rewrite(conn)
            except sqlite3.OperationalError as exc:
                raise Unavailable(f"the SQLite store could not rewrite its file: {exc}", code="store_busy") from exc

    def purge_expired(self) -> int:
        """Delete expired rows (reads already hide them; this only reclaims space)."""
        with self._write() as conn:
            cur = conn.execute(
                "DELETE FROM items WHERE expires_at IS NOT NULL AND expires_at <= ?", (self._clock.now(),)
            )
            return cur.rowcount


@functools.cache
def _query_sql(index: IndexName | None, prefix: bool, cursor: bool, descending: bool) -> tuple[str, tuple[str, ...]]:
    """The statement of a query of this shape (built once: queries run on every request), and its order columns.
    Parameters: partition, now, [prefix low, prefix high], [the cursor's order columns], limit."""
    pk_col, sk_col = INDEX_KEYS[index] if index else ("pk", "sk")
    order_cols = (sk_col, *(("pk", "sk") if index else ()))
    where = [f"{pk_col} = ?", "(expires_at IS NULL OR expires_at > ?)"]
    if prefix:
        where.append(f"{sk_col} >= ? AND {sk_col} < ?")
    if cursor:
        # Row-value comparison: strictly after (or before) the last item returned.
        marks = ", ".join("?" * len(order_cols))
        where.append(f"({', '.join(order_cols)}) {'<' if descending else '>'} ({marks})")
    direction = "DESC" if descending else "ASC"
    sql = (
        f"SELECT body FROM items WHERE {' AND '.join(where)} "  # noqa: S608 - fixed column names
        f"ORDER BY {', '.join(f'{c} {direction}' for c in order_cols)} LIMIT ?"
    )
    return sql, order_cols


def _dump(item: Item) -> str:
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _load(body: str) -> Item:
    item: Item = json.loads(body)
    return item
