"""Two rows side by side by the interval of their paired difference (summary.compare), on data with
a known answer."""

import numpy as np
import pytest

from bildlab.measure import summary as sm

REFS = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "birds sing at dawn",
    "rain fell all night",
] * 5


def _record(seconds, vanilla, outputs=None, **key):
    outputs = outputs or REFS[: len(seconds)]
    return {
        "key": {"pair": "toy-mt", "task": "toy-mt", "split": "test", "limit": len(seconds), **key},
        "summary": {"metric": "bleu"},
        "examples": [
            {"output": o, "seconds": float(t), "baseline_seconds": float(v)}
            for o, t, v in zip(outputs, seconds, vanilla)
        ],
    }


def test_identical_records_differ_by_exactly_nothing():
    rng = np.random.default_rng(1)
    v = rng.gamma(4.0, 0.05, 20)
    a = _record(v / 1.5, v)
    c = sm.compare(a, a, REFS)
    assert c["n"] == 20 and c["speedup_difference"] == 0 and c["speedup_difference_ci"] == [0, 0]
    assert c["speedup_ratio"] == 1 and c["speedup_ratio_ci"] == [1, 1]
    assert c["delta"] == 0 and c["delta_ci"] == [0, 0]
    assert sm.says(c).startswith(
        "no detectable difference in speed (the first - the second +0.000x [+0.000, +0.000]"
    )


def test_a_shifted_row_is_detectably_slower_though_the_intervals_overlap():
    rng = np.random.default_rng(2)
    v = rng.gamma(2.0, 0.1, 20)
    t = v / 1.5 * rng.uniform(0.7, 1.3, 20)
    a, b = _record(t, v), _record(t * 1.05, v)  # b: 5% slower on every example, same vanilla run
    sa, sb = (sm.speed_difference(r, r)["n"] for r in (a, b))
    assert sa == sb == 20
    c = sm.compare(a, b, REFS)
    assert c["speedup_difference_ci"][0] > 0  # the paired interval excludes 0
    # each speedup is vanilla seconds over policy seconds, summed over the examples
    assert c["speedup_difference"] == pytest.approx(
        v.sum() / t.sum() - v.sum() / (1.05 * t).sum(), abs=1e-3
    )
    assert c["speedup_ratio"] == pytest.approx(1.05, abs=1e-4)
    # ... while each row's own interval overlaps the other's: an overlap test would call them equal
    from bildlab.measure.intervals import interval, ratio_of_sums

    own = [interval(lambda i, x=x: ratio_of_sums(v, x, i), 20) for x in (t, t * 1.05)]
    assert own[0][0] < own[1][1]
    assert sm.says(c, ("a", "b")).startswith("a is detectably faster (a - b +")
    assert sm.says(sm.compare(b, a, REFS), ("b", "a")).startswith("a is detectably faster")


def test_records_of_two_sweeps_are_each_against_their_own_vanilla_run():
    rng = np.random.default_rng(3)
    v1, v2 = rng.gamma(2.0, 0.1, 20), rng.gamma(2.0, 0.1, 20)
    a, b = _record(v1 / 1.4, v1), _record(v2 / 1.4, v2)  # the same speedup, timed in two sweeps
    c = sm.compare(a, b, REFS)
    assert c["speedup_ratio"] == pytest.approx(1.0, abs=1e-4) and c[
        "speedup_difference"
    ] == pytest.approx(0, abs=1e-4)


def test_quality_is_compared_on_the_same_examples():
    a = _record([1.0] * 8, [1.5] * 8)
    worse = [
        "the cat sat on the rug",
        "a dog ran in a park",
        "birds sing at night",
        "rain fell",
    ] * 2
    c = sm.compare(a, _record([1.0] * 8, [1.5] * 8, outputs=worse), REFS[:8])
    assert c["delta_ci"][0] > 0 and c["metric"] == "bleu"
    # the reference: corpus BLEU of the outputs against the targets, 100 for the targets themselves
    import sacrebleu

    assert c["delta"] == pytest.approx(
        100.0 - sacrebleu.corpus_bleu(worse, [REFS[:8]]).score, abs=0.01
    )


def test_the_paired_interval_covers_the_true_difference_about_95_times_in_100():
    """200 datasets drawn with a known population difference of speedups (1.5x - 1.4x = 0.1x)."""
    rng = np.random.default_rng(4)
    hits = 0
    for _ in range(200):
        v = rng.gamma(3.0, 0.1, 60)
        a = _record(v / 1.5 * rng.gamma(25, 1 / 25, 60), v)  # noise with mean 1, independent of v
        b = _record(v / 1.4 * rng.gamma(25, 1 / 25, 60), v)
        lo, hi = sm.speed_difference(a, b)["speedup_difference_ci"]
        hits += lo <= 0.1 <= hi
    assert 0.90 <= hits / 200 <= 0.99


def test_records_on_other_examples_are_refused():
    a = _record([1.0] * 4, [1.5] * 4)
    with pytest.raises(ValueError, match="keys differ in split"):
        sm.compare(a, _record([1.0] * 4, [1.5] * 4, split="validation"), REFS)
    b = _record([1.0] * 4, [1.5] * 4)
    b["examples"].pop()
    with pytest.raises(ValueError, match="same examples; they have 4 and 3"):
        sm.compare(a, b, REFS)


def test_an_interval_that_reaches_zero_as_printed_is_not_called_a_difference():
    c = {"n": 300, "speedup_difference": 0.031, "speedup_difference_ci": [0.0004, 0.062]}
    assert sm.says(c, ("k=4", "k=2")) == (
        "no detectable difference in speed (k=4 - k=2 +0.031x [+0.000, +0.062], paired, N = 300)"
    )
    c["speedup_difference_ci"] = [0.0006, 0.062]
    assert sm.says(c, ("k=4", "k=2")).startswith(
        "k=4 is detectably faster (k=4 - k=2 +0.031x [+0.001, +0.062]"
    )
