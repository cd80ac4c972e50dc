"""Fixtures shared by every test folder."""

from __future__ import annotations

import pytest

from tests.support.aws import set_fake_aws_env


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake AWS credentials and region; nothing from the developer's shell leaks in."""
    set_fake_aws_env(monkeypatch)


# Fixtures shared by several test packages.
pytest_plugins = ["tests.support.everything"]
