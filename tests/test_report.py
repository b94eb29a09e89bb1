"""`larbinpy report CRAWL_LOG`: a real crawl's log summed up by kind, status, content type and
host; gzipped logs; bad files refused with exit 2; and memory bounded on a large generated log,
in a child process under RLIMIT_AS."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from conftest import html
from test_crawllog import lines, mixed_web

from larbinpy.demo import Site


def report(*args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """`larbinpy report ARGS` in a child process (under RLIMIT_AS `limit` bytes, set before
    anything is imported); its stdout ends with the child's peak virtual memory (VmPeak, kB)
    on a line of its own."""
    code = (
        "import resource, sys\n"
        f"limit = {limit!r}\n"
        "if limit: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "from larbinpy.cli import main\n"
        f"rc = main(['report', *{list(args)!r}])\n"
        "peak = [l for l in open('/proc/self/status') if l.startswith('VmPeak')][0]\n"
        "print(peak.split()[1])\n"
        "sys.exit(rc)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def peak_kb(proc: subprocess.CompletedProcess[str]) -> int:
    """The child's VmPeak, from its last line."""
    return int(proc.stdout.splitlines()[-1])


def json_of(proc: subprocess.CompletedProcess[str]) -> dict:
    """The report's JSON (its output less the VmPeak line)."""
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.rsplit("\n", 2)[0])


async def test_a_real_crawls_log_by_kind_status_type_and_host(make_web):
    web = mixed_web() + [Site("b.test", "127.0.0.3", {"/": html("/1.html"), "/1.html": html()})]
    tw = await make_web(web)
    crawler = await tw.crawl(f"startUrl {tw.url('a.test')}\nstartUrl {tw.url('b.test')}\n")
    log = tw.tmp / "save" / "crawl.jsonl"
    logged = lines(log)
    got = json_of(report(str(log), "--json"))
    by_kind = {r["key"]: r["urls"] for r in got["by_kind"]}
    assert by_kind == {k.value: n for k, n in crawler.stats.outcomes.items()
                       if n and any(line["kind"] == k.value for line in logged)}
    assert by_kind["err40X"] == 1 and by_kind["forbiddenRobots"] == 1
    assert got["lines"] == len(logged) and got["unreadable_lines"] == 0
    assert got["bytes"] == sum(line["bytes"] for line in logged)
    statuses = {r["key"]: r["urls"] for r in got["by_status"]}
    assert statuses["404"] == 1 and statuses["none"] >= 2  # robots.txt, noDNS: no answer
    types = {r["key"]: r["urls"] for r in got["by_content_type"]}
    assert types["text/plain"] == 1 and types["text/html"] >= 4
    a, b = (tw.url(h).split("//")[1].rstrip("/") for h in ("a.test", "b.test"))
    hosts = {r["key"]: r for r in got["hosts_by_urls"]}
    assert hosts[b]["urls"] == 2 and hosts[b]["failures"] == 0
    assert hosts[a]["failures"] == 2  # the 404 and the URL robots.txt forbids
    failing = [(r["key"], r["failures"]) for r in got["hosts_by_failures"]]
    assert failing == [(a, 2), ("nowhere.test", 1)]  # b.test failed nothing: not listed
    assert got["hosts_estimated"] == len({line["url"].split("/")[2] for line in logged})
    assert set(got["errors"]["hosts_by_urls"].values()) == {0}  # a small log: exact
    text = report(str(log)).stdout
    assert "By outcome kind (exact)" in text and "Hosts with the most failures" in text
    assert f"  {b}  " in text


