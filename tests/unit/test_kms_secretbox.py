"""KmsSecretBox on moto: data key caching, key states and how KMS failures are reported."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.config import Config
from botocore.stub import Stubber
from moto import mock_aws

from mcpbridge import errors
from mcpbridge.adapters.aws import kms
from mcpbridge.adapters.aws.kms import KmsSecretBox
from mcpbridge.domain import sealed as wire
from mcpbridge.domain.secrets import SecretContext, SecretUnreadable

REGION = "eu-west-1"
CONTEXT = SecretContext(workspace_id="ws_1", kind="connector", item_id="con_1")
OTHER = SecretContext(workspace_id="ws_1", kind="connector", item_id="con_2")


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class KmsCalls(Counter[str]):
    """Counts KMS operations made by one client, by operation name."""

    def __init__(self, client: Any) -> None:
        super().__init__()
        client.meta.events.register("before-call.kms.*", self._record)

    def _record(self, model: Any, **_: Any) -> None:
        self[model.name] += 1


@pytest.fixture
def client(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("kms", region_name=REGION)


@pytest.fixture
def key_id(client: Any) -> str:
    return str(client.create_key()["KeyMetadata"]["KeyId"])


@pytest.fixture
def calls(client: Any) -> KmsCalls:
    return KmsCalls(client)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def box(client: Any, key_id: str, clock: ManualClock) -> KmsSecretBox:
    return KmsSecretBox(client, key_id, clock=clock, cache_seconds=300.0)


def _edk(sealed: str) -> bytes:
    payload = wire.decode(sealed)
    assert isinstance(payload, wire.KmsSealed)
    return payload.encrypted_key


def test_construction_calls_nothing(client: Any, key_id: str, calls: KmsCalls) -> None:
    KmsSecretBox(client, key_id)

    assert calls == {}


def test_seals_under_one_context_share_a_data_key(box: KmsSecretBox, calls: KmsCalls) -> None:
    sealed = [box.seal(f"value {i}", CONTEXT) for i in range(20)]

    assert calls == {"GenerateDataKey": 1}
    assert len({_edk(s) for s in sealed}) == 1
    assert len(set(sealed)) == 20


def test_each_context_gets_its_own_data_key(box: KmsSecretBox, calls: KmsCalls) -> None:
    first = [box.seal("value", CONTEXT) for _ in range(5)]
    second = [box.seal("value", OTHER) for _ in range(5)]

    assert calls == {"GenerateDataKey": 2}
    assert {_edk(s) for s in first}.isdisjoint({_edk(s) for s in second})


def test_a_sealing_key_expires(box: KmsSecretBox, calls: KmsCalls, clock: ManualClock) -> None:
    box.seal("value", CONTEXT)
    clock.now += 299.0
    box.seal("value", CONTEXT)
    assert calls == {"GenerateDataKey": 1}

    clock.now += 1.0
    box.seal("value", CONTEXT)
    assert calls == {"GenerateDataKey": 2}


def test_a_sealing_key_is_used_for_at_most_10000_seals(box: KmsSecretBox, calls: KmsCalls) -> None:
    assert kms.MAX_SEALS_PER_DATA_KEY == 10_000
    for _ in range(10_000):
        box.seal("v", CONTEXT)
    assert calls == {"GenerateDataKey": 1}

    box.seal("v", CONTEXT)
    assert calls == {"GenerateDataKey": 2}


def test_no_caching_when_cache_seconds_is_zero(client: Any, key_id: str, calls: KmsCalls) -> None:
    box = KmsSecretBox(client, key_id, cache_seconds=0)
    sealed = [box.seal("value", CONTEXT) for _ in range(3)]
    for value in sealed:
        box.open(value, CONTEXT)

    assert calls == {"GenerateDataKey": 3, "Decrypt": 3}


def test_opening_values_of_one_data_key_decrypts_it_once(
    box: KmsSecretBox, client: Any, key_id: str, calls: KmsCalls, clock: ManualClock
) -> None:
    sealed = [box.seal(f"value {i}", CONTEXT) for i in range(20)]
    # A fresh box, as in another Lambda instance: the sealing box's cache does not help it.
    reader = KmsSecretBox(client, key_id, clock=clock)

    assert [reader.open(s, CONTEXT) for s in sealed] == [f"value {i}" for i in range(20)]
    assert calls == {"GenerateDataKey": 1, "Decrypt": 1}

    clock.now += 300.0
    reader.open(sealed[0], CONTEXT)
    assert calls["Decrypt"] == 2


def test_a_cached_data_key_does_not_open_under_another_context(box: KmsSecretBox, calls: KmsCalls) -> None:
    sealed = box.seal("value", CONTEXT)
    box.open(sealed, CONTEXT)

    with pytest.raises(SecretUnreadable):
        box.open(sealed, OTHER)
    assert calls["Decrypt"] == 2  # the cache is keyed by context too, so KMS was asked (and refused)


def test_the_opening_cache_is_bounded(
    box: KmsSecretBox, client: Any, key_id: str, calls: KmsCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kms, "CACHE_ENTRIES", 2)
    contexts = [SecretContext("ws_1", "connector", f"con_{i}") for i in range(3)]
    sealed = [box.seal("value", context) for context in contexts]
    reader = KmsSecretBox(client, key_id)

    for value, context in zip(sealed, contexts, strict=True):
        reader.open(value, context)
    reader.open(sealed[2], contexts[2])
    assert calls["Decrypt"] == 3

    reader.open(sealed[0], contexts[0])  # evicted as least recently used
    assert calls["Decrypt"] == 4


def test_ping_passes_for_an_enabled_key(box: KmsSecretBox, calls: KmsCalls) -> None:
    box.ping()

    assert calls == {"DescribeKey": 1}


def test_ping_fails_for_a_disabled_key(box: KmsSecretBox, client: Any, key_id: str) -> None:
    client.disable_key(KeyId=key_id)

    with pytest.raises(errors.Unavailable, match="Disabled"):
        box.ping()


def test_ping_fails_for_a_key_pending_deletion(box: KmsSecretBox, client: Any, key_id: str) -> None:
    client.schedule_key_deletion(KeyId=key_id, PendingWindowInDays=7)

    with pytest.raises(errors.Unavailable, match="PendingDeletion"):
        box.ping()


def test_ping_fails_for_an_unknown_key(client: Any) -> None:
    with pytest.raises(errors.Unavailable, match="NotFoundException"):
        KmsSecretBox(client, "11111111-2222-3333-4444-555555555555").ping()


def _enforce_key_state(client: Any, key_id: str) -> None:
    """Make moto refuse to use a key that is not Enabled, as KMS does.

    moto (5.2) still generates and decrypts data keys with a disabled or pending-deletion key. KMS answers
    DisabledException and KMSInvalidStateException; this hook returns exactly those errors so the adapter's
    reading of them is what gets tested. It stays correct if moto starts enforcing key states itself.
    """
    inspector = boto3.client("kms", region_name=REGION)

    def refuse(model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        state = inspector.describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"]
        if state == "Enabled":
            return None
        code = "DisabledException" if state == "Disabled" else "KMSInvalidStateException"
        error = {"Code": code, "Message": f"{key_id} is {state}."}
        return AWSResponse("", 400, HTTPHeaders(), None), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}

    client.meta.events.register("before-call.kms.Decrypt", refuse)
    client.meta.events.register("before-call.kms.GenerateDataKey", refuse)


@pytest.mark.parametrize("make_unusable", ["disable", "schedule_deletion"])
def test_a_key_that_is_not_enabled_makes_kms_unavailable(client: Any, key_id: str, make_unusable: str) -> None:
    # Unavailable, not SecretUnreadable: the stored values are intact and come back as soon as someone enables
    # the key or cancels its deletion. SecretUnreadable would have open_secret_or_none report every secret as
    # "not set", inviting users to re-enter (and overwrite) them and hiding an outage behind quiet 200s.
    _enforce_key_state(client, key_id)
    sealed = KmsSecretBox(client, key_id).seal("value", CONTEXT)
    if make_unusable == "disable":
        client.disable_key(KeyId=key_id)
    else:
        client.schedule_key_deletion(KeyId=key_id, PendingWindowInDays=7)
    box = KmsSecretBox(client, key_id)

    with pytest.raises(errors.Unavailable) as opening:
        box.open(sealed, CONTEXT)
    with pytest.raises(errors.Unavailable):
        box.seal("value", CONTEXT)
    assert opening.value.retryable


def _stubbed() -> tuple[Any, Stubber]:
    stubbed_client = boto3.client("kms", region_name=REGION)
    return stubbed_client, Stubber(stubbed_client)


def _kms_sealed() -> str:
    return wire.encode(wire.KmsSealed(b"edk" * 10, bytes(wire.NONCE_SIZE), bytes(wire.TAG_SIZE + 5)))


@pytest.mark.parametrize("code", ["InvalidCiphertextException", "IncorrectKeyException"])
def test_kms_rejecting_the_ciphertext_is_unreadable(aws_credentials: None, code: str) -> None:
    stubbed_client, stubber = _stubbed()
    stubber.add_client_error("decrypt", service_error_code=code, service_message="the value sealed-secret-xyz")

    with stubber, pytest.raises(SecretUnreadable) as raised:
        KmsSecretBox(stubbed_client, "key").open(_kms_sealed(), CONTEXT)
    assert "sealed-secret-xyz" not in str(raised.value)
    assert raised.value.__cause__ is None


@pytest.mark.parametrize(
    "code",
    ["ThrottlingException", "KMSInternalException", "AccessDeniedException", "NotFoundException", "DisabledException"],
)
def test_other_kms_errors_are_unavailable(aws_credentials: None, code: str) -> None:
    stubbed_client, stubber = _stubbed()
    stubber.add_client_error("decrypt", service_error_code=code)
    stubber.add_client_error("generate_data_key", service_error_code=code)
    box = KmsSecretBox(stubbed_client, "key")

    with stubber:
        with pytest.raises(errors.Unavailable, match=code):
            box.open(_kms_sealed(), CONTEXT)
        with pytest.raises(errors.Unavailable, match=code):
            box.seal("value", CONTEXT)
        stubber.assert_no_pending_responses()


def test_kms_out_of_reach_is_unavailable(aws_credentials: None) -> None:
    unreachable = boto3.client(
        "kms",
        region_name=REGION,
        endpoint_url="http://127.0.0.1:9",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=1),
    )
    box = KmsSecretBox(unreachable, "key")

    with pytest.raises(errors.Unavailable):
        box.seal("value", CONTEXT)
    with pytest.raises(errors.Unavailable):
        box.open(_kms_sealed(), CONTEXT)
    with pytest.raises(errors.Unavailable):
        box.ping()


def test_an_oversized_data_key_is_unreadable_without_asking_kms(box: KmsSecretBox, calls: KmsCalls) -> None:
    sealed = wire.encode(wire.KmsSealed(b"k" * 6145, bytes(wire.NONCE_SIZE), bytes(wire.TAG_SIZE)))

    with pytest.raises(SecretUnreadable):
        box.open(sealed, CONTEXT)
    assert calls == {}


def test_a_data_key_of_the_wrong_size_is_unreadable(client: Any, key_id: str, box: KmsSecretBox) -> None:
    # Something KMS-encrypted under our key and this context, but not a data key we made.
    blob = client.encrypt(KeyId=key_id, Plaintext=b"k" * 16, EncryptionContext=CONTEXT.as_dict())["CiphertextBlob"]
    sealed = wire.encode(wire.KmsSealed(blob, bytes(wire.NONCE_SIZE), bytes(wire.TAG_SIZE)))

    with pytest.raises(SecretUnreadable):
        box.open(sealed, CONTEXT)


def test_the_payload_layout(box: KmsSecretBox) -> None:
    sealed = box.seal("value", CONTEXT)
    text = sealed.removeprefix("enc:v1:")
    payload = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    edk_size = int.from_bytes(payload[1:3], "big")

    assert payload[0] == 0x02
    assert len(payload) == 3 + edk_size + 12 + len(b"value") + 16
