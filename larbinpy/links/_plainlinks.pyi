"""Types of the C twin of `Normalizer._resolve_misses`' loop (`_plainlinks.c`); see urls.py."""

from typing import Any

def tails(
    hrefs: list[str], urls: list[Any], miss: object, origin: str, directory: str,
    same: dict[str, str], max_length: int, strip_path: bool, query_check: object, /,
) -> None: ...

def cached(
    hrefs: list[str], sub: dict[str, str | None], absolute: dict[str, str | None],
    miss: object, /,
) -> tuple[list[Any], bool]: ...

def distinct(urls: list[Any], /) -> list[str]: ...
