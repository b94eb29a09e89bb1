"""larbinpy: larbin, the single-process non-blocking web crawler, on one asyncio event loop."""

__version__ = "0.1.0"
