"""The local key file: created lazily and privately, shared across restarts and racing starters, never replaced."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from mcpbridge import errors
from mcpbridge.adapters.local import keyfile
from mcpbridge.adapters.local.keyfile import KeyFileSecretBox
from mcpbridge.domain.secrets import SecretContext, SecretUnreadable

CONTEXT = SecretContext(workspace_id="ws_1", kind="connector", item_id="con_1")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_key_file_is_created_on_first_use_not_by_construction(tmp_path: Path) -> None:
    path = tmp_path / "data" / "secret.key"
    box = KeyFileSecretBox(path)

    assert not path.exists()
    assert not path.parent.exists()

    box.seal("value", CONTEXT)

    assert path.stat().st_size == 32
    assert _mode(path) == 0o600
    assert _mode(path.parent) & 0o077 == 0


def test_ping_creates_the_key(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    KeyFileSecretBox(path).ping()

    assert path.stat().st_size == 32


def test_a_restarted_box_opens_earlier_values(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    sealed = KeyFileSecretBox(path).seal("value", CONTEXT)
    key = path.read_bytes()

    assert KeyFileSecretBox(path).open(sealed, CONTEXT) == "value"
    assert path.read_bytes() == key


def test_another_key_file_cannot_open(tmp_path: Path) -> None:
    sealed = KeyFileSecretBox(tmp_path / "a.key").seal("value", CONTEXT)

    with pytest.raises(SecretUnreadable):
        KeyFileSecretBox(tmp_path / "b.key").open(sealed, CONTEXT)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_key_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "secret.key"
    path.write_bytes(os.urandom(32))
    path.chmod(mode)

    with pytest.raises(errors.Unavailable, match=str(path)):
        KeyFileSecretBox(path).seal("value", CONTEXT)
    assert _mode(path) == mode


@pytest.mark.parametrize("size", [0, 16, 31, 33, 64])
def test_a_key_file_of_the_wrong_size_is_refused_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    monkeypatch.setattr(keyfile, "PARTIAL_WRITE_GRACE_SECONDS", 0.05)
    path = tmp_path / "secret.key"
    content = os.urandom(size)
    path.write_bytes(content)
    path.chmod(0o600)
    box = KeyFileSecretBox(path)

    with pytest.raises(errors.Unavailable, match=str(path)):
        box.seal("value", CONTEXT)
    with pytest.raises(errors.Unavailable):
        box.ping()
    assert path.read_bytes() == content


def test_a_key_file_still_being_written_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    key = os.urandom(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, key[:10])

    def finish_writing() -> None:
        os.write(fd, key[10:])
        os.close(fd)

    writer = threading.Timer(0.1, finish_writing)
    writer.start()
    try:
        sealed = KeyFileSecretBox(path).seal("value", CONTEXT)
    finally:
        writer.join()

    assert path.read_bytes() == key
    assert KeyFileSecretBox(path).open(sealed, CONTEXT) == "value"


def test_threads_racing_on_a_fresh_path_share_one_key(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "secret.key"
    # One box per thread, as separate processes would have; a shared box would serialise on its own lock.
    boxes = [KeyFileSecretBox(path) for _ in range(8)]
    start = threading.Barrier(len(boxes))
    sealed: dict[int, str] = {}
    failures: list[BaseException] = []

    def seal(index: int) -> None:
        try:
            start.wait()
            sealed[index] = boxes[index].seal(f"value {index}", CONTEXT)
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=seal, args=(i,)) for i in range(len(boxes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert path.stat().st_size == 32
    assert _mode(path) == 0o600
    reader = KeyFileSecretBox(path)
    assert {i: reader.open(value, CONTEXT) for i, value in sealed.items()} == {i: f"value {i}" for i in range(8)}
