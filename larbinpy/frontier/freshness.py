"""Recrawl math: how often a page changes, and how often to revisit it for a site's budget.

Pure functions, no I/O. The crawler calls `observe` after every revisit (the page's estimator
state lives in its schedule record as a few opaque bytes), `rate` to read the estimate, and a
site's `SiteBudget.schedule` to turn that rate into the page's next interval. The bench calls
`freshness`, `uniform` and `optimal_allocation` to grade a crawl against the true rates.

Model (Cho & Garcia-Molina). A page changes as a Poisson process of rate lambda (1/s). Revisited
every I seconds, the copy is fresh a share F(lambda, I) = (1 - e^(-lambda I)) / (lambda I) of
the time.

Estimator ("Estimating frequency of change", ACM TOIT 2003). A revisit after t seconds tells:
- without a trusted Last-Modified, only whether the page changed. The likelihood of n_c changed
  visits (intervals t_i) and unchanged ones (total time U) peaks where
  sum_i t_i / (e^(lambda t_i) - 1) = U. We keep the changed intervals as their count and sum and
  solve with each t_i replaced by their mean t_c: exact when the intervals are regular, where it
  is Cho's -log((n - X) / n) / I; the irregular case costs one Newton solve;
- with a trusted Last-Modified L inside (previous fetch, fetch]: a change happened at L and none
  since, so the visit adds one change and (fetch - L) seconds of exposure: the density of
  "last change at L" is lambda e^(-lambda (fetch - L)). Such visits add n_lm / lambda to the
  left-hand side. Seeing the change time makes this estimator far less noisy.
A new page starts from a prior: PRIOR_CHANGES changes seen at the prior rate (the crawler
passes 1 / recrawlMin), so its first interval is about recrawlMin. Cho's bias correction of the
regular estimator, -log((n - X + 0.5) / (n + 0.5)) / I, is kept as half an unchanged visit of
the mean changed interval (it keeps the rate finite when every visit saw a change). Evidence,
the prior's included, decays by a factor (1 - 1/MEMORY) a visit: a page whose rate changes is
re-learned within a few MEMORY visits, and one that never changes goes to rate 0 (recrawlMax).
State: 8 bytes (two counts, two times on a log scale, as half floats).

Optimiser ("Effective page refresh policies", ICDE 2003). With frequency f = 1/I and
x = lambda I, dF/df = (1 - (1 + x) e^(-x)) / lambda. Maximising the sum of F over a site's pages
with sum f = B (the site's revisit capacity, fetches/s) gives dF/df = mu for every page: x solves
1 - (1 + x) e^(-x) = mu lambda. Since the left side is below 1, a page with lambda >= 1/mu (it
changes faster than the budget can follow) gets no visits at all: its interval goes to
recrawlMax. Each page's objective is concave in f, so the box lo <= I <= hi is a clamp.
`SiteBudget` finds mu per site by dual ascent: it tracks the site's scheduled demand
(sum of 1/I over its pages) and moves mu multiplicatively toward demand = capacity.

The rate is only estimated, so a revisit's interval (`posterior_interval`) solves the same
condition for the expected dF/df over the page's posterior rate: a prior (STATIC_PRIOR at rate
0, the rest log-uniform over rates 1 / (3 recrawlMax) .. 3 / recrawlMin) times the
likelihood of the estimator's state. With much evidence that is the plug-in interval; with
little it hedges, where the plug-in one swings with each visit (the recrawl bench's pages,
revisited a few dozen times, lost more to that than any other part of the schedule).
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence

SATURATED_CHANGES = 8.0  # changes seen (decayed) before "it changed at every visit" is believed
SATURATED_UNCHANGED = 0.015  # ... and unchanged for less than this share of the time watched
MEMORY = 16.0  # visits of evidence kept: each visit multiplies the old evidence by 1 - 1/MEMORY
PRIOR_CHANGES = 0.1  # weight of the prior, in changes seen at the prior rate
_STATE = struct.Struct("<eeee")  # changes without LM, with LM, log2(1 + seconds) x 2
STATE_BYTES = _STATE.size
_NEWTON_STEPS = 60
STATIC_PRIOR = 0.1  # the posterior interval's prior share of pages that never change...
GRID_POINTS = 16  # ... the rest log-uniform on this many rates
GRID_SPAN = 3.0  # ... from 1 / (GRID_SPAN recrawlMax) to GRID_SPAN / recrawlMin
_NEGLIGIBLE = math.log(1e-7)  # posterior points lighter than this (relative) are left out


# --- freshness of a schedule ---


def freshness(rate: float, interval: float) -> float:
    """Time-averaged freshness of a page changing at `rate` (1/s) revisited every `interval` s."""
    if rate <= 0.0:
        return 1.0  # a page that never changes stays fresh, however rarely it is fetched
    x = rate * interval
    if x <= 1e-12:
        return 1.0
    if math.isinf(x):
        return 0.0
    return -math.expm1(-x) / x


def mean_freshness(rates: Sequence[float], intervals: Sequence[float]) -> float:
    """Mean freshness of pages of these rates, revisited at these intervals."""
    if not rates:
        return 1.0
    return sum(map(freshness, rates, intervals)) / len(rates)


def uniform(rates: Sequence[float], budget: float) -> float:
    """Mean freshness when every page is revisited equally often with `budget` fetches/s."""
    if not rates:
        return 1.0
    interval = len(rates) / budget if budget > 0 else math.inf
    return mean_freshness(rates, [interval] * len(rates))


# --- the optimiser ---


def _gain_inverse(y: float) -> float:
    """x >= 0 with 1 - (1 + x) e^(-x) = y, for 0 <= y < 1 (inf for y >= 1)."""
    if y <= 0.0:
        return 0.0
    if y >= 1.0:
        return math.inf
    # Both starts are below the root: g(x) <= x^2 / 2, and x = L + log(1 + L) with
    # L = -log(1 - y) has x - log(1 + x) <= L. Safeguarded Newton inside a bracket.
    big = -math.log1p(-y)
    a = max(math.sqrt(2.0 * y), big + math.log1p(big))
    b = 2.0 * a + 2.0
    while _gain(b) < y:
        a, b = b, 2.0 * b
    x = a
    for _ in range(_NEWTON_STEPS):
        g = _gain(x) - y
        if g < 0:
            a = x
        else:
            b = x
        slope = x * math.exp(-x)
        nxt = x - g / slope if slope > 0 else (a + b) / 2
        if not a < nxt < b:
            nxt = (a + b) / 2
        if abs(nxt - x) <= 1e-12 * max(1.0, x):
            return nxt
        x = nxt
    return x


def _gain(x: float) -> float:
    """lambda * dF/df at x = lambda I: 1 - (1 + x) e^(-x), rising from 0 to 1."""
    return -math.expm1(-x) - x * math.exp(-x)


def interval(rate: float, mu: float, lo: float, hi: float) -> float:
    """The interval maximising freshness at the site's multiplier mu (dF/df = mu), in [lo, hi]."""
    if rate <= 0.0 or mu * rate >= 1.0:
        return hi  # never changes, or changes faster than the budget can follow
    if mu <= 0.0:
        return lo
    return min(hi, max(lo, _gain_inverse(mu * rate) / rate))


