"""The outcome counters: every kind is one named member, and a misspelt kind cannot count."""

from __future__ import annotations

import pytest

from larbinpy.records import Job, JobKind
from larbinpy.stats import Outcome, Stats


def test_every_outcome_kind_starts_at_zero_and_counts_under_its_name() -> None:
    stats = Stats()
    assert set(stats.outcomes) == set(Outcome)
    stats.count(Outcome.timeout, 2)
    assert stats.outcomes["timeout"] == 2  # the status page reads the SPEC.md spelling
    assert stats.errors() == 2


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
