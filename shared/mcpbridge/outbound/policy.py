"""Which URLs and which network addresses outbound requests may reach (pure rules; the only I/O is name resolution).

:class:`EgressPolicy` answers two questions, each refusal an :class:`~mcpbridge.errors.InvalidInput` with a stable code:

* :meth:`EgressPolicy.check_url` — is this URL acceptable at all (scheme, no credentials, a real host, IP literals
  checked at once, including odd IPv4 spellings such as ``2130706433`` or ``0x7f.1`` that resolvers accept)?
* :meth:`EgressPolicy.resolve` — which addresses does the host have, and are *all* of them public (or allowlisted)?

The HTTP layer (:mod:`mcpbridge.outbound.http`) connects only to the addresses :meth:`resolve` returned, so the check
and the connection can never disagree. Messages name the host and the reason, never the query string or userinfo
(either may carry a secret).

The allowlist (:class:`Allowlist`, ``MCPBRIDGE_SSRF_ALLOWLIST``) names what may be reached although private:

* ``internal.example`` — a hostname (exact, case-insensitive), every port; it may resolve to anything.
* ``10.0.0.5`` / ``::1`` / ``[::1]`` — one address, every port; ``10.0.0.0/24`` / ``fd00::/8`` — a network, every port.
* ``127.0.0.1:9000`` / ``[::1]:9000`` — one address on one port only (so allowing a local MCP server does not also
  open mcpbridge's own API on another port of the same address).

An IPv4 entry covers that IPv4 address and its IPv4-mapped spelling ``::ffff:a.b.c.d`` (a dual-stack socket dials
the IPv4 host itself for it), nothing else: the IPv4-compatible (``::a.b.c.d``), IPv4-translated
(``::ffff:0:a.b.c.d``), NAT64 (``64:ff9b::/96``) and 6to4 (``2002::/16``) forms are other destinations (a
tunnel or a translator that may well sit elsewhere) and stay refused unless listed themselves.
"""

# Over 400 lines: every SSRF rule (address forms, ranges, allowlist with ports) must be read in one place.

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from mcpbridge.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]
"""``resolver(host, port) -> ["203.0.113.7", "2001:db8::7", ...]``; raises OSError when the name does not resolve."""

MAX_URL_LENGTH = 8192
DEFAULT_MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The most an external MCP server's answer (one event, for an event stream) may take unless configured otherwise."""
_DEFAULT_PORTS = {"http": 80, "https": 443}

# Whitespace, control characters and backslashes are where URL parsers disagree (WHATWG reads "\" as "/"): refusing
# them means every parser downstream sees the host this module checked.
_UNSAFE_URL_CHARS = re.compile(r"[\x00-\x20\x7f\\]")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_IPV4_PART = re.compile(r"0x[0-9a-f]*|[0-9]+")
_IPV4_DOTTED = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve ``host`` with the operating system, IPv4 and IPv6, in the system's preference order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


# --------------------------------------------------------------------------------------------------------------------
# Forbidden address ranges


def _v4(cidr: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(cidr)


def _v6(cidr: str) -> ipaddress.IPv6Network:
    return ipaddress.IPv6Network(cidr)


# First match wins, so the specific entries (metadata) come before the ranges that contain them.
_IPV4_FORBIDDEN: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_v4("169.254.169.254/32"), "a link-local address (cloud metadata)"),
    (_v4("0.0.0.0/32"), "an unspecified address"),
    (_v4("0.0.0.0/8"), "a 'this network' address"),
    (_v4("127.0.0.0/8"), "a loopback address"),
    (_v4("10.0.0.0/8"), "a private address"),
    (_v4("172.16.0.0/12"), "a private address"),
    (_v4("192.168.0.0/16"), "a private address"),
    (_v4("169.254.0.0/16"), "a link-local address"),
    (_v4("100.64.0.0/10"), "a carrier-grade NAT address"),
    (_v4("224.0.0.0/4"), "a multicast address"),
    (_v4("255.255.255.255/32"), "a broadcast address"),
    (_v4("240.0.0.0/4"), "a reserved address"),
    (_v4("192.0.0.0/24"), "an IETF protocol assignment address"),
    (_v4("198.18.0.0/15"), "a benchmarking address"),
    (_v4("192.0.2.0/24"), "a documentation address"),
    (_v4("198.51.100.0/24"), "a documentation address"),
    (_v4("203.0.113.0/24"), "a documentation address"),
)

