"""larbinpy.links.urls: WHATWG conformance (http/https cases) and larbinpy's canonical form."""

from __future__ import annotations

import json
import random
import re
from itertools import repeat
from pathlib import Path
from urllib.parse import urljoin

import pytest
from conftest import c_extension

from larbinpy.links.urls import (
    _MISS,
    DEFAULT_STRIP_PARAMS,
    Normalizer,
    _BaseInfo,
    host_of,
    path_of,
    site_key,
)

# ---- WHATWG conformance ---------------------------------------------------------------------

_DATA_FILE = Path(__file__).parent / "data" / "urltestdata.json"  # WPT's (data/README.md)
_C0_SPACE = "".join(map(chr, range(0x21)))
_UNRESERVED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

USERINFO = "userinfo dropped: a crawler never sends credentials"
ESCAPES = "percent-escapes canonicalised: unreserved decoded, hex upper-case"

# Every in-scope WHATWG case where larbinpy's answer is not the browser's href (minus fragment):
# (input, base, browser href without fragment, larbinpy's answer, reason).
# Dropping the fragment is a global rule and is not listed per case.
DIFFERENCES = [
    (
        "http://user:pass@foo:21/bar;par?b#c",
        "http://example.org/foo/bar",
        "http://user:pass@foo:21/bar;par?b",
        "http://foo:21/bar;par?b",
        USERINFO,
    ),
    ("https://test:@test", None, "https://test@test/", "https://test/", USERINFO),
    (
        "http://a:b@c:29/d",
        "http://example.org/foo/bar",
        "http://a:b@c:29/d",
        "http://c:29/d",
        USERINFO,
    ),
    (
        "http://&a:foo(b]c@d:2/",
        "http://example.org/foo/bar",
        "http://&a:foo(b%5Dc@d:2/",
        "http://d:2/",
        USERINFO,
    ),
    (
        "http://::@c@d:2",
        "http://example.org/foo/bar",
        "http://:%3A%40c@d:2/",
        "http://d:2/",
        USERINFO,
    ),
    (
        "http://foo.com:b@d/",
        "http://example.org/foo/bar",
        "http://foo.com:b@d/",
        "http://d/",
        USERINFO,
    ),
    ("http://a:b@c\\", None, "http://a:b@c/", "http://c/", USERINFO),
    (
        "/a%2fc",
        "http://example.org/foo/bar",
        "http://example.org/a%2fc",
        "http://example.org/a%2Fc",
        ESCAPES,
    ),
    (
        "/a/%2f/c",
        "http://example.org/foo/bar",
        "http://example.org/a/%2f/c",
        "http://example.org/a/%2F/c",
        ESCAPES,
    ),
    (
        "http://example.com/foo/%2e%2",
        None,
        "http://example.com/foo/%2e%2",
        "http://example.com/foo/.%2",
        ESCAPES,
    ),
    (
        "http://example.com/foo/%2e./%2e%2e/.%2e/%2e.bar",
        None,
        "http://example.com/%2e.bar",
        "http://example.com/..bar",
        ESCAPES,
    ),
    (
        "http://example.com/foo%41%7a",
        None,
        "http://example.com/foo%41%7a",
        "http://example.com/fooAz",
        ESCAPES,
    ),
    (
        "http://example.com/foo%00%51",
        None,
        "http://example.com/foo%00%51",
        "http://example.com/foo%00Q",
        ESCAPES,
    ),
    (
        "http://example.com/%3A%3a%3C%3c",
        None,
        "http://example.com/%3A%3a%3C%3c",
        "http://example.com/%3A%3A%3C%3C",
        ESCAPES,
    ),
    ("http://www/foo%2Ehtml", None, "http://www/foo%2Ehtml", "http://www/foo.html", ESCAPES),
    (
        "http://%25DOMAIN:foobar@foodomain.com/",
        None,
        "http://%25DOMAIN:foobar@foodomain.com/",
        "http://foodomain.com/",
        USERINFO,
    ),
    (
        "http:a:b@www.example.com",
        None,
        "http://a:b@www.example.com/",
        "http://www.example.com/",
        USERINFO,
    ),
    (
        "http:/a:b@www.example.com",
        None,
        "http://a:b@www.example.com/",
        "http://www.example.com/",
        USERINFO,
    ),
    (
        "http://a:b@www.example.com",
        None,
        "http://a:b@www.example.com/",
        "http://www.example.com/",
        USERINFO,
    ),
    (
        "http::b@www.example.com",
        None,
        "http://:b@www.example.com/",
        "http://www.example.com/",
        USERINFO,
    ),
    (
        "http:/:b@www.example.com",
        None,
        "http://:b@www.example.com/",
        "http://www.example.com/",
        USERINFO,
    ),
    (
        "http://:b@www.example.com",
        None,
        "http://:b@www.example.com/",
        "http://www.example.com/",
        USERINFO,
    ),
    (
        "http:a:@www.example.com",
        None,
        "http://a@www.example.com/",
        "http://www.example.com/",
        USERINFO,
    ),
    (
        "http:/a:@www.example.com",
        None,
        "http://a@www.example.com/",
        "http://www.example.com/",
        USERINFO,
    ),
    (
        "http://a:@www.example.com",
        None,
        "http://a@www.example.com/",
        "http://www.example.com/",
        USERINFO,
    ),
    ("http://www.@pple.com", None, "http://www.@pple.com/", "http://pple.com/", USERINFO),
    (
        "http://foo:💩@example.com/bar",
        "http://other.com/",
        "http://foo:%F0%9F%92%A9@example.com/bar",
        "http://example.com/bar",
        USERINFO,
    ),
    (
        "https://@test@test@example:800/",
        "http://doesnotmatter/",
        "https://%40test%40test@example:800/",
        "https://example:800/",
        USERINFO,
    ),
    (
        "https://@@@example",
        "http://doesnotmatter/",
        "https://%40%40@example/",
        "https://example/",
        USERINFO,
    ),
    (
        "http://`{}:`{}@h/`{}?`{}",
        "http://doesnotmatter/",
        "http://%60%7B%7D:%60%7B%7D@h/%60%7B%7D?`{}",
        "http://h/%60%7B%7D?`{}",
        USERINFO,
    ),
    (
        "/some/path",
        "http://user@example.org/smth",
        "http://user@example.org/some/path",
        "http://example.org/some/path",
        USERINFO,
    ),
    (
        "",
        "http://user:pass@example.org:21/smth",
        "http://user:pass@example.org:21/smth",
        "http://example.org:21/smth",
        USERINFO,
    ),
    (
        "/some/path",
        "http://user:pass@example.org:21/smth",
        "http://user:pass@example.org:21/some/path",
        "http://example.org:21/some/path",
        USERINFO,
    ),
    (
        "https://user:pass[\x7f@foo/bar",
        "http://example.org",
        "https://user:pass%5B%7F@foo/bar",
        "https://foo/bar",
        USERINFO,
    ),
]


