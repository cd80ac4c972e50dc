"""A SecretBox on AWS KMS: envelope encryption with AES-256-GCM data keys bound to the secret's context."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from botocore.exceptions import BotoCoreError, ClientError
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mcpbridge import errors
from mcpbridge.domain import sealed as wire
from mcpbridge.domain.secrets import SecretContext, SecretUnreadable

if TYPE_CHECKING:
    from mypy_boto3_kms import KMSClient

DATA_KEY_SIZE = 32
MAX_SEALS_PER_DATA_KEY = 10_000
CACHE_ENTRIES = 256
# KMS rejects longer CiphertextBlobs as a validation error, which would otherwise read as an outage.
MAX_ENCRYPTED_KEY_SIZE = 6144

# What KMS says when the ciphertext itself is wrong: tampered, or made under another key or context. Every other
# error (throttling, access denied, a disabled or pending-deletion key, a network failure) leaves the value intact
# and recoverable, so it is reported as Unavailable rather than as an unreadable secret.
_UNREADABLE_CODES = frozenset({"InvalidCiphertextException", "IncorrectKeyException"})

_T = TypeVar("_T")
_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass
class _SealingKey:
    aead: AESGCM
    encrypted_key: bytes
    expires_at: float
    uses: int


@dataclass(frozen=True)
class _OpeningKey:
    aead: AESGCM
    expires_at: float


class KmsSecretBox:
    """Seals secrets with KMS data keys, with the secret's context as both KMS encryption context and AES-GCM AAD.

    Data keys are cached in memory for ``cache_seconds`` so a burst of seals or opens costs one KMS call: a
    sealing key is reused only for the context it was generated for (KMS binds the encrypted data key to it) and
    for at most ``MAX_SEALS_PER_DATA_KEY`` seals. Construction does no I/O and draws no randomness, so an instance
    built during a Lambda SnapStart snapshot holds nothing that restored copies would share.
    """

    def __init__(
        self,
        client: KMSClient,
        key_id: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        cache_seconds: float = 300.0,
    ) -> None:
        self._client = client
        self._key_id = key_id
        self._clock = clock
        self._cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._sealing: OrderedDict[bytes, _SealingKey] = OrderedDict()
        self._opening: OrderedDict[tuple[bytes, bytes], _OpeningKey] = OrderedDict()

    def seal(self, plaintext: str, context: SecretContext) -> str:
        aead, encrypted_key = self._sealing_key(context)
        nonce = os.urandom(wire.NONCE_SIZE)
        ciphertext = aead.encrypt(nonce, plaintext.encode("utf-8"), context.canonical())
        return wire.encode(wire.KmsSealed(encrypted_key, nonce, ciphertext))

    def open(self, sealed: str, context: SecretContext) -> str:
        payload = wire.decode(sealed)
        if not isinstance(payload, wire.KmsSealed):
            raise SecretUnreadable("sealed value was not sealed with KMS")
        if len(payload.encrypted_key) > MAX_ENCRYPTED_KEY_SIZE:
            raise SecretUnreadable("sealed value carries an oversized data key")
        aead = self._opening_key(payload.encrypted_key, context)
        try:
            return aead.decrypt(payload.nonce, payload.ciphertext, context.canonical()).decode("utf-8")
        except (InvalidTag, UnicodeDecodeError):
            raise SecretUnreadable("sealed value does not open with this data key and context") from None

    def ping(self) -> None:
        metadata = self._call("DescribeKey", lambda: self._client.describe_key(KeyId=self._key_id))["KeyMetadata"]
        state = metadata.get("KeyState", "Unknown")
        if state != "Enabled":
            raise errors.Unavailable(f"KMS key {self._key_id} is {state}, not Enabled", details={"key_state": state})

    def _sealing_key(self, context: SecretContext) -> tuple[AESGCM, bytes]:
        cache_key = context.canonical()
        now = self._clock()
        with self._lock:
            entry = self._sealing.get(cache_key)
            if entry is not None and now < entry.expires_at and entry.uses < MAX_SEALS_PER_DATA_KEY:
                entry.uses += 1
                self._sealing.move_to_end(cache_key)
                return entry.aead, entry.encrypted_key
        # KMS is called outside the lock: concurrent misses may each generate a key, which is merely wasteful.
        response = self._call(
            "GenerateDataKey",
            lambda: self._client.generate_data_key(
                KeyId=self._key_id, KeySpec="AES_256", EncryptionContext=context.as_dict()
            ),
        )
        if len(response["Plaintext"]) != DATA_KEY_SIZE:
            raise errors.Unavailable(f"KMS key {self._key_id} returned a data key of the wrong size")
        aead = AESGCM(response["Plaintext"])
        encrypted_key = response["CiphertextBlob"]
        if self._cache_seconds > 0:
            with self._lock:
                _remember(self._sealing, cache_key, _SealingKey(aead, encrypted_key, now + self._cache_seconds, 1))
        return aead, encrypted_key

    def _opening_key(self, encrypted_key: bytes, context: SecretContext) -> AESGCM:
        cache_key = (encrypted_key, context.canonical())
        now = self._clock()
        with self._lock:
            entry = self._opening.get(cache_key)
            if entry is not None and now < entry.expires_at:
                self._opening.move_to_end(cache_key)
                return entry.aead
        response = self._call(
            "Decrypt",
            lambda: self._client.decrypt(
                CiphertextBlob=encrypted_key, EncryptionContext=context.as_dict(), KeyId=self._key_id
            ),
        )
        if len(response["Plaintext"]) != DATA_KEY_SIZE:
            # KMS opened it, so it is intact, but it is not one of our data keys.
            raise SecretUnreadable("sealed value carries a data key of the wrong size")
        aead = AESGCM(response["Plaintext"])
        if self._cache_seconds > 0:
            with self._lock:
                _remember(self._opening, cache_key, _OpeningKey(aead, now + self._cache_seconds))
        return aead

    def _call(self, operation: str, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
            if operation == "Decrypt" and code in _UNREADABLE_CODES:
                raise SecretUnreadable(f"KMS cannot open the data key ({code})") from None
            raise errors.Unavailable(
                f"KMS {operation} with key {self._key_id} failed: {code}", details={"aws_error": code}
            ) from exc
        except BotoCoreError as exc:
            raise errors.Unavailable(f"KMS {operation} with key {self._key_id} failed: {type(exc).__name__}") from exc


def _remember(cache: OrderedDict[_K, _V], key: _K, value: _V) -> None:
    """Insert as most recently used, dropping the least recently used entries beyond ``CACHE_ENTRIES``."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > CACHE_ENTRIES:
        cache.popitem(last=False)
