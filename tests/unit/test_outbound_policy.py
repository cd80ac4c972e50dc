"""The egress policy without any network: forbidden ranges, odd IP spellings, allowlist, schemes, credentials."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping

import pytest

from mcpbridge.errors import InvalidInput
from mcpbridge.outbound.policy import EgressPolicy, Resolver, forbidden_reason, normalise_host, system_resolver

SECRET = "s3cr3t-t0ken"


def table_resolver(answers: Mapping[str, list[str]]) -> Resolver:
    """A resolver answering from ``answers``; unknown names fail like getaddrinfo does."""

    def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(answers[host])

    return resolve


def refused(call: object, *args: object) -> InvalidInput:
    assert callable(call)
    with pytest.raises(InvalidInput) as caught:
        call(*args)
    return caught.value


# ------------------------------------------------------------------------------------------ forbidden ranges

FORBIDDEN_IPV4 = {
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "10.0.0.1": "private",
    "10.255.255.255": "private",
    "172.16.0.1": "private",
    "172.31.255.254": "private",
    "192.168.0.1": "private",
    "169.254.169.254": "cloud metadata",
    "169.254.0.1": "link-local",
    "100.64.0.1": "carrier-grade NAT",
    "100.127.255.254": "carrier-grade NAT",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "0.0.0.0": "unspecified",
    "0.1.2.3": "this network",
    "255.255.255.255": "broadcast",
    "240.0.0.1": "reserved",
    "192.0.2.10": "documentation",
    "198.18.0.1": "benchmarking",
    "192.0.0.8": "IETF",
}

FORBIDDEN_IPV6 = {
    "::1": "loopback",
    "::": "unspecified",
    "fe80::1": "link-local",
    "febf:ffff::1": "link-local",
    "fc00::1": "unique-local",
    "fd12:3456::1": "unique-local",
    "fd00:ec2::254": "cloud metadata",
    "ff02::1": "multicast",
    "ff0e::1": "multicast",
    "fec0::1": "site-local",
    "::ffff:127.0.0.1": "IPv4-mapped address of 127.0.0.1, a loopback",
    "::ffff:169.254.169.254": "IPv4-mapped address of 169.254.169.254, a link-local address (cloud metadata)",
    "::ffff:10.0.0.1": "IPv4-mapped address of 10.0.0.1, a private",
    "::ffff:0.0.0.0": "unspecified",
    "::ffff:0:7f00:1": "IPv4-translated address of 127.0.0.1",
    "::127.0.0.1": "IPv4-compatible address of 127.0.0.1",
    "::8.8.8.8": "deprecated IPv4-compatible",
    "64:ff9b::127.0.0.1": "NAT64 address of 127.0.0.1",
    "64:ff9b::a9fe:a9fe": "NAT64 address of 169.254.169.254",
    "64:ff9b:1::1": "local-use NAT64",
    "2002:7f00:1::1": "6to4 address of 127.0.0.1",
    "2002:a9fe:a9fe::": "6to4 address of 169.254.169.254",
    "2002:c0a8:0101::1": "6to4 address of 192.168.1.1",
    "2001::1": "Teredo",
    "2001:db8::1": "documentation",
    "100::1": "discard-only",
}

PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "172.32.0.1",
    "172.15.255.255",
    "100.128.0.1",
    "11.0.0.1",
    "192.169.0.1",
    "2606:4700:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
]


@pytest.mark.parametrize(("address", "reason"), sorted({**FORBIDDEN_IPV4, **FORBIDDEN_IPV6}.items()))
def test_forbidden_ranges(address: str, reason: str) -> None:
    found = forbidden_reason(ipaddress.ip_address(address))
    assert found is not None
    assert reason in found


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("address", sorted({**FORBIDDEN_IPV4, **FORBIDDEN_IPV6}))
def test_forbidden_ip_literals_are_refused_by_check_url(address: str) -> None:
    host = f"[{address}]" if ":" in address else address
    error = refused(EgressPolicy().check_url, f"http://{host}:8080/x?token={SECRET}")
    assert error.code == "url_forbidden_address"
    assert error.status == 400
    assert error.message.startswith("refused: ")
    assert SECRET not in error.message
    assert SECRET not in str(error.details)


def test_metadata_message_names_host_and_reason() -> None:
    error = refused(EgressPolicy().check_url, "http://169.254.169.254/latest/meta-data/")
    assert error.message == "refused: 169.254.169.254 is a link-local address (cloud metadata)"
    mapped = refused(EgressPolicy().check_url, "http://[::ffff:169.254.169.254]/")
    assert "::ffff:169.254.169.254" in mapped.message
    assert "cloud metadata" in mapped.message


# ------------------------------------------------------------------------------------------ odd IPv4 spellings

ODD_LOOPBACK = ["2130706433", "0x7f.1", "127.1", "0177.0.0.1", "0x7f000001", "017700000001", "127.0.1", "0x7F.0.0.1"]


@pytest.mark.parametrize("host", ODD_LOOPBACK)
def test_odd_ipv4_spellings_are_normalised_and_refused(host: str) -> None:
    error = refused(EgressPolicy().check_url, f"http://{host}/")
    assert error.code == "url_forbidden_address"
    assert "127.0.0.1" in error.message
    assert "loopback" in error.message


@pytest.mark.parametrize("host", [*ODD_LOOPBACK, "0xa9fea9fe", "169.254.43518", "10.1", "0", "1.2.3.4"])
def test_normalisation_matches_inet_aton(host: str) -> None:
    """Whatever the C library would read the host as, the policy reads it the same way."""
    assert normalise_host(host) == ipaddress.IPv4Address(socket.inet_aton(host))


def test_metadata_in_hex_is_refused() -> None:
    error = refused(EgressPolicy().check_url, "http://0xA9FEA9FE/")
    assert error.message == "refused: 169.254.169.254 is a link-local address (cloud metadata)"


@pytest.mark.parametrize(
    "host", ["256.1.1.1", "1.2.3.4.5", "08.0.0.1", "4294967296", "0x1ffffffff", "example.123", "1..2"]
)
def test_invalid_ip_looking_hosts_are_refused(host: str) -> None:
    assert refused(EgressPolicy().check_url, f"http://{host}/").code == "url_invalid"


def test_trailing_dot_on_ip_is_still_checked() -> None:
    assert refused(EgressPolicy().check_url, "http://127.0.0.1./").code == "url_forbidden_address"


# ------------------------------------------------------------------------------------------ URL shape


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/", "file:///etc/passwd", "gopher://example.com/", "javascript:alert(1)", "data:,x", "//x.com/"],
)
def test_only_http_and_https(url: str) -> None:
    assert refused(EgressPolicy().check_url, url).code == "url_scheme_not_allowed"


@pytest.mark.parametrize(
    "url",
    [
        f"http://user:{SECRET}@example.com/",
        f"http://{SECRET}@example.com/",
        "http://:@example.com/",
        f"https://user:{SECRET}@127.0.0.1/",
    ],
)
def test_credentials_in_url_are_refused(url: str) -> None:
    error = refused(EgressPolicy().check_url, url)
    assert error.code == "url_credentials_not_allowed"
    assert SECRET not in error.message


@pytest.mark.parametrize(
    "url",
    [
        "http:///path",
        "http://:80/",
        "http://example.com:99999/",
        "http://example.com:abc/",
        "http://example.com:0/",
        "http://127.0.0.1\\@example.com/",
        "http://exa mple.com/",
        "http://example.com/\nx",
        "http://%31%32%37.0.0.1/",
        "http://[fe80::1%25eth0]/",
        "http://[example.com]/",
        "http://a..b/",
        "http://-a.example/",
        "",
        "http://" + "a" * 9000 + ".com/",
    ],
)
def test_malformed_urls_are_invalid(url: str) -> None:
    assert refused(EgressPolicy().check_url, url).code == "url_invalid"


def test_target_is_normalised() -> None:
    policy = EgressPolicy()
    target = policy.check_url(f"HTTP://Example.COM./a?token={SECRET}")
    assert (target.scheme, target.host, target.port) == ("http", "example.com", 80)
    assert target.url == f"HTTP://Example.COM./a?token={SECRET}"
    assert target.address is None
    assert policy.check_url("https://example.com/").port == 443
    assert policy.check_url("https://example.com:8443/").port == 8443
    assert policy.check_url("http://bücher.example/").host == "xn--bcher-kva.example"
    assert policy.check_url("http://8.8.8.8/").address == ipaddress.IPv4Address("8.8.8.8")
    assert policy.check_url("http://[2606:4700:4700::1111]:8080/").host == "2606:4700:4700::1111"


def test_https_requirement_exempts_only_allowlisted_hosts() -> None:
    policy = EgressPolicy(["internal.test", "10.1.0.0/16"], require_https=True)
    assert refused(policy.check_url, "http://example.com/").code == "url_scheme_not_allowed"
    assert "https is required" in refused(policy.check_url, "http://example.com/").message
    assert policy.check_url("https://example.com/").scheme == "https"
    assert policy.check_url("http://internal.test:8080/").host == "internal.test"
    assert policy.check_url("http://10.1.2.3/").host == "10.1.2.3"
    assert refused(policy.check_url, "http://10.2.0.1/").code == "url_forbidden_address"


# ------------------------------------------------------------------------------------------ resolution


def test_any_forbidden_answer_refuses_the_host() -> None:
    policy = EgressPolicy(
        resolver=table_resolver(
            {
                "mixed.test": ["8.8.8.8", "10.0.0.5"],
                "mixed6.test": ["2001:4860::1", "fd00::1"],
                "metadata.test": ["1.1.1.1", "::ffff:169.254.169.254"],
            }
        )
    )
    error = refused(policy.resolve, policy.check_url(f"http://mixed.test/?token={SECRET}"))
    assert error.code == "url_forbidden_address"
    assert error.message == "refused: mixed.test resolves to 10.0.0.5, a private address"
    assert SECRET not in error.message
    assert "unique-local" in refused(policy.resolve, policy.check_url("http://mixed6.test/")).message
    assert "cloud metadata" in refused(policy.resolve, policy.check_url("http://metadata.test/")).message


def test_public_answers_are_returned_deduplicated_in_order() -> None:
    seen: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> list[str]:
        seen.append((host, port))
        return ["2001:4860::1", "8.8.8.8", "8.8.8.8"]

    policy = EgressPolicy(resolver=resolver)
    addresses = policy.resolve(policy.check_url("https://Public.Example.:8443/"))
    assert addresses == [ipaddress.ip_address("2001:4860::1"), ipaddress.ip_address("8.8.8.8")]
    assert seen == [("public.example", 8443)]


def test_ip_literals_are_not_resolved() -> None:
    def resolver(host: str, port: int) -> list[str]:
        raise AssertionError("an IP literal must not go to the resolver")

    policy = EgressPolicy(resolver=resolver)
    assert policy.resolve(policy.check_url("http://8.8.8.8/")) == [ipaddress.ip_address("8.8.8.8")]
    assert policy.resolve_host("0x08080808", 80) == [ipaddress.ip_address("8.8.8.8")]
    assert refused(policy.resolve_host, "0x7f.1", 80).code == "url_forbidden_address"


@pytest.mark.parametrize("answers", [[], ["not-an-ip"]])
def test_empty_or_garbage_answers_are_unresolvable(answers: list[str]) -> None:
    policy = EgressPolicy(resolver=table_resolver({"odd.test": answers}))
    assert refused(policy.resolve, policy.check_url("http://odd.test/")).code == "url_unresolvable"


def test_resolution_failure_is_a_clear_refusal() -> None:
    policy = EgressPolicy(resolver=table_resolver({}))
    error = refused(policy.resolve, policy.check_url(f"http://nowhere.test/?token={SECRET}"))
    assert error.code == "url_unresolvable"
    assert error.message == "refused: the host nowhere.test could not be resolved"


def test_zone_in_answer_does_not_hide_link_local() -> None:
    policy = EgressPolicy(resolver=table_resolver({"zoned.test": ["fe80::1%eth0"]}))
    assert "link-local" in refused(policy.resolve, policy.check_url("http://zoned.test/")).message


def test_system_resolver_handles_literals_without_dns() -> None:
    assert system_resolver("127.0.0.1", 80) == ["127.0.0.1"]


# ------------------------------------------------------------------------------------------ allowlist


def test_allowlisted_hostname_may_resolve_anywhere() -> None:
    policy = EgressPolicy(["Internal.Test."], resolver=table_resolver({"internal.test": ["10.0.0.5", "127.0.0.1"]}))
    target = policy.check_url("http://INTERNAL.test:8080/")
    assert policy.resolve(target) == [ipaddress.ip_address("10.0.0.5"), ipaddress.ip_address("127.0.0.1")]


def test_allowlisted_hostname_does_not_cover_other_names() -> None:
    policy = EgressPolicy(
        ["internal.test"],
        resolver=table_resolver({"sub.internal.test": ["10.0.0.5"], "internal.test.evil": ["10.0.0.5"]}),
    )
    for host in ("sub.internal.test", "internal.test.evil"):
        assert refused(policy.resolve, policy.check_url(f"http://{host}/")).code == "url_forbidden_address"


@pytest.mark.parametrize("entry", ["10.0.0.5", "10.0.0.0/24", "[::ffff:10.0.0.5]", "::ffff:10.0.0.0/120"])
def test_allowlisted_address_or_network(entry: str) -> None:
    policy = EgressPolicy(
        [entry], resolver=table_resolver({"db.test": ["10.0.0.5"], "mapped.test": ["::ffff:10.0.0.5"]})
    )
    assert policy.check_url("http://10.0.0.5/").host == "10.0.0.5"
    assert policy.resolve(policy.check_url("http://db.test/")) == [ipaddress.ip_address("10.0.0.5")]
    assert policy.resolve(policy.check_url("http://mapped.test/")) == [ipaddress.ip_address("::ffff:10.0.0.5")]
    # Only that address: the rest of the private range stays closed.
    assert refused(policy.check_url, "http://10.0.1.5/").code == "url_forbidden_address"


def test_allowlisted_ipv6_network() -> None:
    policy = EgressPolicy(["fd00::/8"], resolver=table_resolver({"v6.test": ["fd00::10", "fd00::11"]}))
    assert len(policy.resolve(policy.check_url("http://v6.test/"))) == 2
    assert refused(policy.check_url, "http://[fc00::1]/").code == "url_forbidden_address"


def test_allowlisted_answer_does_not_excuse_another_forbidden_answer() -> None:
    policy = EgressPolicy(["10.0.0.5"], resolver=table_resolver({"two.test": ["10.0.0.5", "127.0.0.1"]}))
    assert "127.0.0.1" in refused(policy.resolve, policy.check_url("http://two.test/")).message


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "   ",
        "*.example.com",
        "http://example.com",
        "example.com:8080",
        "10.0.0.1/8",
        "10.0.0.0/33",
        "999.1.1.1",
        "127.1",
        "0x7f000001",
        "fe80::1%eth0",
        "exa mple.com",
        "a..b",
        "example.com/path",
    ],
)
def test_invalid_allowlist_entries_raise(entry: str) -> None:
    with pytest.raises(ValueError, match="invalid SSRF allowlist entry"):
        EgressPolicy([entry])


def test_bare_string_allowlist_is_rejected() -> None:
    with pytest.raises(ValueError, match="sequence"):
        EgressPolicy("example.com")


def test_repr_lists_entries() -> None:
    assert repr(EgressPolicy(["b.test", "10.0.0.0/8"])) == (
        "EgressPolicy(allowlist=['b.test', '10.0.0.0/8'], require_https=False)"
    )


def test_fullwidth_digits_are_read_as_the_address_they_spell() -> None:
    error = refused(EgressPolicy().check_url, "http://１２７.０.０.１/")
    assert error.code == "url_forbidden_address"
    assert "127.0.0.1" in error.message


def test_policy_from_settings() -> None:
    from mcpbridge.settings import Settings

    policy = EgressPolicy.from_settings(Settings(ssrf_allowlist=["Internal.Test", "10.0.0.0/8"]), require_https=True)
    assert policy.is_allowlisted_host("internal.test")
    assert policy.is_allowlisted_host("10.2.3.4")
    assert not policy.is_allowlisted_host("127.0.0.1")
    assert policy.require_https
