"""The batch-size measurement: full batches of the inputs, every method against batched greedy on
the same batches, lossless methods' outputs counted equal to greedy's, the speedup the ratio of the
summed seconds within its paired interval, and bad arguments refused by name."""

import json
from pathlib import Path

import pytest
import torch
from conftest import VOCAB, perturbed, tiny

from bildlab.engine.batch import generate_batch
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


def test_a_batchs_forwards_are_counted_as_its_rows_counts_say(pair):
    """Every ragged verification holds each unfinished row once: the rows of the large model's
    forwards sum to the rows' own large_calls; a lockstep greedy batch without EOS is a prefill
    over the left-padded prompts, then one step over every row per token."""
    large, small = pair
    xs = inputs(5)
    report = {}
    outs = generate_batch(
        large, xs, small=small, method="speculative", k=3, max_new_tokens=9, report=report
    )
    assert report["engine"] == "ragged"
    by = {name: 0 for name in ("large", "small")}
    for name, rows, _, count in report["calls"]:
        by[name] += rows * count
    assert by["large"] == sum(o.stats["large_calls"] for o in outs)
    # rows whose draft ended early are fed along with the others
    assert by["small"] >= sum(o.stats["small_calls"] for o in outs)
    report = {}
    generate_batch(large, xs, max_new_tokens=9, eos_token_id=[], report=report)
    width = max(x.shape[1] for x in xs)
    assert report["calls"] == [["large", 5, 1, 8], ["large", 5, width, 1]]


def test_an_encoder_decoders_batch_counts_its_encoders_once():
    large = tiny("t5", seed=5)
    small = perturbed(large, 0.3, seed=4)
    xs = inputs(4)
    report = {}
    generate_batch(
        large,
        xs,
        small=small,
        method="bild",
        fallback=0.5,
        rollback=3.0,
        max_new_tokens=6,
        report=report,
    )
    width = max(x.shape[1] for x in xs)
    encoders = [c for c in report["calls"] if c[0].endswith("encoder")]
    assert encoders == [["large encoder", 4, width, 1], ["small encoder", 4, width, 1]]


def test_the_price_of_forwards_is_exact_where_the_cost_is_linear():
    """A grid of a cost linear in rows and in columns prices any shape exactly, inside the grid
    and beyond it."""

    def cost(r, c):
        return 0.001 + 0.0002 * r + 0.0003 * c

    grid = {"large": {r: {c: cost(r, c) for c in (1, 4, 8)} for r in (1, 2, 4)}}
    calls = [["large", 3, 5, 2], ["large", 1, 1, 7], ["large", 6, 12, 1]]
    want = 2 * cost(3, 5) + 7 * cost(1, 1) + cost(6, 12)
    assert batch_sizes.price(calls, grid) == pytest.approx(want, rel=1e-12)


def test_each_method_is_priced_beside_its_clock(pair):
    large, small = pair
    rows = batch_sizes.measure(
        large, small, inputs(6), METHODS, [1, 3], max_new_tokens=6, cost_batches=2
    )
    for r in rows:
        lo, hi = r["predicted_speedup_ci"]
        assert lo <= r["predicted_speedup"] <= hi
        lo, hi = r["measured_over_predicted_ci"]
        assert lo <= r["measured_over_predicted"] <= hi
        assert r["measured_over_predicted"] == pytest.approx(r["speedup"] / r["predicted_speedup"])
        assert 0 < r["forward_share"]
        if r["method"] == "greedy":
            assert r["predicted_speedup"] == 1.0
    grids = [r["grid"] for r in rows if "grid" in r]
    assert [sorted(g["large"]) for g in grids] == [[1], [1, 2, 3]]
    assert sorted(grids[1]["large"][3]) == list(batch_sizes.COLUMNS)


def test_a_method_may_name_its_engine(pair):
    large, small = pair
    both = {
        "speculative": dict(method="speculative", k=3),
        "speculative lockstep": dict(method="speculative", k=3, engine="lockstep"),
    }
    rows = batch_sizes.measure(large, small, inputs(4), both, [2], max_new_tokens=6, costs=False)
    assert [(r["method"], r["engine"]) for r in rows] == [
        ("greedy", "lockstep"),
        ("speculative", "ragged"),
        ("speculative lockstep", "lockstep"),
    ]
    assert all(r["identical"] == 4 for r in rows)
    assert all("predicted_speedup" not in r and "grid" not in r for r in rows)


