"""The recrawl's policy alone (`frontier/recrawl.py`): made-up histories and answers in, the
next visit and what the site's validators proved out. No server, no clock, no schedule."""

from __future__ import annotations

from dataclasses import replace
from email.utils import formatdate

import pytest

from larbinpy.frontier import freshness
from larbinpy.frontier import recrawl as policy_module
from larbinpy.frontier.recrawl import (
    AUDIT_FIRST,
    FIRST_FAILURE,
    PULL,
    Answer,
    Policy,
    SiteRecrawl,
)
from larbinpy.frontier.schedule import Visit
from larbinpy.records import Job, JobKind
from larbinpy.stats import Outcome

LO, HI = 10.0, 1000.0
T0 = 1_800_000_000.0
URL = "http://h.test/p.html"
JOB = Job(URL, 3, kind=JobKind.REVISIT)


def policy() -> Policy:
    return Policy(LO, HI, per_host=1, share=1.0)


def site() -> SiteRecrawl:
    return SiteRecrawl(freshness.SiteBudget(0.0))


def http_date(t: float) -> str:
    return formatdate(t, usegmt=True)


def answered(prior: Visit | None, body: bytes, status: int = 200, etag: str | None = None,
             lm: str | None = None, date: str | None = None, **kw: bool) -> Answer:
    answer = Answer(prior, **kw)
    answer.heard(status, etag, lm, date)
    answer.found(body)
    return answer


def test_a_page_new_to_the_schedule_gets_its_sites_mean_interval() -> None:
    state = site()
    learned = policy().observed(Job(URL, 3), Outcome.success, answered(None, b"x"), state,
                                T0, delay=1.0, coming=9)
    # nothing known of the page: its site's pages (this one and 9 coming) over its capacity
    assert learned.visit.due - T0 == pytest.approx(state.budget.first(LO, HI, 9))
    assert not learned.audit and learned.visit.fetched_at == T0


def test_of_two_pages_of_a_site_the_one_that_changes_gets_the_shorter_interval() -> None:
    """Both are revisited every 60 s on a site whose politeness (30 s) cannot serve that: the
    site's budget goes where it keeps copies fresh, to the page that changes every 3 visits,
    and the page that never changes drifts toward recrawlMax."""
    p, state = policy(), site()
    urls = {"changes": URL + "?a", "static": URL + "?b"}
    visits = {name: p.observed(Job(url, 3), Outcome.success, answered(None, b"0"), state, T0,
                               delay=30.0, coming=1).visit for name, url in urls.items()}
    for i in range(1, 40):
        for name, url in urls.items():
            changed = name == "changes" and i % 3 == 0
            body = f"{i // 3}".encode() if name == "changes" else b"0"
            kind = Outcome.success if changed else Outcome.unchanged
            visits[name] = p.observed(Job(url, 3, kind=JobKind.REVISIT), kind,
                                      answered(visits[name], body), state, T0 + 60 * i,
                                      delay=30.0, coming=0).visit
    interval = {name: v.due - v.fetched_at for name, v in visits.items()}
    assert interval["static"] > 2 * interval["changes"]
    assert p.rate(visits["changes"].stats) > 100 * p.rate(visits["static"].stats)


def test_a_failure_backs_off_doubling_from_its_last_answer_up_to_recrawl_max() -> None:
    p = policy()
    never = p.failed(Job(URL, 3), None, 503, T0)
    assert never.due - T0 == FIRST_FAILURE * LO and never.status == 503
    prior = Visit(URL, due=T0, fetched_at=T0 - 100.0, digest=b"d" * 20)
    again = p.failed(JOB, prior, 500, T0)
    assert again.due - T0 == 200.0 and again.digest == prior.digest  # the capture is kept
    old = Visit(URL, due=T0, fetched_at=T0 - 10_000.0)
    assert p.failed(JOB, old, 500, T0).due - T0 == HI


def test_an_etag_that_changes_on_an_unchanged_page_is_not_sent_again() -> None:
    p, state = policy(), site()
    first = p.observed(Job(URL, 3), Outcome.success,
                       answered(None, b"same", etag='"1"'), state, T0, 1.0, 0).visit
    assert p.conditional_headers(first, state, audit=False) == {"If-None-Match": '"1"'}
    answer = answered(first, b"same", etag='"2"', conditional=True)
    p.observed(JOB, Outcome.unchanged, answer, state, T0 + 60, 1.0, 0)
    assert state.etag_trusted is False
    assert p.conditional_headers(first, state, audit=False) == {}


