"""A hub whose consent page signs people in through an OpenID Connect provider (``tests/support/oidc_provider.py``)
served over HTTPS with a throwaway CA the hub trusts (``outbound_ca_file``), on either deployment."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.oauth_flow import Hub, hub_on, lambda_hub
from tests.support.oidc_provider import CLIENT_ID, CLIENT_SECRET, OpenIdProvider
from tests.support.tls import https_server, write_certificates

PROVIDER_NAME = "Example Sign-In"


@dataclass
class Provider:
    op: OpenIdProvider
    ca: Path
    """The CA that signed the provider's certificate."""
    cert: Path
    """The provider's certificate."""


@contextlib.contextmanager
def served_provider(directory: Path) -> Iterator[Provider]:
    ca, cert, key = write_certificates(directory, "127.0.0.1")
    op = OpenIdProvider()
    with https_server(op.app(), cert, key, hostname="127.0.0.1") as origin:
        op.issuer = origin
        yield Provider(op, ca, cert)


@contextlib.contextmanager
def hub_signing_in(
    backend: str, provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **oidc: Any
) -> Iterator[Hub]:
    """A hub (``local`` or ``aws``: the Lambda functions) whose consent page signs people in with the provider
    (``oidc``: oidc_* settings beyond the issuer, the client and the name)."""
    settings: dict[str, Any] = {
        "oidc_issuer": provider.op.issuer,
        "oidc_client_id": CLIENT_ID,
        "oidc_client_secret": CLIENT_SECRET,
        "oidc_provider_name": PROVIDER_NAME,
        **{f"oidc_{name}": value for name, value in oidc.items()},
    }
    if backend == "local":
        served = hub_on(
            "local", tmp_path, monkeypatch, outbound_ca_file=provider.ca, ssrf_allowlist=["127.0.0.1"], **settings
        )
    else:
        environment = {
            name: str(value).lower() if isinstance(value, bool) else str(value) for name, value in settings.items()
        }
        served = lambda_hub(monkeypatch, outbound_ca_file=str(provider.ca), ssrf_allowlist="127.0.0.1", **environment)
    with served as hub:
        provider.op.redirect_uris[:] = [f"{hub.base_url}/oauth/oidc/callback"]
        yield hub
