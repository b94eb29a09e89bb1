"""How the status figures look: larbin's HTML status page and the Prometheus text format.

Pure functions of the `status.snapshot()` dict, so they are easy to test and cannot slow
the crawl down.
"""

from __future__ import annotations

import html
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from larbinpy.daemon.progress import human_bytes

REFRESH_SECONDS = 5


def _chart(history: list[dict[str, Any]], width: int = 600, height: int = 120) -> str:
    """An inline SVG of pages/s over the recorded history (no external resources)."""
    rates = [
        max(0.0, (b["pages"] - a["pages"]) / max(b["t"] - a["t"], 1e-9))
        for a, b in zip(history, history[1:], strict=False)
    ]
    if not rates:
        return "<p>(throughput chart: waiting for data)</p>"
    top = max(rates) or 1.0
    step = width / max(len(rates) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - r / top * (height - 10):.1f}" for i, r in enumerate(rates)
    )
    return (
        f'<svg id="chart" width="{width}" height="{height}" role="img" '
        f'aria-label="pages per second, last {len(rates)} seconds">'
        f'<rect width="100%" height="100%" fill="#f6f6f6"/>'
        f'<polyline fill="none" stroke="#2a6" stroke-width="2" points="{points}"/>'
        f'<text x="4" y="12" font-size="11">{top:.0f} pages/s</text></svg>'
    )


def _rows(pairs: list[tuple[str, Any]]) -> str:
    """Table rows of label/value pairs."""
    return "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in pairs
    )


def _state(s: dict[str, Any]) -> str:
    """crawling / idle / stopping, or why fetching is paused."""
    if s["outputs"]["paused"]:
        return f'PAUSED: {s["outputs"]["paused_reason"]}'
    return "idle" if s["idle"] else ("stopping" if s["stopping"] else "crawling")