def test_a_last_modified_within_a_second_of_the_answer_is_not_kept_as_a_validator() -> None:
    p = policy()
    weak = answered(None, b"x", lm=http_date(T0), date=http_date(T0))
    assert p.observed(Job(URL, 3), Outcome.success, weak, site(), T0, 1.0, 0
                      ).visit.last_modified is None
    strong = answered(None, b"x", lm=http_date(T0 - 5), date=http_date(T0))
    assert p.observed(Job(URL, 3), Outcome.success, strong, site(), T0, 1.0, 0
                      ).visit.last_modified == http_date(T0 - 5)


def test_after_enough_304s_of_a_slow_page_the_next_visit_is_an_unconditional_audit_now(
) -> None:
    p, state = policy(), site()
    visit = p.observed(Job(URL, 3), Outcome.success, answered(None, b"v", etag='"e"'), state,
                       T0, 1.0, 0).visit
    now = T0
    audits = []
    for _ in range(AUDIT_FIRST):
        now += 50.0
        answer = answered(visit, b"", status=304, etag='"e"', conditional=True)
        learned = p.observed(JOB, Outcome.notModified, answer, state, now, 1.0, 0)
        visit = learned.visit
        audits.append(learned.audit)
    assert audits == [False] * (AUDIT_FIRST - 1) + [True]
    assert visit.due == now  # checked at once
    assert p.conditional_headers(visit, state, audit=True) == {}  # an audit sends none


def test_a_304_that_hid_a_change_its_last_modified_proves_ends_the_sites_validators() -> None:
    p, state = policy(), site()
    lm_old = http_date(T0 - 3600)
    first = p.observed(Job(URL, 3), Outcome.success,
                       answered(None, b"v1", lm=lm_old, date=http_date(T0)), state, T0, 1.0, 0)
    not_modified = answered(first.visit, b"", status=304, lm=lm_old, conditional=True)
    after_304 = p.observed(JOB, Outcome.notModified, not_modified, state, T0 + 60, 1.0, 0).visit
    # the audit's body: a new version, its Last-Modified well before the 304 was sent
    lm_new = http_date(T0 + 30)
    audit = answered(after_304, b"v2", lm=lm_new, date=http_date(T0 + 61), audit=True)
    p.observed(JOB, Outcome.success, audit, state, T0 + 61, 1.0, 0)
    assert state.validators_trusted is False
    assert p.conditional_headers(after_304, state, audit=False) == {}


def test_a_sitemap_lastmod_the_fetch_finds_false_ends_the_sites_lastmod_trust() -> None:
    p, state = policy(), site()
    first = p.observed(Job(URL, 3), Outcome.success, answered(None, b"v"), state, T0, 1.0, 0)
    claim = T0 + 30  # "modified after your fetch", but the body is the same
    p.observed(JOB, Outcome.unchanged, answered(first.visit, b"v"), state, T0 + 40, 1.0, 0,
               claim=claim)
    assert state.lastmod_trusted is False
    trusting = site()
    p.observed(JOB, Outcome.success, answered(first.visit, b"w"), trusting, T0 + 40, 1.0, 0,
               claim=claim)  # it had changed: the claim was true
    assert trusting.lastmod_trusted is True


def test_an_audit_goes_first_among_a_sites_waiting_visits() -> None:
    p = policy()
    overdue = Visit("http://h.test/old", due=T0, fetched_at=T0 - 900)
    audited = Visit("http://h.test/audit", due=T0, fetched_at=T0 - 1)
    fifo = [(overdue, 0.01, 0.0), (audited, 0.0, 0.0)]
    assert p.most_urgent(fifo, {"http://h.test/audit"}, T0) == 1
    assert p.most_urgent(fifo, set(), T0) == 0  # else the page a visit now helps most


def test_a_visit_made_due_early_goes_first_and_a_visit_put_back_keeps_its_interval() -> None:
    """A page's record keeps the interval its site's budget counted: a feed or a sitemap date
    making it due now (`Schedule.force`) sends it before the site's other waiting visits, and
    a visit put back behind a backlog (its due time moved later) is still judged against the
    interval it was given, not as a page meant to wait longer."""
    p, state = policy(), site()
    first = p.observed(Job(URL, 3), Outcome.success, answered(None, b"v"), state, T0, 1.0, 0)
    given = policy_module.interval_of(first.visit)
    assert given is not None and first.visit.due == pytest.approx(T0 + given, abs=1e-3)
    put_back = replace(first.visit, due=first.visit.due + 500.0)
    assert policy_module.interval_of(put_back) == given
    assert p.target_of(put_back) == p.target_of(first.visit)
    assert not policy_module.made_early(put_back)
    forced = replace(first.visit, due=T0 + 1.0)
    assert policy_module.made_early(forced)
    overdue = Visit("http://h.test/old", due=T0, fetched_at=T0 - 900)
    fifo = [(overdue, 0.01, 0.0), (forced, p.rate(forced.stats), 0.0)]
    assert p.most_urgent(fifo, set(), T0 + 2.0) == 1