def _is_http(url: str | None) -> bool:
    """Whether a test URL string starts with an http(s) scheme (as the URL parser would see it)."""
    return url is not None and url.strip(_C0_SPACE).lower().startswith(("http:", "https:"))


def _load_cases() -> list[dict]:
    """The WHATWG cases (comments dropped); a missing file fails the collection."""
    return [c for c in json.loads(_DATA_FILE.read_text("utf-8")) if isinstance(c, dict)]


def _in_scope(case: dict) -> bool:
    """Cases with an http(s) base (or absolute http(s) input) and an http(s) or failure result."""
    if not (_is_http(case["base"]) if case["base"] else _is_http(case["input"])):
        return False
    return bool(case.get("failure")) or case["href"].startswith(("http:", "https:"))


def _canonical(href: str) -> str:
    """Browser href -> larbinpy canonical form, written independently of larbinpy.links.urls."""
    href = href.partition("#")[0]
    scheme, _, rest = href.partition("//")
    authority, slash, path_query = rest.partition("/")
    authority = authority.rpartition("@")[2]

    def fix(m: re.Match[str]) -> str:
        char = chr(int(m.group(1), 16))
        return char if char in _UNRESERVED else "%" + m.group(1).upper()

    return scheme + "//" + authority + slash + re.sub("%([0-9A-Fa-f]{2})", fix, path_query)


def _run(normalizer: Normalizer, case: dict) -> str | None:
    """What larbinpy gives for a WHATWG case."""
    if case["base"]:
        return normalizer.resolve(case["base"], case["input"])
    return normalizer.normalize(case["input"])


_CASES = _load_cases()
_IN_SCOPE = [c for c in _CASES if _in_scope(c)]
_DIFFER = {(i, b): (browser, ours, why) for i, b, browser, ours, why in DIFFERENCES}


def _params(cases: list[dict]) -> list:
    """pytest params with readable ids."""
    return [pytest.param(c, id=f"{c['input']!r}@{c['base']!r}"[:80]) for c in cases]


@pytest.mark.parametrize("case", _params(_IN_SCOPE))
def test_whatwg_case(case: dict) -> None:
    """Each in-scope case: failure -> None, otherwise the browser href in canonical form."""
    expected = None if case.get("failure") else _canonical(case["href"])
    key = (case["input"], case["base"])
    if key in _DIFFER:
        expected = _DIFFER[key][1]
    assert _run(Normalizer(), case) == expected


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")


def _other_scheme(case: dict) -> bool:
    """Whether the case's input is an absolute URL with a scheme other than http(s)."""
    m = _SCHEME.match(case["input"].strip(_C0_SPACE).replace("\t", "").replace("\n", ""))
    return m is not None and m.group(1).lower() not in ("http", "https")


@pytest.mark.parametrize("case", _params([c for c in _CASES if _other_scheme(c)]))
def test_whatwg_other_scheme_inputs_are_refused(case: dict) -> None:
    """Inputs with another scheme (file:, mailto:, non-special ...) give None on an http page."""
    assert Normalizer().resolve("http://example.org/dir/page", case["input"]) is None


@pytest.mark.parametrize(
    "case", _params([c for c in _CASES if _is_http(c["base"]) and not _in_scope(c)])
)
def test_whatwg_non_http_results_are_refused(case: dict) -> None:
    """An href on an http page that a browser resolves to another scheme gives None."""
    assert _run(Normalizer(), case) is None


