"""Detectors of secrets and personal data in a call's arguments and results, for rules to act on.

Secrets are found by the rules of ``detect-secrets`` (Yelp's maintained detector library: AWS keys, private keys,
GitHub, GitLab, Slack, Stripe, OpenAI, npm, PyPI, SendGrid, Twilio, Discord, Telegram and JSON Web Tokens); personal
data by this module: e-mail addresses, phone numbers (international form, 8 to 15 digits), payment card numbers (13 to
19 digits passing the Luhn check) and IBANs (checked by their mod-97 sum). What is found is reported by *kind* only:
a value found is never returned, logged or stored, except masked (``[redacted:<kind>]``) by :func:`redact`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

SECRET_KINDS: Final = (
    "aws_access_key",
    "private_key",
    "github_token",
    "gitlab_token",
    "slack_token",
    "stripe_key",
    "openai_key",
    "npm_token",
    "pypi_token",
    "sendgrid_key",
    "twilio_key",
    "discord_token",
    "telegram_token",
    "jwt",
)
PERSONAL_KINDS: Final = ("email", "phone", "card_number", "iban")
KINDS: Final = frozenset(SECRET_KINDS + PERSONAL_KINDS)
GROUPS: Final = {"secret": frozenset(SECRET_KINDS), "personal": frozenset(PERSONAL_KINDS)}
"""Names a rule may use for a whole family of kinds."""

_PLUGINS: Final = {
    "aws_access_key": ("aws", "AWSKeyDetector"),
    "private_key": ("private_key", "PrivateKeyDetector"),
    "github_token": ("github_token", "GitHubTokenDetector"),
    "gitlab_token": ("gitlab_token", "GitLabTokenDetector"),
    "slack_token": ("slack", "SlackDetector"),
    "stripe_key": ("stripe", "StripeDetector"),
    "openai_key": ("openai", "OpenAIDetector"),
    "npm_token": ("npm", "NpmDetector"),
    "pypi_token": ("pypi_token", "PypiTokenDetector"),
    "sendgrid_key": ("sendgrid", "SendGridDetector"),
    "twilio_key": ("twilio", "TwilioKeyDetector"),
    "discord_token": ("discord", "DiscordBotTokenDetector"),
    "telegram_token": ("telegram_token", "TelegramBotTokenDetector"),
    "jwt": ("jwt", "JwtTokenDetector"),
}

_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}")
_PHONE = re.compile(r"(?<![\w+])\+[1-9](?:[ .-]?\(?\d\)?){7,14}(?!\d)")
_CARD = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])")
_MAX_SCANNED: Final = 1 << 20
"""Characters of one string looked at (a longer one is scanned up to here)."""


def expand_kinds(names: Iterable[str]) -> frozenset[str]:
    """Kinds named by a rule, ``secret`` and ``personal`` standing for their family; unknown names raise KeyError."""
    kinds: set[str] = set()
    for name in names:
        if name in GROUPS:
            kinds |= GROUPS[name]
        elif name in KINDS:
            kinds.add(name)
        else:
            raise KeyError(name)
    return frozenset(kinds)


@dataclass(frozen=True)
class _Finder:
    kind: str
    spans: Callable[[str], list[tuple[int, int]]]


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _iban_valid(text: str) -> bool:
    compact = text.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in moved)
    return int(number) % 97 == 1


def _regex_spans(pattern: re.Pattern[str], check: Callable[[str], bool] | None = None) -> Callable[[str], Any]:
    def spans(text: str) -> list[tuple[int, int]]:
        return [m.span() for m in pattern.finditer(text) if check is None or check(m.group())]

    return spans


def _card(text: str) -> bool:
    digits = re.sub(r"[ -]", "", text)
    return 13 <= len(digits) <= 19 and _luhn(digits)


def _secret_spans(kind: str) -> Callable[[str], list[tuple[int, int]]]:
    def spans(text: str) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        for line_start, line in _lines(text):
            for value in _plugin(kind).analyze_string(line):
                start = line.find(value)
                while start >= 0:
                    found.append((line_start + start, line_start + start + len(value)))
                    start = line.find(value, start + len(value))
        return found

    return spans


def _lines(text: str) -> Iterator[tuple[int, str]]:
    start = 0
    for line in text.splitlines(keepends=True):
        yield start, line
        start += len(line)


@cache
def _plugin(kind: str) -> Any:
    import importlib

    module, name = _PLUGINS[kind]
    return getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)()


_FINDERS: Final = {
    **{kind: _Finder(kind, _secret_spans(kind)) for kind in SECRET_KINDS},
    "email": _Finder("email", _regex_spans(_EMAIL)),
    "phone": _Finder("phone", _regex_spans(_PHONE)),
    "card_number": _Finder("card_number", _regex_spans(_CARD, _card)),
    "iban": _Finder("iban", _regex_spans(_IBAN, _iban_valid)),
}


def strings_of(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value: keys and values, at any depth."""
    if isinstance(value, str):
        yield value[:_MAX_SCANNED]
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_of(key)
            yield from strings_of(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_of(item)


def detect(value: Any, kinds: Iterable[str] = KINDS) -> frozenset[str]:
    """The kinds (of ``kinds``) found anywhere in a JSON-like value."""
    wanted = [k for k in sorted(set(kinds)) if k in _FINDERS]
    found: set[str] = set()
    for text in strings_of(value):
        for kind in wanted:
            if kind not in found and _FINDERS[kind].spans(text):
                found.add(kind)
    return frozenset(found)


def redact(value: Any, kinds: Iterable[str] = KINDS) -> tuple[Any, frozenset[str]]:
    """A copy of a JSON-like value with every found value of ``kinds`` masked as ``[redacted:<kind>]``, and the
    kinds masked."""
    wanted = [k for k in sorted(set(kinds)) if k in _FINDERS]
    masked: set[str] = set()

    def text(original: str) -> str:
        spans: list[tuple[int, int, str]] = []
        for kind in wanted:
            spans += [(start, end, kind) for start, end in _FINDERS[kind].spans(original[:_MAX_SCANNED])]
        if not spans:
            return original
        out, at = [], 0
        for start, end, kind in sorted(spans):
            if start < at:
                continue  # overlapping an earlier span (a card number inside a longer digit run): masked already
            out.append(original[at:start])
            out.append(f"[redacted:{kind}]")
            masked.add(kind)
            at = end
        out.append(original[at:])
        return "".join(out)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return text(item)
        if isinstance(item, dict):
            return {text(k) if isinstance(k, str) else k: walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        return item

    return walk(value), frozenset(masked)
