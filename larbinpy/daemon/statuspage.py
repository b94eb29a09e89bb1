"""How the status figures look: larbin's HTML status page and the Prometheus text format.

Pure functions of the `status.snapshot()` dict, so they are easy to test and cannot slow
the crawl down.
"""

from __future__ import annotations

import html
import math
import time
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from larbinpy.daemon.progress import human_bytes
from larbinpy.stats import counted

REFRESH_SECONDS = 5
# outcome kinds of a link or URL refused before it is queued (links_dropped in /metrics)
DROP_KINDS = ("trap", "outOfScope", "tooDeep", "urlDup")
# the chart: its size and the room kept around the plot for the axes' labels
CHART_WIDTH, CHART_HEIGHT = 640, 200
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 16, 10, 38
_TIME_STEPS = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)  # x ticks, seconds apart
_TICKS_AT_MOST = 6


def _nice(x: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `x` > 0 (a tick step)."""
    power = 10.0 ** math.floor(math.log10(x))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= x * (1 - 1e-9))


def _ago(seconds: float) -> str:
    """An x tick's label: "now", "30 s", "2 min"."""
    if seconds == 0:
        return "now"
    return f"{seconds // 60:.0f} min" if seconds % 60 == 0 else f"{seconds:.0f} s"


def _rates(history: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(seconds before the last sample, pages/s) between consecutive samples."""
    if len(history) < 2:
        return []
    last = history[-1]["t"]
    return [(last - b["t"], max(0.0, (b["pages"] - a["pages"]) / max(b["t"] - a["t"], 1e-9)))
            for a, b in zip(history, history[1:], strict=False)]


def _chart(history: list[dict[str, Any]]) -> str:
    """An inline SVG of pages/s over the recorded history, with both axes labelled: pages/s
    up, time ago (before the last sample) across. No external resources."""
    rates = _rates(history)
    if not rates:
        return "<p>(throughput chart: waiting for data)</p>"
    span_seen = max(rates[0][0], 1.0)
    x_step = next((t for t in _TIME_STEPS if span_seen / t <= _TICKS_AT_MOST), _TIME_STEPS[-1])
    span = math.ceil(span_seen / x_step) * x_step
    peak = max(r for _, r in rates)
    y_step = _nice(max(peak, 1.0) / 4)
    top = max(math.ceil(peak / y_step - 1e-9), 2) * y_step
    w, h = CHART_WIDTH - _LEFT - _RIGHT, CHART_HEIGHT - _TOP - _BOTTOM

    def x(ago: float) -> float:
        return _LEFT + w * (1 - ago / span)

    def y(rate: float) -> float:
        return _TOP + h * (1 - rate / top)

    parts = [f'<rect x="{_LEFT}" y="{_TOP}" width="{w}" height="{h}" fill="#f6f6f6"/>']
    for i in range(round(top / y_step) + 1):
        v = i * y_step
        parts.append(f'<line x1="{_LEFT}" x2="{_LEFT + w}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     f'stroke="#ddd"/><text x="{_LEFT - 4}" y="{y(v) + 4:.1f}" '
                     f'text-anchor="end">{v:g}</text>')
    for i in range(round(span / x_step) + 1):
        ago = i * x_step
        parts.append(f'<line x1="{x(ago):.1f}" x2="{x(ago):.1f}" y1="{_TOP + h}" '
                     f'y2="{_TOP + h + 4}" stroke="#555"/><text x="{x(ago):.1f}" '
                     f'y="{_TOP + h + 16}" text-anchor="middle">{_ago(ago)}</text>')
    points = " ".join(f"{x(ago):.1f},{y(r):.1f}" for ago, r in rates)
    return (
        f'<svg id="chart" width="{CHART_WIDTH}" height="{CHART_HEIGHT}" role="img" '
        f'font-size="11" aria-label="pages per second over the last {span_seen:.0f} seconds">'
        + "".join(parts)
        + f'<path d="M{_LEFT},{_TOP}V{_TOP + h}H{_LEFT + w}" fill="none" stroke="#555"/>'
        f'<polyline fill="none" stroke="#2a6" stroke-width="2" points="{points}"/>'
        f'<text class="axis" transform="translate(12,{_TOP + h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">pages/s</text>'
        f'<text class="axis" x="{_LEFT + w / 2:.0f}" y="{CHART_HEIGHT - 4}" '
        f'text-anchor="middle">time ago</text></svg>'
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


def _banner(s: dict[str, Any]) -> str:
    """A banner at the top while fetching is paused (an output's storage refuses writes)."""
    out = s["outputs"]
    if not out["paused"]:
        return ""
    return (f'<div id="paused" role="alert"><strong>PAUSED</strong>: '
            f'{html.escape(str(out["paused_reason"]))}<br>No new fetch starts until the '
            f'output can write again ({counted(out["backlog"], "page")} waiting to be '
            'written).</div>')


def _failures(lines: list[dict[str, Any]]) -> str:
    """The last failures, newest first: time (UTC), outcome, HTTP status, URL."""
    if not lines:
        return '<p id="failures">None so far.</p>'
    rows = "".join(
        f'<tr><td>{time.strftime("%H:%M:%S", time.gmtime(f["t"]))}</td>'
        f'<td>{html.escape(f["kind"])}</td><td>{"" if f["status"] is None else f["status"]}'
        f'</td><td class="url">{html.escape(f["url"])}</td></tr>' for f in lines)
    return ('<table id="failures"><tr><th>time (UTC)</th><th>outcome</th><th>HTTP</th>'
            f"<th>URL</th></tr>{rows}</table>")


def render_html(s: dict[str, Any]) -> str:
    """larbin's status page, refreshing itself: what needs an eye first (pause, state, rates,
    what the crawl waits for, the last failures), then the details."""
    sites = s["sites"]
    now = [
        ("state", _state(s)),
        ("pages fetched", s["pages"]),
        ("pages/s (last 10 s / since start)",
         f'{s["pages_per_s"]["last_10s"]} / {s["pages_per_s"]["since_start"]}'),
        ("errors (failed fetches)", s["errors"]),
        ("URLs queued (FIFOs / sites)",
         f'{sum(s["queued_per_priority"].values())} / {s["queued_in_sites"]}'),
        *[("waiting for", w) for w in s.get("waiting_for", [])],
    ]
    main = [
        ("bytes/s (last 10 s / since start)",
         f'{human_bytes(s["bytes_per_s"]["last_10s"])} / '
         f'{human_bytes(s["bytes_per_s"]["since_start"])}'),
        ("bytes read", human_bytes(s["bytes"])),
        ("URLs seen", s["urls_seen"]),
        *_seen_rows(s.get("seen_set")),
        *_recrawl_rows(s.get("recrawl")),
        ("sites known = waiting DNS + waiting robots + ready + parked + dead",
         f'{sites["known"]} = {sites["waiting_dns"]} + {sites["waiting_robots"]} + '
         f'{sites["ready"]} + {sites["parked"]} + {sites["dead"]}'),
        ("connections open", s["connections_open"]),
        ("DNS queries", s["dns_queries"]),
        ("robots.txt fetched / refusals", f'{s["robots_fetches"]} / {s["robots_refusals"]}'),
        ("links dropped (over maxLinksPerPage)", s["links_dropped"]),
        ("pages and stylesheets whose requisites were cut", s.get("requisites_cut", 0)),
        ("output errors / pages lost", f'{s["output_errors"]} / {s["outputs"]["lost"]}'),
        ("uptime", f'{s["uptime_s"]:.0f} s'),
        ("HTTPS certificates", "checked" if s.get("tls_verify", True)
         else "NOT CHECKED (tlsVerify off)"),
        ("proxy", s.get("proxy") or "none"),
    ]
    queues = [(f"priority {p}", n) for p, n in s["queued_per_priority"].items()] or [
        ("all priorities", 0)]
    outcomes = [(k, v) for k, v in s["outcomes"].items() if v]
    zero = len(s["outcomes"]) - len(outcomes)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<title>larbinpy status</title>
<style>body{{font-family:sans-serif;margin:1em 2em}}th{{text-align:left;padding-right:1em;
font-weight:normal;color:#555}}td{{font-family:monospace;padding-right:1em}}
table{{margin-bottom:1em}}td.url{{word-break:break-all}}
#paused{{background:#c22;color:#fff;padding:.6em 1em;font-size:1.2em;margin-bottom:1em}}
</style></head><body>
<h1>larbinpy {html.escape(s["version"])}</h1>
{_banner(s)}<table id="now">{_rows(now)}</table>
{_chart(s["history"])}
<h2>Last failures</h2>
<p>Fetch failures (the kinds counted in errors) and URLs refused by robots.txt or
allowNetworks, newest first; the crawl log has every URL.</p>
{_failures(s.get("recent_failures", []))}
<h2>Crawl</h2><table id="crawl">{_rows(main)}</table>
<p>Each site is counted in exactly one state: parked sites are ready sites waiting on a
politeness timer or their IP's turn.</p>
{_cluster_html(s.get("cluster"))}
<h2>Queued per priority</h2><table id="queues">{_rows(queues)}</table>
<h2>Fetch outcomes</h2><table id="outcomes">{_rows(outcomes)}</table>
<p>{counted(zero, "kind")} at zero not shown.</p>
<p>Also: <a href="/sites">sites</a> (the busiest and the most failing),
<a href="/status.json">status.json</a>, <a href="/metrics">metrics</a>.</p>
</body></html>
"""


def _recrawl_rows(r: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """recrawl on: the schedule, the revisits and the copy's estimated freshness."""
    if r is None:
        return []
    revisits = sum(r["revisits"].values())
    by_kind = ", ".join(f"{k} {n}" for k, n in sorted(r["revisits"].items())) or "none yet"
    fresh = "not known yet" if r["freshness"] is None else f'{r["freshness"]:.1%}'
    return [
        ("pages scheduled / due now / overdue",
         f'{r["scheduled"]} / {r["due_now"]} / {r["overdue"]}'),
        ("most overdue page", f'{r["max_lateness_s"]:.1f} s late'),
        ("revisits", f"{revisits} ({by_kind})"),
        ("revisits answered 304 (of those that found the page)",
         f'{r["not_modified_share"]:.1%}'),
        ("estimated freshness of the copy", fresh),
        *_discovery_rows(r.get("discovery")),
    ]


def _discovery_rows(d: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """recrawl on: the new pages revisits found, how soon they were fetched, the pages that
    find most."""
    if d is None:
        return []
    delay = ("none fetched in the last hour" if d["delay_median_s"] is None else
             f'{d["delay_median_s"]:.1f} s / {d["delay_p90_s"]:.1f} s '
             f'({d["delays_last_hour"]} in the last hour)')
    top = "; ".join(f'{p["url"]} ({p["found"]})' for p in d["top_pages"][:5]) or "none yet"
    return [("new pages found by revisits", d["found_by_revisits"]),
            ("discovery delay, median / 90th percentile", delay),
            ("pages that discover most", top)]


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
        if (recrawl := s.get("recrawl")) is not None:
            yield from _recrawl_metrics(recrawl)
        yield GaugeMetricFamily("larbinpy_idle", "1 when nothing is queued or in flight",
                                value=1 if s["idle"] else 0)
        yield GaugeMetricFamily(
            "larbinpy_paused", "1 while fetching is paused: an output's storage refuses writes",
            value=1 if s["outputs"]["paused"] else 0)
        yield GaugeMetricFamily("larbinpy_output_backlog",
                                "Pages waiting for an output's storage while paused",
                                value=s["outputs"]["backlog"])
        yield _counter("larbinpy_output_errors",
                       "Output failures: a page an output could not store, a failed userOutput "
                       "hook call", s["output_errors"])
        yield _counter("larbinpy_output_lost_pages",
                       "Pages an output never stored (dropped on error or still refused at exit)",
                       s["outputs"]["lost"])
        dropped = CounterMetricFamily(
            "larbinpy_links_dropped",
            "Links dropped unread over maxLinksPerPage, and links or URLs a rule kept from "
            "the crawl, by the rule's outcome kind (the larbinpy_fetch_outcomes count)",
            labels=["reason"])
        dropped.add_metric(["maxLinksPerPage"], s["links_dropped"])
        for kind in DROP_KINDS:
            dropped.add_metric([kind], s["outcomes"][kind])
        yield dropped
        yield _counter("larbinpy_requisites_cut",
                       "Pages and stylesheets whose requisites were cut: over maxLinksPerPage, "
                       "or a stylesheet's CSS read only up to its first 512 KiB",
                       s.get("requisites_cut", 0))


def _recrawl_metrics(r: dict[str, Any]) -> Any:
    """recrawl on: the schedule's gauges, the revisits by outcome, the 304 share, freshness."""
    schedule = GaugeMetricFamily("larbinpy_recrawl_pages", "Pages in the recrawl schedule",
                                 labels=["state"])
    for state in ("scheduled", "due_now", "overdue"):
        schedule.add_metric([state], r[state])
    yield schedule
    yield GaugeMetricFamily("larbinpy_recrawl_max_lateness_seconds",
                            "How late the most overdue page of the schedule is",
                            value=r["max_lateness_s"])
    revisits = CounterMetricFamily("larbinpy_recrawl_revisits",
                                   "Revisits of pages fetched before, by outcome kind",
                                   labels=["kind"])
    for kind, n in r["revisits"].items():
        revisits.add_metric([kind], n)
    yield revisits
    yield GaugeMetricFamily("larbinpy_recrawl_not_modified_share",
                            "Share of the revisits that found the page answered 304",
                            value=r["not_modified_share"])
    if r["freshness"] is not None:
        yield GaugeMetricFamily("larbinpy_recrawl_freshness",
                                "Estimated time-averaged freshness of the copy (0..1)",
                                value=r["freshness"])
    d = r.get("discovery")
    if d is not None:
        yield _counter("larbinpy_recrawl_discovered", "New pages found by revisits",
                       d["found_by_revisits"])
        if d["delay_median_s"] is not None:
            delay = GaugeMetricFamily("larbinpy_recrawl_discovery_delay_seconds",
                                      "Time from a revisit finding a page to its first "
                                      "fetch, over the last hour", labels=["quantile"])
            delay.add_metric(["0.5"], d["delay_median_s"])
            delay.add_metric(["0.9"], d["delay_p90_s"])
            yield delay


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