def marginal(rate: float, interval: float) -> float:
    """dF/df of a page of this rate revisited every `interval` s: the freshness one more
    visit a second buys it, (1 - (1 + x) e^(-x)) / lambda at x = lambda I."""
    if rate <= 0.0 or math.isinf(rate) or interval <= 0.0:
        return 0.0
    x = rate * interval
    if x < 1e-3:  # the two terms of _gain cancel: its series, x^2 / 2 - x^3 / 3
        return x * x * (0.5 - x / 3.0) / rate
    return _gain(x) / rate


def urgency(rate: float, since: float, target: float) -> float:
    """How due a page is, `since` s after its last fetch, when it was meant for `target` s:
    its marginal gain now over its gain at the target (1 at the target, rising after it).
    Pages of one site at their optimum all have the same gain mu there, so under a backlog
    the most urgent page is the one a visit now helps most (the greedy index policy of Azar
    et al., "Tractable near-optimal policies for crawling", 2018); a page kept at a bound of
    the schedule, or whose gain is flat (static, or too fast), counts by time: since / target.
    """
    if target <= 0.0:
        return math.inf
    due = marginal(rate, target)
    if due <= 0.0:
        return since / target
    return overdue(marginal(rate, since) / due, since, target)


def overdue(value: float, since: float, target: float) -> float:
    """An urgency past its target never below the time overdue (since / target): a page whose
    gain is flat there (its rate, or only its prior, says it changes much faster than it is
    visited) would otherwise never grow more urgent, and wait behind every other page of a
    site with a backlog for ever."""
    return max(value, since / target) if since > target else value