def test_differences_table_is_complete_and_exact() -> None:
    """The table lists exactly the cases where we differ from the browser (besides fragments)."""
    normalizer = Normalizer()
    actual = {}
    for case in _IN_SCOPE:
        if case.get("failure"):
            continue
        browser = case["href"].partition("#")[0]
        ours = _run(normalizer, case)
        if ours != browser:
            actual[(case["input"], case["base"])] = (browser, ours)
    assert actual == {key: (browser, ours) for key, (browser, ours, _) in _DIFFER.items()}


def test_whatwg_scope_is_substantial() -> None:
    """Guard against the loader silently selecting (almost) nothing."""
    assert len(_IN_SCOPE) > 400
    assert sum(1 for c in _IN_SCOPE if c.get("failure")) > 50


def test_canonical_output_is_a_fixed_point() -> None:
    """Normalizing a canonical URL again changes nothing (the seen-set relies on it)."""
    normalizer = Normalizer()
    for case in _CASES:
        url = _run(normalizer, case) if _is_http(case["base"]) or not case["base"] else None
        if url is not None:
            assert normalizer.normalize(url) == url, case


def test_differences_doc_lists_every_table_entry() -> None:
    """docs/url-differences.md names each case of the table (the README copies it)."""
    doc = Path(__file__).parents[1] / "docs" / "url-differences.md"
    text = doc.read_text("utf-8")
    assert len(re.findall(r"^\| \d+ \|", text, re.M)) == len(DIFFERENCES)
    for given, base, _, ours, _ in DIFFERENCES:
        assert f"`` {ours} ``" in text, (given, base)


# ---- canonical form, by behaviour -----------------------------------------------------------


@pytest.fixture
def norm() -> Normalizer:
    """A Normalizer with the default settings."""
    return Normalizer()


def test_default_port_is_dropped(norm: Normalizer) -> None:
    assert norm.normalize("http://example.com:80/a") == "http://example.com/a"
    assert norm.normalize("https://example.com:443/a") == "https://example.com/a"
    assert norm.normalize("http://example.com:0080/a") == "http://example.com/a"
    assert norm.normalize("http://example.com:443/a") == "http://example.com:443/a"
    assert norm.normalize("https://example.com:8443") == "https://example.com:8443/"
    assert norm.normalize("http://example.com:65536/") is None


def test_scheme_and_host_are_lowercased(norm: Normalizer) -> None:
    assert norm.normalize("HTTP://WWW.Example.COM/Path") == "http://www.example.com/Path"


def test_empty_path_becomes_slash(norm: Normalizer) -> None:
    assert norm.normalize("http://example.com") == "http://example.com/"
    assert norm.normalize("http://example.com?q=1") == "http://example.com/?q=1"


def test_dot_segments_are_resolved(norm: Normalizer) -> None:
    assert norm.normalize("http://e.com/a/./b/../c") == "http://e.com/a/c"
    assert norm.normalize("http://e.com/../../x") == "http://e.com/x"
    assert norm.resolve("http://e.com/a/b/c.html", "../d") == "http://e.com/a/d"
    assert norm.resolve("http://e.com/a/b/c.html", "./") == "http://e.com/a/b/"
    assert norm.resolve("http://e.com/a/b/c.html", "%2e%2E/x") == "http://e.com/a/x"


def test_fragment_is_dropped(norm: Normalizer) -> None:
    assert norm.normalize("http://e.com/a?b=1#frag") == "http://e.com/a?b=1"
    assert norm.resolve("http://e.com/a", "b#c") == "http://e.com/b"


def test_percent_escapes_are_canonical(norm: Normalizer) -> None:
    assert norm.normalize("http://e.com/%7euser/%61%2f%3f?x=%7e%2a%2A") == (
        "http://e.com/~user/a%2F%3F?x=~%2A%2A"
    )


def test_unsafe_characters_are_percent_encoded_like_a_browser(norm: Normalizer) -> None:
    assert norm.normalize('http://e.com/a b/ü"<>`{}?q=a b&r=ü\'"<>`{}') == (
        "http://e.com/a%20b/%C3%BC%22%3C%3E%60%7B%7D?q=a%20b&r=%C3%BC%27%22%3C%3E`{}"
    )
    assert norm.normalize("http://e.com/\x01x") == "http://e.com/%01x"


def test_caret_is_percent_encoded_in_the_path_not_in_the_query(norm: Normalizer) -> None:
    """The URL Standard's path percent-encode set has `^` (docs/url-differences.md)."""
    assert norm.normalize("http://e.com/a^b?c^d") == "http://e.com/a%5Eb?c^d"
    assert norm.resolve("http://e.com/x/", "y^z") == "http://e.com/x/y%5Ez"


def test_surrounding_whitespace_and_embedded_newlines_are_ignored(norm: Normalizer) -> None:
    assert norm.resolve("http://e.com/", "  /a\n/b\t\r ") == "http://e.com/a/b"


def test_backslashes_act_as_slashes(norm: Normalizer) -> None:
    assert norm.normalize("http:\\\\e.com\\a\\b") == "http://e.com/a/b"
    assert norm.resolve("http://e.com/x/y", "\\z") == "http://e.com/z"
    assert norm.resolve("http://e.com/x/y", "q\\r") == "http://e.com/x/q/r"


