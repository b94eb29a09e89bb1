"""A plain-http response's headers (`http1.py`), read the way aiohttp's are.

The stages read aiohttp's `CIMultiDictProxy` of a response: a case-insensitive multidict of
decoded names and values. Building one for every page costs more than the few headers a page's
path asks for (Content-Type, Content-Length, Content-Encoding, Transfer-Encoding; Location on a
redirect, Retry-After on a 429). `Headers` answers those lookups from the raw (name, value)
byte pairs llhttp gave, decoding only the values asked for, and builds the same multidict only
when a reader wants more of it (its items, its length, iteration: an archive, a user hook).

Its answers are the multidict's: names compare case-insensitively (ASCII), values are decoded
as aiohttp does (UTF-8, surrogates for the rest), `get` gives the first value, `getall` every
one in order. A head with a name that is not ASCII is answered by the multidict itself, whose
case rules for such names are its own.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multidict import CIMultiDictProxy

__all__ = ["Headers"]

_ABSENT: Any = object()  # a default no caller passes
_KEYS: dict[str, bytes] = {}  # names asked for -> their lookup keys (the stages ask a dozen)
_KEYS_MAX = 256


def _text(raw: bytes) -> str:
    """A name or value as aiohttp decodes it."""
    return raw.decode("utf-8", "surrogateescape")


class Headers:
    """A response's headers: lookups answered from the raw pairs (see the module doc)."""

    __slots__ = ("_raw", "_first", "_proxy")

    def __init__(self, raw: tuple[tuple[bytes, bytes], ...]) -> None:
        self._raw = raw
        # lower-case ASCII name -> its first value's bytes; None when a name is not ASCII
        # (reversed: the first of repeated names is the one left in the dict)
        first = {name.lower(): value for name, value in reversed(raw)}
        self._first = first if b"".join(first).isascii() else None
        self._proxy: CIMultiDictProxy[str] | None = None

    def multidict(self) -> CIMultiDictProxy[str]:
        """The headers as aiohttp's read-only multidict (built once, when first asked)."""
        if self._proxy is None:
            from multidict import CIMultiDict, CIMultiDictProxy

            self._proxy = CIMultiDictProxy(CIMultiDict(
                (_text(name), _text(value)) for name, value in self._raw))
        return self._proxy

    def _key(self, name: str) -> bytes | None:
        """The lookup key of `name`; None when the multidict must answer."""
        if self._first is None:
            return None
        key = _KEYS.get(name)
        if key is None:
            if not name.isascii():
                return None
            if len(_KEYS) >= _KEYS_MAX:
                _KEYS.clear()
            key = _KEYS[name] = name.lower().encode("ascii")
        return key

    def get(self, name: str, default: Any = None) -> Any:
        """The first value of `name`, or `default`."""
        # (the stages ask a few names, each many times: a known name's lookup is two dict
        # gets here, without a call to _key)
        first, key = self._first, _KEYS.get(name)
        if first is None or key is None:
            key = self._key(name)
            if key is None:
                return self.multidict().get(name, default)
            assert first is not None  # (a key is made only then)
        value = first.get(key)
        return default if value is None else value.decode("utf-8", "surrogateescape")

    def getone(self, name: str, default: Any = _ABSENT) -> str:
        """The first value of `name` (KeyError without one, unless a default is given)."""
        value = self.get(name, _ABSENT)
        if value is _ABSENT:
            if default is _ABSENT:
                raise KeyError(name)
            return default  # type: ignore[no-any-return]  # the caller's
        return value  # type: ignore[no-any-return]  # a str: decoded

    def getall(self, name: str, default: Any = _ABSENT) -> Any:
        """Every value of `name`, in order (KeyError without one, unless a default is given)."""
        key = self._key(name)
        if key is None:
            return self.multidict().getall(name, *(() if default is _ABSENT else (default,)))
        values = [_text(value) for raw_name, value in self._raw if raw_name.lower() == key]
        if values:
            return values
        if default is _ABSENT:
            raise KeyError(name)
        return default

    def __getitem__(self, name: str) -> str:
        """The first value of `name` (KeyError without one)."""
        return self.getone(name)

    def __contains__(self, name: object) -> bool:
        """Is there a header called `name`?"""
        if not isinstance(name, str):
            return False
        key = self._key(name)
        if key is None:
            return name in self.multidict()
        assert self._first is not None
        return key in self._first

    def __iter__(self) -> Iterator[str]:
        """The names, in order, repeated ones repeated (as the multidict's)."""
        return iter(self.multidict())

    def __len__(self) -> int:
        """How many header lines."""
        return len(self._raw)

    def keys(self) -> KeysView[str]:
        """The multidict's keys view."""
        return self.multidict().keys()

    def values(self) -> ValuesView[str]:
        """The multidict's values view."""
        return self.multidict().values()

    def items(self) -> ItemsView[str, str]:
        """The multidict's items view: every (name, value), in order."""
        return self.multidict().items()

    def __eq__(self, other: object) -> bool:
        """Equal to what the multidict is equal to."""
        return self.multidict() == (other.multidict() if isinstance(other, Headers) else other)

    __hash__ = None  # type: ignore[assignment]  # a mapping, as the multidict: unhashable

    def __repr__(self) -> str:
        """As the multidict shows itself."""
        return repr(self.multidict())
