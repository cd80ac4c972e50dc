"""Settings, read from the environment (prefix ``MCPBRIDGE_``) once per process or cold start."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MCPBRIDGE_", extra="ignore", frozen=True)

    backend: Literal["local", "aws"] = "local"
    """``local``: SQLite + key file in ``data_dir``. ``aws``: DynamoDB, KMS, S3 (AWS_ENDPOINT_URL is honoured)."""

    data_dir: Path = Path(".mcpbridge")

    # AWS mode
    table_name: str = "mcpbridge"
    kms_key_id: str = ""
    bucket_name: str = ""
    aws_region: str = Field(default="", description="Falls back to AWS_REGION / AWS_DEFAULT_REGION.")

    # HTTP surfaces
    public_base_url: str = ""
    """The URL clients reach mcpbridge at (API Gateway URL or http://127.0.0.1:8080); used in generated configs."""

    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["localhost", "127.0.0.1"])
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)

    log_level: str = "INFO"

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return _split_csv(value)

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "mcpbridge.sqlite3"

    @property
    def key_file(self) -> Path:
        return self.data_dir / "secret.key"


def get_settings() -> Settings:
    """Read the environment now. Callers keep the result (a Lambda function reads it once per cold start)."""
    return Settings()
