"""The outcome counters: every kind is one named member, and a misspelt kind cannot count."""

from __future__ import annotations

import pytest

from larbinpy.records import Job, JobKind
from larbinpy.stats import Outcome, Stats


def test_every_outcome_kind_starts_at_zero_and_counts_under_its_name() -> None:
    stats = Stats()
    assert set(stats.outcomes) == set(Outcome)
    stats.count(Outcome.timeout, 2)
    assert stats.outcomes["timeout"] == 2  # the status page reads the documented spelling
    assert stats.errors() == 2


def test_errors_count_fetch_failures_not_urls_a_rule_left_unfetched() -> None:
    """The demo crawl's mix: one 404 and one host without DNS are errors; duplicates, links
    out of scope, robots refusals, redirects and pages of an unwanted type are not."""
    stats = Stats()
    for kind, n in ((Outcome.success, 56), (Outcome.err40X, 1), (Outcome.noDNS, 1),
                    (Outcome.urlDup, 332), (Outcome.outOfScope, 24), (Outcome.err30X, 4),
                    (Outcome.forbiddenRobots, 3), (Outcome.badType, 2), (Outcome.backedOff, 1)):
        stats.count(kind, n)
    assert stats.errors() == 2


def test_every_outcome_kind_is_explained_in_docs_outcomes() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "outcomes.md").read_text()
    rows = {line.split("|")[1].strip(" `") for line in text.splitlines()
            if line.startswith("| `")}
    assert rows == {k.value for k in Outcome}


def test_a_misspelt_outcome_is_refused_instead_of_making_a_new_counter() -> None:
    stats = Stats()
    with pytest.raises(KeyError):
        stats.count("tiemout")  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        Outcome.tiemout  # type: ignore[attr-defined]  # noqa: B018
    assert len(stats.outcomes) == len(Outcome)


def test_job_kind_is_a_page_unless_said_otherwise() -> None:
    assert Job("http://a.test/", 1).kind is JobKind.PAGE
    assert JobKind(1) is JobKind.SITEMAP