def _demand(rates: Sequence[float], mu: float, lo: float, hi: float) -> float:
    """Fetches/s the site's pages ask for at multiplier mu."""
    return sum(1.0 / interval(r, mu, lo, hi) for r in rates)


def optimal_mu(rates: Sequence[float], budget: float, lo: float = 0.0,
               hi: float = math.inf) -> float:
    """The multiplier whose intervals spend exactly `budget` fetches/s (bisection on log mu)."""
    changing = [r for r in rates if r > 0]
    if not changing:
        return math.inf
    if lo > 0 and _demand(rates, 0.0, lo, hi) <= budget:
        return 0.0  # every page at lo fits the budget
    a, b = 1e-12 / max(changing), 1.0 / min(changing)
    for _ in range(200):
        m = math.sqrt(a * b)
        if _demand(rates, m, lo, hi) > budget:
            a = m
        else:
            b = m
        if b / a < 1 + 1e-12:
            break
    return b


def optimal_allocation(rates: Sequence[float], budget: float, lo: float = 0.0,
                       hi: float = math.inf) -> list[float]:
    """Intervals maximising the mean freshness of pages of known rates for `budget` fetches/s."""
    mu = optimal_mu(rates, budget, lo, hi)
    return [interval(r, mu, lo, hi) for r in rates]


def failure_interval(failures: int, lo: float, hi: float) -> float:
    """Interval before retrying a page that failed `failures` times in a row: lo doubling, to hi."""
    if failures <= 0:
        return lo
    return min(hi, lo * 2.0 ** min(failures - 1, 64))


