"""The composition root: settings -> adapters -> services. The only module that imports adapters.

Everything is built lazily on first use, so a Lambda function pays only for the ports it touches and nothing
random or networked is captured at import time (SnapStart restores the same snapshot in many sandboxes).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from mcpbridge.identity.service import IdentityService
from mcpbridge.ports import Clock, SecretBox, Store
from mcpbridge.settings import Settings, get_settings

if TYPE_CHECKING:
    import boto3


class Container:
    """The wired application. Tests build it with other settings or adapters through the same constructor."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        secrets: SecretBox | None = None,
    ) -> None:
        self.settings = settings
        if clock is not None:
            self.__dict__["clock"] = clock
        if store is not None:
            self.__dict__["store"] = store
        if secrets is not None:
            self.__dict__["secrets"] = secrets

    @cached_property
    def clock(self) -> Clock:
        from mcpbridge.adapters.system_clock import SystemClock

        return SystemClock()

    @cached_property
    def _aws(self) -> boto3.session.Session:
        import boto3

        return boto3.session.Session(region_name=self.settings.aws_region or None)

    def _aws_client(self, service: str, **config: Any) -> Any:
        from botocore.config import Config

        # AWS_ENDPOINT_URL (read by botocore itself) points every client at moto's server in tests.
        return self._aws.client(service, config=Config(retries={"mode": "standard", "max_attempts": 3}, **config))  # type: ignore[call-overload]

    @cached_property
    def store(self) -> Store:
        if self.settings.backend == "aws":
            from mcpbridge.adapters.aws.dynamodb import DynamoStore

            client = self._aws_client("dynamodb", connect_timeout=2, read_timeout=5)
            return DynamoStore(client, self.settings.table_name, self.clock)
        from mcpbridge.adapters.local.sqlite import SqliteStore

        return SqliteStore(self.settings.sqlite_path, self.clock)

    @cached_property
    def secrets(self) -> SecretBox:
        if self.settings.backend == "aws":
            from mcpbridge.adapters.aws.kms import KmsSecretBox

            if not self.settings.kms_key_id:
                from mcpbridge.errors import Unavailable

                raise Unavailable("MCPBRIDGE_KMS_KEY_ID is not set", code="secrets_unconfigured")
            client = self._aws_client("kms", connect_timeout=2, read_timeout=5)
            return KmsSecretBox(client, self.settings.kms_key_id)
        from mcpbridge.adapters.local.keyfile import KeyFileSecretBox

        return KeyFileSecretBox(self.settings.key_file)

    @cached_property
    def identity(self) -> IdentityService:
        return IdentityService(self.store, self.clock)

    def preload(self) -> None:
        """Import the backend's adapter modules now (no client, no I/O), so a SnapStart snapshot holds them and
        the first request does not pay for them."""
        if self.settings.backend == "aws":
            import mcpbridge.adapters.aws.dynamodb
            import mcpbridge.adapters.aws.kms  # noqa: F401

    def close(self) -> None:
        store = self.__dict__.get("store")
        close = getattr(store, "close", None)
        if close is not None:
            close()


def build_container(settings: Settings | None = None) -> Container:
    return Container(settings or get_settings())
