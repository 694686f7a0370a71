"""The batch-size measurement: full batches of the inputs, every method against batched greedy on
the same batches, lossless methods' outputs counted equal to greedy's, the speedup the ratio of the
summed seconds within its paired interval, and bad arguments refused by name."""

import pytest
import torch
from conftest import VOCAB, perturbed, tiny

from bildlab.harness import batch_sizes

METHODS = {
    "speculative k 3": dict(method="speculative", k=3),
    "bild lossless": dict(method="bild", fallback=0.0, rollback=0.0),
    "prompt lookup": dict(method="prompt-lookup", k=2, ngram=1),
}


@pytest.fixture(scope="module")
def pair():
    large = tiny("llama", seed=31, scale=2.0)
    return large, perturbed(large, 0.3, seed=3)


def inputs(n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, VOCAB, (1, 3 + i % 4), generator=g) for i in range(n)]


def test_every_method_is_timed_against_greedy_on_the_same_full_batches(pair):
    large, small = pair
    rows = batch_sizes.measure(
        large, small, inputs(7), METHODS, [1, 3], max_new_tokens=6, eos_token_id=[]
    )
    assert [(r["batch_size"], r["method"]) for r in rows] == [
        (b, m) for b in (1, 3) for m in ["greedy", *METHODS]
    ]
    for r in rows:
        # batch 3: two full batches of the 7 inputs, the last one left out
        assert (r["batches"], r["rows"]) == ((7, 7) if r["batch_size"] == 1 else (2, 6))
        assert len(r["seconds"]) == r["batches"]
        assert r["identical"] == r["rows"]  # every method here is lossless
        greedy = next(
            g for g in rows if g["batch_size"] == r["batch_size"] and g["method"] == "greedy"
        )
        assert r["speedup"] == pytest.approx(sum(greedy["seconds"]) / sum(r["seconds"]))
        assert r["outputs_per_second"] == pytest.approx(r["rows"] / sum(r["seconds"]))
        lo, hi = r["speedup_ci"]
        assert lo <= r["speedup"] <= hi
        want = "lockstep" if r["method"] == "greedy" else "ragged"
        assert r["engine"] == want, r


def test_a_lossy_method_counts_the_outputs_that_differ(pair):
    large, small = pair
    lossy = {"bild": dict(method="bild", fallback=0.2, rollback=float("inf"))}
    xs = inputs(4)
    (greedy, bild) = batch_sizes.measure(large, small, xs, lossy, [4], max_new_tokens=8)
    import bildlab

    want = [bildlab.generate(large, x, small=small, max_new_tokens=8, **lossy["bild"]) for x in xs]
    ref = [bildlab.generate(large, x, max_new_tokens=8).tokens for x in xs]
    assert bild["identical"] == sum(w.tokens == r for w, r in zip(want, ref)) < 4
    assert greedy["identical"] == 4


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(batch_sizes=[0]), ["batch_sizes", "[1, 3]"]),
        (dict(batch_sizes=[4]), ["batch_sizes", "[1, 3]"]),
        (dict(batch_sizes=[2.0]), ["batch_sizes"]),
        (dict(methods={}), ["methods", "non-empty"]),
        (dict(methods={"greedy": dict(method="greedy")}), ["'greedy'", "baseline"]),
    ],
)
def test_bad_arguments_are_refused_by_name(pair, kw, words):
    large, small = pair
    args = {"methods": METHODS, "batch_sizes": [1], **kw}
    with pytest.raises(ValueError) as info:
        batch_sizes.measure(large, small, inputs(3), max_new_tokens=4, **args)
    assert all(w in str(info.value) for w in words), str(info.value)
