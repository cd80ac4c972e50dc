"""The settings secret (MCPBRIDGE_SETTINGS_SECRET_ARN) on moto: its values reach Settings, the environment wins,
and nothing it holds shows in a repr, a log line or an error."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mcpbridge.adapters.aws.settings_secret import ATTEMPTS, CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS
from mcpbridge.bootstrap import build_container, load_settings
from mcpbridge.lambda_entry import lambda_container
from mcpbridge.settings import SECRET_SETTINGS, Settings, SettingsSecretError

REGION = "eu-west-1"
VALUES = {
    "oidc_client_secret": "oidc-Secret-Value-4711",
    "llm_api_key": "sk-llm-Secret-Value-0815",
    "embedding_api_key": "sk-embedding-Secret-Value-42",
}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, aws_credentials: None) -> pytest.MonkeyPatch:
    for name in SECRET_SETTINGS | {"settings_secret_arn"}:
        monkeypatch.delenv(f"MCPBRIDGE_{name.upper()}", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", raising=False)
    return monkeypatch


@pytest.fixture
def secrets(env: pytest.MonkeyPatch) -> Iterator[object]:
    with mock_aws():
        yield boto3.client("secretsmanager", region_name=REGION)


def _secret(client: object, text: str | None = None, binary: bytes | None = None) -> str:
    value = {"SecretString": text} if text is not None else {"SecretBinary": binary}
    arn: str = client.create_secret(Name="mcpbridge/settings", **value)["ARN"]  # type: ignore[attr-defined]
    return arn


def _load_error(env: pytest.MonkeyPatch, arn: str) -> str:
    env.setenv("MCPBRIDGE_SETTINGS_SECRET_ARN", arn)
    with pytest.raises(SettingsSecretError) as raised:
        load_settings()
    assert raised.value.__cause__ is None
    assert raised.value.__context__ is None or raised.value.__suppress_context__
    return str(raised.value)


def test_the_secrets_values_arrive_in_settings_and_show_nowhere(
    secrets: object, env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    arn = _secret(secrets, json.dumps(VALUES))
    env.setenv("MCPBRIDGE_SETTINGS_SECRET_ARN", arn)
    env.setenv("MCPBRIDGE_OIDC_CLIENT_ID", "client-1")
    with caplog.at_level(logging.DEBUG):
        settings = load_settings()
    assert settings.oidc_client_secret == VALUES["oidc_client_secret"]
    assert settings.llm_api_key == VALUES["llm_api_key"]
    assert settings.embedding_api_key == VALUES["embedding_api_key"]
    assert settings.oidc_client_id == "client-1"  # the environment's settings stay
    assert settings.settings_secret_arn == arn
    shown = [repr(settings), str(settings), repr(settings.model_copy()), caplog.text]
    for value in VALUES.values():
        assert not any(value in text for text in shown)
    assert "settings read from the settings secret: embedding_api_key, llm_api_key, oidc_client_secret" in caplog.text


def test_an_environment_variable_that_is_set_wins_over_the_secret(secrets: object, env: pytest.MonkeyPatch) -> None:
    arn = _secret(secrets, json.dumps(VALUES))
    env.setenv("MCPBRIDGE_SETTINGS_SECRET_ARN", arn)
    env.setenv("MCPBRIDGE_LLM_API_KEY", "from-the-environment")
    env.setenv("MCPBRIDGE_EMBEDDING_API_KEY", "")  # empty: as if unset
    settings = load_settings()
    assert settings.llm_api_key == "from-the-environment"
    assert settings.embedding_api_key == VALUES["embedding_api_key"]
    assert settings.oidc_client_secret == VALUES["oidc_client_secret"]


def test_a_subset_of_the_secret_settings_is_enough(secrets: object, env: pytest.MonkeyPatch) -> None:
    env.setenv("MCPBRIDGE_SETTINGS_SECRET_ARN", _secret(secrets, json.dumps({"llm_api_key": "k-1"})))
    settings = load_settings()
    assert (settings.llm_api_key, settings.embedding_api_key, settings.oidc_client_secret) == ("k-1", "", "")


def test_without_an_arn_no_secret_is_read(env: pytest.MonkeyPatch) -> None:
    env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # any call would fail
    assert load_settings() == Settings()


def test_an_unknown_key_is_named_and_its_value_is_not(secrets: object, env: pytest.MonkeyPatch) -> None:
    arn = _secret(secrets, json.dumps({"llm_api_key": "sk-fine", "log_level": "sk-Hidden-Value"}))
    message = _load_error(env, arn)
    assert "unknown key 'log_level'" in message
    assert "embedding_api_key, llm_api_key, oidc_client_secret" in message  # what it accepts
    assert arn in message
    assert "sk-" not in message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("sk-Not-Json-Value", "is not JSON"),
        ('{"llm_api_key": "sk-Cut-Value', "is not JSON"),
        (json.dumps(["sk-Listed-Value"]), "not an object of settings"),
        (json.dumps("sk-Quoted-Value"), "not an object of settings"),
        (json.dumps({"llm_api_key": ["sk-Listed-Value"]}), "the value of 'llm_api_key' is not a string"),
    ],
)
def test_a_secret_that_is_not_a_json_object_of_strings_is_refused(
    secrets: object, env: pytest.MonkeyPatch, text: str, problem: str
) -> None:
    message = _load_error(env, _secret(secrets, text))
    assert problem in message
    assert "sk-" not in message


def test_a_binary_secret_is_refused(secrets: object, env: pytest.MonkeyPatch) -> None:
    message = _load_error(env, _secret(secrets, binary=b'{"llm_api_key": "sk-Binary-Value"}'))
    assert "has no SecretString" in message
    assert "sk-" not in message


def test_a_missing_secret_is_named(secrets: object, env: pytest.MonkeyPatch) -> None:
    arn = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:mcpbridge/absent-AbCdEf"
    message = _load_error(env, arn)
    reason = "(ResourceNotFoundException): no such secret, or it has no current version"
    assert message == f"settings secret {arn} could not be read {reason}"


def test_an_unanswering_endpoint_fails_after_its_own_timeouts(env: pytest.MonkeyPatch) -> None:
    # A server that accepts connections and never answers: each try waits out the read timeout, and there are two.
    accepted: list[socket.socket] = []
    clients: list[Any] = []
    make_client = boto3.session.Session.client

    def client(self: boto3.session.Session, *args: Any, **kwargs: Any) -> Any:
        clients.append(make_client(self, *args, **kwargs))
        return clients[-1]

    env.setattr(boto3.session.Session, "client", client)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(0.2)
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    accepted.append(listener.accept()[0])

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        env.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
        try:
            message = _load_error(env, f"arn:aws:secretsmanager:{REGION}:123456789012:secret:mcpbridge/settings-AbCdEf")
        finally:
            stop.set()
            acceptor.join(5)
            for connection in accepted:
                connection.close()
    # Ended by its own read timeout on its last try, where botocore's defaults would wait 60 s on each of more.
    assert "could not be read (ReadTimeoutError)" in message
    assert len(accepted) == ATTEMPTS
    (used,) = clients
    config = used.meta.config
    assert (config.connect_timeout, config.read_timeout) == (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS)
    assert config.retries["total_max_attempts"] == ATTEMPTS
    assert CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS <= 4, "each try fits a Lambda init's 10 s twice"


def test_the_container_is_built_with_the_secrets_values(secrets: object, env: pytest.MonkeyPatch) -> None:
    env.setenv("MCPBRIDGE_SETTINGS_SECRET_ARN", _secret(secrets, json.dumps(VALUES)))
    assert build_container().settings.llm_api_key == VALUES["llm_api_key"]
    explicit = Settings(llm_api_key="given")
    assert build_container(explicit).settings is explicit  # given settings: no secret read


def test_a_lambda_cold_start_fails_on_an_unreadable_secret_before_building_anything(
    secrets: object, env: pytest.MonkeyPatch
) -> None:
    arn = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:mcpbridge/absent-AbCdEf"
    env.setenv("MCPBRIDGE_SETTINGS_SECRET_ARN", arn)
    env.setenv("MCPBRIDGE_BACKEND", "aws")
    with pytest.raises(SettingsSecretError, match="ResourceNotFoundException"):
        lambda_container()


def test_every_secret_setting_is_a_string_kept_out_of_repr() -> None:
    for name in SECRET_SETTINGS:
        field = Settings.model_fields[name]
        assert field.annotation is str, name
        assert field.repr is False, name


def test_a_lambda_cold_start_builds_its_container_with_the_secrets_values(
    secrets: object, env: pytest.MonkeyPatch
) -> None:
    env.setenv("MCPBRIDGE_SETTINGS_SECRET_ARN", _secret(secrets, json.dumps({"oidc_client_secret": "s-1"})))
    env.setenv("MCPBRIDGE_BACKEND", "aws")
    assert lambda_container().settings.oidc_client_secret == "s-1"
