"""The recrawl bench's arithmetic (freshness, optimum, shares, gaps) on hand-made logs, and
the bench end to end."""

from __future__ import annotations

import math

import pytest
from conftest import bench_json

from larbinpy.bench.changing import ChangingPage
from larbinpy.bench.recrawl import analyse, copy_freshness, optimal_freshness, resumed_schedules
from larbinpy.frontier.freshness import freshness, optimal_allocation
from larbinpy.frontier.freshness import uniform as uniform_freshness


def test_a_static_page_is_fresh_at_any_interval() -> None:
    assert freshness(0.0, math.inf) == freshness(0.0, 5.0) == 1.0
    assert freshness(0.1, math.inf) == 0.0
    assert uniform_freshness([0.0, 0.1], 0.0) == 0.5 == optimal_freshness([0.0, 0.1], 0.0)


def test_the_copy_freshness_of_a_simulated_crawl_is_the_formula() -> None:
    """A page of rate 0.2 fetched every 4 s for 40,000 s: the measured freshness is
    (1 - e^-0.8) / 0.8 within half a percent."""
    page = ChangingPage("h", "/", "none", 0.2, t0=0.0, seed="sim")
    copies = [(t, page.version(t)) for t in range(0, 40_000, 4)]
    measured = copy_freshness(page.changes_until(40_000), copies, 0.0, 40_000.0)
    assert measured == pytest.approx(freshness(0.2, 4.0), rel=0.005)


def test_copy_freshness_on_a_hand_made_history() -> None:
    # changes at 10 and 20; copies of v0 at 5, v1 at 15, v2 at 25; fresh 5-10, 15-20, 25-30
    assert copy_freshness([10.0, 20.0], [(5.0, 0), (15.0, 1), (25.0, 2)], 0.0, 30.0) == 0.5
    # a copy that stays behind: v0 fetched at 5 and again (a lying 304 keeps it) -> 5 s fresh
    assert copy_freshness([10.0], [(5.0, 0)], 0.0, 20.0) == 0.25
    assert copy_freshness([10.0], [], 0.0, 20.0) == 0.0  # never fetched


def test_the_optimum_spends_the_budget_and_beats_uniform() -> None:
    rates = [0.0, 0.001, 0.01, 0.05, 0.2, 1.0, 5.0]
    intervals = optimal_allocation(rates, 0.3)
    assert sum(1 / i for i in intervals) == pytest.approx(0.3, rel=1e-6)
    assert intervals[0] == intervals[-1] == math.inf  # static: fetched once; 5/s: out of reach
    assert optimal_freshness(rates, 0.3) > uniform_freshness(rates, 0.3)
    same = [0.1] * 5  # equal rates: uniform is the optimum
    assert optimal_freshness(same, 1.0) == pytest.approx(uniform_freshness(same, 1.0))


def test_the_optimum_of_two_pages_is_the_best_split_on_a_grid() -> None:
    rates, budget = [0.05, 0.5], 0.2
    best = max((freshness(rates[0], 1 / f) + freshness(rates[1], 1 / (budget - f))) / 2
               for f in (budget * i / 2000 for i in range(1, 2000)))
    assert optimal_freshness(rates, budget) == pytest.approx(best, abs=1e-5)
    assert optimal_freshness(rates, budget) >= best - 1e-9


def hand_made_run() -> tuple[dict, list[dict], float]:
    """One honest ETag host, a static page A and a page B changing at 10 and 20 (t0 = 1000):
    A fetched at 1, B at 2 (the first pass ends), B again at 15 and 25, A at 16 (a 304)."""
    t0 = 1000.0
    url = "http://etag-0.changing.test:80"
    truth = {"t0": t0, "pages": [
        {"url": url + "/", "host": "etag-0.changing.test", "path": "/", "kind": "etag",
         "rate": 0.0, "changes": []},
        {"url": url + "/b", "host": "etag-0.changing.test", "path": "/b", "kind": "etag",
         "rate": 0.1, "changes": [t0 + 10, t0 + 20]}]}
    # (time, path, status, version, If-None-Match, If-Modified-Since)
    fetches = [(1, "/", 200, 0, 0, 0), (2, "/b", 200, 0, 0, 0), (15, "/b", 200, 1, 1, 0),
               (16, "/", 304, 0, 1, 0), (25, "/b", 200, 2, 0, 0)]
    truth["answers"] = [[t0 + t, t0 + t + 0.001, "etag-0.changing.test", path, status, v, inm,
                         ims] for t, path, status, v, inm, ims in fetches]
    truth["answers"].append([t0 + 0.5, t0 + 0.501, "etag-0.changing.test", "/robots.txt", 200,
                             -1, 0, 0])
    lines = [{"t": t0 + t + 0.002, "url": url + path, "status": status,
              "kind": "success" if status == 200 else "notModified"}
             for t, path, status, *_ in fetches]
    return truth, lines, t0 + 30


def test_analyse_a_hand_made_run() -> None:
    truth, lines, end = hand_made_run()
    r = analyse(truth, lines, end, wait=2.0, per_host=1)
    window = 28.0 - 0.002  # from the first pass's end (B's line at 2.002) to 30
    b = (10 - 2.002) + (20 - 15.001) + (30 - 25.001)
    assert r["freshness"] == pytest.approx((1 + b / window) / 2, abs=1e-4)
    assert r["fetched"] == 2 and r["steady_s"] == pytest.approx(window, abs=0.01)
    assert r["sites"]["etag-0.changing.test"]["fetches_per_s"] == pytest.approx(
        3 / window, abs=1e-3)  # B at 15 and 25, A at 16 (B at 2.002 ends the first pass)
    assert r["validator_share"] == pytest.approx(2 / 3, abs=1e-4)  # B at 15, A at 16; not B at 25
    assert r["not_modified_share"] == 1.0  # A at 16 was unchanged, and answered 304
    assert r["kinds"]["etag"]["changed_304"] == 0
    # robots.txt at 0.5, A at 1 and B at 2: 0.5 s and 1 s apart; A at 16 one second after B
    assert r["politeness"]["short_gaps"] == 3
    assert r["politeness"]["least_gap_s"] == pytest.approx(0.499, abs=1e-3)
    assert analyse(truth, lines, end, wait=0.4, per_host=1)["politeness"]["short_gaps"] == 0
    assert r["optimum_full"] >= r["optimum"] >= r["uniform"] > 0


