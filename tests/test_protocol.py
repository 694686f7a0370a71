"""The one timing protocol, the paired bootstrap intervals and what the study reads from summaries."""

import math

import numpy as np
import pytest
import torch

from bildlab.engine import timing
from bildlab.measure import intervals, metrics, summary


def test_runners_are_interleaved_in_a_rotating_order_after_an_untimed_warmup(monkeypatch):
    order, now = [], [0.0]
    cost = {"a": 1.0, "b": 2.0, "c": 4.0}  # each runner's call takes this long on a fake clock

    def runner(name):
        def run(x, i):
            order.append((name, i))
            now[0] += cost[name]
            return [i], {}

        return run

    monkeypatch.setattr(timing, "clock", lambda device: now[0])
    inputs = [torch.zeros(1, 1, dtype=torch.long)] * 4
    rows = timing.interleave(inputs, {n: runner(n) for n in "abc"}, warmup=1)
    assert order[:3] == [("a", 0), ("b", 0), ("c", 0)]  # the warm-up
    timed = order[3:]
    # the order rotates from input to input
    assert [n for n, _ in timed] == list("abcbcacababc")
    assert [i for _, i in timed] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert len(rows) == 4 and all(set(r) == set("abc") for r in rows)
    # each runner is timed over its own call only: not the others', not the warm-up's
    assert [[r[n]["seconds"] for n in "abc"] for r in rows] == [[1.0, 2.0, 4.0]] * 4
    assert [r["b"]["tokens"] for r in rows] == [[0], [1], [2], [3]]


def test_repeats_keep_the_median_and_the_thread_count_is_fixed_then_restored(monkeypatch):
    seen, ticks = [], iter([0, 1, 10, 13, 20, 22])  # three timings of one runner: 1, 3, 2 seconds

    monkeypatch.setattr(timing, "clock", lambda device: next(ticks))
    before = torch.get_num_threads()
    rows = timing.interleave(
        [torch.zeros(1, 1)],
        {"a": lambda x, i: (seen.append(torch.get_num_threads()) or [1], {})},
        warmup=0,
        repeats=3,
        threads=1,
    )
    assert rows[0]["a"]["seconds"] == 2 and seen == [1, 1, 1] and torch.get_num_threads() == before


@pytest.mark.parametrize(
    "kwargs, word",
    [(dict(threads=0), "threads"), (dict(repeats=0), "repeats"), (dict(warmup=-1), "warmup")],
)
def test_bad_protocol_settings_are_named(kwargs, word):
    with pytest.raises(ValueError, match=word):
        timing.interleave([torch.zeros(1, 1)], {"a": lambda x, i: ([], {})}, **kwargs)


# ---------------------------------------------------------------------------------------------------------------------
# Intervals on data whose answer is known


def test_a_ratio_of_equal_times_covers_one_and_a_shifted_one_excludes_it():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.5, 2.0, 300)
    same = base * rng.normal(1.0, 0.05, 300)  # the same times plus noise: no difference
    lo, hi = intervals.interval(lambda i: intervals.ratio_of_sums(base, same, i), 300)
    assert lo < 1.0 < hi and hi - lo < 0.02
    faster = base / 1.5 * rng.normal(1.0, 0.05, 300)  # 1.5x faster
    lo, hi = intervals.interval(lambda i: intervals.ratio_of_sums(base, faster, i), 300)
    assert 1.45 < lo < 1.5 < hi < 1.55


def test_interval_coverage_is_close_to_95_percent():
    # the mean of N(0, 1) samples of 100: the interval covers the true mean 0 in about 95% of 200
    # datasets
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(200):
        x = rng.normal(0, 1, 100)
        hits += intervals.covers(
            intervals.interval(lambda i: intervals.mean(x, i), 100, n_resamples=500)
        )
    assert 0.89 <= hits / 200 <= 0.99


