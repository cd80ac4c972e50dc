"""The settings secret: one Secrets Manager secret read once per cold start, within a few seconds."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from mcpbridge.settings import SettingsSecretError

CONNECT_TIMEOUT_SECONDS = 2.0
READ_TIMEOUT_SECONDS = 2.0
ATTEMPTS = 2
"""Two tries of at most 4 s each: a Lambda function's initialisation has 10 s before it is started again."""


def read_settings_secret(secret_arn: str, region: str = "") -> str:
    """The secret's SecretString; :class:`SettingsSecretError` naming why it could not be read (never its value)."""
    import boto3

    config = Config(
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        retries={"mode": "standard", "total_max_attempts": ATTEMPTS},
    )
    where = f"settings secret {secret_arn}"
    with _quiet_botocore():
        try:
            client: Any = boto3.session.Session(region_name=region or None).client("secretsmanager", config=config)
            response = client.get_secret_value(SecretId=secret_arn)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "error"))
            raise SettingsSecretError(f"{where} could not be read ({code}){_hint(code)}") from None
        except BotoCoreError as exc:
            raise SettingsSecretError(f"{where} could not be read ({type(exc).__name__})") from None
    text = response.get("SecretString")
    if not isinstance(text, str):
        raise SettingsSecretError(f"{where} has no SecretString (a binary secret?): expected a JSON object")
    return text


QUIET_LOGGERS = ("botocore", "botocore.parsers", "botocore.endpoint", "urllib3")
"""At DEBUG botocore logs each response body: the secret's, too. They speak from WARNING up during the read."""


@contextmanager
def _quiet_botocore() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _hint(code: str) -> str:
    if code == "ResourceNotFoundException":
        return ": no such secret, or it has no current version"
    if code in ("AccessDeniedException", "AccessDenied"):
        return ": the function's role may not read it, or may not decrypt it with the secret's KMS key"
    if code == "DecryptionFailure":
        return ": the secret's KMS key refused to decrypt it"
    return ""