def test_userinfo_is_dropped(norm: Normalizer) -> None:
    assert norm.normalize("https://user:secret@e.com/p") == "https://e.com/p"
    assert norm.normalize("http://a@b@e.com/") == "http://e.com/"
    assert norm.normalize("http://user@/p") is None  # credentials but no host


def test_session_id_params_are_stripped(norm: Normalizer) -> None:
    assert norm.normalize("http://e.com/p?a=1&PHPSESSID=x&b=2&utm_source=n&utm_x") == (
        "http://e.com/p?a=1&b=2"
    )
    assert norm.normalize("http://e.com/p?sid=1&JSESSIONID=2") == "http://e.com/p"
    assert (
        norm.normalize("http://e.com/p?sidebar=1&autm_x=2") == "http://e.com/p?sidebar=1&autm_x=2"
    )
    assert norm.resolve("http://e.com/", "/p;jsessionid=AB12?x=1") == "http://e.com/p?x=1"
    assert norm.normalize("http://e.com/p?%73id=1&q") == "http://e.com/p?q"


def test_default_strip_params_use_a_prefix_rule_for_utm() -> None:
    assert "utm_*" in DEFAULT_STRIP_PARAMS
    assert {"sid", "sessionid", "jsessionid", "phpsessid", "cfid", "cftoken"} <= (
        DEFAULT_STRIP_PARAMS
    )


def test_custom_strip_params_replace_the_defaults() -> None:
    norm = Normalizer(strip_params={"ref", "trk*"})
    assert norm.normalize("http://e.com/?ref=x&sid=1&trkid=2") == "http://e.com/?sid=1"
    assert Normalizer(strip_params=set()).normalize("http://e.com/?sid=1") == "http://e.com/?sid=1"


def test_idn_host_becomes_punycode(norm: Normalizer) -> None:
    assert norm.normalize("http://bücher.de/") == "http://xn--bcher-kva.de/"
    assert norm.normalize("http://B%C3%BCcher.DE/") == "http://xn--bcher-kva.de/"
    assert norm.normalize("http://☃.net/") == "http://xn--n3h.net/"
    assert norm.normalize("http://xn--bcher-kva.de/") == "http://xn--bcher-kva.de/"


def test_invalid_idn_is_refused(norm: Normalizer) -> None:
    assert norm.normalize("http://xn--/") is None
    assert norm.normalize("http://a.xn--pokxncvks/") is None
    assert norm.normalize("http://%ff.com/") is None


def test_ipv4_browser_forms_become_dotted_decimal(norm: Normalizer) -> None:
    assert norm.normalize("http://0x7f.1/") == "http://127.0.0.1/"
    assert norm.normalize("http://2130706433/") == "http://127.0.0.1/"
    assert norm.normalize("http://0177.0.0.1/") == "http://127.0.0.1/"
    assert norm.normalize("http://1.2.3.4.5/") is None
    assert norm.normalize("http://256.0.0.1/") is None


def test_ipv6_hosts_are_compressed_lowercase(norm: Normalizer) -> None:
    assert norm.normalize("http://[2001:DB8:0:0:0:0:0:1]:8080/") == "http://[2001:db8::1]:8080/"
    assert norm.normalize("http://[::FFFF:192.168.0.1]/") == "http://[::ffff:c0a8:1]/"
    assert norm.normalize("http://[::1/") is None


def test_mailto_and_javascript_links_are_refused(norm: Normalizer) -> None:
    base = "http://e.com/a/b.html"
    for href in (
        "mailto:me@e.com",
        "javascript:void(0)",
        "JavaScript:alert(1)",
        "tel:+123",
        "ftp://e.com/f",
        "data:text/html,hi",
        "file:///etc/passwd",
        "about:blank",
    ):
        assert norm.resolve(base, href) is None, href
    assert norm.normalize("e.com/no-scheme") is None


def test_resolve_follows_the_browser_for_fragment_and_empty_hrefs(norm: Normalizer) -> None:
    base = "http://e.com/a/b.html?x=1"
    assert norm.resolve(base, "#top") == base
    assert norm.resolve(base, "") == base
    assert norm.resolve(base, "?y=2") == "http://e.com/a/b.html?y=2"


def test_resolve_many_dedupes_skips_fragments_and_keeps_order(norm: Normalizer) -> None:
    base = "http://e.com/dir/page.html"
    hrefs = ["b.html", "#top", "/c", "b.html", "./b.html", "mailto:x@e.com", "http://E.com/c"]
    assert norm.resolve_many(base, hrefs) == ["http://e.com/dir/b.html", "http://e.com/c"]


def test_relative_links_without_a_usable_base_are_dropped(norm: Normalizer) -> None:
    assert norm.resolve("not a url", "/a") is None
    assert norm.resolve("not a url", "http://e.com/a") == "http://e.com/a"
    assert norm.resolve_many("mailto:x", ["a", "https://e.com"]) == ["https://e.com/"]


def test_non_canonical_base_is_normalized_first(norm: Normalizer) -> None:
    assert norm.resolve("HTTP://E.com:80/a/b#f", "c") == "http://e.com/a/c"