def test_the_reachable_optimum_keeps_the_bounds_and_the_answer_time() -> None:
    truth, lines, end = hand_made_run()
    free = analyse(truth, lines, end, wait=2.0, per_host=1)
    # at most 0.5 fetches a second, less each answer's millisecond; intervals 5..6 s: B
    # (0.1 changes a second) gets 5 s, not the 2.4 s the unbounded optimum gives it
    r = analyse(truth, lines, end, wait=2.0, per_host=1, bounds=(5.0, 6.0))
    site = r["sites"]["etag-0.changing.test"]
    assert site["capacity_reachable"] == pytest.approx(1 / 2.001, abs=1e-3)
    assert r["optimum_reachable"] == pytest.approx((1 + freshness(0.1, 5.0)) / 2, abs=1e-4)
    assert r["optimum_reachable"] < free["optimum_full"]
    assert r["over_optimum_reachable"] == pytest.approx(r["freshness"] / r["optimum_reachable"],
                                                        abs=1e-3)
    assert "optimum_reachable" not in free


def test_a_lying_304_leaves_the_copy_stale() -> None:
    truth, lines, end = hand_made_run()
    # B at 15 is a 304 though B changed at 10: the copy stays v0, stale from 10 to 25
    truth["answers"][2][4] = 304
    lines[2]["status"] = 304
    r = analyse(truth, lines, end, wait=0.4, per_host=1)
    window = 28.0 - 0.002
    b = (10 - 2.002) + (30 - 25.001)
    assert r["freshness"] == pytest.approx((1 + b / window) / 2, abs=1e-4)
    assert r["kinds"]["etag"]["changed_304"] == 1


def test_the_recrawl_bench_runs_the_daemon_and_stops_it_with_sigterm() -> None:
    """A short run on a small changing web, then a restart on its state: the daemon exits 0
    both times, every page is fetched, pages are revisited (validators sent to the ETag host),
    no gap under waitDuration, and the figures are shares."""
    r = bench_json("--recrawl", "--seconds", "4", "--hosts-per-kind", "1", "--pages", "4",
                   "--wait", "0.1", "--restart", "2", timeout=120)
    assert r["exit_code"] == 0 and r["restart"]["exit_code"] == 0
    assert r["fetched"] == r["pages"] == 28
    assert r["politeness"]["short_gaps"] == 0
    for name in ("freshness", "uniform", "optimum", "optimum_full"):
        assert 0 < r[name] <= 1
    assert r["optimum_full"] >= r["optimum"] - 1e-9
    assert set(r["kinds"]) == {"etag", "lm", "none", "lm-now", "etag-churn", "false-304",
                               "lm-coarse"}
    if r["recrawl"]:  # this larbinpy revisits
        assert r["kinds"]["etag"]["revisits"] > 0 and r["kinds"]["etag"]["with_validator"] > 0
        assert r["restart"]["refetched"] > 0


def test_a_restart_is_judged_against_the_next_of_each_page() -> None:
    """Stopped at 10, restarted at 12: a due at 15 fetched at 15.5 kept its schedule, one due
    at 20 fetched at 13 did not; a page whose line had no `next` is not judged."""
    lines = [{"t": 5.0, "url": "a", "next": 15.0}, {"t": 6.0, "url": "b", "next": 20.0},
             {"t": 7.0, "url": "c"},
             {"t": 15.5, "url": "a"}, {"t": 13.0, "url": "b"}, {"t": 12.5, "url": "c"},
             {"t": 19.0, "url": "b"}]
    r = resumed_schedules(lines, stopped=10.0, started=12.0)
    assert (r["refetched"], r["judged"], r["early"]) == (3, 2, 1)
    assert r["examples"] == [{"url": "b", "early_s": 7.0}]


def test_a_weak_last_modified_is_not_held_against_the_validator_share() -> None:
    """An lm page changed at 9.5 and fetched at 9.7 carries a Last-Modified of its Date's
    second (weak): the revisit at 15 without If-Modified-Since is not counted against the
    crawler; the copy of 15 had a strong one, sent at 20."""
    t0 = 1000.0
    host = "lm-0.changing.test"
    truth = {"t0": t0, "pages": [{"url": f"http://{host}/", "host": host, "path": "/",
                                  "kind": "lm", "rate": 0.1, "changes": [t0 + 9.5]}],
             "answers": [[t0 + t, t0 + t + 0.001, host, "/", status, v, 0, ims]
                         for t, status, v, ims in ((9.7, 200, 1, 0), (15, 200, 1, 0),
                                                   (20, 304, 1, 1))]}
    lines = [{"t": t0 + t + 0.002, "url": f"http://{host}/", "status": status, "kind": "x"}
             for t, status in ((9.7, 200), (15, 200), (20, 304))]
    r = analyse(truth, lines, t0 + 30, wait=1.0, per_host=1)
    assert r["validator_share"] == 1.0 and r["validator_share_all"] == 0.5
    lm = r["kinds"]["lm"]
    assert (lm["revisits"], lm["strong_revisits"], lm["unchanged"], lm["unchanged_304"]) == \
        (2, 1, 2, 1)
