"""A SecretBox for the embedded backend: AES-256-GCM under a 32-byte key kept in a local file."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mcpbridge import errors
from mcpbridge.domain import sealed as wire
from mcpbridge.domain.secrets import SecretContext, SecretUnreadable

KEY_SIZE = 32

# Another process may have created the file and not yet written the key; a short file is re-read for this long
# before it is declared damaged.
PARTIAL_WRITE_GRACE_SECONDS = 1.0
_RETRY_INTERVAL_SECONDS = 0.01


class KeyFileSecretBox:
    """Seals secrets with a key file that is created (mode 0600) on first use.

    An existing key file that is the wrong size or readable by group/other is refused with ``errors.Unavailable``
    rather than replaced: a new key would make every stored secret unreadable.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._aead: AESGCM | None = None
        self._lock = threading.Lock()

    def seal(self, plaintext: str, context: SecretContext) -> str:
        nonce = os.urandom(wire.NONCE_SIZE)
        ciphertext = self._cipher().encrypt(nonce, plaintext.encode("utf-8"), context.canonical())
        return wire.encode(wire.LocalSealed(nonce, ciphertext))

    def open(self, sealed: str, context: SecretContext) -> str:
        payload = wire.decode(sealed)
        if not isinstance(payload, wire.LocalSealed):
            raise SecretUnreadable("sealed value was not sealed with a local key file")
        aead = self._cipher()
        try:
            return aead.decrypt(payload.nonce, payload.ciphertext, context.canonical()).decode("utf-8")
        except (InvalidTag, UnicodeDecodeError):
            raise SecretUnreadable("sealed value does not open with this key and context") from None

    def ping(self) -> None:
        self._cipher()

    def _cipher(self) -> AESGCM:
        aead = self._aead
        if aead is None:
            with self._lock:
                if self._aead is None:
                    self._aead = AESGCM(self._load_or_create())
                aead = self._aead
        return aead

    def _load_or_create(self) -> bytes:
        try:
            return self._read()
        except FileNotFoundError:
            pass
        try:
            self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            return self._create()
        except FileExistsError:
            pass  # lost the race to another process or thread: its key is the one
        except OSError as exc:
            raise errors.Unavailable(f"cannot create key file {self._path}: {exc.strerror}") from exc
        try:
            return self._read()
        except FileNotFoundError as exc:
            raise errors.Unavailable(f"key file {self._path} disappeared while it was being created") from exc

    def _create(self) -> bytes:
        # O_EXCL makes creation the single point where concurrent starters agree on one key.
        fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            key = os.urandom(KEY_SIZE)
            view = memoryview(key)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        return key

    def _read(self) -> bytes:
        """The key; raises FileNotFoundError when there is no file yet."""
        deadline = time.monotonic() + PARTIAL_WRITE_GRACE_SECONDS
        while True:
            try:
                key = self._read_once()
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise errors.Unavailable(f"cannot read key file {self._path}: {exc.strerror}") from exc
            if len(key) == KEY_SIZE:
                return key
            # A writer never makes the file longer than the key, so only a short file can still be in progress.
            if len(key) > KEY_SIZE or time.monotonic() >= deadline:
                raise errors.Unavailable(
                    f"key file {self._path} holds {len(key)} bytes, expected {KEY_SIZE}; refusing to use or replace "
                    "it (a new key would make every stored secret unreadable)"
                )
            time.sleep(_RETRY_INTERVAL_SECONDS)

    def _read_once(self) -> bytes:
        fd = os.open(self._path, os.O_RDONLY)
        try:
            # Checked on the open descriptor so the file inspected is the file read.
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise errors.Unavailable(f"key file {self._path} is not a regular file")
            mode = stat.S_IMODE(info.st_mode)
            if mode & 0o077:
                raise errors.Unavailable(
                    f"key file {self._path} has mode {mode:04o}, which gives group or other access to it; "
                    f"run `chmod 600 {self._path}` if it has not leaked"
                )
            chunks: list[bytes] = []
            size = 0
            while size <= KEY_SIZE:
                chunk = os.read(fd, KEY_SIZE + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