def render_html(s: dict[str, Any]) -> str:
    """larbin's status page, refreshing itself."""
    sites = s["sites"]
    main = [
        ("pages fetched", s["pages"]),
        ("pages/s (last 10 s / since start)",
         f'{s["pages_per_s"]["last_10s"]} / {s["pages_per_s"]["since_start"]}'),
        ("bytes/s (last 10 s / since start)",
         f'{human_bytes(s["bytes_per_s"]["last_10s"])} / '
         f'{human_bytes(s["bytes_per_s"]["since_start"])}'),
        ("bytes read", human_bytes(s["bytes"])),
        ("URLs seen", s["urls_seen"]),
        *_seen_rows(s.get("seen_set")),
        ("URLs queued in sites", s["queued_in_sites"]),
        ("sites known / waiting DNS / waiting robots / ready / parked / dead",
         f'{sites["known"]} / {sites["waiting_dns"]} / {sites["waiting_robots"]} / '
         f'{sites["ready"]} / {sites["parked"]} / {sites["dead"]}'),
        ("connections open", s["connections_open"]),
        ("DNS queries", s["dns_queries"]),
        ("robots.txt fetched / refusals", f'{s["robots_fetches"]} / {s["robots_refusals"]}'),
        ("uptime", f'{s["uptime_s"]:.0f} s'),
        ("HTTPS certificates", "checked" if s.get("tls_verify", True)
         else "NOT CHECKED (tlsVerify off)"),
        ("proxy", s.get("proxy") or "none"),
        ("state", _state(s)),
        *[("waiting for", w) for w in s.get("waiting_for", [])],
    ]
    queues = [(f"priority {p}", n) for p, n in s["queued_per_priority"].items()] or [
        ("all priorities", 0)]
    outcomes = [(k, v) for k, v in s["outcomes"].items()]
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<title>larbinpy status</title>
<style>body{{font-family:sans-serif;margin:1em 2em}}th{{text-align:left;padding-right:1em;
font-weight:normal;color:#555}}td{{font-family:monospace}}table{{margin-bottom:1em}}</style>
</head><body>
<h1>larbinpy {html.escape(s["version"])}</h1>
{_chart(s["history"])}
<h2>Crawl</h2><table id="crawl">{_rows(main)}</table>
{_cluster_html(s.get("cluster"))}
<h2>Queued per priority</h2><table id="queues">{_rows(queues)}</table>
<h2>Fetch outcomes</h2><table id="outcomes">{_rows(outcomes)}</table>
<p>Also: <a href="/status.json">status.json</a>, <a href="/metrics">metrics</a>.</p>
</body></html>
"""


def _seen_rows(seen: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The seen-set's rows: its kind, the bitmap's fill and the expected loss so far."""
    if seen is None:
        return []
    return [("seen-set / hash set fill / expected URLs lost",
             f'{seen["kind"]} / {seen["bitmap_fill"]:.2%} / {seen["expected_loss"]:.3g}')]


class _Snapshot:
    """A prometheus-client collector over one status snapshot."""

    def __init__(self, s: dict[str, Any]) -> None:
        self.s = s

    def collect(self) -> Any:
        """Counters and gauges named larbinpy_*, units in the names."""
        s = self.s
        yield _counter("larbinpy_pages", "Responses read", s["pages"])
        yield _counter("larbinpy_body_bytes", "Body bytes read", s["bytes"])
        yield _counter("larbinpy_urls_seen", "URLs accepted by the hash set", s["urls_seen"])
        yield _counter("larbinpy_dns_queries", "DNS queries sent", s["dns_queries"])
        yield _counter("larbinpy_robots_fetches", "robots.txt fetches", s["robots_fetches"])
        outcomes = CounterMetricFamily("larbinpy_fetch_outcomes", "Fetch outcomes by kind",
                                       labels=["kind"])
        for kind, n in s["outcomes"].items():
            outcomes.add_metric([kind], n)
        yield outcomes
        queued = GaugeMetricFamily("larbinpy_queued_urls", "URLs queued", labels=["where"])
        for prio, n in s["queued_per_priority"].items():
            queued.add_metric([f"priority_{prio}"], n)
        queued.add_metric(["sites"], s["queued_in_sites"])
        yield queued
        sites = GaugeMetricFamily("larbinpy_sites", "Sites by state", labels=["state"])
        for state, n in s["sites"].items():
            sites.add_metric([state], n)
        yield sites
        yield GaugeMetricFamily("larbinpy_connections_open", "Fetches in flight",
                                value=s["connections_open"])
        yield GaugeMetricFamily("larbinpy_uptime_seconds", "Seconds since start",
                                value=s["uptime_s"])
        yield GaugeMetricFamily("larbinpy_tls_verify", "1 when HTTPS certificates are checked",
                                value=1 if s.get("tls_verify", True) else 0)
        if (seen := s.get("seen_set")) is not None:
            yield GaugeMetricFamily("larbinpy_seen_bitmap_fill", "Fraction of hash set bits set",
                                    value=seen["bitmap_fill"])
            yield GaugeMetricFamily(
                "larbinpy_seen_expected_loss",
                "New URLs expected dropped so far as already seen by hash collisions",
                value=seen["expected_loss"])
        yield GaugeMetricFamily("larbinpy_idle", "1 when nothing is queued or in flight",
                                value=1 if s["idle"] else 0)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    """One unlabelled counter."""
    return CounterMetricFamily(name, doc, value=value)


# --- scale-out: the cluster's figures (only when `cluster` is set) ---

_NODE_COLUMNS = ("pages", "success", "errors", "urls_seen", "queued", "pages_per_s",
                 "round_trips")


def _cluster_html(c: dict[str, Any] | None) -> str:
    """The cluster's totals and one row per node (empty without a cluster)."""
    if not c:
        return ""
    head = "".join(f"<th>{k.replace('_', ' ')}</th>" for k in ("node", "live", *_NODE_COLUMNS))
    rows = [("total", f"{len(c['live'])} live")] + [(n, "yes" if f.get("live") else "no")
                                                     for n, f in c["nodes"].items()]
    figures = {"total": c["totals"], **c["nodes"]}
    body = "".join(
        f"<tr><td>{html.escape(n)}{' (this node)' if n == c['node'] else ''}</td>"
        f"<td>{live}</td>"
        + "".join(f"<td>{html.escape(str(figures[n].get(k, '')))}</td>" for k in _NODE_COLUMNS)
        + "</tr>" for n, live in rows)
    return (f'<h2>Cluster {html.escape(c["name"])}</h2><table id="cluster">'
            f"<tr>{head}</tr>{body}</table>")


class _NodeSnapshot(_Snapshot):
    """In a cluster: every metric labelled with this node, plus every node's figures."""

    def collect(self) -> Any:
        """This node's metrics with a `node` label, then larbinpy_cluster_* by node."""
        c = self.s["cluster"]
        for family in super().collect():
            family.samples = [x._replace(labels={**x.labels, "node": c["node"]})
                              for x in family.samples]
            yield family
        for name, doc, kind in (("pages", "Responses read", "counter"),
                                ("success", "Pages fetched with success", "counter"),
                                ("urls_seen", "URLs accepted by the shared seen-set", "counter"),
                                ("round_trips", "Redis round trips", "counter"),
                                ("queued", "URLs queued", "gauge"),
                                ("live", "1 while the node heartbeats", "gauge")):
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(
                f"larbinpy_cluster_{name}", f"{doc}, by node (from Redis)", labels=["node"])
            for node, figures in c["nodes"].items():
                family.add_metric([node], float(figures.get(name, 0)))
            yield family


def metrics_text(s: dict[str, Any]) -> tuple[bytes, str]:
    """Prometheus exposition text and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_NodeSnapshot(s) if s.get("cluster") else _Snapshot(s))
    return generate_latest(registry), CONTENT_TYPE_LATEST
