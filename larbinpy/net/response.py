"""What the crawl reads of a response, whichever client fetched it (`fetcher.py`).

The stages, `body.read_body` and `outputs.page_from_response` read a `Response`: the crawler's
own plain-HTTP client's (`http1.Response`) or aiohttp's (`ClientResponse`, HTTPS and proxies).
These Protocols name exactly what they read, so mypy checks both clients' responses against
them (`fetcher._checked`). Its own module, not the fetcher's: `body.py` reads a `Response`
and the fetcher needs `body.py` (its errors), and the package has no import circles.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, overload

__all__ = ["Connection", "Content", "Headers", "RequestInfo", "Response", "Transport",
           "Version"]


class Headers(Protocol):
    """A response's headers as the stages read them: case-insensitive names, decoded values
    (aiohttp's `CIMultiDictProxy`, or `headers.Headers` answering from the raw bytes)."""

    @overload
    def get(self, name: str, /) -> str | None:
        """The first value of `name`, or None."""

    @overload
    def get(self, name: str, default: str, /) -> str:
        """The first value of `name`, or `default`."""

    def getall(self, name: str, /) -> list[str]:
        """Every value of `name`, in order (KeyError if none)."""
        ...

    def __contains__(self, name: object, /) -> bool:
        """Is there a header `name`?"""
        ...


class Version(Protocol):
    """The HTTP version of a response (a named tuple in both clients)."""

    @property
    def major(self) -> int:
        """1 for HTTP/1.x."""
        ...

    @property
    def minor(self) -> int:
        """0 or 1."""
        ...


class RequestInfo(Protocol):
    """What was sent, for archival outputs."""

    @property
    def headers(self) -> Mapping[str, str]:
        """The request's headers."""
        ...


class Transport(Protocol):
    """The connection's transport, for the peer's address."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """`peername` and the like (asyncio's)."""
        ...


class Connection(Protocol):
    """The connection a response came on."""

    @property
    def transport(self) -> Transport | None:
        """Its transport (None once closed)."""
        ...


class Content(Protocol):
    """A body arriving in chunks."""

    def iter_any(self) -> AsyncIterator[bytes]:
        """The chunks as they arrive; raises if the body cannot be read to its end."""
        ...


class Response(Protocol):
    """One response, its head read and its body to come (`content.iter_any()`): what the
    reader, the robots stage, `body.read_body` and `outputs.page_from_response` read."""

    @property
    def status(self) -> int:
        """The status code."""
        ...

    @property
    def reason(self) -> str | None:
        """The reason phrase."""
        ...

    @property
    def version(self) -> Version | None:
        """The HTTP version of the answer."""
        ...

    @property
    def headers(self) -> Headers:
        """The response headers."""
        ...

    @property
    def raw_headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """The response headers as they came, for archival outputs."""
        ...

    @property
    def content_type(self) -> str:
        """The media type, lower-case, without parameters."""
        ...

    @property
    def content_length(self) -> int | None:
        """Content-Length as announced (None when absent)."""
        ...

    @property
    def request_info(self) -> RequestInfo:
        """What was sent."""
        ...

    @property
    def connection(self) -> Connection | None:
        """The connection it came on (None once released)."""
        ...

    @property
    def content(self) -> Content:
        """The body, in chunks."""
        ...

    def release(self) -> Any:
        """Done with it: the connection goes back to its pool, or is closed."""
        ...