def test_the_committed_batch_figure_and_table_replay_from_the_committed_files(tmp_path, capsys):
    """`bench_batch_sizes.py --table` draws figures/batch_sizes from results/batch-sizes byte for byte
    (on any machine), and its table holds every file's method and batch size with an interval."""
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(
        "bench_batch_sizes", root / "benchmarks" / "bench_batch_sizes.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--table", "--figures", str(tmp_path)]) == 0
    for name in ("batch_sizes.png", "batch_sizes.pdf"):
        assert (tmp_path / name).read_bytes() == (root / "figures" / name).read_bytes(), name
    table = capsys.readouterr().out
    files = [
        json.loads(p.read_text()) for p in sorted((root / "results/batch-sizes").glob("*.json"))
    ]
    assert files
    for f in files:
        for r in f["rows"]:
            if r["method"] == "greedy":
                continue
            lo, hi = r["speedup_ci"]
            assert lo <= r["speedup"] <= hi
            assert f"{r['speedup']:.2f}x [{lo:.2f}, {hi:.2f}]" in table


def test_the_notebook_section_replays_the_files_and_says_what_their_intervals_allow(tmp_path):
    """The speculative notebook's batch section: the committed figure byte for byte, a verdict per
    method from its intervals, the machine and zoo named, the lossless outputs counted."""
    from bildlab.study import batching

    root = Path(__file__).resolve().parent.parent
    result = batching.batch_answer(root / "results" / "batch-sizes", figures=tmp_path)
    for name in ("batch_sizes.png", "batch_sizes.pdf"):
        assert (tmp_path / name).read_bytes() == (root / "figures" / name).read_bytes(), name
    for f in batching.load(root / "results" / "batch-sizes"):
        lossless = [r for r in f["rows"] if r["method"].startswith(("speculative", "prompt"))]
        assert all(r["identical"] == r["rows"] for r in lossless)
        n = sum(r["rows"] for r in lossless)
        assert f"{f['machine']['processor']}, {f['threads']} thread" in result.answer
        notes = [d.text for d in result.details if hasattr(d, "text")]
        assert any(f"outputs equal greedy's in {n} of {n})" in t for t in notes)
    # why, from the grids, among the details
    assert batching.verification(batching.load(root / "results" / "batch-sizes")) in notes
    assert len(result.pin.splitlines()) == 2 * 3  # two pairs, three methods by "auto"
    # the verdict reads the intervals: above 1, across it, below it
    points = [(1, (1.2, 1.5)), (8, (0.9, 1.1)), (16, (1.0, 1.2)), (64, (0.5, 0.8))]
    assert batching.verdict(points) == (
        "faster at batch 1; no detectable difference at batch 8, 16; slower at batch 64"
    )
    assert batching._reach(points) == "faster up to batch 1, slower at batch 64"
    tail = [(1, (1.5, 1.9)), (8, (0.9, 1.1)), (16, (0.8, 0.9)), (64, (0.7, 0.8))]
    assert batching._reach(tail) == "faster up to batch 1, slower from batch 16"
    assert batching._reach(points[:3]) == "faster up to batch 1, never slower"
    assert batching._reach(points[1:2] + points[3:]) == "never faster, slower at 1 of 2 batch sizes"
    # slower in the middle only (e.g. where the engine changes): not "slower from"
    middle = [(1, (1.2, 1.5)), (16, (0.8, 0.9)), (32, (0.9, 1.1)), (64, (1.1, 1.2))]
    assert batching._reach(middle) == "faster at batch 1, 64, slower at batch 16"
    assert len(result.answer) <= 850  # an answer is a few sentences; the verdicts are the details'
    with pytest.raises(ValueError, match="batch_results: no <pair>.json in"):
        batching.load(tmp_path / "empty")


def test_the_batch_answer_leads_with_what_the_intervals_say():
    """The first sentence follows the data: still paying at the largest batch, only at small ones,
    or at none (greedy and the lockstep-timed copies left out)."""
    from bildlab.study import batching

    def file(spec_lo, spec_hi):
        methods = {"spec": {"method": "speculative"}, "spec lockstep": {"engine": "lockstep"}}
        rows = [
            {"method": m, "batch_size": b, "speedup_ci": ci}
            for b, ci in ((1, spec_lo), (64, spec_hi))
            for m in ("greedy", "spec", "spec lockstep")
        ]
        return {"methods": methods, "rows": rows}

    assert batching.lead([file((1.2, 1.4), (0.9, 1.1))]) == (
        "Speculation pays at small batches and no longer at batch 64."
    )
    assert batching.lead([file((1.2, 1.4), (1.05, 1.1))]) == (
        "Speculation still pays at batch 64: spec."
    )
    assert batching.lead([file((0.8, 0.9), (0.9, 1.1))]) == (
        "Speculation pays at no batch size measured here."
    )


