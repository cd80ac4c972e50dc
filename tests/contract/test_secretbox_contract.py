"""Every SecretBox keeps the same promises: the key file (local) and KMS envelope encryption (aws, via moto)."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from mcpbridge.adapters.aws.kms import KmsSecretBox
from mcpbridge.adapters.local.keyfile import KeyFileSecretBox
from mcpbridge.domain import sealed as wire
from mcpbridge.domain.secrets import SEALED_PREFIX, SecretContext, SecretUnreadable
from mcpbridge.ports import SecretBox
from mcpbridge.sealing import open_secret_or_none

CONTEXT = SecretContext(workspace_id="ws_1", kind="connector", item_id="con_1")
OTHER_CONTEXTS = [
    SecretContext(workspace_id="ws_2", kind="connector", item_id="con_1"),
    SecretContext(workspace_id="ws_1", kind="oauth_client", item_id="con_1"),
    SecretContext(workspace_id="ws_1", kind="connector", item_id="con_2"),
]
SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def kms_box(aws_credentials: None) -> Iterator[KmsSecretBox]:
    with mock_aws():
        client = boto3.client("kms", region_name="eu-west-1")
        key_id = client.create_key()["KeyMetadata"]["KeyId"]
        yield KmsSecretBox(client, key_id)


@pytest.fixture
def local_box(tmp_path: Path) -> KeyFileSecretBox:
    return KeyFileSecretBox(tmp_path / "secret.key")


@pytest.fixture(params=["local", "aws"])
def box(request: pytest.FixtureRequest) -> SecretBox:
    fixture = {"local": "local_box", "aws": "kms_box"}[request.param]
    result: SecretBox = request.getfixturevalue(fixture)
    return result


def _payload(sealed: str) -> bytearray:
    text = sealed.removeprefix(SEALED_PREFIX)
    return bytearray(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _reseal(payload: bytes) -> str:
    return SEALED_PREFIX + base64.urlsafe_b64encode(payload).rstrip(b"=").decode()


def _flip(sealed: str, position: int) -> str:
    payload = _payload(sealed)
    payload[position] ^= 0x01
    return _reseal(bytes(payload))


def _tamper_positions(sealed: str) -> dict[str, int]:
    """Byte offsets of each field of the payload, named for the failure message."""
    payload = _payload(sealed)
    size = len(payload)
    positions = {"scheme": 0}
    if payload[0] == wire.SCHEME_KMS:
        edk_size = int.from_bytes(payload[1:3], "big")
        edk_start = 3
        # moto lays its blob out as key id (36) | iv (12) | tag (16) | ciphertext. A tampered key id makes moto
        # answer AccessDeniedException (real KMS authenticates the whole blob and says InvalidCiphertextException),
        # and AccessDenied rightly means Unavailable, so the edk is tampered past moto's key id.
        positions |= {
            "edk length (high byte)": 1,
            "edk length (low byte)": 2,
            "edk iv": edk_start + 40,
            "edk tag": edk_start + 56,
            "edk ciphertext": edk_start + edk_size - 1,
        }
        nonce_start = edk_start + edk_size
    else:
        nonce_start = 1
    positions |= {
        "nonce start": nonce_start,
        "nonce end": nonce_start + wire.NONCE_SIZE - 1,
        "ciphertext": nonce_start + wire.NONCE_SIZE,
        "tag start": size - wire.TAG_SIZE,
        "tag end": size - 1,
    }
    return positions


def _opens(box: SecretBox, sealed: str) -> bool:
    try:
        box.open(sealed, CONTEXT)
    except SecretUnreadable:
        return False
    return True


@pytest.mark.parametrize(
    "plaintext",
    [SECRET, "pässwörd 🔑 秘密", "", "x" * 65536],
    ids=["ascii", "unicode", "empty", "64KiB"],
)
def test_round_trip(box: SecretBox, plaintext: str) -> None:
    assert box.open(box.seal(plaintext, CONTEXT), CONTEXT) == plaintext


def test_sealed_text_is_prefixed_and_hides_the_value(box: SecretBox) -> None:
    sealed = box.seal(SECRET, CONTEXT)

    assert sealed.startswith(SEALED_PREFIX)
    assert SECRET not in sealed
    assert SECRET.encode() not in _payload(sealed)


def test_sealing_twice_gives_different_text(box: SecretBox) -> None:
    assert box.seal(SECRET, CONTEXT) != box.seal(SECRET, CONTEXT)


@pytest.mark.parametrize("other", OTHER_CONTEXTS, ids=["workspace_id", "kind", "item_id"])
def test_another_context_cannot_open(box: SecretBox, other: SecretContext) -> None:
    sealed = box.seal(SECRET, CONTEXT)

    with pytest.raises(SecretUnreadable):
        box.open(sealed, other)


def test_a_flipped_byte_anywhere_is_unreadable(box: SecretBox) -> None:
    sealed = box.seal(SECRET, CONTEXT)
    box.open(sealed, CONTEXT)  # a warm data key cache must not hide tampering

    opened = [field for field, position in _tamper_positions(sealed).items() if _opens(box, _flip(sealed, position))]

    assert opened == []


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        SECRET,
        "enc:v1:",
        "enc:v1:!!!!",
        "enc:v1:AA",
        "enc:v1:" + "A" * 5,
        "enc:v2:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA",
        "enc:v1:" + base64.urlsafe_b64encode(bytes([0x7F]) + bytes(60)).decode().rstrip("="),
    ],
    ids=["empty", "plaintext", "prefix-only", "not-base64", "one-byte", "bad-length", "wrong-version", "scheme"],
)
def test_garbage_is_unreadable(box: SecretBox, garbage: str) -> None:
    with pytest.raises(SecretUnreadable):
        box.open(garbage, CONTEXT)


def test_altered_text_is_unreadable(box: SecretBox) -> None:
    sealed = box.seal(SECRET, CONTEXT)
    altered = [
        sealed.replace(SEALED_PREFIX, "ENC:V1:", 1),
        sealed.removeprefix(SEALED_PREFIX),
        sealed + "=" * (-len(sealed.removeprefix(SEALED_PREFIX)) % 4 or 4),
        sealed + "\n",
        " " + sealed,
        sealed[:-1],
        sealed[:-4],
        sealed[: len(SEALED_PREFIX) + 4],
        sealed[: len(SEALED_PREFIX) + 40],
        _reseal(bytes(_payload(sealed)[:-1])),
        _reseal(bytes(_payload(sealed)[: wire.NONCE_SIZE + wire.TAG_SIZE])),
    ]

    assert [text for text in altered if _opens(box, text)] == []


def test_open_secret_or_none(box: SecretBox, caplog: pytest.LogCaptureFixture) -> None:
    sealed = box.seal(SECRET, CONTEXT)
    caplog.set_level(logging.WARNING, logger="mcpbridge.sealing")

    assert open_secret_or_none(box, sealed, CONTEXT) == SECRET
    assert open_secret_or_none(box, None, CONTEXT) is None
    assert open_secret_or_none(box, "", CONTEXT) is None
    assert not caplog.records

    assert open_secret_or_none(box, _flip(sealed, -1), CONTEXT) is None
    assert open_secret_or_none(box, sealed, OTHER_CONTEXTS[2]) is None

    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]
    assert "con_1" in caplog.records[0].getMessage()
    assert "con_2" in caplog.records[1].getMessage()
    for record in caplog.records:
        message = record.getMessage()
        assert "connector" in message
        assert SECRET not in message
        assert sealed.removeprefix(SEALED_PREFIX)[:16] not in message
        assert "ws_1" not in message


def test_backends_cannot_open_each_other(local_box: KeyFileSecretBox, kms_box: KmsSecretBox) -> None:
    from_local = local_box.seal(SECRET, CONTEXT)
    from_kms = kms_box.seal(SECRET, CONTEXT)

    with pytest.raises(SecretUnreadable):
        kms_box.open(from_local, CONTEXT)
    with pytest.raises(SecretUnreadable):
        local_box.open(from_kms, CONTEXT)


def test_ping(box: SecretBox) -> None:
    box.ping()
