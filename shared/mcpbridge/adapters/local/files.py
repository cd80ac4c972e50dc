"""Blobs as files under the data directory, written atomically (temporary file + rename)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from mcpbridge.errors import Unavailable
from mcpbridge.ports import UploadTarget


class FileBlobs:
    """``ports.Blobs`` on a directory. Keys are relative paths of safe segments (``a/b/c.txt``)."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") or "\\" in p or "\x00" in p for p in parts):
            raise ValueError(f"invalid blob key {key!r}")
        return self._root.joinpath(*parts)

    def put(self, key: str, data: bytes, *, content_type: str = "application/octet-stream") -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise Unavailable(f"cannot write blob {key}: {exc.strerror}", code="blobs_unavailable") from exc

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Unavailable(f"cannot read blob {key}: {exc.strerror}", code="blobs_unavailable") from exc

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise Unavailable(f"cannot delete blob {key}: {exc.strerror}", code="blobs_unavailable") from exc

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Unavailable(f"cannot read blob {key}: {exc.strerror}", code="blobs_unavailable") from exc

    def copy(self, source: str, destination: str) -> None:
        origin, path = self._path(source), self._path(destination)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            os.close(fd)
            try:
                shutil.copyfile(origin, tmp)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise Unavailable(f"cannot copy blob {source}: {exc.strerror}", code="blobs_unavailable") from exc

    def upload_target(self, key: str, *, content_type: str, max_bytes: int, expires_in: int) -> UploadTarget | None:
        return None  # uploads come through mcpbridge's own route