_IPV6_FORBIDDEN: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_v6("fd00:ec2::254/128"), "a unique-local address (cloud metadata)"),
    (_v6("fe80::/10"), "a link-local address"),
    (_v6("fc00::/7"), "a unique-local address"),
    (_v6("ff00::/8"), "a multicast address"),
    (_v6("fec0::/10"), "a deprecated site-local address"),
    (_v6("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (_v6("2001::/32"), "a Teredo tunnel address"),
    (_v6("100::/64"), "a discard-only address"),
    (_v6("2001:db8::/32"), "a documentation address"),
)

_IPV4_MAPPED = _v6("::ffff:0:0/96")
_IPV4_TRANSLATED = _v6("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = _v6("::/96")
_NAT64 = _v6("64:ff9b::/96")
_SIX_TO_FOUR = _v6("2002::/16")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    """The IPv4 address an IPv6 form stands for (mapped, translated, compatible, NAT64, 6to4), with the form's name."""
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _IPV4_MAPPED:
        return "an IPv4-mapped address", low32
    if address in _IPV4_TRANSLATED:
        return "an IPv4-translated address", low32
    if address in _IPV4_COMPATIBLE:
        return "an IPv4-compatible address", low32
    if address in _NAT64:
        return "a NAT64 address", low32
    if address in _SIX_TO_FOUR:
        return "a 6to4 address", ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF)
    return None


def forbidden_reason(address: IPAddress) -> str | None:
    """Why ``address`` must not be reached (e.g. ``"a loopback address"``), or None for a public address.

    The allowlist is not consulted here; see :meth:`EgressPolicy.resolve`.
    """
    if isinstance(address, ipaddress.IPv4Address):
        for network, reason in _IPV4_FORBIDDEN:
            if address in network:
                return reason
        # Anything else IANA marks special-purpose; new registry entries reach us through the stdlib.
        return None if address.is_global else "a special-purpose (non-public) address"
    if address.scope_id:
        return "a zone-scoped address"
    if address == ipaddress.IPv6Address("::"):
        return "an unspecified address"
    if address == ipaddress.IPv6Address("::1"):
        return "a loopback address"
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        form, ipv4 = embedded
        inner = forbidden_reason(ipv4)
        if inner is not None:
            return f"{form} of {ipv4}, {inner}"
        # Never routed today, and the kernel may still treat it specially: no reason to allow it.
        return "a deprecated IPv4-compatible address" if form == "an IPv4-compatible address" else None
    for network6, reason in _IPV6_FORBIDDEN:
        if address in network6:
            return reason
    return None if address.is_global else "a special-purpose (non-public) address"


# --------------------------------------------------------------------------------------------------------------------
# Hosts


class _BadHost(ValueError):
    """A host that is not a hostname, not an IP address, or an IP-looking string that is not a valid one."""


def _ipv4_part(part: str) -> int:
    if part.startswith("0x"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)  # inet_aton reads a leading zero as octal (0177 == 127); "08" raises ValueError
    return int(part)


def _ipv4_number_form(host: str) -> ipaddress.IPv4Address | None:
    """Read ``host`` the way ``inet_aton`` and browsers do (``127.1``, ``0x7f.1``, ``2130706433``, ``0177.0.0.1``).

    None when the last label is not numeric (a hostname). A host that ends in a number but is no valid IPv4 address
    raises: a resolver might still read it as one, so it must not pass as a hostname.
    """
    parts = host.split(".")
    if not _IPV4_PART.fullmatch(parts[-1]):
        return None
    if len(parts) > 4 or not all(_IPV4_PART.fullmatch(part) for part in parts):
        raise _BadHost("looks like an IPv4 address but is not a valid one")
    try:
        *leading, last = [_ipv4_part(part) for part in parts]
    except ValueError:
        raise _BadHost("looks like an IPv4 address but is not a valid one") from None
    if any(number > 255 for number in leading) or last >= 256 ** (4 - len(leading)):
        raise _BadHost("looks like an IPv4 address but is out of range")
    value = last
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def normalise_host(host: str) -> str | IPAddress:
    """A lower-case ASCII hostname without trailing dot, or the IP address ``host`` spells (in any spelling).

    Raises ValueError for anything else (percent signs, zone ids, bad labels, invalid IP-looking strings).
    """
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise _BadHost("a host is required")
    if "%" in host:
        raise _BadHost("percent-encoded or zone-scoped hosts are not supported")
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise _BadHost("not a valid IPv6 address") from None
    name = host.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            raise _BadHost("not a valid international domain name") from None
    if not name:
        raise _BadHost("a host is required")
    address = _ipv4_number_form(name)
    if address is not None:
        return address
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise _BadHost("not a valid hostname")
    return name


def display(address: IPAddress) -> str:
    """``address`` as people write it: IPv4-mapped IPv6 keeps its dotted tail (``::ffff:127.0.0.1``)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None and not address.scope_id:
        return f"::ffff:{address.ipv4_mapped}"
    return str(address)


def _shown(host: str) -> str:
    # Hosts are not secret, but an absurd one should not flood logs.
    return host if len(host) <= 100 else host[:97] + "..."


def _invalid(message: str, host: str | None = None) -> InvalidInput:
    suffix = f" (host {_shown(host)})" if host else ""
    return InvalidInput(f"refused: {message}{suffix}", code="url_invalid")


# --------------------------------------------------------------------------------------------------------------------
# The allowlist

_PORT = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True, slots=True)
class _AddressEntry:
    network: IPNetwork
    port: int | None
    """None: every port."""

    def covers(self, address: IPAddress, port: int | None) -> bool:
        # A port-less request (port None) asks "every port?": only a port-less entry says yes.
        return address in self.network and (self.port is None or self.port == port)

    def __str__(self) -> str:
        if self.port is None:
            return str(self.network)
        shown = str(self.network.network_address)
        return f"[{shown}]:{self.port}" if self.network.version == 6 else f"{shown}:{self.port}"


class Allowlist:
    """``MCPBRIDGE_SSRF_ALLOWLIST`` parsed: hostnames, addresses and networks that may be reached although private,
    each address optionally on one port only (see the module docstring for the forms and the IPv4 rule).

    Raises ValueError naming the first invalid entry, so a bad configuration fails when settings load.
    """

    __slots__ = ("_addresses", "_hosts")

    def __init__(self, entries: Sequence[str] = ()) -> None:
        if isinstance(entries, str):
            # A bare string would be read character by character; demand the list it was meant to be.
            raise ValueError("allowlist must be a sequence of entries, not a single string")
        hosts: set[str] = set()
        addresses: list[_AddressEntry] = []
        for entry in entries:
            parsed = _parse_allowlist_entry(entry)
            if isinstance(parsed, str):
                hosts.add(parsed)
                continue
            addresses.append(parsed)
            network = parsed.network
            if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_IPV4_MAPPED):
                # "::ffff:10.0.0.5" means 10.0.0.5, however the resolver happens to spell it.
                low32 = int(network.network_address) & 0xFFFFFFFF
                addresses.append(_AddressEntry(ipaddress.IPv4Network((low32, network.prefixlen - 96)), parsed.port))
        self._hosts = frozenset(hosts)
        self._addresses = tuple(addresses)

    def entries(self) -> list[str]:
        """The entries in canonical form (hostnames sorted first)."""
        return sorted(self._hosts) + [str(entry) for entry in self._addresses]

    def covers_hostname(self, host: str) -> bool:
        """Whether a normalised hostname is listed (hostname entries take no port: they cover every port)."""
        return host in self._hosts

    def ports_for(self, address: IPAddress) -> list[int]:
        """The ports that entries limited to one port allow ``address`` on (for messages)."""
        return sorted(
            {
                entry.port
                for entry in self._addresses
                for candidate in _allowlist_candidates(address)
                if entry.port is not None and entry.covers(candidate, entry.port)
            }
        )

    def covers_address(self, address: IPAddress, port: int | None = None) -> bool:
        """Whether an address entry covers ``address`` on ``port`` (None: on every port, i.e. a port-less entry).

        An IPv4-mapped address (``::ffff:a.b.c.d``) is the IPv4 address itself; no other IPv6 form of an IPv4
        address is (see the module docstring).
        """
        return any(
            entry.covers(candidate, port) for candidate in _allowlist_candidates(address) for entry in self._addresses
        )


def _allowlist_candidates(address: IPAddress) -> list[IPAddress]:
    """``address`` and, for an IPv4-mapped address, the IPv4 address a dual-stack socket actually dials for it."""
    if isinstance(address, ipaddress.IPv6Address) and not address.scope_id and address.ipv4_mapped is not None:
        return [address, address.ipv4_mapped]
    return [address]


# --------------------------------------------------------------------------------------------------------------------
# The policy


@dataclass(frozen=True, slots=True)
class Target:
    """A URL that passed :meth:`EgressPolicy.check_url`.

    ``host`` is normalised: a lower-case ASCII hostname without trailing dot, or the canonical text of an IP address
    (``http://0x7f.1/`` has host ``127.0.0.1``). ``port`` is explicit or the scheme's default. ``url`` is as given.
    """

    scheme: str
    host: str
    port: int
    url: str

    @property
    def address(self) -> IPAddress | None:
        """The IP address when the URL names one instead of a hostname."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None


class _WithAllowlist(Protocol):
    """What :meth:`EgressPolicy.from_settings` reads (``mcpbridge.settings.Settings``; typed here so this module
    does not import the settings, which import it)."""

    @property
    def ssrf_allowlist(self) -> Sequence[str]: ...

    @property
    def upstream_max_answer_bytes(self) -> int: ...


class EgressPolicy:
    """The rules for outbound requests: which URLs are acceptable and which resolved addresses may be reached.

    ``allowlist`` entries (see :class:`Allowlist`) are hostnames (exact, case-insensitive, every port), IP addresses
    or CIDRs (every port), or an address with a port (``127.0.0.1:9000``, ``[::1]:9000``: that port only). An
    allowlisted hostname may resolve to anything; an allowlisted address may be reached whatever name led to it, on
    the ports its entry allows. ``require_https`` refuses plain http except to allowlisted hosts (on an allowed
    port). ``resolver`` defaults to the operating system's. Invalid allowlist entries raise ValueError here, so a
    bad configuration fails at start-up. ``max_answer_bytes`` is how much of an external MCP server's answer may be
    read (see :mod:`mcpbridge.outbound.http`).
    """

    def __init__(
        self,
        allowlist: Sequence[str] | Allowlist = (),
        *,
        require_https: bool = False,
        resolver: Resolver | None = None,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        if max_answer_bytes < 1:
            raise ValueError("max_answer_bytes must be positive")
        self._allowlist = allowlist if isinstance(allowlist, Allowlist) else Allowlist(allowlist)
        self.require_https = require_https
        self._resolver: Resolver = resolver or system_resolver
        self.max_answer_bytes = max_answer_bytes

    @classmethod
    def from_settings(cls, settings: _WithAllowlist, *, require_https: bool = False) -> EgressPolicy:
        """The policy configured by ``MCPBRIDGE_SSRF_ALLOWLIST`` and ``MCPBRIDGE_UPSTREAM_MAX_ANSWER_BYTES``."""
        return cls(
            settings.ssrf_allowlist,
            require_https=require_https,
            max_answer_bytes=settings.upstream_max_answer_bytes,
        )

    def __repr__(self) -> str:
        return f"EgressPolicy(allowlist={self._allowlist.entries()!r}, require_https={self.require_https!r})"

    # -- allowlist -----------------------------------------------------------------------------------------------

    def is_allowlisted_host(self, host: str, port: int | None = None) -> bool:
        """Whether a normalised host is allowlisted on ``port`` (None: on every port), as a hostname entry or as an
        address inside an IP/CIDR entry."""
        if self._allowlist.covers_hostname(host):
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return self.is_allowlisted_address(address, port)

    def is_allowlisted_address(self, address: IPAddress, port: int | None = None) -> bool:
        """Whether an IP/CIDR entry covers ``address`` (or the IPv4 address it maps) on ``port`` (None: every port)."""
        return self._allowlist.covers_address(address, port)

    def refusal(self, address: IPAddress, port: int | None = None) -> str | None:
        """Why this policy refuses ``address`` on ``port`` (None: refused unless allowed on every port), or None
        when it may be reached."""
        if self.is_allowlisted_address(address, port):
            return None
        return forbidden_reason(address)

    # -- URLs ------------------------------------------------------------------------------------------------------

    def check_url(self, url: str) -> Target:
        """Accept ``url`` or raise InvalidInput (``url_invalid``, ``url_scheme_not_allowed``,
        ``url_credentials_not_allowed``, ``url_forbidden_address``). IP literals are checked here; hostnames are
        checked by :meth:`resolve`."""
        if not isinstance(url, str) or not url:
            raise _invalid("a URL is required")
        if len(url) > MAX_URL_LENGTH:
            raise _invalid(f"the URL is longer than {MAX_URL_LENGTH} characters")
        if _UNSAFE_URL_CHARS.search(url):
            raise _invalid("the URL contains whitespace, control characters or backslashes")
        try:
            parts = urlsplit(url)
        except ValueError:
            raise _invalid("the URL cannot be parsed") from None
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            shown = f"the scheme {_shown(scheme)!r}" if scheme else "a URL without a scheme"
            raise InvalidInput(f"refused: {shown} is not allowed (only http and https)", code="url_scheme_not_allowed")
        raw_host = parts.hostname or ""
        if "@" in parts.netloc:
            raise InvalidInput(
                f"refused: URLs with credentials (user:password@host) are not allowed (host {_shown(raw_host)})",
                code="url_credentials_not_allowed",
            )
        if not raw_host:
            raise _invalid("the URL has no host")
        if "[" in parts.netloc and ":" not in raw_host:
            raise _invalid("brackets are only allowed around an IPv6 address", raw_host)
        try:
            host = normalise_host(raw_host)
        except ValueError as exc:
            raise _invalid(str(exc), raw_host) from None
        try:
            port = parts.port
        except ValueError:
            raise _invalid("the port is not a number between 1 and 65535", str(host)) from None
        if port == 0:
            raise _invalid("the port is not a number between 1 and 65535", str(host))
        target = Target(scheme=scheme, host=str(host), port=port or _DEFAULT_PORTS[scheme], url=url)
        if not isinstance(host, str):
            self._check_address(host, target.port)
        if self.require_https and scheme != "https" and not self.is_allowlisted_host(target.host, target.port):
            raise InvalidInput(
                f"refused: plain http to {_shown(target.host)} is not allowed (https is required)",
                code="url_scheme_not_allowed",
            )
        return target

    # -- addresses -------------------------------------------------------------------------------------------------

    def resolve(self, target: Target) -> list[IPAddress]:
        """The addresses to connect to for ``target``, every one of them allowed; else InvalidInput
        (``url_forbidden_address``, ``url_unresolvable``)."""
        return self.resolve_host(target.host, target.port)

    def resolve_host(self, host: str, port: int) -> list[IPAddress]:
        """Like :meth:`resolve` for a raw host (any spelling, as an HTTP library hands it to its network layer) and
        the port about to be dialled: the network backends call this for every new connection, so an entry limited
        to one port is enforced on the connection itself, whatever URL or redirect led to it."""
        try:
            normalised = normalise_host(host)
        except ValueError as exc:
            raise _invalid(str(exc), host) from None
        if not isinstance(normalised, str):
            self._check_address(normalised, port)
            return [normalised]
        try:
            answers = self._resolver(normalised, port)
        except (OSError, UnicodeError) as exc:
            raise InvalidInput(
                f"refused: the host {_shown(normalised)} could not be resolved", code="url_unresolvable"
            ) from exc
        addresses = _parse_answers(answers, normalised)
        if self._allowlist.covers_hostname(normalised):
            return addresses
        # Every answer is checked, not only the first: a client may fall back to any of them.
        for address in addresses:
            reason = self.refusal(address, port)
            if reason is not None:
                raise InvalidInput(
                    f"refused: {_shown(normalised)} resolves to {display(address)}, {reason}"
                    + _port_note(self._allowlist, address, port),
                    code="url_forbidden_address",
                    details={"host": normalised, "address": str(address)},
                )
        return addresses

    def _check_address(self, address: IPAddress, port: int) -> None:
        reason = self.refusal(address, port)
        if reason is not None:
            raise InvalidInput(
                f"refused: {display(address)} is {reason}" + _port_note(self._allowlist, address, port),
                code="url_forbidden_address",
                details={"address": str(address)},
            )


def _parse_answers(answers: Iterable[str], host: str) -> list[IPAddress]:
    addresses: list[IPAddress] = []
    for answer in answers:
        try:
            # getaddrinfo appends "%<zone>" to link-local IPv6 answers; the zone does not change the verdict.
            address = ipaddress.ip_address(str(answer).split("%", 1)[0])
        except ValueError:
            raise InvalidInput(
                f"refused: the host {_shown(host)} resolved to an invalid address", code="url_unresolvable"
            ) from None
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise InvalidInput(f"refused: the host {_shown(host)} has no addresses", code="url_unresolvable")
    return addresses


def _port_note(allowlist: Allowlist, address: IPAddress, port: int) -> str:
    """Why an address on the allowlist was refused anyway: the port is not the one its entries name."""
    ports = allowlist.ports_for(address)
    if not ports:
        return ""
    listed = ", ".join(str(number) for number in ports)
    return f" (the allowlist lists it on port{'s' if len(ports) > 1 else ''} {listed} only, not on {port})"


def _parse_allowlist_entry(entry: str) -> str | _AddressEntry:
    expected = "expected a hostname, an IP address, a CIDR, or an address with a port (127.0.0.1:9000, [::1]:9000)"
    problem = f"invalid SSRF allowlist entry {entry!r}: {expected}"
    if not isinstance(entry, str):
        raise ValueError(problem)
    text = entry.strip()
    port: int | None = None
    if text.startswith("["):
        # "[v6]" or "[v6]:port"; what is inside the brackets is parsed below like a bare entry.
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{problem} (unbalanced brackets)")
        text = inside
        if rest:
            port = _allowlist_port(rest[1:], problem)
    elif text.count(":") == 1:
        # "a.b.c.d:port". More than one colon is an IPv6 address, which needs brackets to carry a port.
        text, _, port_text = text.partition(":")
        if not _IPV4_DOTTED.fullmatch(text):
            raise ValueError(
                f"{problem} (a port may only follow an IP address: a hostname entry already allows every port of "
                "that name; to open one port only, list the address it resolves to, e.g. 10.0.0.5:9000)"
            )
        port = _allowlist_port(port_text, problem)
    if not text or "%" in text:
        raise ValueError(problem)
    if "/" in text or ":" in text or _IPV4_DOTTED.fullmatch(text):
        if port is not None and "/" in text:
            raise ValueError(f"{problem} (a port may only follow a single address, not a network)")
        try:
            return _AddressEntry(ipaddress.ip_network(text, strict=True), port)
        except ValueError as exc:
            raise ValueError(f"{problem} ({exc})") from None
    try:
        normalised = normalise_host(text)
    except ValueError as exc:
        raise ValueError(f"{problem} ({exc})") from None
    if not isinstance(normalised, str):
        # "127.1" or "0x7f000001" in a configuration is almost certainly a mistake: ask for the plain form.
        raise ValueError(f"{problem} (write the address in dotted form: {normalised})")
    if port is not None:
        raise ValueError(f"{problem} (a port may only follow an IP address)")
    return normalised


def _allowlist_port(text: str, problem: str) -> int:
    if not _PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise ValueError(f"{problem} (the port must be a number from 1 to 65535)")
    return int(text)
