"""Index files kept in S3, one per knowledge base, with a version pointer in DynamoDB.

    KB#<kb> / INDEX         {version, object}: the published version; advanced only by a conditional write
    KB#<kb> / INDEX_LEASE   {holder, lease_until}: one writer per knowledge base at a time
    s3://<bucket>/indexes/<kb>/v<version>-<random>.sqlite3   (the random part: a name is never reused, so a
                                                              cached copy can never stand for other content)

Readers read the pointer (one consistent get), download that version into the local cache (``/tmp`` in Lambda)
unless it is already there, and query the local copy; a new version is fetched only when the pointer moved.
Writers take the lease, copy the current version, change the copy, upload it as the next version and advance the
pointer on the condition that it still names the version they started from. The previous version is kept in
S3 so a reader that read the old pointer a moment ago can still fetch it.

The file must fit the ``/tmp`` of every function that reads it, twice while a reader switches versions: past
``max_file_bytes`` a write that would grow it is refused (``index_full``), the published version left as it was;
writes that do not grow it (deletions) still go through.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from mcpbridge.adapters.index_files.kb_index import KbIndexFile
from mcpbridge.domain.items import AttrAbsent, Compare, Condition, ItemAbsent, Key, Update, all_of, any_of
from mcpbridge.errors import ConditionFailed, Unavailable
from mcpbridge.ports import Clock, Store

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

LEASE_SECONDS = 120
WAIT_FOR_LEASE_SECONDS = 60


def pointer_key(kb_id: str) -> Key:
    return Key(f"KB#{kb_id}", "INDEX")


def lease_key(kb_id: str) -> Key:
    return Key(f"KB#{kb_id}", "INDEX_LEASE")


class S3IndexFiles:
    """``IndexFiles`` on S3 + a DynamoDB version pointer, cached under ``cache_dir``."""

    def __init__(
        self,
        store: Store,
        s3: S3Client,
        bucket: str,
        cache_dir: Path,
        clock: Clock,
        *,
        lease_wait_seconds: float = WAIT_FOR_LEASE_SECONDS,
        max_file_bytes: int = 0,
    ) -> None:
        """``lease_wait_seconds``: how long a writer waits for the knowledge base's lease before it gives up with
        ``Unavailable`` ``index_busy`` (the job is then tried again later, not failed). ``max_file_bytes``: the size
        a write may not grow a file past (0: no limit)."""
        self._lease_wait = lease_wait_seconds
        self._max_file_bytes = max_file_bytes
        self._store = store
        self._s3 = s3
        self._bucket = bucket
        self._cache = cache_dir
        self._clock = clock
        self._open: dict[str, tuple[str, KbIndexFile]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def new_object_key(kb_id: str, version: int) -> str:
        return f"indexes/{kb_id}/v{version}-{uuid.uuid4().hex[:12]}.sqlite3"

    def _cached_path(self, object_key: str) -> Path:
        return self._cache / object_key.removeprefix("indexes/")

    # ------------------------------------------------------------------------------------------ reading

    def _published(self, kb_id: str) -> tuple[int, str] | None:
        pointer = self._store.get(pointer_key(kb_id))
        return None if pointer is None else (int(pointer["version"]), str(pointer["object"]))

    @contextlib.contextmanager
    def reading(self, kb_id: str) -> Iterator[KbIndexFile | None]:
        published = self._published(kb_id)
        if published is None:
            yield None
            return
        yield self._open_object(kb_id, published[1])

    def _open_object(self, kb_id: str, object_key: str) -> KbIndexFile:
        with self._lock:
            current = self._open.get(kb_id)
            if current is not None and current[0] == object_key:
                return current[1]
        path = self._cached_path(object_key)
        if not path.exists():
            self._download(object_key, path)
        # A published version never changes: read it as an immutable file (no -wal/-shm beside it).
        index = KbIndexFile(path, read_only=True)
        with self._lock:
            previous = self._open.get(kb_id)
            self._open[kb_id] = (object_key, index)
        if previous is not None and previous[0] != object_key:
            previous[1].close()
            _remove_sqlite(self._cached_path(previous[0]))
        return index

    def _download(self, object_key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        try:
            self._s3.download_file(self._bucket, object_key, str(partial))
            partial.replace(path)
        except (ClientError, BotoCoreError) as exc:
            partial.unlink(missing_ok=True)
            raise Unavailable(f"cannot fetch the index file {object_key}", code="index_unavailable") from exc
        except OSError as exc:
            partial.unlink(missing_ok=True)
            if exc.errno != errno.ENOSPC:
                raise
            free = shutil.disk_usage(path.parent).free
            message = f"the index file {object_key} does not fit in {self._cache} ({_mib(free)} free)"
            raise Unavailable(message, code="index_too_large") from None

    # ------------------------------------------------------------------------------------------ writing

    @contextlib.contextmanager
    def writing(self, kb_id: str) -> Iterator[KbIndexFile]:
        holder = uuid.uuid4().hex
        self._take_lease(kb_id, holder)
        work = self._cache / kb_id / f".write-{holder}.sqlite3"
        try:
            published = self._published(kb_id)
            work.parent.mkdir(parents=True, exist_ok=True)
            if published is not None:
                self._download(published[1], work)
            before = work.stat().st_size if published is not None else 0
            index = KbIndexFile(work)
            try:
                yield index
            finally:
                index.close()
            _checkpoint(work)
            self._check_size(kb_id, before, work.stat().st_size)
            self._publish(kb_id, published, work)
        finally:
            self._release_lease(kb_id, holder)
            _remove_sqlite(work)

    def _check_size(self, kb_id: str, before: int, after: int) -> None:
        if not self._max_file_bytes or after <= self._max_file_bytes or after <= before:
            return
        raise Unavailable(
            f"the index of knowledge base {kb_id} would grow to {_mib(after)}, past the {_mib(self._max_file_bytes)} "
            "an index file may have (every function reading it holds it in its /tmp): nothing was changed; "
            "knowledge bases this large need SearchEngine=lance (infra/README.md, Search engine)",
            code="index_full",
        )

    def _publish(self, kb_id: str, published: tuple[int, str] | None, work: Path) -> None:
        new_version = (published[0] if published else 0) + 1
        new_object = self.new_object_key(kb_id, new_version)
        try:
            self._s3.upload_file(str(work), self._bucket, new_object)
        except (ClientError, BotoCoreError) as exc:
            raise Unavailable(f"cannot store the index of knowledge base {kb_id}", code="index_unavailable") from exc
        unchanged = (
            Condition.absent("index_unpublished")
            if published is None
            else Condition.equals("index_version_unchanged", "version", published[0])
        )
        pointer = {**pointer_key(kb_id).as_dict(), "version": new_version, "object": new_object}
        if published is not None:
            pointer["previous_object"] = published[1]
        try:
            previous = self._store.get(pointer_key(kb_id)) if published is not None else None
            self._store.put(pointer, condition=unchanged)
        except ConditionFailed as lost:
            # Only a writer that lost its lease gets here; its upload is orphaned, the published index is intact.
            raise Unavailable("the index changed while it was being written; retry", code="index_contention") from lost
        # Keep the cache warm with what was just published; drop the version before the previous one.
        cached = self._cached_path(new_object)
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(work, cached)
        stale = (previous or {}).get("previous_object")
        if stale:
            with contextlib.suppress(ClientError, BotoCoreError):
                self._s3.delete_object(Bucket=self._bucket, Key=stale)

    def _take_lease(self, kb_id: str, holder: str) -> None:
        deadline = time.monotonic() + self._lease_wait
        delay = 0.05
        while True:
            now = self._clock.now()
            free = Condition(
                "index_lease_free",
                any_of(ItemAbsent(), AttrAbsent("lease_until"), Compare("lease_until", "<", now)),
            )
            try:
                self._store.update(
                    lease_key(kb_id), Update(set={"holder": holder, "lease_until": now + LEASE_SECONDS}), condition=free
                )
                return
            except ConditionFailed:
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"the index of knowledge base {kb_id} stayed busy (another write) for {self._lease_wait:g} s",
                        code="index_busy",
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _release_lease(self, kb_id: str, holder: str) -> None:
        mine = Condition("index_lease_mine", all_of(Compare("holder", "=", holder)))
        with contextlib.suppress(ConditionFailed):
            self._store.delete(lease_key(kb_id), condition=mine)

    # ------------------------------------------------------------------------------------------ dropping

    def drop(self, kb_id: str) -> None:
        with self._lock:
            current = self._open.pop(kb_id, None)
        if current is not None:
            current[1].close()
        pointer = self._store.delete(pointer_key(kb_id))
        for name in ("object", "previous_object"):
            if pointer and pointer.get(name):
                with contextlib.suppress(ClientError, BotoCoreError):
                    self._s3.delete_object(Bucket=self._bucket, Key=pointer[name])
        shutil.rmtree(self._cache / kb_id, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            for _, index in self._open.values():
                index.close()
            self._open.clear()


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB"


def _checkpoint(path: Path) -> None:
    """Fold the write-ahead log into the main file, so the one file uploaded holds every change."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
