"""larbinpy: larbin, the single-process non-blocking web crawler, on one asyncio event loop."""

import os

__version__ = "0.1.0"

# LARBINPY_PURE=1 in the environment: the pure-Python twins of the C extensions run instead
# (`links.tagscan.scan_py`, `links.urls.Normalizer`'s own loop, `frontier.seen`'s own test),
# as where they were not built
PURE = bool(os.environ.get("LARBINPY_PURE"))