def test_urls_over_max_length_are_refused() -> None:
    norm = Normalizer(max_length=40)
    ok = "http://e.com/" + "a" * 27
    assert len(ok) == 40
    assert norm.normalize(ok) == ok
    assert norm.normalize(ok + "a") is None
    assert norm.resolve("http://e.com/", "/" + "a" * 28) is None
    assert norm.resolve("http://e.com/", "/é" + "a" * 22) is None  # counted after encoding
    assert Normalizer().normalize("http://e.com/" + "x" * 3000) is None


def test_site_key_host_and_path_slice_canonical_urls() -> None:
    assert site_key("https://e.com/a?b") == "https://e.com"
    assert site_key("http://e.com:8080/") == "http://e.com:8080"
    assert site_key("http://[::1]:81/x") == "http://[::1]:81"
    assert host_of("http://e.com:8080/x") == "e.com"
    assert host_of("https://[::1]:81/x") == "[::1]"
    assert host_of("http://a/") == "a"
    assert path_of("http://e.com/a/b?c=d") == "/a/b?c=d"
    assert path_of("http://e.com/") == "/"


# ---- cache ----------------------------------------------------------------------------------

_BASES = [
    "http://e.com/",
    "http://e.com/a/b.html",
    "http://e.com/a/c.html?q=1",
    "https://e.com/a/b.html",
    "https://other.org:8443/x/y/z",
    "http://127.0.0.1/p/",
]
_PIECES = [
    "",
    "/",
    "//",
    "?",
    "#",
    ".",
    "..",
    "a",
    "B",
    "%2e",
    "%41",
    "%",
    ":",
    "@",
    "\\",
    " ",
    "\t",
    "é",
    "http:",
    "https:",
    "HTTP:",
    "mailto:",
    "e.com",
    "x.org",
    "sid=1",
    "&",
    "=",
    ";",
    "[::1]",
]


def _random_hrefs(seed: int, count: int) -> list[str]:
    """Random-ish hrefs built from URL-significant pieces (same seed, same list)."""
    rng = random.Random(seed)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 6))) for _ in range(count)]


def test_cache_returns_same_answer_as_uncached() -> None:
    """Warm-cache answers equal cold ones, across bases that share a directory."""
    hrefs = _random_hrefs(7, 3000)
    hrefs += [c["input"] for c in _CASES]
    warm = Normalizer()
    for base in _BASES:
        warm.resolve_many(base, hrefs)  # fill the cache from every base
    for base in _BASES:
        for href in hrefs:
            cold = Normalizer().resolve(base, href)
            assert warm.resolve(base, href) == cold, (base, href)


def test_a_page_url_it_resolved_earlier_is_a_base_like_any_other() -> None:
    """In a crawl a page's URL is usually a link the normalizer resolved before, and is then
    used as the base as it is, not normalized again: its links resolve as a fresh one would."""
    hrefs = _random_hrefs(11, 300) + [c["input"] for c in _CASES]
    warm = Normalizer()
    pages = [url for base in _BASES for url in warm.resolve_many(base, hrefs)][::7][:200]
    assert sum(page in warm._same for page in pages) > 100  # results it keeps: the shortcut
    for page in pages:
        assert warm.resolve_many(page, hrefs[:40]) == Normalizer().resolve_many(page, hrefs[:40])


