"""Fuzzing the parsers that take outside input: no exception escapes but the documented one.

larbin.conf -> ConfigError; URL normalizer -> a str or None; link extractor -> a list (bytes of
any kind, any Content-Type charset); robots.txt -> rules or None; input port bodies ->
BadSubmission; the body decoder -> BodyError.
"""

from __future__ import annotations

import asyncio
import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from larbinpy.config import ConfigError, parse_config
from larbinpy.daemon.ports import BadSubmission, parse_json_body, parse_text_body
from larbinpy.links.extract import extract_links
from larbinpy.links.urls import Normalizer
from larbinpy.net.body import BodyError, html_for_links, read_body
from larbinpy.stages.robots import parse_rules

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NORMALIZER = Normalizer()
CONF_WORDS = st.sampled_from([
    "startUrl", "depthInSite", "maxPageSize", "allowNetworks", "end", "limitToDomain",
    "excludePatterns", "\"", "#", "10", "-1", "1MiB", "http://a.b/", "127.0.0.0/8", "on", "off",
    "waitDuration", "[", "(", "output", "save", "stripParams", "\n", "UserAgent", "x" * 300,
])
URL_PARTS = st.sampled_from([
    "http://", "https://", "ftp://", "//", "/", "..", ".", "%", "%2e", "%zz", "?", "#", "@",
    ":", "[", "]", "::1", "127.0.0.1", "xn--", "a", "\u00e9", "\u30c4", "\x00", " ", "\t", "\\",
    "0x7f.1", "999999999999", "localhost", ";sid=1", "&", "=",
])


@FAST
@given(st.lists(st.one_of(CONF_WORDS, st.text(max_size=20)), max_size=30).map(" ".join))
def test_config_raises_only_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_config(text)


@FAST
@given(st.lists(URL_PARTS, max_size=12).map("".join), st.text(max_size=40))
def test_normalizer_returns_a_url_or_none(href: str, noise: str) -> None:
    for candidate in (href, noise, href + noise):
        out = NORMALIZER.normalize(candidate)
        assert out is None or out.startswith(("http://", "https://"))
        out = NORMALIZER.resolve("http://a.test/dir/page.html?q=1", candidate)
        assert out is None or out.startswith(("http://", "https://"))


HTML_BITS = st.sampled_from([
    b"<a href=", b"<base href=", b"<meta charset=", b"shift_jis>", b"utf-16>", b"\xef\xbb\xbf",
    b"\xff\xfe", b"\x00", b'"', b"'", b">", b"</a>", b"<iframe src=", b"javascript:", b"\x80",
    b"\xe9", b"/x", b"http://[", b"<!--", b"<script>", b"&amp;", b"&#0;",
])


@FAST
@given(st.lists(st.one_of(HTML_BITS, st.binary(max_size=20)), max_size=40).map(b"".join),
       st.sampled_from(["", "text/html; charset=utf-8", "text/html; charset=latin1",
                        "text/html; charset=utf-16", "text/html;charset=bogus", "charset=\"",
                        "text/html; charset=shift_jis"]))
def test_link_extractor_never_raises(body: bytes, ctype: str) -> None:
    links, dropped = extract_links(html_for_links(body, ctype), "http://a.test/", NORMALIZER,
                                   max_links=5)
    assert len(links) <= 5 and dropped >= 0


@FAST
@given(st.binary(max_size=400))
def test_robots_parser_never_raises(data: bytes) -> None:
    rules = parse_rules(data)
    if rules is not None:
        rules.can_fetch("http://a.test/x", "larbinpy")


@FAST
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)),
       st.dictionaries(st.sampled_from(["priority", "depth", "force", "x"]),
                       st.text(max_size=5), max_size=3))
def test_input_port_bodies_raise_only_bad_submission(body: bytes, query: dict[str, str]) -> None:
    for parse in (lambda: parse_json_body(body), lambda: parse_text_body(body, query)):
        with contextlib.suppress(BadSubmission):
            parse()


def test_a_query_number_padded_with_odd_whitespace_is_read() -> None:
    # found by the test above: str.strip() takes '\x1f', int() refused it (a 500, not a 400)
    assert parse_text_body(b"http://a.test/", {"priority": "0\x1f"}).priority == 0


class _Content:
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def iter_any(self):  # noqa: ANN201 - an async generator, like aiohttp's
        for i in range(0, len(self.data), 7):
            yield self.data[i : i + 7]


class _Resp:
    def __init__(self, data: bytes, encoding: str) -> None:
        self.headers = {"Content-Encoding": encoding}
        self.content_length = None
        self.content = _Content(data)


@FAST
@given(st.binary(max_size=300), st.sampled_from(["gzip", "deflate", "br", "", "x-gzip", "zz"]))
def test_body_decoder_raises_only_body_error(data: bytes, encoding: str) -> None:
    try:
        body = asyncio.run(read_body(_Resp(data, encoding), 100))  # type: ignore[arg-type]
    except BodyError:
        return
    assert len(body.data) <= 100
