"""`larbinpy bench --nodes 1,2`: the cluster against the embedded default, on this machine.

Not used by a crawl. Every configuration crawls the same synthetic web (the benchmark's
`SynthServer`, in its own process) the same way, so the figures compare:

* each node is a real `larbinpy -c node.conf` process, with no seeds; the benchmark waits
  until every node answers on its port (and, in a cluster, has joined and been seen by the
  others), then POSTs the seeds (every host's root) to the first node's input port and starts
  the clock; it stops when the last node has exited (a cluster ends itself with `exitAtEnd`;
  the embedded node, a daemon, gets SIGTERM at its first idle status);
* "embedded" is one such process without `cluster`; "N nodes" are N processes sharing one
  local `redis-server` (started here, a fresh `clusterName` per run);
* reported: pages/s, CPU of the node processes per page (getrusage of the children), CPU of
  redis-server per page and the commands it ran per page (its INFO, `redisfigures.py`), Redis
  round trips per page (each node counts its own and leaves the total in the cluster's
  figures), and the seen-set's bytes a URL in Redis.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import redis

from larbinpy.bench.harness import HASH_BITS, HASH_FUNCTIONS, SynthServer
from larbinpy.bench.localredis import LocalRedis, _free_port
from larbinpy.bench.redisfigures import RedisFigures, seen_set_bytes
from larbinpy.bench.synth import host_name

READY_TIMEOUT = 30.0
CRAWL_TIMEOUT = 600.0
_SUCCESS = re.compile(r"\bsuccess (\d+)")


def node_config(args: argparse.Namespace, server: SynthServer, workdir: Path, node: str,
                port: int, cluster: str | None) -> str:
    """larbin.conf of one node: as the in-process benchmark's, but seeds come by POST."""
    text = (
        f"UserAgent larbinpy-bench\ndnsServers 127.0.0.1:{server.dns_port}\n"
        f"allowNetworks 127.0.0.0/8 end\npagesConnexions {args.connections}\n"
        f"connectionsPerHost {args.per_host}\nwaitDuration 0\ndepthInSite 1000\n"
        f"httpPort {port}\ninputPort {port}\noutput {args.output}\n"
        f"saveDir {workdir / node / 'save'}\nstateDir {workdir / node / 'state'}\n"
        f"hashSize {HASH_BITS}\nhashFunctions {HASH_FUNCTIONS}\n"
    )
    if cluster:  # the cluster ends itself (distributed termination)
        text += (f"cluster {cluster}\nclusterName bench-{workdir.name}\nnodeId {node}\n"
                 "exitAtEnd\n")
    return text


def _get(port: int, path: str) -> bytes:
    """GET a node's status port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        body: bytes = r.read()
    return body


def _wait_ready(procs: list[subprocess.Popen[bytes]], ports: list[int],
                db: redis.Redis | None, prefix: str) -> None:
    """Every node answers on its port; in a cluster every node has joined."""
    deadline = time.monotonic() + READY_TIMEOUT
    for proc, port in zip(procs, ports, strict=True):
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"a node exited with code {proc.returncode} at start")
            try:
                _get(port, "/status.json")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("a node did not start") from None
                time.sleep(0.05)
    while db is not None and db.zcard(prefix + "nodes") < len(procs):
        if time.monotonic() > deadline:
            raise RuntimeError("the nodes did not all join")
        time.sleep(0.05)
    if db is not None and len(procs) > 1:
        time.sleep(1.5)  # every node has beaten and seen the others: no join grace left


def _submit(port: int, urls: list[str]) -> None:
    """POST the seeds to a node's input port."""
    body = json.dumps({"urls": urls}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/urls", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()


def _stop_when_idle(proc: subprocess.Popen[bytes], port: int) -> None:
    """The embedded node runs as a daemon (exitAtEnd would end it before the seeds come): its
    `idle` is exact, so the first idle status after the seeds is the end; then SIGTERM."""
    deadline = time.monotonic() + CRAWL_TIMEOUT
    while time.monotonic() < deadline:
        if json.loads(_get(port, "/status.json"))["idle"]:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)


