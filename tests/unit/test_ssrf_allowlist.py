"""The SSRF allowlist, precisely: what an IPv4 entry covers (the address and its IPv4-mapped spelling, no other
IPv6 form), entries limited to one port (checked on the URL and again on the port a connection dials), and
entries validated when settings load."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping

import pytest
from pydantic import ValidationError

from mcpbridge.errors import InvalidInput
from mcpbridge.outbound.json_http import require_https
from mcpbridge.outbound.policy import EgressPolicy, Resolver
from mcpbridge.settings import Settings


def table_resolver(answers: Mapping[str, list[str]]) -> Resolver:
    def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(answers[host])

    return resolve


def refusal(call: object, *args: object) -> InvalidInput:
    assert callable(call)
    with pytest.raises(InvalidInput) as caught:
        call(*args)
    return caught.value


# ------------------------------------------------------------------------------------- IPv6 forms of an IPv4 entry

# IPv6 addresses that embed 127.0.0.1 but are other destinations: a dual-stack socket does not dial 127.0.0.1 for
# them (a compatible address is plain IPv6 to the kernel; 6to4, NAT64 and SIIT go to a tunnel or a translator).
NOT_THE_IPV4_HOST = {
    "::127.0.0.1": "IPv4-compatible",
    "::7f00:1": "IPv4-compatible",
    "2002:7f00:1::": "6to4",
    "2002:7f00:1:1::1": "6to4",
    "64:ff9b::7f00:1": "NAT64",
    "64:ff9b::127.0.0.1": "NAT64",
    "::ffff:0:7f00:1": "IPv4-translated",
}


@pytest.mark.parametrize("address", sorted(NOT_THE_IPV4_HOST))
def test_an_ipv4_entry_does_not_allow_other_ipv6_forms_of_it(address: str) -> None:
    policy = EgressPolicy(["127.0.0.1"], resolver=table_resolver({"embedded.test": [address]}))
    literal = refusal(policy.check_url, f"http://[{address}]:9000/")
    assert literal.code == "url_forbidden_address"
    assert NOT_THE_IPV4_HOST[address] in literal.message
    assert refusal(policy.resolve, policy.check_url("http://embedded.test/")).code == "url_forbidden_address"
    assert not policy.is_allowlisted_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("entry", ["10.0.0.0/24", "10.0.0.5"])
def test_an_ipv4_network_entry_does_not_allow_embedded_forms_either(entry: str) -> None:
    policy = EgressPolicy([entry])
    for literal in ("[::10.0.0.5]", "[2002:a00:5::1]", "[64:ff9b::a00:5]", "[::ffff:0:a00:5]"):
        assert refusal(policy.check_url, f"http://{literal}/").code == "url_forbidden_address"


@pytest.mark.parametrize("literal", ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]"])
def test_an_ipv4_entry_allows_its_ipv4_mapped_spelling(literal: str) -> None:
    # A dual-stack socket dials 127.0.0.1 itself for ::ffff:127.0.0.1: the same host, so the same verdict.
    policy = EgressPolicy(["127.0.0.1"])
    assert policy.check_url(f"http://{literal}:9000/").host == "::ffff:7f00:1"


def test_an_embedded_form_listed_itself_is_allowed() -> None:
    policy = EgressPolicy(["64:ff9b::7f00:1", "2002:7f00:1::/48"])
    assert policy.check_url("http://[64:ff9b::7f00:1]/").host == "64:ff9b::7f00:1"
    assert policy.check_url("http://[2002:7f00:1::5]/").host == "2002:7f00:1::5"
    assert refusal(policy.check_url, "http://127.0.0.1/").code == "url_forbidden_address"


# ------------------------------------------------------------------------------------------------- port entries


def test_an_address_with_a_port_allows_that_port_only() -> None:
    policy = EgressPolicy(["127.0.0.1:9000"], resolver=table_resolver({"mcp.test": ["127.0.0.1"]}))
    assert policy.check_url("http://127.0.0.1:9000/mcp").port == 9000
    assert policy.check_url("http://0x7f.1:9000/mcp").host == "127.0.0.1", "any spelling of the same address"
    assert policy.check_url("http://[::ffff:127.0.0.1]:9000/mcp").port == 9000
    assert policy.resolve(policy.check_url("http://mcp.test:9000/")) == [ipaddress.ip_address("127.0.0.1")]
    for url in (
        "http://127.0.0.1:8080/api/v1/api-keys",  # mcpbridge's own API on the same address
        "http://127.0.0.1/",
        "https://127.0.0.1/",
        "http://127.0.0.1:9001/",
        "http://[::ffff:127.0.0.1]:8080/",
        "http://127.0.0.2:9000/",
    ):
        error = refusal(policy.check_url, url)
        assert error.code == "url_forbidden_address", url
    error = refusal(policy.resolve, policy.check_url("http://mcp.test:8080/"))
    assert error.code == "url_forbidden_address"
    assert "port 9000 only" in error.message


def test_the_port_is_checked_on_the_connection_itself() -> None:
    # The network backends call resolve_host with the port they are about to dial, whatever URL led there.
    policy = EgressPolicy(["127.0.0.1:9000", "[::1]:9000"], resolver=table_resolver({"mcp.test": ["127.0.0.1"]}))
    assert policy.resolve_host("127.0.0.1", 9000) == [ipaddress.ip_address("127.0.0.1")]
    assert policy.resolve_host("mcp.test", 9000) == [ipaddress.ip_address("127.0.0.1")]
    assert policy.resolve_host("::1", 9000) == [ipaddress.ip_address("::1")]
    for host in ("127.0.0.1", "2130706433", "mcp.test", "::1", "::ffff:127.0.0.1"):
        assert refusal(policy.resolve_host, host, 8080).code == "url_forbidden_address", host


def test_an_ipv6_address_with_a_port_needs_brackets() -> None:
    policy = EgressPolicy(["[::1]:9000"])
    assert policy.check_url("http://[::1]:9000/").host == "::1"
    assert refusal(policy.check_url, "http://[::1]:9001/").code == "url_forbidden_address"
    # Without brackets "::1:9000" is an address (0::1:9000), not ::1 on port 9000.
    unbracketed = EgressPolicy(["::1:9000"])
    assert unbracketed.check_url("http://[::1:9000]:80/").host == "::1:9000"
    assert refusal(unbracketed.check_url, "http://[::1]:9000/").code == "url_forbidden_address"


@pytest.mark.parametrize("entry", ["127.0.0.1", "::1", "[::1]", "10.0.0.0/8", "fd00::/8", "internal.test"])
def test_entries_without_a_port_allow_every_port(entry: str) -> None:
    policy = EgressPolicy([entry], resolver=table_resolver({"internal.test": ["10.0.0.5"]}))
    host = {"127.0.0.1": "127.0.0.1", "::1": "[::1]", "[::1]": "[::1]", "10.0.0.0/8": "10.1.2.3"}.get(entry)
    host = host or {"fd00::/8": "[fd00::5]", "internal.test": "internal.test"}[entry]
    for port in (80, 443, 8080, 9000, 65535):
        target = policy.check_url(f"http://{host}:{port}/")
        assert policy.resolve(target)
        assert policy.resolve_host(target.host, port)


def test_a_mapped_ipv6_entry_with_a_port_covers_the_ipv4_address_on_that_port() -> None:
    policy = EgressPolicy(["[::ffff:10.0.0.5]:9000"], resolver=table_resolver({"db.test": ["10.0.0.5"]}))
    assert policy.resolve(policy.check_url("http://db.test:9000/")) == [ipaddress.ip_address("10.0.0.5")]
    assert refusal(policy.resolve, policy.check_url("http://db.test:9001/")).code == "url_forbidden_address"


def test_https_exemption_follows_the_port() -> None:
    policy = EgressPolicy(["127.0.0.1:9000"], require_https=True)
    assert policy.check_url("http://127.0.0.1:9000/token").scheme == "http"
    assert require_https(policy, "http://127.0.0.1:9000/token", "token endpoint").port == 9000
    assert policy.is_allowlisted_host("127.0.0.1", 9000)
    assert not policy.is_allowlisted_host("127.0.0.1", 8080)
    assert not policy.is_allowlisted_host("127.0.0.1"), "None asks 'every port?': a port entry says no"


def test_repr_shows_ports() -> None:
    policy = EgressPolicy(["b.test", "127.0.0.1:9000", "[::1]:9000", "10.0.0.0/8"])
    assert repr(policy) == (
        "EgressPolicy(allowlist=['b.test', '127.0.0.1:9000', '[::1]:9000', '10.0.0.0/8'], require_https=False)"
    )


# --------------------------------------------------------------------------------------------------- validation

BAD_ENTRIES = [
    "127.0.0.1:0",
    "127.0.0.1:65536",
    "127.0.0.1:",
    "127.0.0.1:80x",
    "127.0.0.1: 80",
    "127.0.0.1:+80",
    "127.0.0.1:８０",
    "[::1]:",
    "[::1]:0",
    "[::1]9000",
    "[::1",
    "[::1]:9000:1",
    "10.0.0.0/24:9000",
    "[fd00::/8]:9000",
    "example.com:8080",
    "localhost:9000",
    "[localhost]:9000",
    "[example.com]:443",
    "127.1:9000",
    "0x7f000001:80",
]


@pytest.mark.parametrize("entry", BAD_ENTRIES)
def test_bad_port_entries_are_refused_naming_the_entry(entry: str) -> None:
    with pytest.raises(ValueError, match="invalid SSRF allowlist entry") as caught:
        EgressPolicy([entry])
    assert repr(entry) in str(caught.value)


def test_a_hostname_with_a_port_says_what_to_write_instead() -> None:
    with pytest.raises(ValueError, match="a port may only follow an IP address") as caught:
        EgressPolicy(["localhost:9000"])
    assert "127.0.0.1:9000" in str(caught.value) or "10.0.0.5:9000" in str(caught.value)


@pytest.mark.parametrize("bad", ["127.0.0.1:0", "exa mple.test", "10.0.0.1/8", "example.com:8080"])
def test_settings_refuse_a_bad_allowlist_entry_when_they_load(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPBRIDGE_SSRF_ALLOWLIST", f"127.0.0.1, {bad}, internal.test")
    with pytest.raises(ValidationError) as caught:
        Settings()
    text = str(caught.value)
    assert "ssrf_allowlist" in text
    assert f"invalid SSRF allowlist entry {bad!r}" in text


def test_settings_accept_ports_and_keep_the_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPBRIDGE_SSRF_ALLOWLIST", "127.0.0.1:9000,[::1]:9000,::1,10.0.0.0/8,Internal.Test")
    settings = Settings()
    assert settings.ssrf_allowlist == ["127.0.0.1:9000", "[::1]:9000", "::1", "10.0.0.0/8", "Internal.Test"]
    policy = EgressPolicy.from_settings(settings)
    assert policy.is_allowlisted_host("127.0.0.1", 9000)
    assert not policy.is_allowlisted_host("127.0.0.1", 8080)
    assert policy.is_allowlisted_host("internal.test", 8080)
