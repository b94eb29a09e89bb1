"""Types of the C link scanner (`_tagscan.c`); see tagscan.py."""

def scan(
    doc: bytes, requisites: bool = ..., /
) -> (tuple[str | None, list[str], list[str], list[str], list[tuple[str | None, str | None]],
            list[str], bool]
      | tuple[str | None, list[str], list[str], list[str], list[tuple[str | None, str | None]],
              list[str], bool, list[str], list[str], list[str], list[str]]): ...
