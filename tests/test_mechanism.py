"""The mechanism numbers (bildlab.measure.mechanism): known answers on hand-made counts, what is
inexact named, and a sweep's numbers bit-identical whatever the thread count (they are counts, not
times)."""

import pytest

from bildlab.harness import evaluate as ev
from bildlab.harness import shard
from bildlab.measure.mechanism import mechanism

FAST = dict(split="test", limit=6, max_new_tokens=12, warmup=0)


def test_known_answers_from_hand_made_counts():
    counts = [
        dict(
            small_tokens=6,
            large_calls=2,
            rollbacks=1,
            fallbacks=1,
            drafts=2,
            accepted_at=[2, 2, 1, 1],
        ),
        dict(
            small_tokens=0,
            large_calls=2,
            rollbacks=0,
            fallbacks=2,
            drafts=0,
            accepted_at=[0, 0, 0, 0],
        ),
    ]
    m = mechanism(counts * 10, [8, 2] * 10)
    assert m["examples"] == 20 and m["tokens"] == 100 and m["drafts"] == 20
    assert (
        m["small_share"] == 0.6
        and m["tokens_per_large_call"] == 2.5
        and m["large_calls_per_token"] == 0.4
    )
    assert m["rollbacks_per_token"] == 0.1 and m["fallbacks_per_token"] == 0.3
    assert m["accepted_by_position"] == [1.0, 1.0, 0.5, 0.5]  # accepted at i over all drafts (vLLM)
    assert m["inexact"] == {}
    for name in ("small_share", "tokens_per_large_call", "accepted_at_3"):
        lo, hi = m["ci"][name]
        assert lo <= (m[name] if name in m else m["accepted_by_position"][2]) <= hi


def test_what_the_batched_engine_cannot_count_is_named():
    # a rollback: no fallbacks
    counts = [
        dict(small_tokens=3, large_calls=2, rollbacks=1, drafts=1, accepted_at=[1, 1]),
        dict(small_tokens=1, large_calls=1, rollbacks=0, fallbacks=1, drafts=1, accepted_at=[1, 0]),
    ]
    m = mechanism(counts * 5, [4, 2] * 5)
    assert (
        m["fallbacks_per_token"] is None
        and "5 of 10 examples: BiLD rows with a rollback" in m["inexact"]["fallbacks_per_token"]
    )
    assert m["rollbacks_per_token"] == pytest.approx(1 / 6, abs=1e-4) and m[
        "accepted_by_position"
    ] == [1.0, 0.5]
    assert mechanism([None, counts[1]], [4, 2]) is None  # transformers' generate counts nothing
    with pytest.raises(ValueError, match="one entry per example"):
        mechanism(counts, [4])


def test_a_sweeps_mechanism_is_identical_at_one_and_two_threads(fake_zoo, tmp_path):
    grid = [
        {"fallback": 0.3, "rollback": 2.0},
        {"method": "speculative", "k": 3},
        {"method": "prompt-lookup", "ngram": 2, "k": 3},
    ]
    made = {}
    for threads in (1, 2):
        shard._OUTPUTS.clear()  # computed again, not taken from this process's memory
        made[threads] = ev.sweep(
            "toy-mt",
            grid,
            registry=tmp_path / str(threads),
            timing_limit=3,
            batch_size=4,
            threads=threads,
            **FAST,
        )
    for one, two in zip(made[1], made[2]):
        assert one["key"]["threads"] == 1 and two["key"]["threads"] == 2
        # every example, exact
        assert one["mechanism"] == two["mechanism"] and one["mechanism"]["examples"] == 6
    bild, spec, lookup = (r["mechanism"] for r in made[1])
    # one share per draft position, k = 3
    assert spec["drafts"] > 0 and len(spec["accepted_by_position"]) == 3
    for m in (bild, spec, lookup):
        assert m["tokens_per_large_call"] >= 1 and 0 <= m["small_share"] <= 1
        assert m["tokens_per_large_call"] == pytest.approx(1 / m["large_calls_per_token"], rel=1e-3)


def test_recount_counts_a_sample_counted_record_on_every_example_and_refuses_other_outputs(
    fake_zoo, tmp_path
):
    from bildlab.harness import records
    from bildlab.harness.registry import Registry

    grid = [{"fallback": 0.3, "rollback": 2.0}, {"method": "speculative", "k": 3}]
    made = ev.sweep("toy-mt", grid, registry=tmp_path, timing_limit=3, batch_size=4, **FAST)
    made += ev.sweep(
        "toy-mt", [{"method": "speculative", "k": 3, "do_sample": True}], registry=tmp_path, **FAST
    )
    reg, whole, sampled = Registry(tmp_path), made[0]["mechanism"], made[2]["mechanism"]
    # as a record made before every example's counts were kept: its timed sample's, without drafts
    for r in made:
        timed = [e for e in r["examples"] if e["seconds"] is not None]
        for e in timed:
            e["stats"] = {k: v for k, v in e["stats"].items() if k not in ("drafts", "accepted_at")}
        r["mechanism"] = mechanism(
            [e["stats"] for e in timed], [e["tokens"] for e in timed], "the 3 timed examples"
        )
        reg.put(r["key"], r)
    bild_key, spec_key, sample_key = (r["key"] for r in made)
    tampered = reg.get(spec_key)
    row = tampered["examples"][0]
    row.update(output=row["output"] + " x", identical=False)  # an output the policy does not give
    reg.put(spec_key, tampered)
    shard._OUTPUTS.clear()
    out = records.recount(reg, progress=False)
    assert out["recounted"] == 2 and out["differ"] == ["toy-mt test: speculative k=3"]
    # exact: as the sweep's
    assert reg.get(bild_key)["mechanism"] == {**whole, "source": records.WHOLE}
    # batch 1, the same seeds
    assert reg.get(sample_key)["mechanism"] == {**sampled, "source": records.SAMPLED}
    assert sampled["drafts"] > 0 and sampled["examples"] == 6
    assert reg.get(spec_key)["mechanism"]["source"] == "the 3 timed examples"  # left as it was
    # resumed: nothing left to count but the refused
    assert records.recount(reg, progress=False)["recounted"] == 0