def test_a_lockstep_copy_is_known_by_its_engine_not_its_name():
    """The ragged-over-lockstep comparison pairs a method whose policy names engine="lockstep" with
    the method of the same policy that names none, whatever they are called."""
    from bildlab.study import batching

    bild = {"method": "bild", "fallback": 0.5, "rollback": 3.0}
    methods = {
        "bild": bild,
        "both models everywhere": {**bild, "engine": "lockstep"},
        "spec lockstep": {"method": "speculative", "k": 4},  # a name, not an engine
        "bild rb 5 lockstep": {**bild, "rollback": 5.0, "engine": "lockstep"},  # no ragged twin
    }
    f = {"pair": "p", "methods": methods, "rows": []}
    assert batching.lockstep_copies(f) == {"both models everywhere": "bild"}
    f["rows"] = [
        {"method": m, "batch_size": 8, "seconds": s}
        for m, s in (("bild", [1.0, 2.0, 1.0]), ("both models everywhere", [2.0, 4.0, 2.0]))
    ]
    (ratio, (lo, hi)), *_ = batching.ragged_over_lockstep([f]).values()
    assert (ratio, lo, hi) == (2.0, 2.0, 2.0)
    assert list(batching.ragged_over_lockstep([f])) == [("p", "bild", 8)]


def test_where_auto_took_the_lockstep_the_engines_are_not_compared():
    """BiLD's large batches by `engine="auto"` are the lockstep: no ragged-over-lockstep ratio there
    (the same engine timed twice), and the tables mark the cells."""
    from bildlab.study import batching

    bild = {"method": "bild", "fallback": 0.5, "rollback": 3.0}
    f = {"pair": "p", "methods": {"bild": bild, "bild lockstep": {**bild, "engine": "lockstep"}}}
    f["rows"] = [
        {
            "method": m,
            "batch_size": b,
            "engine": "ragged" if (m, b) == ("bild", 8) else "lockstep",
            "seconds": [1.0, 2.0] if m == "bild" else [2.0, 4.0],
            "speedup": 1.0,
            "speedup_ci": [0.9, 1.1],
            "predicted_speedup": 1.0,
        }
        for m in ("bild", "bild lockstep")
        for b in (8, 32)
    ]
    assert list(batching.ragged_over_lockstep([f])) == [("p", "bild", 8)]
    speedups, over = batching.table_rows([f])
    assert speedups[0]["batch 8"] == "1.00x [0.90, 1.10] (1.00x)"
    assert speedups[0]["batch 32"] == "1.00x [0.90, 1.10] (1.00x) lockstep"
    assert speedups[1]["batch 32"] == "1.00x [0.90, 1.10] (1.00x)"  # named its engine: no mark
    assert over == [
        {
            "pair": "p",
            "ragged over lockstep": "bild",
            "batch 8": "2.00x [2.00, 2.00]",
            "batch 32": "both lockstep",
        }
    ]


def test_why_speculation_stops_paying_is_read_from_the_grids():
    """`verification`: the large model's pass over k + 1 tokens in one-token steps and the draft's
    c, at the smallest and the largest batch size, from each file's grids (one number where the
    files agree, a range where they differ); nothing where a file kept no grid."""
    from bildlab.study import batching

    def grid(rows, one, five, small):
        return {"large": {str(rows): {"1": one, "5": five}}, "small": {str(rows): {"1": small}}}

    def file(pass64, c64):
        rows = [
            {"batch_size": 1, "grid": grid(1, 0.010, 0.012, 0.001)},
            {"batch_size": 64, "grid": grid(64, 0.020, 0.020 * pass64, 0.020 * c64)},
        ]
        return {"methods": {"spec": {"method": "speculative", "k": 4}}, "rows": rows}

    said = batching.verification([file(3.0, 0.125), file(2.5, 0.1)])
    assert said == (
        "Why: the large model's pass over 5 tokens costs 1.20 one-token steps at 1 row and "
        "2.50–3.00 at 64 rows, the draft's step c = 0.100 and 0.100–0.125 of the large model's "
        "(the grids timed in the same runs)."
    )
    bare = file(3.0, 0.125)
    bare["rows"] = [{k: v for k, v in r.items() if k != "grid"} for r in bare["rows"]]
    assert batching.verification([file(3.0, 0.125), bare]) == ""