class SiteBudget:
    """One site's multiplier mu, moved so its scheduled revisit demand meets its capacity.

    The demand is the sum of 1/I over the site's scheduled pages, kept incrementally: every
    (re)scheduling says the page's old interval (None for a new page) and its new one. After
    each, log mu moves by GAIN * (demand - capacity) / capacity / pages (the relative excess
    clamped to +-STEP_MAX): a full round of the site's pages moves it by about GAIN times the
    relative excess, which is as fast as the demand itself can follow (a page's new interval
    counts only once it is rescheduled). Larger steps overshoot: a mu raised too far sends
    pages to recrawlMax, and they count at that interval until they come back. Downward (the
    site asks less than it can serve, as when its first revisits find pages unchanged and
    give them long intervals) the gain is GAIN_DOWN: a lower mu shortens intervals, which
    come back soon, and a site asking a little too much only has a backlog, served most urgent
    first (at GAIN, a recrawl bench site stayed below its capacity for rounds). A new site's
    mu starts where a page changing once a mean interval (pages / capacity) gets that interval.
    State: `to_bytes()` (20 bytes) for the site's record.
    """

    GAIN = 1.0
    GAIN_DOWN = 3.0  # when the site asks less than it can serve (see the docstring)
    STEP_MAX = 1.0  # at most e^(GAIN * STEP_MAX) on mu a round of the site's pages
    MU_MIN, MU_MAX = 1e-9, 1e12
    _PACK = struct.Struct("<ddI")

    def __init__(self, capacity: float, mu: float | None = None, demand: float = 0.0,
                 pages: int = 0) -> None:
        self.capacity = capacity  # revisit fetches/s the site's politeness allows
        self.mu = mu if mu is not None else 0.0  # 0: set from the first page's lo
        self.demand = demand
        self.pages = pages

    def schedule(self, rate: float, lo: float, hi: float,
                 old_interval: float | None = None) -> float:
        """The page's next interval at the site's mu; the demand and mu follow."""
        new = self.target(rate, lo, hi)
        self.account(old_interval, new)
        return new

    def target(self, rate: float, lo: float, hi: float, stats: bytes | None = None,
               found: float = 0.0) -> float:
        """The interval at the site's mu for a page of this rate (not counted: `account`);
        with the page's estimator `stats`, for its posterior rate (`posterior_interval`), and
        the new URLs a second its revisits yield (`found`: `discovery_interval`)."""
        if self.mu <= 0.0:
            # A new site: start where a page changing once a mean interval gets the mean
            # interval (or, with no page counted yet, where the prior puts a new page at
            # about lo: mu * lambda = 0.1 at lambda = 1/lo), then let the controller move
            # it. Not this page's own rate: one visit makes it ten times too high or too low.
            mean = self.mean_interval(lo, hi)
            self.mu = marginal(1.0 / mean, mean) if self.pages else 0.1 * lo
        if stats is not None:  # `rate` aside: the posterior also weighs a too-fast page
            return discovery_interval(stats, found, self.mu, lo, hi)
        return interval(rate, self.mu, lo, hi)

    def first(self, lo: float, hi: float, coming: int = 0) -> float:
        """A new page's first interval, before anything is known of it: the site's mean
        interval counting it and the `coming` pages not fetched yet ((pages + 1 + coming) /
        capacity, within [lo, hi]), so that a first pass does not schedule its pages at lo,
        far beyond what the site can serve."""
        new = self.mean_interval(lo, hi, 1 + coming)
        self.account(None, new)
        return new

    def mean_interval(self, lo: float, hi: float, more: int = 0) -> float:
        """The interval that spends the capacity evenly over the site's pages (and `more`),
        within [lo, hi]."""
        if self.capacity <= 0.0:
            return hi
        return min(hi, max(lo, (self.pages + more) / self.capacity))

    def account(self, old_interval: float | None, new_interval: float | None) -> None:
        """Record that a page's interval changed (None: no page before / after), then step mu."""
        if old_interval is None:
            self.pages += 1
        else:
            self.demand -= 1.0 / old_interval
        if new_interval is None:
            self.pages = max(0, self.pages - 1)
        else:
            self.demand += 1.0 / new_interval
        self.demand = max(0.0, self.demand)
        self._step()

    def _step(self) -> None:
        """One dual-ascent step of log mu toward demand = capacity."""
        if self.capacity <= 0.0 or self.pages == 0 or self.mu <= 0.0:
            return
        excess = (self.demand - self.capacity) / self.capacity
        gain = self.GAIN if excess > 0 else self.GAIN_DOWN
        step = gain * max(-self.STEP_MAX, min(self.STEP_MAX, excess)) / self.pages
        self.mu = min(self.MU_MAX, max(self.MU_MIN, self.mu * math.exp(step)))

    def to_bytes(self) -> bytes:
        """The state to keep in the site's record."""
        return self._PACK.pack(self.mu, self.demand, self.pages)

    @classmethod
    def from_bytes(cls, data: bytes, capacity: float) -> SiteBudget:
        """A budget from `to_bytes()` (a new one for b"")."""
        if not data:
            return cls(capacity)
        mu, demand, pages = cls._PACK.unpack(data)
        return cls(capacity, mu, demand, pages)


# --- the interval for what the estimate does not know ---


@functools.lru_cache(maxsize=64)
def rate_grid(lo: float, hi: float) -> tuple[tuple[float, float], ...]:
    """The prior over a page's rate the posterior interval uses: (rate, weight) pairs,
    STATIC_PRIOR at rate 0, the rest log-uniform on GRID_POINTS rates from 1 / (GRID_SPAN hi)
    (too slow to tell from static within the schedule's bounds) to GRID_SPAN / lo."""
    a, b = 1.0 / (GRID_SPAN * hi), GRID_SPAN / lo
    step = (b / a) ** (1.0 / (GRID_POINTS - 1))
    each = (1.0 - STATIC_PRIOR) / GRID_POINTS
    return ((0.0, STATIC_PRIOR),) + tuple((a * step ** k, each) for k in range(GRID_POINTS))


