"""Batched exact decoding: `generate_batch` equals `generate` token for token, by both of its
engines, and its statistics equal the engine's: all of them where rows draft and verify raggedly,
those the lockstep trace gives exactly otherwise (the others are named in stats['inexact'])."""

import pytest
import torch
from conftest import VOCAB, perturbed, tiny
from reference import reference_bild

import bildlab
from bildlab.engine import capabilities
from bildlab.engine import ragged as ragged_engine
from bildlab.engine.batch import BRANCH, TIMINGS, generate_batch
from bildlab.engine.early_exit import exit_draft

N_NEW = 8
# (seed, scale): varied outputs
MODELS = {
    "gpt2": (21, 2.0),
    "llama": (22, 2.0),
    "qwen2": (23, 2.0),
    "t5": (21, 0.7),
    "bart": (28, 2.0),
    "marian": (26, 1.0),
}
ARCHS = tuple(MODELS)
# inputs of different lengths, not in order (rows are sorted, outputs come back in input order)
LENGTHS = (7, 2, 9, 4)
# (draft, policy): random and identical drafts, perturbed drafts that agree on some tokens, the
# large model's early exit; both rollback rules; fallback / rollback of 0, 1 and inf; the N-limit
POLICIES = [
    ("random", dict(method="greedy")),
    ("self", dict(method="speculative", k=4)),
    ("perturbed", dict(method="speculative", k=2)),
    ("exit", dict(method="speculative", k=3)),
    ("perturbed", dict(method="bild", fallback=0.3, rollback=1.0)),
    (
        "perturbed",
        dict(
            method="bild",
            fallback=0.5,
            rollback=0.5,
            max_small_steps=3,
            rollback_rule="first-above",
        ),
    ),
    ("exit", dict(method="bild", fallback=0.2, rollback=2.0, rollback_rule="first-above")),
    ("random", dict(method="bild", fallback=0.0, rollback=float("inf"))),
    ("random", dict(method="bild", fallback=0.4, rollback=0.0)),
    ("perturbed", dict(method="bild", fallback=1.0, rollback=0.0)),
    ("self", dict(method="bild", fallback=0.1, rollback=3.0, max_small_steps=2)),
    ("random", dict(method="prompt-lookup", k=3, ngram=1)),
]
BATCH_SIZES = (1, 3, 8)  # one row a batch, batches of 3 and 1, all rows in one batch
# generate_batch's engines: rows that draft and verify raggedly where the models allow it ("auto"),
# and both models at every position
ENGINES = ("auto", "lockstep")
# bart's and marian's decoder positions count from the first column: the lockstep serves them
RAGGED = {"gpt2", "llama", "qwen2", "t5"}


