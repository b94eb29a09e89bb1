"""`larbinpy bench` end to end on a tiny synthetic web (figures are not asserted, only sanity)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_small_json() -> None:
    """3 hosts x 20 pages: exit 0, the crawl fetched all 60 pages, both runs have a throughput."""
    proc = subprocess.run(
        [sys.executable, "-m", "larbinpy", "bench", "--hosts", "3", "--pages", "20", "--json"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["crawl"]["pages"] == 60
    assert result["crawl"]["pages_per_s"] > 0
    assert result["floor"]["pages_per_s"] > 0
    assert result["warnings"] == []
