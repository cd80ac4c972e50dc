"""Where the commands send their requests: a server URL and an API key.

``MCPBRIDGE_URL`` and ``MCPBRIDGE_API_KEY`` in the environment come first; else the profile ``--profile`` (or
``MCPBRIDGE_PROFILE``, else ``default``) of the config file ``mcpbridge login`` writes:
``$XDG_CONFIG_HOME/mcpbridge/config.json`` (``~/.config/...`` without it; ``%APPDATA%`` on Windows), or the file
``MCPBRIDGE_CONFIG`` names. The file holds API keys: it is written with mode 0600 in a 0700 folder, replaced whole
(never half written), and one readable by others is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from mcpbridge.errors import InvalidInput, Unauthenticated

URL_ENV = "MCPBRIDGE_URL"
API_KEY_ENV = "MCPBRIDGE_API_KEY"
PROFILE_ENV = "MCPBRIDGE_PROFILE"
CONFIG_ENV = "MCPBRIDGE_CONFIG"
DEFAULT_PROFILE = "default"
_MAX_CONFIG_BYTES = 1024 * 1024


class Target(NamedTuple):  # not a dataclass: importing dataclasses costs a tenth of a command's CPU
    url: str
    api_key: str
    source: str
    """Where they came from, for messages: ``profile 'default' of /home/.../config.json`` or the environment."""


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    if sys.platform == "win32" and env.get("APPDATA"):
        base = Path(env["APPDATA"])
    else:
        base = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "mcpbridge" / "config.json"


def read_config(path: Path) -> dict[str, Any]:
    """The config file's content (``{"profiles": {name: {"url", "api_key"}}}``), empty when there is none."""
    try:
        with path.open("rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            raw = handle.read(_MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return {"profiles": {}}
    except OSError as exc:
        raise InvalidInput(f"{path}: {exc.strerror or exc}", code="invalid_config") from None
    if sys.platform != "win32" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidInput(
            f"{path} holds API keys and others may read it (mode {stat.S_IMODE(mode):o}): chmod 600 {path}",
            code="insecure_config",
        )
    try:
        document = json.loads(raw)
    except ValueError:
        raise InvalidInput(f"{path} is not JSON: log in again to rewrite it", code="invalid_config") from None
    if not isinstance(document, dict) or not isinstance(document.get("profiles", {}), dict):
        raise InvalidInput(f"{path} has no profiles: log in again to rewrite it", code="invalid_config")
    document.setdefault("profiles", {})
    return document


def save_profile(path: Path, name: str, url: str, api_key: str) -> None:
    """The profile written into the config file (the others kept), atomically, readable by its owner only."""
    document = read_config(path)
    document["profiles"][name] = {"url": url, "api_key": api_key}
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    import tempfile  # only to write the file

    descriptor, temporary = tempfile.mkstemp(prefix=".config-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            os.chmod(temporary, 0o600)  # mkstemp creates it 0600 already; a umask cannot widen it
            json.dump(document, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def profile_name(given: str | None, env: Mapping[str, str]) -> str:
    return given or env.get(PROFILE_ENV) or DEFAULT_PROFILE


def target_of(profile: str | None, env: Mapping[str, str]) -> Target:
    """The server and key a command uses (see the module docstring); a message that says how to log in without."""
    url, key = env.get(URL_ENV, "").strip(), env.get(API_KEY_ENV, "").strip()
    if url and key and profile is None:
        return Target(clean_url(url), key, f"{URL_ENV} and {API_KEY_ENV}")
    name = profile_name(profile, env)
    path = config_path(env)
    saved = read_config(path)["profiles"].get(name)
    if isinstance(saved, dict) and saved.get("url") and saved.get("api_key"):
        source = f"profile {name!r} of {path}"
        if profile is not None or not (url or key):
            return Target(clean_url(str(saved["url"])), str(saved["api_key"]), source)
        # Without --profile, either variable overrides its part of the profile.
        source += f", with {URL_ENV if url else API_KEY_ENV}"
        return Target(clean_url(url or str(saved["url"])), key or str(saved["api_key"]), source)
    if profile is not None:
        raise Unauthenticated(
            f"no profile {name!r} in {path}: log in with `mcpbridge login URL --profile {name}`", code="not_logged_in"
        )
    raise Unauthenticated(
        f"no server to talk to: log in with `mcpbridge login URL` (e.g. http://127.0.0.1:8080, where `mcpbridge "
        f"serve` listens), or set {URL_ENV} and {API_KEY_ENV}",
        code="not_logged_in",
    )


def clean_url(url: str) -> str:
    """An http(s) base URL without its trailing slash."""
    url = url.strip().rstrip("/")
    if not url.lower().startswith(("http://", "https://")) or len(url) > 2048:
        raise InvalidInput(f"{url[:80]!r} is not an http:// or https:// URL", code="invalid_url")
    return url