def test_paired_quality_differences_zero_and_shifted():
    refs = [f"the cat number {i} sat on the mat today" for i in range(200)]
    a = [r if i % 3 else r.replace("cat", "dog") for i, r in enumerate(refs)]
    data = metrics.sentence_data("bleu", a, refs)
    full = np.arange(200)[None]
    assert metrics.corpus("bleu", data, full)[0] == pytest.approx(metrics.bleu(a, refs))
    # identical systems: the paired difference is exactly 0 in every resample
    assert summary.score_difference("bleu", data, data) == (0.0, [0.0, 0.0])
    # a system that breaks a further third of the sentences is worse, and the interval says so
    b = [
        r if i % 3 != 1 else r.replace("mat", "rug").replace("sat", "lay") for i, r in enumerate(a)
    ]
    other = metrics.sentence_data("bleu", b, refs)
    value, (lo, hi) = summary.score_difference("bleu", other, data)
    assert lo <= value <= hi < 0
    assert value == pytest.approx(metrics.bleu(b, refs) - metrics.bleu(a, refs), abs=1e-3)
    # ROUGE-L: the mean of per-example F-measures
    rl = metrics.sentence_data("rougeL", a, refs)
    assert metrics.corpus("rougeL", rl, full)[0] == pytest.approx(metrics.rouge_l(a, refs))


def _rows(n, speed=2.0, identical=True, truncate=()):
    rows = []
    for i in range(n):
        out = " ".join(f"w{i + j}" for j in range(6))
        rows.append(
            {
                "output": out if identical or i % 2 else "x y z",
                "tokens": 3,
                "seconds": 0.1 / speed,
                "stats": {"small_tokens": 2, "large_calls": 1, "drafted": 3, "accepted": 2},
                "truncated": i in truncate,
                "baseline_output": out,
                "baseline_tokens": 3,
                "baseline_seconds": 0.1 * (10 if i in truncate else 1),
                "baseline_truncated": i in truncate,
                "identical": identical or bool(i % 2),
                "hf_seconds": 0.12,
                "hf_identical": True,
            }
        )
    return rows


def test_summary_of_rows_with_a_known_answer():
    refs = [" ".join(f"w{i + j}" for j in range(6)) for i in range(40)]
    s = summary.summarize(_rows(40), refs, metric="bleu")
    assert s["speedup"] == pytest.approx(2.0) and s["speedup_ci"] == pytest.approx([2.0, 2.0])
    assert (
        s["speedup_hf"] == pytest.approx(2.4)
        and s["identical_count"] == 40
        and s["delta_ci"] == [0, 0]
    )
    assert s["small_share"] == pytest.approx(2 / 3, abs=1e-4) and s["acceptance"] == pytest.approx(
        2 / 3, abs=1e-4
    )
    assert s["mean_accepted"] == 3 and s["large_calls_per_token"] == pytest.approx(1 / 3, abs=1e-4)
    # a runner that counts nothing (transformers' generate): no composition, rather than numbers
    # made of zeros
    blind = summary.summarize([{**r, "stats": {}} for r in _rows(40)], refs, metric="bleu")
    assert [
        blind[k] for k in ("small_share", "large_calls_per_token", "mean_accepted", "acceptance")
    ] == [None] * 4
    # two examples whose vanilla output looped to the limit dominate the total time; reported with
    # and without them
    t = summary.summarize(_rows(40, truncate=(3, 7)), refs, metric="bleu")
    assert (
        t["truncated"] == 2
        and t["baseline_truncated"] == 2
        and t["examples_without_truncated"] == 38
    )
    assert t["speedup"] == pytest.approx((38 * 0.1 + 2 * 1.0) / (40 * 0.05))
    assert t["speedup_without_truncated"] == pytest.approx(2.0)
    # a lossy policy: half the outputs differ, the quality change is negative and its interval
    # excludes 0
    lossy = summary.summarize(_rows(40, identical=False), refs, metric="bleu")
    assert (
        lossy["identical_count"] == 20
        and lossy["delta_ci"][1] < 0
        and not summary.lossless({"summary": lossy})
    )


