"""How the per-site view looks: `/sites` (the busiest and the most failing sites) and
`/sites/HOST` (one site's detail and last outcomes), as HTML.

Pure functions of the readings `frontier/siteview.py` makes (the same dicts `/sites.json` and
`/sites/HOST.json` serve), like `statuspage.py` of the status snapshot.
"""

from __future__ import annotations

import html
import time
from typing import Any
from urllib.parse import quote

from larbinpy.stats import counted

_STYLE = """<style>body{font-family:sans-serif;margin:1em 2em}th{text-align:left;
padding-right:1em;font-weight:normal;color:#555}td{font-family:monospace;padding-right:1em;
vertical-align:top}table{margin-bottom:1em}td.url{word-break:break-all}</style>"""
_COLUMNS = ("site", "state", "pages", "queued", "last outcome", "failures",
            "outcomes other than success", "back-off", "robots.txt", "next fetch allowed")


def _when(t: float | None, passed: str = "now") -> str:
    """A Unix time as HH:MM:SS UTC, the date first when it is not today's (a robots.txt
    verdict holds a day); `passed` when None (the time has passed)."""
    if t is None:
        return passed
    when = time.gmtime(t)
    today = time.gmtime()[:3] == when[:3]
    return time.strftime("%H:%M:%S UTC" if today else "%Y-%m-%d %H:%M:%S UTC", when)


def robots_text(r: dict[str, Any]) -> str:
    """A site's robots.txt state (`siteview.robots_state`) in words."""
    state = r["state"]
    if state == "failing":
        return f'failing ({r["failures"]} in a row), retry {_when(r["retry"])}'
    if state == "disallow all":
        return f'disallow all until {_when(r["until"])} ({r["note"] or "failed"})'
    if state == "rules":
        return f'rules ({r["bytes"]} bytes) until {_when(r["until"])}'
    if state == "allow all":
        return f'allow all until {_when(r["until"])}'
    return str(state)


def _last(s: dict[str, Any]) -> str:
    """The last outcome: kind, HTTP status, time."""
    last = s["last"]
    if last is None:
        return "none yet"
    status = "" if last["status"] is None else f' {last["status"]}'
    return f'{last["kind"]}{status} at {_when(last["t"])}'


def _backoff(s: dict[str, Any]) -> str:
    """The 429/503s in a row and until when the site waits for them."""
    b = s["backoff"]
    if not b["in_a_row"]:
        return "none"
    return f'{b["in_a_row"]} in a row, until {_when(b["until"])}'


def _cells(s: dict[str, Any]) -> list[str]:
    """A site's row of the lists, escaped (the site's name links to its detail)."""
    link = f'<a href="/sites/{quote(s["host"], safe=":[]")}">{html.escape(s["site"])}</a>'
    outcomes = ", ".join(f"{k} {n}" for k, n in s["outcomes"].items()) or "none"
    state = s["state"] if s["dead"] is None else f'dead ({s["dead"]["reason"]})'
    return [link] + [html.escape(str(v)) for v in (
        state, s["pages"], s["queued"], _last(s), s["failures"], outcomes, _backoff(s),
        robots_text(s["robots"]), _when(s["next_fetch"]))]


def _table(table_id: str, rows: list[dict[str, Any]], empty: str) -> str:
    """A list of sites, or a line saying it is empty."""
    if not rows:
        return f'<p id="{table_id}">{empty}</p>'
    head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in _cells(s)) + "</tr>"
                   for s in rows)
    return f'<table id="{table_id}"><tr>{head}</tr>{body}</table>'


def render_sites(view: dict[str, Any]) -> str:
    """`/sites`: the busiest sites (pages fetched) and the most failing ones."""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>larbinpy sites</title>{_STYLE}</head><body>
<h1>Sites</h1>
<p><a href="/">status</a> &middot; <a href="/sites.json">sites.json</a></p>
<p>{counted(view["sites_known"], "site")} in memory (those with work and the most recently
idle), a site forgotten when idle
forgets its counts (the crawl log, and <code>larbinpy report</code>, has every URL).</p>
<h2>Busiest (most pages fetched)</h2>
{_table("busiest", view["busiest"], "No page fetched yet.")}
<h2>Most failing</h2>
<p>Failures: fetch errors, and URLs refused by robots.txt or allowNetworks.</p>
{_table("failing", view["failing"], "No failures so far.")}
</body></html>
"""


def render_site(host: str, found: list[dict[str, Any]]) -> str:
    """`/sites/HOST`: each site of the host (http, https) with its last outcomes."""
    parts = []
    for s in found:
        facts = [("state", s["state"]), ("address", s["ip"] or "not resolved"),
                 ("pages fetched", s["pages"]), ("fetches started (maxPagesPerSite counts)",
                                                 s["fetches_started"]),
                 ("URLs queued", s["queued"]), ("fetches running", s["in_flight"]),
                 ("seconds between fetches", f'{s["delay_s"]:g}'),
                 ("failures", s["failures"]),
                 ("outcomes other than success",
                  ", ".join(f"{k} {n}" for k, n in s["outcomes"].items()) or "none"),
                 ("back-off (429/503)", _backoff(s)),
                 ("robots.txt", robots_text(s["robots"])),
                 ("next fetch allowed", _when(s["next_fetch"]))]
        if s.get("discovers_most"):
            facts.append(("pages that discover most (new URLs their revisits found)",
                          "; ".join(f'{p["url"]} ({p["found"]})' for p in s["discovers_most"])))
        if s["dead"] is not None:
            d = s["dead"]
            facts.append(("dead", f'{d["reason"]} until {_when(d["until"])}'
                                  + (f' ({d["note"]})' if d["note"] else "")))
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
                       for k, v in facts)
        recent = "".join(
            f'<tr><td>{_when(r["t"])}</td><td>{html.escape(r["kind"])}</td>'
            f'<td>{"" if r["status"] is None else r["status"]}</td>'
            f'<td class="url">{html.escape(r["path"])}</td></tr>' for r in s["recent"])
        parts.append(
            f'<h2>{html.escape(s["site"])}</h2><table class="site">{rows}</table>'
            f"<h3>Last outcomes, newest first</h3>"
            + (f'<table class="recent"><tr><th>time</th><th>outcome</th><th>HTTP</th>'
               f"<th>path</th></tr>{recent}</table>" if recent else "<p>None yet.</p>"))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>larbinpy site {html.escape(host)}</title>{_STYLE}
</head><body>
<h1>Site {html.escape(host)}</h1>
<p><a href="/sites">sites</a> &middot; <a href="/">status</a> &middot;
<a href="/sites/{quote(host, safe=":[]")}.json">as JSON</a></p>
{"".join(parts)}
</body></html>
"""