def test_an_overdue_page_whose_gain_is_flat_still_grows_more_urgent() -> None:
    """A page only its prior knows (it looks as if it changed every recrawlMin, so a visit's
    gain is flat past its interval) is not left behind for ever by pages whose gain grows: its
    urgency is at least the time it is overdue."""
    p, state = policy(), site()
    new = p.observed(Job(URL, 3), Outcome.success, answered(None, b"v"), state, T0, 1.0,
                     coming=200)  # a first pass: the site's mean interval, far above LO
    target = p.target_of(new.visit)
    rate = p.rate(new.visit.stats)
    assert rate * target > 5  # (its gain is flat: the bug this guards against)
    urgency = [p.urgency(new.visit, rate, 0.0, T0 + k * target) for k in (1.0, 2.0, 4.0)]
    assert urgency[0] == pytest.approx(1.0, rel=0.01)
    assert urgency[1] >= 2.0 and urgency[2] >= 4.0


def test_a_handed_over_state_keeps_a_validator_either_node_caught_lying() -> None:
    mine, handed = site(), site()
    handed.etag_trusted = False
    handed.budget.pages = 3  # the former owner learned something
    merged = mine.merged(handed)
    assert merged is handed and not merged.etag_trusted
    learned = site()
    learned.not_modified, learned.lm_trusted = 2, True
    liar = site()
    liar.lm_trusted = False
    assert learned.merged(liar) is learned and not learned.lm_trusted
    back = SiteRecrawl.from_bytes(learned.to_bytes(), 1.0)  # what a restart reads back
    assert back is not None and (back.not_modified, back.lm_trusted) == (2, False)


def test_the_due_interval_leaves_its_sites_slack_except_at_the_bounds() -> None:
    p = policy()
    assert p.due_after(400.0) == (1 - PULL) * 400.0
    assert p.due_after(HI) == HI  # a visit before recrawlMax gains nothing there
    assert p.due_after(11.0) == LO
    assert policy_module.interval_of(Visit(URL, due=T0 + 30, fetched_at=T0)) == 30.0


def front_page(p: Policy, publishing: int, quiet: int, yields: bool) -> Visit:
    """A front page changing at every revisit (an article every 2 s) for `publishing`
    revisits, then unchanged for `quiet` more, beside a page that never changes, on a site
    whose politeness (60 s) cannot serve both at recrawlMin; `yields`: its revisits find the
    new articles (else they are found elsewhere)."""
    state = site()
    other = p.observed(Job(URL + "?other", 3), Outcome.success, answered(None, b"o"), state,
                       T0, delay=60.0, coming=0).visit
    front = p.observed(Job(URL, 3), Outcome.success, answered(None, b"0"), state, T0,
                       delay=60.0, coming=0).visit
    for i in range(1, publishing + quiet + 1):
        now = front.due
        job = Job(URL, 3, kind=JobKind.REVISIT)
        changed = i <= publishing
        if changed and yields:
            job.found = max(1, round(0.5 * (now - front.fetched_at)))
        body = f"{min(i, publishing)}".encode()
        kind = Outcome.success if changed else Outcome.unchanged
        front = p.observed(job, kind, answered(front, body), state, now, 60.0, 0).visit
        other = p.observed(Job(URL + "?other", 3, kind=JobKind.REVISIT), Outcome.unchanged,
                           answered(other, b"o"), state, now + 1, 60.0, 0).visit
    return front


def test_a_page_whose_revisits_find_new_urls_is_revisited_often_though_it_changes_too_fast(
) -> None:
    """A front page changes at every visit, too fast for a copy of it to stay fresh, so for
    freshness alone it is not worth visiting often; each revisit finding new articles makes
    it worth it, and the estimate of what it finds falls once it finds nothing."""
    p = policy()
    finding = front_page(p, 30, 0, yields=True)
    alone = front_page(p, 30, 0, yields=False)
    assert p.found(finding.stats) == pytest.approx(0.5, rel=0.3)
    assert p.found(alone.stats) == 0.0
    assert finding.due - finding.fetched_at < 0.25 * (alone.due - alone.fetched_at)
    quiet = front_page(p, 30, 50, yields=True)
    assert p.found(quiet.stats) < 0.05


def test_without_discovery_the_interval_is_the_freshness_one_and_it_shortens_with_it() -> None:
    stats = freshness.observe(b"", 0.0, 0.0, False)
    fresh = freshness.posterior_interval(stats, 16.0, LO, HI)
    assert freshness.discovery_interval(stats, 0.0, 16.0, LO, HI) == fresh
    found = [freshness.discovery_interval(stats, rate, 16.0, LO, HI)
             for rate in (0.001, 0.01, 0.1, 1.0)]
    assert found == sorted(found, reverse=True) and found[0] < fresh and found[-1] == LO