def _rec(speed, ci, delta, dci, identical=10):
    return {
        "summary": {
            "speedup": speed,
            "speedup_ci": ci,
            "delta": delta,
            "delta_ci": dci,
            "examples": 10,
            "identical_count": identical,
        }
    }


def _policy_record(seconds, identical=True):
    """A record of 40 examples of one sweep (vanilla 0.1 s each), timed `seconds` per example."""
    refs = [" ".join(f"w{i + j}" for j in range(6)) for i in range(40)]
    rows = _rows(40, identical=identical)
    for r, t in zip(rows, seconds):
        r["seconds"] = float(t)
    return {
        "key": {"pair": "toy-mt", "task": "toy-mt", "split": "test", "limit": 40},
        "summary": summary.summarize(rows, refs, metric="bleu"),
        "examples": rows,
    }, refs


def test_a_policy_is_dominated_only_by_its_paired_differences():
    rng = np.random.default_rng(0)
    base = 0.05 * rng.uniform(0.8, 1.2, 40)
    a, refs = _policy_record(base)
    b, _ = _policy_record(base * 1.03)  # 3% slower on every example, same outputs: dominated by a
    # as fast as a in all (its times in another order): no detectable difference
    c, _ = _policy_record(base[::-1])
    # faster, but half its outputs are wrong: not dominated
    d, _ = _policy_record(base * 0.6, identical=False)
    # b's own speedup interval overlaps a's: an overlap test would keep b on the front
    assert b["summary"]["speedup_ci"][1] > a["summary"]["speedup_ci"][0]
    front = summary.pareto([a, b, c, d], refs)
    assert [x is b for x in front] == [False] * 3 and {id(x) for x in front} == {
        id(a),
        id(c),
        id(d),
    }
    assert front[-1] is d  # by increasing speedup
    assert summary.pareto([b, a], refs) == [a] and summary.pareto([a], refs) == [a]


def test_choose_takes_the_fastest_within_the_tolerance_or_lossless():
    recs = [
        _rec(1.2, [1, 1.4], 0.0, [0, 0]),
        _rec(1.8, [1.6, 2], -0.9, [-1.0, 0], 7),
        _rec(2.5, [2, 3], -3, [-4, -2], 2),
    ]
    assert summary.choose(recs, None) is recs[0]
    assert summary.choose(recs, 1.0) is recs[1]
    assert summary.choose(recs, 0.99) is recs[0]  # the interval reaches 1 point below vanilla
    assert summary.choose(recs, 5.0) is recs[2]
    assert summary.choose(recs[1:], None) is None


def test_choose_judges_the_interval_not_the_point():
    """A policy that scores above vanilla by its point (it escapes one looping vanilla output) but
    whose interval reaches far below is not 'within' the tolerance; a slower one whose interval
    stays within it is chosen."""
    lossless = _rec(1.3, [1.25, 1.35], 0.0, [0.0, 0.0])
    escapes_a_loop = _rec(1.5, [1.4, 1.6], +1.6, [-3.4, +9.5], 6)
    tight = _rec(1.4, [1.35, 1.45], -0.3, [-0.9, +0.2], 8)
    assert summary.within(tight, 1.0) and not summary.within(escapes_a_loop, 1.0)
    assert summary.choose([lossless, escapes_a_loop, tight], 1.0) is tight
    assert summary.choose([lossless, escapes_a_loop, tight], 0.2) is lossless
    assert summary.choose([lossless, escapes_a_loop, tight], 5.0) is escapes_a_loop
    assert summary.fmt(1.234, [1.1, 1.3], "x") == "1.23x [1.10, 1.30]"
    assert summary.fmt(-0.5, [-1, 0.25], signed=True) == "-0.50 [-1.00, +0.25]"
    assert math.isclose(summary.LN2, math.log(2))