def _children_cpu() -> float:
    """User + system CPU of the children waited for so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_nodes(args: argparse.Namespace, server: SynthServer, workdir: Path, nodes: int,
              cluster: str | None) -> dict[str, Any]:
    """One configuration: `nodes` processes (a cluster if `cluster`), timed from the seeds."""
    workdir.mkdir(parents=True)
    db = redis.Redis.from_url(cluster) if cluster else None
    prefix = f"larbinpy:bench-{workdir.name}:"
    names = [f"node{i + 1}" for i in range(nodes)]
    ports = [_free_port() for _ in names]
    procs, logs = [], []
    for name, port in zip(names, ports, strict=True):
        conf = workdir / f"{name}.conf"
        conf.write_text(node_config(args, server, workdir, name, port, cluster))
        log = open(workdir / f"{name}.log", "w+b")  # noqa: SIM115 - closed below
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-m", "larbinpy", "-c", str(conf), "-q"],
                                      stdout=subprocess.DEVNULL, stderr=log))
    try:
        _wait_ready(procs, ports, db, prefix)
        seeds = [f"http://{host_name(h)}:{server.http_port}/" for h in range(args.hosts)]
        before = RedisFigures.read(db) if db is not None else None
        cpu0, t0 = _children_cpu(), time.perf_counter()
        _submit(ports[0], seeds)
        if not cluster:
            _stop_when_idle(procs[0], ports[0])
        for proc in procs:
            proc.wait(CRAWL_TIMEOUT)
        seconds = time.perf_counter() - t0
        cpu = _children_cpu() - cpu0
        after = RedisFigures.read(db) if db is not None else None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    pages = 0
    for proc, log in zip(procs, logs, strict=True):
        log.seek(0)
        text = log.read().decode(errors="replace")
        log.close()
        if proc.returncode != 0:
            raise RuntimeError(f"a node exited with code {proc.returncode}: {text[-1000:]}")
        found = _SUCCESS.findall(text)
        pages += int(found[-1]) if found else 0
    trips, figures = 0, {}
    if db is not None and before is not None and after is not None:
        for raw in db.hgetall(prefix + "stats").values():
            trips += json.loads(raw).get("round_trips", 0)
        figures = {**after.since(before, pages), **seen_set_bytes(db, prefix)}
        db.close()
    per_page = max(pages, 1)
    return {**figures,
        "nodes": nodes if cluster else 0, "pages": pages, "seconds": round(seconds, 2),
        "pages_per_s": round(pages / seconds, 1),
        "cpu_ms_per_page": round(cpu / per_page * 1000, 3),
        "redis_cpu_ms_per_page": figures.get("redis_cpu_ms", 0.0),
        "redis_commands_per_page": figures.get("redis_commands", 0.0),
        "redis_round_trips_per_page": round(trips / per_page, 3) if cluster else 0.0,
    }


def bench_nodes(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The embedded default, then a cluster of each size in `args.nodes`; `args.repeat`
    rounds of all of them, interleaved (the machine's load drifts), medians reported."""
    sizes = [int(n) for n in str(args.nodes).split(",")]
    rounds: list[list[dict[str, Any]]] = []
    with SynthServer(args.hosts, args.pages, workdir) as server, \
            LocalRedis(workdir / "redis") as local:
        for r in range(max(1, getattr(args, "repeat", 1))):
            runs = [run_nodes(args, server, workdir / f"embedded-{r}", 1, None)]
            for n in sizes:
                runs.append(run_nodes(args, server, workdir / f"cluster{n}-{r}", n, local.url))
            rounds.append(runs)
    runs = [_median([rnd[i] for rnd in rounds]) for i in range(len(rounds[0]))]
    base = runs[0]["pages_per_s"] or 1.0
    for run in runs:
        run["vs_embedded"] = round(run["pages_per_s"] / base, 3)
    return {"hosts": args.hosts, "pages_per_host": args.pages, "repeat": len(rounds),
            "pages_per_s_all": [[r["pages_per_s"] for r in rnd] for rnd in rounds],
            "expected_pages": args.hosts * args.pages, "connections": args.connections,
            "per_host": args.per_host, "output": args.output, "runs": runs}


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median pages/s."""
    return sorted(runs, key=lambda r: r["pages_per_s"])[len(runs) // 2]


def report_nodes(result: dict[str, Any]) -> str:
    """The human-readable table."""
    lines = [f"larbinpy bench --nodes: {result['hosts']} hosts x {result['pages_per_host']} "
             f"pages, {result['connections']} connections and {result['per_host']} per host "
             f"a node, output {result['output']} (one process a node, seeds by POST); "
             f"median of {result['repeat']}",
             f"  {'run':<10} {'pages':>7} {'seconds':>8} {'pages/s':>8} {'vs emb.':>8} "
             f"{'CPU ms/page':>12} {'redis ms/page':>14} {'round trips/page':>17} "
             f"{'redis cmds/page':>16} {'seen B/URL':>11}"]
    for r in result["runs"]:
        name = f"{r['nodes']} node" + ("s" if r["nodes"] > 1 else "") if r["nodes"] else "embedded"
        lines.append(f"  {name:<10} {r['pages']:>7} {r['seconds']:>8.2f} {r['pages_per_s']:>8.0f} "
                     f"{r['vs_embedded']:>8.2f} {r['cpu_ms_per_page']:>12.3f} "
                     f"{r['redis_cpu_ms_per_page']:>14.3f} "
                     f"{r['redis_round_trips_per_page']:>17.3f} "
                     f"{r['redis_commands_per_page']:>16.2f} "
                     f"{r.get('seen_bytes_per_url', 0.0):>11.2f}")
        if result["repeat"] > 1:
            i = result["runs"].index(r)
            lines.append(f"  {'':<10} all pages/s: "
                         + ", ".join(f"{rnd[i]:.0f}" for rnd in result["pages_per_s_all"]))
        if r["pages"] != result["expected_pages"]:
            lines.append(f"WARNING: {name} fetched {r['pages']} pages, expected "
                         f"{result['expected_pages']}")
    return "\n".join(lines)