def posterior(stats: bytes, lo: float, hi: float) -> list[tuple[float, float]]:
    """The page's rate given its visits: `rate_grid`'s prior times the likelihood of the
    estimator's state, (1 - e^(-lambda t_c))^n_c lambda^n_lm e^(-lambda U), normalised;
    points of negligible weight left out. Rate 0 keeps its weight only while no change was
    seen (the state's prior pseudo-change aside)."""
    grid = rate_grid(lo, hi)
    if len(stats) != STATE_BYTES:
        return list(grid)
    n_c, n_lm, s_c, u = _unpack(stats)
    t_c = s_c / n_c if n_c > 1e-6 else 0.0
    static_possible = n_c < 1e-6 and n_lm <= PRIOR_CHANGES + 1e-3
    logs: list[tuple[float, float]] = []
    for lam, weight in grid:
        if lam == 0.0:
            if static_possible:
                logs.append((lam, math.log(weight)))
            continue
        ll = math.log(weight) - lam * u
        if n_lm > 0.0:
            ll += n_lm * math.log(lam)
        if n_c > 1e-6 and t_c > 0.0:  # (a sum of tiny intervals may round to 0 seconds)
            ll += n_c * math.log(-math.expm1(-lam * t_c))
        logs.append((lam, ll))
    top = max(ll for _, ll in logs)
    kept = [(lam, math.exp(ll - top)) for lam, ll in logs if ll - top > _NEGLIGIBLE]
    total = sum(w for _, w in kept)
    return [(lam, w / total) for lam, w in kept]


def expected_marginal(post: Sequence[tuple[float, float]], interval: float) -> float:
    """dF/df at `interval`, averaged over the posterior `post` ((rate, weight) pairs)."""
    return sum(w * marginal(lam, interval) for lam, w in post if lam > 0.0)


def posterior_interval(stats: bytes, mu: float, lo: float, hi: float) -> float:
    """The interval at which the expected dF/df over the page's posterior rate is mu, in [lo,
    hi]. Where the estimate is sure it is `interval(rate(stats), mu, lo, hi)`; where it is
    not, it hedges: a page with little history is neither sent far on a few unchanged visits
    nor thrown to recrawlMax by noise near the optimiser's cliff (rates about 1 / mu, where
    `interval` jumps there). The expectation rises with the interval (d/dI of dF/df is
    lambda I e^(-lambda I)): Newton from the plug-in interval, kept inside a bracket."""
    if mu <= 0.0:
        return lo
    post = [(lam, w) for lam, w in posterior(stats, lo, hi) if lam > 0.0]
    if expected_marginal(post, hi) < mu:
        return hi
    if expected_marginal(post, lo) >= mu:
        return lo
    a, b = lo, hi
    x = min(hi, max(lo, interval(sum(lam * w for lam, w in post), mu, lo, hi)))
    for _ in range(_NEWTON_STEPS):
        h = expected_marginal(post, x) - mu
        if h < 0.0:
            a = x
        else:
            b = x
        slope = sum(w * lam * x * math.exp(-lam * x) for lam, w in post)
        nxt = x - h / slope if slope > 0.0 else math.sqrt(a * b)
        if not a < nxt < b:
            nxt = math.sqrt(a * b)
        if abs(nxt - x) <= 1e-4 * x or b <= a * (1.0 + 1e-4):
            return nxt
        x = nxt
    return x


# --- the estimator ---


def _unpack(stats: bytes) -> tuple[float, float, float, float]:
    """(changes seen without LM, with LM, their summed intervals, unchanged exposure)."""
    n_c, n_lm, s_c, u = _STATE.unpack(stats)
    return n_c, n_lm, math.exp2(s_c) - 1.0, math.exp2(u) - 1.0


