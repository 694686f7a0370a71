"""Formatting of the study's numbers."""

from bildlab.summary import fmt_gap


def test_the_gap_closed_is_a_percentage_or_says_there_is_none():
    assert fmt_gap(0.99, (0.97, 1.01)) == "99% [97, 101]"
    assert fmt_gap(float("nan"), (1.0, 1.0)) == "no gap to close (the small model alone scores as the large)"
