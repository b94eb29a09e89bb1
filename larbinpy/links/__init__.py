"""From a page to the URLs worth crawling: link extraction, URL resolution and normalisation,
the crawl's scope, and sitemaps."""

import os

# LARBINPY_PURE=1 in the environment: the pure-Python twins of the C extensions run instead
# (`tagscan.scan_py`, `urls.Normalizer`'s own loop), as where they were not built
PURE = bool(os.environ.get("LARBINPY_PURE"))
