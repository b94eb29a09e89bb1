"""net/headers.py: a plain-http response's headers answer as aiohttp's multidict does."""

from __future__ import annotations

import random

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from larbinpy.net.headers import Headers

_NAMES = [b"Content-Type", b"content-type", b"Set-Cookie", b"SET-COOKIE", b"Location",
          b"X-\xc3\xa9t\xc3\xa9", b"X-\xff", b"Retry-After", b"ETag", b"Content-Length"]
_VALUES = [b"text/html", b"a=1; Path=/", b"", b" spaced ", b"caf\xc3\xa9", b"\xff\xfe", b"5"]
_ASKED = ["content-type", "CONTENT-TYPE", "Set-Cookie", "set-cookie", "Location", "x-été",
          "X-ÉTÉ", "Absent", "etag", "Content-Length", "", "x-\udcff"]


def _reference(raw: tuple[tuple[bytes, bytes], ...]) -> CIMultiDictProxy[str]:
    """What http1.py built before: aiohttp's decoding of the same pairs."""
    return CIMultiDictProxy(CIMultiDict(
        (k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
        for k, v in raw))


def _answers(h: Headers | CIMultiDictProxy[str], name: str) -> tuple[object, ...]:
    """Every lookup the stages make, for one name (exceptions as their type)."""
    def attempt(call: object) -> object:
        try:
            return call()  # type: ignore[operator]
        except KeyError:
            return KeyError
    return (h.get(name), h.get(name, "d"), name in h, attempt(lambda: h[name]),
            attempt(lambda: h.getall(name)), h.getall(name, []),
            attempt(lambda: h.getone(name)), h.getone(name, "d"))


def test_lookups_answer_as_the_multidict_on_random_heads() -> None:
    rng = random.Random(3)
    for _ in range(500):
        raw = tuple((rng.choice(_NAMES), rng.choice(_VALUES)) for _ in range(rng.randint(0, 9)))
        ours, ref = Headers(raw), _reference(raw)
        for name in _ASKED:
            assert _answers(ours, name) == _answers(ref, name), (raw, name)
        assert list(ours.items()) == list(ref.items())
        assert list(ours) == list(ref) and list(ours.keys()) == list(ref.keys())
        assert list(ours.values()) == list(ref.values())
        assert len(ours) == len(ref) and ours == ref and ours == Headers(raw)
        assert CIMultiDict(ours) == CIMultiDict(ref)  # what a user hook is given (hook.py)


def test_a_head_with_a_name_that_is_not_ascii_is_answered_by_the_multidict() -> None:
    raw = ((b"X-\xc3\xa9", b"1"), (b"Content-Type", b"text/html"))
    ours = Headers(raw)
    assert ours.get("x-é") == "1" and ours["content-type"] == "text/html"
    assert ours._first is None  # the fast table is not used for such a head


def test_headers_are_unhashable_like_the_multidict() -> None:
    with pytest.raises(TypeError):
        hash(Headers(()))