def _pack(n_c: float, n_lm: float, s_c: float, u: float) -> bytes:
    """The state: half floats, the times on a log scale (0.05% apart)."""
    def seconds(t: float) -> float:
        return min(65000.0, math.log2(1.0 + max(0.0, t)))

    return _STATE.pack(min(n_c, 65000.0), min(n_lm, 65000.0), seconds(s_c), seconds(u))


def observe(stats: bytes, fetched_at: float, previous_fetch: float, changed: bool,
            last_modified: float | None = None, trust_lm: bool = False,
            prior: float = 1.0 / 3600, memory: float = MEMORY) -> bytes:
    """The estimator state after one visit at `fetched_at` (the last one: `previous_fetch`).

    `changed`: the payload differs from the last capture (the digest is the truth).
    `last_modified`: the answer's Last-Modified (Unix time), used when `trust_lm` and it falls
    inside (previous_fetch, fetched_at]. A first fetch (previous_fetch 0) adds no evidence.
    `prior` (1/s, e.g. 1 / recrawlMin) seeds a new state.
    """
    if len(stats) != STATE_BYTES:
        stats = _pack(0.0, PRIOR_CHANGES, 0.0, PRIOR_CHANGES / prior)
    t = fetched_at - previous_fetch
    if previous_fetch <= 0 or t <= 0:
        return stats
    keep = 1.0 - 1.0 / max(1.0, memory)
    n_c, n_lm, s_c, u = (v * keep for v in _unpack(stats))
    lm_inside = last_modified is not None and previous_fetch < last_modified <= fetched_at
    if not changed:
        u += t
    elif trust_lm and lm_inside:
        assert last_modified is not None
        n_lm += 1.0
        u += fetched_at - last_modified
    else:
        n_c += 1.0
        s_c += t
    return _pack(n_c, n_lm, s_c, u)


def too_fast(stats: bytes) -> bool:
    """Did the page change at every recent visit, with no change time to tell how fast?

    Then its rate is unknown beyond a lower bound, c / t_c with c = log(1 + 2 n_c) (the bias
    correction) at the mean changed interval t_c, and `rate` gives that bound. Scheduling on it
    is a trap: the interval the optimiser gives a rate c / t_c is about 4 mu, and revisited that
    often the page keeps changing at every visit, so the estimate stays c / t_c -- a stable
    fixed point that spends a share of the site's budget on a page the budget cannot follow.
    The crawler's `rate` for such a page is inf (it orders waiting visits by it); its
    interval comes from `posterior_interval`, whose prior stops at 3 / recrawlMin, so the
    likelihood of changing at every visit sends it toward recrawlMax there as well; a page
    that slows down shows an unchanged visit and is learned again. The test: at least
    SATURATED_CHANGES changes in memory, and the unchanged exposure less than
    SATURATED_UNCHANGED of all the time watched (a chance of no change in an interval below
    ~1.5%: x = lambda I > 4.2, where the optimum's pages are marginal, 1 - (1 + x) e^(-x) >
    0.92 = mu lambda).
    """
    if len(stats) != STATE_BYTES:
        return False
    n_c, n_lm, s_c, u = _unpack(stats)
    return (n_c >= SATURATED_CHANGES and n_lm < 0.5 * n_c
            and u < SATURATED_UNCHANGED * (u + s_c))


def rate(stats: bytes, prior: float = 1.0 / 3600) -> float:
    """Estimated change rate (1/s) from the state; `prior` for a page without one."""
    if len(stats) != STATE_BYTES:
        return prior
    n_c, n_lm, s_c, u = _unpack(stats)
    if n_c < 1e-6 or s_c <= 0:
        return n_lm / u if u > 0 else prior
    t_c = s_c / n_c
    exposure = u + 0.5 * t_c  # Cho's bias correction: half an unchanged visit
    # Solve h(lam) = n_c t_c / (e^(lam t_c) - 1) + n_lm / lam - exposure = 0. h is convex and
    # decreasing, and h >= s_c / 2 > 0 at lam0 = (n_c + n_lm) / (exposure + s_c) (from
    # y / (e^y - 1) >= 1 - y / 2): Newton from there rises to the root, never past it.
    lam = (n_c + n_lm) / (exposure + s_c)
    for _ in range(_NEWTON_STEPS):
        y = lam * t_c
        if y > 700.0:  # every no-LM change is certain at this rate: n_lm / lam is left
            return max(lam, n_lm / exposure)
        em1 = math.expm1(y)
        h = n_c * t_c / em1 + n_lm / lam - exposure
        dh = -n_c * t_c * t_c * (em1 + 1.0) / (em1 * em1) - n_lm / (lam * lam)
        step = h / dh
        lam -= step
        if abs(step) <= 1e-9 * lam:
            break
    return lam


