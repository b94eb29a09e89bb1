"""Types of the C twin of `Normalizer._resolve_misses`' loop (`_plainlinks.c`); see urls.py."""

from typing import Any

def tails(
    hrefs: list[str], urls: list[Any], miss: object, origin: str, directory: str,
    same: dict[str, str], max_length: int, sub: dict[str, str | None],
    absolute: dict[str, str | None], strip_path: bool, query_check: object, href_max: int,
    room: int, same_room: int, absolute_room: int, /,
) -> tuple[int, int]: ...

def cached(
    hrefs: list[str], sub: dict[str, str | None], absolute: dict[str, str | None],
    miss: object, /,
) -> tuple[list[Any], bool]: ...

def distinct(urls: list[Any], /) -> list[str]: ...
