"""Types of the C twin of seen.py's test of links against the seen-set (`_seenbits.c`)."""

from _typeshed import ReadableBuffer as Buffer

def missing(
    keys: list[str], recent: set[str], older: set[str], bitmap: Buffer,
    bits: int, k: int, table: Buffer | None, buckets: int | None, /,
) -> tuple[list[str], list[str]]: ...
