"""95% intervals by the paired bootstrap over examples (Koehn 2004), with scipy.stats.bootstrap.

Every statistic is a function of a resample of example *indices*, so that the method and its
baseline are always resampled together (paired) and any statistic can be computed from per-example
data:

    corpus BLEU      sacrebleu's sentence statistics summed over the resample, scored by sacrebleu (metrics.corpus)
    ROUGE-L          the mean of per-example F-measures (metrics.corpus)
    speedup          sum of baseline times / sum of method times over the resample (a ratio of sums)

    lo, hi = interval(lambda idx: ratio_of_sums(base_t, meth_t, idx), n=len(base_t))
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

N_RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 0
BATCH = 250  # resamples per vectorized call (bounds memory: BLEU statistics are [batch, n, 10])


def interval(
    statistic: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of `statistic(idx)` where idx is an [n_resamples, n] array of
    example indices (vectorized: one value per row). Deterministic for a given seed. A statistic
    that does not vary gives [v, v]."""
    lo, hi = intervals(
        lambda idx: np.asarray(statistic(idx))[None],
        n,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
    )
    return float(lo[0]), float(hi[0])


def intervals(
    statistic: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> tuple[np.ndarray, np.ndarray]:
    """`interval` for a statistic of many values at once, drawn from the same resamples of the
    examples: `statistic(idx)` gives [k, n_resamples] for idx [n_resamples, n]; returns the k lows
    and the k highs."""
    from scipy.stats import bootstrap

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (the number of examples) must be an integer >= 1; got {n!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence!r}")
    if n == 1:
        value = np.asarray(statistic(np.zeros((1, 1), dtype=int)), dtype=float)[:, 0]
        return value, value
    res = bootstrap(
        (np.arange(n),),
        lambda idx, axis=-1: statistic(np.atleast_2d(idx)),
        vectorized=True,
        paired=False,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        batch=BATCH,
        rng=np.random.default_rng(seed),
    )
    return np.asarray(res.confidence_interval.low, dtype=float), np.asarray(
        res.confidence_interval.high, dtype=float
    )


# ---------------------------------------------------------------------------------------------------------------------
# Statistics of index resamples (each returns one value per row of idx)


def ratio_of_sums(numerator, denominator, idx: np.ndarray) -> np.ndarray:
    num, den = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    return num[idx].sum(-1) / den[idx].sum(-1)


def mean(values, idx: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=float)[idx].mean(-1)


def covers(lo_hi: tuple[float, float], value: float = 0.0) -> bool:
    """Does the interval include `value` (e.g. a difference of 0: no detectable difference)?"""
    return lo_hi[0] <= value <= lo_hi[1]