def count_joins(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hrefs given to ada-url's join_url from now on (each call still answered by it)."""
    import larbinpy.links.urls as urls

    calls: list[str] = []
    join = urls.join_url

    def counted(base: str, href: str) -> str:
        calls.append(href)
        return join(base, href)

    monkeypatch.setattr(urls, "join_url", counted)
    return calls


def test_dot_segment_hrefs_of_known_urls_resolve_as_ada_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """'../p.html', './p.html' and the like are answered from the URLs already produced (the
    folder's parents, the root staying the root) without ada-url, and as ada-url answers."""

    hrefs = ["../p.html", "./p.html", "../../p.html", "../../../../p.html", "./../d/p.html",
             "../", "./", "..//p.html", "../d/./p.html", "../d/../p.html", ".hidden", "..", ".",
             "../?q", "./?q", "./.././p.html", "../P%41.html", "../a%2fb", "../c d.html"]
    bases = ["http://e.com/", "http://e.com/a/", "http://e.com/a/b/c.html",
             "http://e.com/a/b/c/?x=1", "http://e.com:81/a/b/"]
    expected = {(base, h): Normalizer().resolve(base, h) for base in bases for h in hrefs}
    warm = Normalizer()
    # the targets, produced first as absolute links (no folder's cache holds these hrefs)
    warm.resolve_many("http://e.com/", [u for u in expected.values() if u])
    calls = count_joins(monkeypatch)
    for base in bases:
        assert warm.resolve_many(base, hrefs) == Normalizer().resolve_many(base, hrefs), base
    calls.clear()
    known = Normalizer()
    known.resolve_many("http://e.com/", [u for u in expected.values() if u])
    for (base, h), url in expected.items():
        assert known.resolve(base, h) == url, (base, h)
    # the plain dot-segment hrefs (no escapes, spaces, '..' or '.' at the end) took no parse;
    # ('..//p.html' names an empty segment: the table answers it only with a URL ada-url made,
    # and plain links are not kept there)
    assert not {h for h in calls if h.startswith(("../", "./")) and h.endswith("p.html")
                and "/./" not in h and "/../" not in h and "//" not in h}


_PLAIN_PIECES = ["a", "Z9", "p.html", "/", "-", "_", "~", ".", "..", "!", "$", "&", "'", "(",
                 ")", "*", "+", ",", "=", "?", "?q=1", "&x=y", ":", "@", "%41", ";", "#f", "//",
                 " ", "\\", "^", "|", "`", "{", "\"", "<", "\t", "\u00e9", "utm_a=1", "sid=2"]
_PLAIN_HOSTS = [
    "http://e.com", "https://a-b.c-d.test", "http://x", "http://1.2.3.4", "http://a.0x1",
    "http://E.com", "http://xn--nxasmq6b.com", "http://a..b", "http://a.b.", "http://e.com:80",
    "http://e.com:81", "https://e.com:443", "https://e.com:80", "http://e.com:8080",
    "http://e.com:65535", "http://e.com:65536", "http://e.com:0", "http://e.com:08",
    "http://" + "l" * 64 + ".com", "http://a.9", "http://a.b9", "http://xn--a.com",
]


def test_plain_links_resolve_as_ada_does() -> None:
    """A plain link resolved without ada-url (`Normalizer._tail`, `_plain`) is what ada-url answers,
    for random hrefs of URL-significant pieces against every base, and absolute ones."""
    rng = random.Random(30)
    norm = Normalizer()
    bases = [_BaseInfo(b) for b in _BASES + ["http://e.com/a/b/", "https://q.test/x?y=1"]]
    answered = 0
    for _ in range(20_000):
        href = "".join(rng.choice(_PLAIN_PIECES) for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.3:
            href = rng.choice(_PLAIN_HOSTS) + rng.choice(["", "/"]) + href
        base = rng.choice(bases)
        # (a normalizer whose table is empty: what `_tail` answers is the plain-link rule's)
        plain = norm._plain(href) if href[:4] == "http" else norm._tail(base, href)
        if plain is not _MISS:
            answered += 1
            assert plain == norm._parse_ada(href, base), (href, base.url)
    assert answered > 2_000  # not a test of the fallback alone


def test_cache_does_not_share_base_dependent_answers_within_a_directory() -> None:
    norm = Normalizer()
    for href in ("?p=2", "", "http:", "http:?z", "  ?p=3", "\t#x"):
        first = norm.resolve("http://e.com/d/one.html?a=1", href)
        second = norm.resolve("http://e.com/d/two.html", href)
        assert first is not None and first.startswith("http://e.com/d/one.html"), href
        assert second is not None and second.startswith("http://e.com/d/two.html"), href


def test_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import larbinpy.links.urls as urls

    monkeypatch.setattr(urls, "_CACHE_MAX", 100)
    monkeypatch.setattr(urls, "_URLS_MAX", 150)
    norm = Normalizer()
    for i in range(1000):  # (';': not plain links, which are not cached at all)
        assert norm.resolve("http://e.com/", f"/p;{i}") == f"http://e.com/p;{i}"
    assert sum(len(sub) for sub in norm._cache.values()) <= 100
    for i in range(1000):  # one directory per page, only uncacheable hrefs
        assert norm.resolve(f"http://e.com/d{i}/", "?q") == f"http://e.com/d{i}/?q"
    assert len(norm._cache) <= 100
    for i in range(1000):  # absolute links: their own cache, bounded the same way
        assert norm.resolve("http://e.com/", f"http://f.com/;{i}") == f"http://f.com/;{i}"
    assert len(norm._absolute) <= 100
    assert len(norm._same) <= 150  # each URL's one object, in a table bounded on its own


def test_plain_links_under_a_folder_with_a_parameter_are_stripped_as_ada_answers() -> None:
    """A stripped parameter whose name holds a '/' may begin in the page's folder and end in
    the href: such links are not plain."""
    for params, base, href in ((["a/b"], "http://h/x;a/p", "b"),
                               (["a/b"], "http://h/x;a/p", "b?q=1"),
                               (["a/*"], "http://h/x;a/b&c", "zz")):
        norm = Normalizer(frozenset(params))
        assert norm.resolve(base, href) == norm._parse_ada(href, _BaseInfo(base)), (params, href)


def test_the_table_of_produced_urls_forgets_its_older_half_when_full(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A full table of produced URLs keeps the newer half: links to the URLs produced since
    stay answered without ada-url, and every answer stays ada-url's."""
    import larbinpy.links.urls as urls

    monkeypatch.setattr(urls, "_URLS_MAX", 20)
    norm = Normalizer()
    # (';' keeps them from being plain links, which need neither the table nor ada-url)
    for i in range(20):
        norm.resolve("http://e.com/", f"http://e.com/p;{i}")
    assert len(norm._same) == 20
    norm.resolve("http://e.com/", "http://e.com/p;20")  # full: p0..p9 go, p10..p20 stay
    assert list(norm._same) == [f"http://e.com/p;{i}" for i in range(10, 21)]
    calls = count_joins(monkeypatch)
    for i in (*range(10, 21), 0):  # hrefs no cache holds: the table answers the newer half
        assert norm.resolve("http://e.com/d/", f"../p;{i}") == f"http://e.com/p;{i}"
    assert calls == ["../p;0"]


def test_links_resolved_after_the_cache_fills_mid_page_stay_cached(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import larbinpy.links.urls as urls

    monkeypatch.setattr(urls, "_CACHE_MAX", 7)
    norm = Normalizer()
    for k, base in enumerate(("http://e.com/d/p.html", "http://e.com/f/p.html",
                              "http://e.com/d/q.html")):
        # (';': not plain links, which are not cached; new ones each page, or the table of
        # URLs made would answer them)
        hrefs = [f"x;{k}-{i}.html" for i in range(10)]
        assert norm.resolve_many(base, hrefs) == [urljoin(base, h) for h in hrefs]
        # the entries the page added after the clear are still there, and counted
        kept = sum(len(sub) for sub in norm._cache.values()) + len(norm._cache)
        assert kept == norm._cache_size <= 7
        assert f"x;{k}-9.html" in norm._cache[base[: base.rfind("/") + 1]]


# ---- robustness -----------------------------------------------------------------------------


def test_random_strings_never_raise() -> None:
    """Random junk gives None or a canonical str, never an exception."""
    rng = random.Random(20240611)
    alphabet = (
        "abcXYZ019:/\\?#@%[]. \t\n\r\x00\x7f-_~+!$&'()*,;=\"<>`{}^|"
        "éü☃\u200d\ufffd\ud800\U0001f4a9\u3002\uff0e"
    )
    norm = Normalizer()
    for _ in range(4000):
        length = rng.randint(0, 40)
        text = "".join(rng.choice(alphabet) for _ in range(length))
        if rng.random() < 0.5:
            text = rng.choice(["http://", "https://", "//", "http:", "/", ""]) + text
        for result in (norm.normalize(text), norm.resolve(rng.choice(_BASES), text)):
            assert result is None or isinstance(result, str)
            if result is not None:
                assert result.startswith(("http://", "https://"))
                assert result.isascii() and "#" not in result
                assert norm.normalize(result) == result, (text, result)


def test_non_string_input_is_refused(norm: Normalizer) -> None:
    assert norm.normalize(None) is None  # type: ignore[arg-type]
    assert norm.normalize(b"http://e.com/") is None  # type: ignore[arg-type]


def _page_of_hrefs(rng: random.Random) -> list[str]:
    """A page's hrefs: plain ones and not, relative, climbing, rooted, absolute, repeated."""
    hrefs = []
    for _ in range(rng.randint(1, 30)):
        href = "".join(rng.choice(_PLAIN_PIECES) for _ in range(rng.randint(1, 5)))
        lead = rng.random()
        if lead < 0.2:
            href = "".join(rng.choice(["./", "../", "."]) for _ in range(rng.randint(1, 3))) + href
        elif lead < 0.3:
            href = "/" + href
        elif lead < 0.45:
            href = rng.choice(_PLAIN_HOSTS) + rng.choice(["/", "", "?", ":8080/"]) + href
        hrefs.append(href)
    return hrefs + rng.sample(hrefs, min(3, len(hrefs)))


def test_the_resolver_in_use_is_the_c_twin_unless_told() -> None:
    """Normalizer resolves plain links with `_plainlinks` where it was built (a failed build
    falls back to Python without a word: this says so), with Python under LARBINPY_PURE=1."""
    import larbinpy.links.urls as urls
    from larbinpy import PURE

    if PURE:
        assert urls._plainlinks is None
    else:
        assert urls._plainlinks is c_extension("links._plainlinks")


@pytest.mark.parametrize(("cache_max", "urls_max"), [(16_384, 65_536), (40, 65_536), (16_384, 25)])
def test_the_c_twin_answers_a_pages_misses_as_the_python_loop_does(
        monkeypatch: pytest.MonkeyPatch, cache_max: int, urls_max: int) -> None:
    """`_plainlinks.tails` (C) and `_tail`, `_plain` and their caching (Python) give every page
    the same links, and, while no cache or table fills, leave the same caches behind; with
    small bounds they stop for Python to empty them, and the links stay the same."""
    twin = c_extension("links._plainlinks")
    import larbinpy.links.urls as urls

    monkeypatch.setattr(urls, "_CACHE_MAX", cache_max)
    monkeypatch.setattr(urls, "_URLS_MAX", urls_max)
    rng = random.Random(cache_max + urls_max)
    bases = [*_BASES, "http://e.com/a/b/c/d.html", "http://e.com/s;sid=1/p", "https://q.test/x?y=1"]
    for params in (DEFAULT_STRIP_PARAMS, frozenset({"a/b", "x*"})):
        c_norm, py_norm = Normalizer(params, max_length=60), Normalizer(params, max_length=60)
        for _ in range(400):
            base, hrefs = rng.choice(bases), _page_of_hrefs(rng)
            monkeypatch.setattr(urls, "_plainlinks", twin)
            got = c_norm.resolve_upto(base, hrefs, None)
            monkeypatch.setattr(urls, "_plainlinks", None)
            assert got == py_norm.resolve_upto(base, hrefs, None), (base, hrefs)
            assert c_norm._cache_size <= cache_max and len(c_norm._same) <= urls_max
            assert len(c_norm._absolute) <= cache_max
        if cache_max > 1000 and urls_max > 1000:  # nothing filled: the same caches too
            assert c_norm._cache == py_norm._cache
            assert c_norm._absolute == py_norm._absolute
            assert c_norm._same == py_norm._same


def test_the_c_twins_lookups_and_de_duplication_answer_as_pythons() -> None:
    """`_plainlinks.cached` gives what resolve_upto's two maps give (the absolute links' cache
    answering last), `distinct` what `dict.fromkeys` keeps (equal strings that are distinct
    objects are one URL; None dropped), on short pages and on pages of thousands of URLs."""
    twin = c_extension("links._plainlinks")
    rng = random.Random(5)
    for n in (0, 1, 7, 200, 3000):
        pool = [f"http://h{rng.randrange(9)}.test/{rng.randrange(n + 1)}" for _ in range(n)]
        urls = [None if rng.random() < 0.1 else "".join(list(rng.choice(pool))) for _ in pool]
        expected = dict.fromkeys(urls)
        expected.pop(None, None)
        assert twin.distinct(urls) == list(expected)
        sub = {h: f"s{h}" for h in rng.sample(pool, n // 3)}
        absolute = {h: f"a{h}" for h in rng.sample(pool, n // 3)}
        after_sub = list(map(sub.get, pool, repeat(_MISS, len(pool))))
        after_both = list(map(absolute.get, pool, after_sub)) if _MISS in after_sub else after_sub
        assert twin.cached(pool, sub, absolute, _MISS) == (after_both, _MISS in after_both)


def test_the_c_de_duplication_survives_a_comparison_that_empties_the_list() -> None:
    """A URL's == may run code (a str subclass): one that empties the list under `distinct` or
    `cached` ends it there, without reading freed memory."""
    twin = c_extension("links._plainlinks")

    class Emptying(str):
        def __eq__(self, other: object) -> bool:
            urls.clear()
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    urls: list[str | None] = ["http://a/", Emptying("http://a/"), "http://b/"]
    assert twin.distinct(urls) == ["http://a/"]
    urls = ["p", "q", "r"]  # `cached`: a lookup that empties the hrefs ends the answers there
    sub: dict[str, str | None] = {Emptying("p"): "http://h/p", "q": "http://h/q"}
    assert twin.cached(urls, sub, {}, _MISS) == (["http://h/p"], False)


def test_the_c_twin_answers_plain_links_and_urls_of_the_table_and_caches_nothing() -> None:
    """`_plainlinks.tails` answers plain links (relative, rooted, absolute; None when too long)
    and the URLs of the table, leaves the rest to ada-url, and adds nothing to the table: a
    plain link costs less to check again than to remember."""
    twin = c_extension("links._plainlinks")
    known = "http://e.com/d/x;1"
    same = {known: known}
    hrefs = ["p.html", "/q?x=1", "http://f.com/r", "x;1", "x;2", "HTTP://f.com/",
             "http://f.com/" + "a" * 60, "../p.html", "#top"]
    urls: list[object] = [_MISS] * len(hrefs)
    assert twin.tails(hrefs, urls, _MISS, "http://e.com", "http://e.com/d/", same, 60, False,
                      None) is None
    assert urls == ["http://e.com/d/p.html", "http://e.com/q?x=1", "http://f.com/r", known,
                    _MISS, _MISS, None, "http://e.com/p.html", _MISS]
    assert same == {known: known}
    norm = Normalizer(max_length=60)  # and as the Python twin answers them
    assert [norm.resolve("http://e.com/d/i.html", h) for h in hrefs[:4]] == urls[:4]


def test_a_folder_a_stripped_parameter_ends_is_not_the_answer_to_dot_slash() -> None:
    """'./' and '../' name the page's folder or a parent: when a stripped parameter whose
    name ends with '/' ends that folder's path, the answer is the folder stripped, as ada-url
    answers (the link is not plain)."""
    for params, base, href in ((["a/"], "http://h/x;a/p", "./"),
                               (["a/*"], "http://h/x;a/&/p", "../")):
        norm = Normalizer(frozenset(params))
        expected = norm._parse_ada(href, _BaseInfo(base))
        assert expected == "http://h/x", (params, href)
        assert norm.resolve(base, href) == expected, (params, href)
        assert Normalizer(frozenset(params)).resolve_many(base, [href]) == [expected], params


@pytest.mark.parametrize("shortened", ["hrefs", "urls"])
def test_the_c_twin_reads_a_list_shortened_under_it_no_further(shortened: str) -> None:
    """A call of `query_check` may run any code (on Python 3.11 the match object it makes may
    start a collection, which runs finalizers): a list it shortens ends the loop there, and is
    not read past its end."""
    twin = c_extension("links._plainlinks")
    hrefs = ["a?q", "b?q", "c?q"]
    urls: list[object] = [_MISS] * 3
    lists = {"hrefs": hrefs, "urls": urls}

    def query_check(url: str) -> None:
        lists[shortened].clear()  # (a cleared list has no item array left to read)

    twin.tails(hrefs, urls, _MISS, "http://e.com", "http://e.com/d/", {}, 2048, False,
               query_check)
    assert urls == ([] if shortened == "urls" else ["http://e.com/d/a?q", _MISS, _MISS])