def prompt(seed: int, n: int) -> torch.Tensor:
    return torch.randint(3, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def pairs():
    """Per architecture: a large model with sharp distributions (the small model is often confident)
    and its drafts."""
    zoo = {}
    for i, arch in enumerate(ARCHS):
        seed, scale = MODELS[arch]
        large = tiny(arch, seed=seed, scale=scale)
        zoo[arch] = (
            large,
            {
                "random": tiny(arch, seed=50 + i, layers=1, scale=2.0),
                "perturbed": perturbed(large, 0.3, seed=5),
                "self": large,
                "exit": exit_draft(large, 1),
            },
        )
    return zoo


def new_at(tokens: list[int], at: int) -> int | None:
    """The token at `at` if it does not occur before it: as EOS it ends this output right there."""
    return tokens[at] if tokens[at] not in tokens[:at] else None


def eos_ids(outs: list[list[int]]) -> list[int]:
    """EOS ids that end one output with its last token (at the budget) and, where one can, another
    one inside."""
    last = next(([t] for out in outs if (t := new_at(out, N_NEW - 1)) is not None), [])
    ends_last = next((out for out in outs if last and new_at(out, N_NEW - 1) == last[0]), [])
    inside = [t for out in outs for j in range(2, N_NEW - 2) if (t := new_at(out, j)) is not None]
    return last + [t for t in inside if t not in ends_last][:1]


def compare(large, xs, batch_size, seen, engine="auto", ragged=False, **kw) -> list[list[int]]:
    """generate_batch against generate: the same tokens, and the same value for every count it
    gives; BiLD's tokens also against the plain rewrite of the algorithm (tests/reference.py), which
    shares no code with either. `ragged`: the rows are expected to draft and verify raggedly."""
    report = {}
    outs = generate_batch(large, xs, batch_size=batch_size, engine=engine, report=report, **kw)
    drafted = kw.get("method") == "prompt-lookup" or (
        kw.get("method") in ("speculative", "bild") and kw.get("fallback", 0.0) < 1
    )
    assert report["engine"] == ("ragged" if ragged and drafted else "lockstep"), report
    assert len(outs) == len(xs)
    tokens = []
    for x, out in zip(xs, outs):
        ref = bildlab.generate(large, x, **kw)
        assert out.tokens == ref.tokens, (kw, batch_size)
        if kw["method"] == "bild":
            plain = reference_bild(
                large,
                kw["small"],
                x,
                kw["max_new_tokens"],
                kw.get("fallback", 0.6),
                kw.get("rollback", 5.0),
                kw.get("max_small_steps", 10),
                kw["eos_token_id"],
                rule=kw.get("rollback_rule", "first-differing"),
            )
            assert out.tokens == plain, (kw, batch_size)
            seen["plain"] = seen.get("plain", 0) + 1
        inexact = out.stats.pop("inexact")
        assert sorted([*out.stats, *inexact]) == sorted(ref.stats)
        assert out.stats == {key: ref.stats[key] for key in out.stats}, (kw, batch_size)
        branch = report["engine"] == "lockstep" and kw["method"] == "bild"
        assert inexact == (list(BRANCH) if branch and ref.stats["rollbacks"] else []) + list(
            TIMINGS
        )
        for key in ("fallbacks", "rollbacks", "small_tokens", "drafts"):
            seen[key] += ref.stats[key]
        # a draft's second token accepted, counted alike
        seen["accepted_at_2"] += sum(ref.stats["accepted_at"][1:2])
        seen["inexact"] += len(inexact) > len(TIMINGS)
        tokens.append(ref.tokens)
    return tokens


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_batch_equals_generate(pairs, arch):
    large, drafts = pairs[arch]
    xs = [prompt(seed, n) for seed, n in enumerate(LENGTHS)]
    seen = dict(
        fallbacks=0,
        rollbacks=0,
        small_tokens=0,
        drafts=0,
        accepted_at_2=0,
        inexact=0,
        eos_inside=0,
        eos_at_budget=0,
        plain=0,
    )
    for engine in ENGINES:
        for i, (draft, policy) in enumerate(POLICIES):
            kw = dict(small=drafts[draft], max_new_tokens=N_NEW, engine=engine, **policy)
            kw["ragged"] = engine == "auto" and arch in RAGGED
            outs = compare(large, xs, BATCH_SIZES[i % 3], seen, eos_token_id=[], **kw)
            # EOS inside an output and EOS as the last token the budget allows (a list of EOS ids)
            eos = eos_ids(outs)
            stopped = compare(large, xs, BATCH_SIZES[(i + 1) % 3], seen, eos_token_id=eos, **kw)
            seen["eos_at_budget"] += sum(len(s) == N_NEW and s[-1] in eos for s in stopped)
            seen["eos_inside"] += sum(len(s) < N_NEW for s in stopped)
    assert all(v > 0 for v in seen.values()), {
        k: v for k, v in seen.items() if not v
    }  # every rule ran


@pytest.mark.parametrize("arch", ["t5", "llama"])
def test_budgets_of_a_few_tokens(pairs, arch):
    large, drafts = pairs[arch]
    xs = [prompt(seed, n) for seed, n in enumerate(LENGTHS[:3])]
    seen = dict(fallbacks=0, rollbacks=0, small_tokens=0, drafts=0, accepted_at_2=0, inexact=0)
    for budget in (0, 1, 2, 3):
        for draft, policy in (
            ("self", dict(method="speculative", k=2)),
            ("perturbed", dict(method="bild", fallback=0.0, rollback=1.0)),
        ):
            compare(
                large,
                xs,
                2,
                seen,
                ragged=True,
                small=drafts[draft],
                max_new_tokens=budget,
                eos_token_id=[],
                **policy,
            )
    assert seen["small_tokens"] > 0


@pytest.mark.parametrize("arch", ["gpt2", "bart"])
def test_rows_are_sorted_by_length_and_finished_rows_leave_the_batch(pairs, arch):
    large, drafts = pairs[arch]
    xs = [prompt(seed, n) for seed, n in enumerate(LENGTHS)]
    full = [bildlab.generate(large, x, max_new_tokens=N_NEW, eos_token_id=[]).tokens for x in xs]
    # a row stops early
    eos = next(t for j in (3, 2, 1, 0) if (t := new_at(full[3], j)) is not None)
    stops = [next((j + 1 for j, t in enumerate(f) if t == eos), N_NEW) for f in full]
    rows, calls = [], []
    model = large.get_decoder() if large.config.is_encoder_decoder else large
    hook = model.register_forward_pre_hook(
        lambda m, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        outs = generate_batch(large, xs, batch_size=2, max_new_tokens=N_NEW, eos_token_id=eos)
    finally:
        hook.remove()
    assert [o.tokens for o in outs] == [f[:s] for f, s in zip(full, stops)]
    # two batches: the inputs of length 2 and 4, then 7 and 9 (decoder-only prompts left-padded to
    # the longest)
    first = sorted(stops[i] for i in (1, 3))
    second = sorted(stops[i] for i in (0, 2))
    for batch, lengths in ((first, (2, 4)), (second, (7, 9))):
        width = 1 if large.config.is_encoder_decoder else max(lengths)
        rows.extend([(2, width)] + [(2 if t < batch[0] else 1, 1) for t in range(1, batch[1])])
    assert calls == rows


def test_sampling_is_refused_and_bad_arguments_fail_fast(pairs):
    large, drafts = pairs["gpt2"]
    calls = []
    hook = large.register_forward_hook(lambda *a: calls.append(1))
    x = prompt(0, 3)
    cases = [
        (dict(method="sample"), ValueError, ["random stream", "generate"]),
        (
            dict(method="speculative", do_sample=True),
            ValueError,
            ["random stream", "do_sample=True"],
        ),
        (dict(batch_size=0), ValueError, ["batch_size", ">= 1"]),
        (dict(batch_size=2.0), ValueError, ["batch_size", ">= 1"]),
        (dict(method="beam"), ValueError, ["method", "'bild'"]),
        (dict(method="bild", fallback=2.0), ValueError, ["fallback", "[0, 1]"]),
        (dict(method="bild", small=None), ValueError, ["small"]),
        (dict(method="bild", rollback_rule="paper"), ValueError, ["rollback_rule"]),
        (dict(inputs=x), TypeError, ["inputs", "list"]),
        (dict(inputs=[x, [[1, 2]]]), TypeError, ["inputs[1]", "input_ids", "LongTensor"]),
        (
            dict(inputs=[x, torch.ones((2, 3), dtype=torch.long)]),
            ValueError,
            ["inputs[1]", "batch size 2"],
        ),
    ]
    try:
        for kw, error, words in cases:
            kw = {"inputs": [x], "small": drafts["random"], **kw}
            with pytest.raises(error) as info:
                generate_batch(large, kw.pop("inputs"), **kw)
            assert all(w in str(info.value) for w in words), (kw, str(info.value))
    finally:
        hook.remove()
    assert not calls  # nothing ran
    assert generate_batch(large, []) == []


@pytest.mark.parametrize("arch", ["llama", "t5"])
def test_a_rollback_in_one_row_leaves_the_other_rows_untouched(pairs, arch):
    """After a round where one row keeps none of its draft and the others part or all of it, every
    row's cache holds, bit for bit, the keys and values it held before at the positions it keeps
    (realigning only moves columns), and they are those of the row decoded alone, unpadded; and in a
    BiLD batch where some rows roll back and others do not, every row's output is its own."""
    large, drafts = pairs[arch]
    rows = [prompt(seed, n)[0].tolist() for seed, n in enumerate((5, 3, 7))]
    fed = 4  # draft columns fed after the rows
    draft = torch.randint(3, VOCAB, (3, fed), generator=torch.Generator().manual_seed(9))
    kept = [fed, 0, 2]

    def model(picked: list[int], with_draft: list[int]) -> ragged_engine.Rows:
        if large.config.is_encoder_decoder:
            source, smask = ragged_engine._left_padded([rows[i][::-1] for i in picked], "cpu")
            m = ragged_engine.Rows(large, source.flip(1), smask.flip(1))
        else:
            m = ragged_engine.Rows(large)
        ids, mask = ragged_engine._left_padded(
            [rows[i] + draft[i, :n].tolist() for i, n in zip(picked, with_draft)], "cpu"
        )
        m.feed(ids, mask, 1)
        return m

    batch = model([0, 1, 2], [0, 0, 0])
    batch.feed(draft, torch.ones_like(draft), 1)
    layers = ragged_engine._self_attention(batch.cache).layers
    before = [(layer.keys.clone(), layer.values.clone()) for layer in layers]
    mask = batch.mask.clone()
    width = max(map(len, rows))
    batch.realign(torch.tensor([width + n for n in kept]))
    for i, n in enumerate(kept):
        was = mask[i, : width + n].nonzero()[:, 0]
        now = batch.mask[i].nonzero()[:, 0]
        assert len(now) == len(rows[i]) + n
        alone = ragged_engine._self_attention(model([i], [n]).cache).layers
        for layer, (keys, values), one in zip(layers, before, alone):
            assert torch.equal(layer.keys[i][:, now], keys[i][:, was])
            assert torch.equal(layer.values[i][:, now], values[i][:, was])
            torch.testing.assert_close(layer.keys[i][:, now], one.keys[0])
            torch.testing.assert_close(layer.values[i][:, now], one.values[0])
    xs = [prompt(seed, n) for seed, n in enumerate(LENGTHS)]
    kw = dict(
        small=drafts["perturbed"],
        method="bild",
        fallback=0.6,
        rollback=3.0,
        max_new_tokens=N_NEW,
        eos_token_id=[],
    )
    report = {}
    outs = generate_batch(large, xs, batch_size=len(xs), report=report, **kw)
    assert report["engine"] == "ragged"
    refs = [bildlab.generate(large, x, **kw) for x in xs]
    assert 0 < sum(r.stats["rollbacks"] > 0 for r in refs) < len(xs)
    assert [o.tokens for o in outs] == [r.tokens for r in refs]
    assert [o.stats["rollbacks"] for o in outs] == [r.stats["rollbacks"] for r in refs]


@pytest.mark.parametrize("arch", ["bart", "marian"])
def test_the_engine_is_chosen_or_refused_by_name(pairs, arch):
    """engine="ragged" where a model's decoder positions count from the first column (BART, Marian)
    is refused with the reason, before any model call; an unknown engine is a ValueError naming the
    allowed ones; "auto" then runs the lockstep, exactly."""
    large, drafts = pairs[arch]
    xs = [prompt(seed, n) for seed, n in enumerate(LENGTHS)]
    kw = dict(small=drafts["perturbed"], method="speculative", k=2, max_new_tokens=N_NEW)
    capabilities.probe(large)  # probed once per model, as the first generate_batch would
    capabilities.probe(drafts["perturbed"])
    calls = []
    hook = large.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(
            bildlab.Unsupported,
            match=f"engine='ragged' cannot run: {type(large).__name__}: .*absolute",
        ):
            generate_batch(large, xs, engine="ragged", **kw)
        with pytest.raises(ValueError, match="engine must be one of 'auto', 'ragged', 'lockstep'"):
            generate_batch(large, xs, engine="fast", **kw)
    finally:
        hook.remove()
    assert calls == []
    report = {}
    outs = generate_batch(large, xs, report=report, **kw)
    assert report["engine"] == "lockstep"
    assert [o.tokens for o in outs] == [bildlab.generate(large, x, **kw).tokens for x in xs]


def test_auto_takes_the_lockstep_for_bild_over_many_rows(pairs):
    """engine="auto": BiLD over batches of BILD_LOCKSTEP_ROWS rows or more runs the lockstep (the
    faster there, docs/benchmark.md), below them the ragged engine; speculative decoding stays
    ragged; engine="ragged" is obeyed. The outputs are the engine's either way."""
    from bildlab.engine.batch import BILD_LOCKSTEP_ROWS as many

    large, drafts = pairs["llama"]
    xs = [prompt(seed, 2 + seed % 5) for seed in range(many)]
    bild = dict(small=drafts["perturbed"], method="bild", fallback=0.6, rollback=3.0)
    spec = dict(small=drafts["perturbed"], method="speculative", k=2)
    chosen = {}
    for name, kw, engine, rows in [
        ("bild", bild, "auto", many),
        ("bild fewer", bild, "auto", many - 1),
        ("bild ragged", bild, "ragged", many),
        ("speculative", spec, "auto", many),
    ]:
        report = {}
        outs = generate_batch(
            large, xs, batch_size=rows, max_new_tokens=3, report=report, engine=engine, **kw
        )
        chosen[name] = report["engine"]
        assert [o.tokens for o in outs] == [
            bildlab.generate(large, x, max_new_tokens=3, **kw).tokens for x in xs
        ]
    assert chosen == {
        "bild": "lockstep",
        "bild fewer": "ragged",
        "bild ragged": "ragged",
        "speculative": "ragged",
    }
