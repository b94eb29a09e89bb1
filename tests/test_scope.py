"""The scope rules and the network policy, as units: what is refused, and why."""

from __future__ import annotations

import ipaddress

import pytest

from larbinpy.config import parse_config
from larbinpy.links.scope import Scope, is_trap_path
from larbinpy.net.policy import NetworkPolicy


def scope(text: str = "") -> Scope:
    """The scope of a crawl configured by `text`."""
    return Scope(parse_config(text))


@pytest.mark.parametrize(("url", "kind"), [
    ("http://a.test/ok/page.html", None),
    ("http://a.test/a/a/a/a/x", "trap"),
    ("http://a.test/x/b/c/b/c/b/c/b/c", "trap"),
    ("http://a.test/" + "d/" * 41, "trap"),
    ("http://a.test/cal/2999/01/", "trap"),
    ("http://a.test/cal?year=1066&month=10", "trap"),
    ("http://a.test/cal/2024/01/", None),
    ("http://a.test/product/12345", None),  # a number is not a date
    ("http://a.test/" + "x" * 3000, "trap"),
])
def test_trap_heuristics(url: str, kind: str | None) -> None:
    assert scope().check(url) == kind


def test_trap_path_heuristic_runs_only_on_deep_paths() -> None:
    assert is_trap_path("/a/a/a/a")
    assert scope().check("http://a.test/a/a/a") is None  # shallow: not even looked at


def test_refusals_are_remembered_bounded_and_answered_alike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused URL (met again on every page of a site) is answered from memory, with the
    same reason; the memory is bounded, and URLs in scope are never kept."""
    import larbinpy.links.scope as scope_module

    monkeypatch.setattr(scope_module, "REFUSED_MAX", 3)
    s = scope("forbiddenExtensions .jpg end\nlimitToDomain a.test end\n")
    urls = ["http://a.test/i.jpg", "http://b.test/", "http://a.test/ok.html",
            "http://a.test/cal/2999/01/", "http://a.test/" + "x" * 3000, "http://a.test/j.jpg"]
    first = [s.check(u) for u in urls]
    assert first == ["outOfScope", "outOfScope", None, "trap", "trap", "outOfScope"]
    for _ in range(3):
        assert [s.check(u) for u in urls] == first
        assert [s._check(u) for u in urls] == first  # the rules themselves agree
    assert len(s._refused) <= 3 and "http://a.test/ok.html" not in s._refused


@pytest.mark.parametrize(("addr", "allowed"), [
    ("93.184.216.34", True), ("2606:2800:220:1::1", True),
    ("127.0.0.1", False), ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.1.1", False),
    ("169.254.169.254", False), ("100.64.0.1", False), ("0.0.0.0", False), ("224.0.0.1", False),
    ("255.255.255.255", False), ("::1", False), ("fe80::1", False), ("fc00::1", False),
    ("ff02::1", False), ("::ffff:127.0.0.1", False), ("::ffff:10.0.0.1", False),
    ("64:ff9b::7f00:1", False), ("2002:7f00:1::", False), ("2002:c0a8:101::", False),
    ("fe80::1%eth0", False), ("not an ip", False),
])
def test_network_policy_denies_the_operators_networks(addr: str, allowed: bool) -> None:
    assert NetworkPolicy().allowed(addr) is allowed


def test_allow_networks_opens_only_the_given_ranges() -> None:
    policy = NetworkPolicy([ipaddress.ip_network("127.0.0.0/8")])
    assert policy.allowed("127.0.0.5") and policy.allowed("::ffff:127.0.0.5")
    assert not policy.allowed("10.0.0.1")


@pytest.mark.parametrize(("url", "kind"), [
    ("http://a.test/mailtoISO-8859-1.html", None),  # a charset name, not year 8859
    ("http://a.test/doc/ISO-8859-15/", None),
    ("http://a.test/v/3000-1/", None),  # not a year a calendar steps through
    ("http://a.test/cal/2999-01-31/", "trap"),
    ("http://a.test/cal/1850-13/", None),  # month 13: not a date
    ("http://a.test/cal/1850-12-31.html", "trap"),
    ("http://a.test/news2999-01.html", None),  # digits inside a word are not a date
    ("http://a.test/cal/2024-02-30/", None),
])
def test_calendar_rule_reads_only_dates_a_calendar_writes(url: str, kind: str | None) -> None:
    assert scope().check(url) == kind