# --- discovery: what a page's revisits find that was never seen ---

_FOUND = struct.Struct("<ee")  # new URLs found (decayed), log2(1 + seconds watched) (decayed)
FOUND_BYTES = _FOUND.size
# the weight of discovery: a second of delay before a new page is fetched costs as much as
# DISCOVERY_WEIGHT pages' seconds of staleness (see `discovery_interval`)
DISCOVERY_WEIGHT = 16.0
_BISECTIONS = 14  # steps of the discovery interval's bisection (2^-14 of its bracket's log)


def observe_found(state: bytes, found: int, seconds: float, memory: float = MEMORY) -> bytes:
    """The discovery state after a revisit `seconds` after the page's previous fetch that
    found `found` URLs never seen before; its evidence decays like the change estimator's (a
    page that stops yielding is learned again within a few `memory` visits)."""
    if seconds <= 0.0:
        return state
    keep = 1.0 - 1.0 / max(1.0, memory)
    n, u = _unpack_found(state)
    n, u = n * keep + found, u * keep + seconds
    return _FOUND.pack(min(n, 65000.0), min(65000.0, math.log2(1.0 + u)))


def _unpack_found(state: bytes) -> tuple[float, float]:
    """(new URLs found, seconds watched) of a discovery state; (0, 0) for none."""
    if len(state) != FOUND_BYTES:
        return 0.0, 0.0
    n, u = _FOUND.unpack(state)
    return n, math.exp2(u) - 1.0


def found_rate(state: bytes) -> float:
    """New URLs a second the page's revisits yield (0 for a page never revisited: most pages
    yield none, and a page's first fetch tells nothing of what its revisits will)."""
    n, u = _unpack_found(state)
    return n / u if u > 0.0 and n > 0.0 else 0.0


def discovery_interval(stats: bytes, found: float, mu: float, lo: float, hi: float,
                       weight: float = DISCOVERY_WEIGHT) -> float:
    """The interval of a page whose revisits yield `found` new URLs a second, where what one
    more visit a second buys is worth the site's multiplier mu: the freshness it buys
    (E[dF/df] over the posterior rate, as `posterior_interval`) plus the delay it saves the
    new pages the page will list (they come at rate `found` and wait I / 2 on average, so
    the cost is weight found I / 2 a second, and its marginal weight found I^2 / 2).

    Both terms rise with I, so the interval is at most the smaller of the two intervals each
    alone gives (`posterior_interval`, and sqrt(2 mu / (weight found))): bisection below it,
    on a log scale, within [lo, hi]."""
    fresh = posterior_interval(stats, mu, lo, hi)
    if found <= 0.0 or mu <= 0.0 or weight <= 0.0:
        return fresh
    top = min(fresh, math.sqrt(2.0 * mu / (weight * found)), hi)
    if top <= lo:
        return lo
    post = [(lam, w) for lam, w in posterior(stats, lo, hi) if lam > 0.0]

    def excess(i: float) -> float:
        return expected_marginal(post, i) + weight * found * i * i / 2.0 - mu

    if excess(top) < 0.0:  # (held at hi)
        return top
    if excess(lo) >= 0.0:
        return lo
    a, b = lo, top
    for _ in range(_BISECTIONS):
        m = math.sqrt(a * b)
        if excess(m) < 0.0:
            a = m
        else:
            b = m
    return b