def test_a_gzipped_log_with_a_torn_last_line_and_an_overlong_line(tmp_path: Path):
    """logrotate's .gz is read as the log; a torn last line (a kill -9) and a line over
    MAX_LINE are counted unreadable, not fatal."""
    good = [json.dumps({"t": 1.8e9 + i, "url": f"http://h{i % 3}.test/{i}", "kind": "success",
                        "status": 200, "bytes": 10, "ms": 1, "type": "text/html", "depth": 1,
                        "via": None}) for i in range(30)]
    overlong = json.dumps({"url": "http://x.test/", "kind": "success", "pad": "x" * (2 << 20)})
    text = "\n".join(good[:10] + [overlong] + good[10:]) + '\n{"t":1.8e9,"url":"http://to'
    path = tmp_path / "crawl.jsonl.1.gz"
    path.write_bytes(gzip.compress(text.encode()))
    got = json_of(report(str(path), "--json"))
    assert got["lines"] == 30 and got["unreadable_lines"] == 2
    assert {r["key"]: r["urls"] for r in got["hosts_by_urls"]} == {
        "h0.test": 10, "h1.test": 10, "h2.test": 10}


def test_a_missing_or_foreign_file_exits_2_saying_why(tmp_path: Path):
    missing = report(str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2
    assert f"{tmp_path / 'nope.jsonl'}: No such file or directory" in missing.stderr
    foreign = tmp_path / "larbin.conf"
    foreign.write_text("".join(f"# line {i}\nhttpPort 8081\n" for i in range(80)))
    refused = report(str(foreign))
    assert refused.returncode == 2
    assert f"{foreign} is not a crawl log: none of its first 100 lines" in refused.stderr
    other_json = tmp_path / "status.json"
    other_json.write_text('{"pages": 3}\n')
    assert "is not a crawl log" in report(str(other_json)).stderr
    assert report(str(tmp_path)).returncode == 2  # a directory
    assert "--top must be at least 1" in report(str(foreign), "--top", "0").stderr


def big_log(path: Path, n: int) -> None:
    """A crawl log of `n` lines each of its own host and content type (a report keeping every
    key would grow with the log), but one line in ten of busy.example.test."""
    line = ('{"t":%d,"url":"http://%s.example.test:8080/page.html","kind":"%s",'
            '"status":%d,"bytes":%d,"ms":12,"type":"text/x-%d","depth":3,"via":null}\n')
    with path.open("w") as f:
        f.writelines(line % (1.8e9 + i, "busy" if i % 10 == 5 else f"host-{i}",
                             "err40X" if i % 4 == 0 else "success", 100 + i % 900,
                             1000 + i % 7, i) for i in range(n))


def test_memory_stays_bounded_on_a_large_log_under_rlimit_as(tmp_path: Path):
    """300,000 lines, nearly every host and content type new: the report runs under an
    address-space limit of what it takes on a 10-line log plus 48 MB, and finds the one busy
    host (a tenth of the lines) within the error it states, and no other. The same limit
    stops a count that keeps every host (the control: the limit bites)."""
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    big_log(small, 10)
    big_log(big, 300_000)
    baseline = report(str(small), "--json")
    assert baseline.returncode == 0, baseline.stderr
    limit = peak_kb(baseline) * 1024 + (48 << 20)
    got = json_of(report(str(big), "--json", limit=limit))
    assert got["lines"] == 300_000
    assert got["failures"] == 75_000
    assert abs(got["hosts_estimated"] - 270_001) < 270_001 * 0.05
    error = got["errors"]["hosts_by_urls"]["urls"]
    assert 0 < error < 300_000 * 3.5 / 2**13 + 1  # the sketch's stated bound
    [busy] = got["hosts_by_urls"]
    assert busy["key"] == "busy.example.test:8080"
    assert abs(busy["urls"] - 30_000) <= error
    control = subprocess.run([sys.executable, "-c", (
        "import resource, sys, json\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
        "import datasketches, larbinpy.report\n"  # the same imports as the report's
        "hosts = {}\n"
        f"for line in open({str(big)!r}):\n"
        "    r = json.loads(line); hosts[r['url'].split('/')[2]] = r\n")],
        capture_output=True, text=True, timeout=120)
    assert control.returncode != 0 and "MemoryError" in control.stderr
