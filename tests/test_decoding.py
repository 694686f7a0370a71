"""The decoding engine: exact equality with transformers' greedy generate, BiLD against a plain
reference implementation, the sampling law of speculative sampling, statistics, caches, and bad
input."""

import math
import warnings

import numpy as np
import pytest
import torch
import transformers as tf
from conftest import ARCHS, EOS, VOCAB, hf_greedy, perturbed, tiny
from reference import reference_bild
from scipy import stats as sps

import bildlab
from bildlab.engine.decoding import _probs
from bildlab.engine.early_exit import exit_draft

N_NEW = 20


def prompt(seed: int, n: int = 6) -> torch.Tensor:
    return torch.randint(3, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


def early_eos(ref: list[int]) -> int:
    """A token of the reference output, chosen so that generation stops early (not at the first
    step)."""
    for t in ref[3:]:
        if t not in ref[:3]:
            return t
    return ref[-1]


LOSSLESS = {
    "greedy": dict(method="greedy"),
    "speculative-k1": dict(method="speculative", k=1),
    "speculative-k4": dict(method="speculative", k=4),
    "bild-rollback0": dict(method="bild", rollback=0.0, fallback=0.0),
    "bild-rollback0-fb": dict(method="bild", rollback=0.0, fallback=0.3, max_small_steps=3),
    "bild-fallback1": dict(method="bild", fallback=1.0, rollback=100.0),
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("draft", ["random", "perturbed", "self", "exit"])
def test_lossless_modes_equal_transformers_greedy(models, arch, draft):
    large, drafts = models[arch]
    small = drafts[draft]
    accepted = 0
    for seed in range(2):
        x = prompt(seed)
        full = hf_greedy(large, x, N_NEW, [])
        eos = early_eos(full)
        stopped = hf_greedy(large, x, N_NEW, eos)
        assert len(stopped) < len(full) and stopped[-1] == eos  # the EOS case really stops early
        for eos_id, ref in (([], full), (eos, stopped)):
            for name, kw in LOSSLESS.items():
                out = bildlab.generate(
                    large, x, small=small, max_new_tokens=N_NEW, eos_token_id=eos_id, **kw
                )
                assert out.tokens == ref, (name, eos_id)
                st = out.stats
                assert st["small_tokens"] + st["large_tokens"] == len(ref)
                if name.startswith("speculative"):
                    accepted += st["accepted"]
                    # the target as its own draft: all drafts accepted,
                    if draft == "self" and eos_id == []:
                        assert st["accepted"] == st["drafted"] and st["rollbacks"] == 0
                        # k + 1 tokens a call
                        assert st["large_calls"] == math.ceil(len(ref) / (kw["k"] + 1))
                if name == "bild-fallback1":
                    assert st["small_calls"] == 0 and st["large_calls"] == len(ref)
    if draft in ("perturbed", "self"):
        assert accepted > 0


def test_generate_default_eos_comes_from_generation_config(models):
    large, drafts = models["llama"]
    x = prompt(3)
    full = hf_greedy(large, x, N_NEW, [])
    large.generation_config.eos_token_id = early_eos(full)
    try:
        ref = hf_greedy(large, x, N_NEW, None)
        for method in ("greedy", "speculative", "bild"):
            out = bildlab.generate(
                large,
                x,
                small=drafts["perturbed"],
                method=method,
                max_new_tokens=N_NEW,
                rollback=0.0,
            )
            assert out.tokens == ref
    finally:
        large.generation_config.eos_token_id = EOS


def test_max_new_tokens_zero_and_one(models):
    large, drafts = models["t5"]
    x = prompt(0)
    for method in ("greedy", "speculative", "bild"):
        assert (
            bildlab.generate(large, x, small=drafts["self"], method=method, max_new_tokens=0).tokens
            == []
        )
        one = bildlab.generate(
            large, x, small=drafts["self"], method=method, max_new_tokens=1, rollback=0.0
        )
        assert one.tokens == hf_greedy(large, x, 1, EOS)


# ---------------------------------------------------------------------------------------------------------------------
# BiLD against a plain reference implementation of the paper's Algorithm 1 (no caches, full
# recomputation)


@pytest.mark.parametrize("arch", ARCHS)
def test_bild_equals_reference_algorithm(arch):
    # sharper distributions: the small model is often confident
    large = tiny(arch, seed=21, scale=2.0)
    small = perturbed(large, 0.3, seed=5)
    seen = {"fallbacks": 0, "rollbacks": 0, "small_tokens": 0}
    for seed in range(3):
        x = prompt(seed)
        for fallback, rollback, n_max in [
            (0.2, 1.0, 10),
            (0.5, 0.5, 3),
            (0.4, 3.0, 10),
            (0.0, 2.0, 2),
            (0.9, 0.1, 10),
        ]:
            ref = reference_bild(large, small, x, N_NEW, fallback, rollback, n_max, EOS)
            out = bildlab.generate(
                large,
                x,
                small=small,
                method="bild",
                max_new_tokens=N_NEW,
                fallback=fallback,
                rollback=rollback,
                max_small_steps=n_max,
                eos_token_id=EOS,
            )
            assert out.tokens == ref, (seed, fallback, rollback, n_max)
            for key in seen:
                seen[key] += out.stats[key]
    # the sweep exercised fallback, rollback and kept small tokens
    assert all(v > 0 for v in seen.values()), seen


def test_bild_statistics_add_up(models):
    large = tiny("llama", seed=30, scale=2.0)
    small = perturbed(large, 0.3, seed=1)
    for seed in range(3):
        x = prompt(seed)
        for fallback, rollback in [(0.3, 1.0), (0.6, 5.0), (0.1, 0.5)]:
            out = bildlab.generate(
                large,
                x,
                small=small,
                method="bild",
                max_new_tokens=N_NEW,
                fallback=fallback,
                rollback=rollback,
                eos_token_id=[],
            )
            st = out.stats
            assert len(out.tokens) == N_NEW
            assert st["small_tokens"] + st["large_tokens"] == len(out.tokens)
            assert st["small_tokens"] == st["accepted"] <= st["drafted"]
            assert st["rollbacks"] <= st["large_calls"] and st["fallbacks"] <= st["large_calls"]
            # each large call adds at most one token of its own; small calls = drafted + discarded
            # (fallback) tokens
            assert st["large_tokens"] <= st["large_calls"]
            assert st["small_calls"] == st["drafted"] + st["fallbacks"]
            assert 0 < st["large_seconds"] + st["small_seconds"] <= st["seconds"]


# ---------------------------------------------------------------------------------------------------------------------
# Speculative sampling: the output law equals the target's


SMALL_VOCAB = 5


def target_law(model, x, length, eos, temperature, top_k, top_p):
    """Exact law of the first `length` tokens (sequences may end early at EOS), using transformers'
    own warpers."""
    warpers = [tf.TemperatureLogitsWarper(temperature)]
    if top_k is not None:
        warpers.append(tf.TopKLogitsWarper(top_k))
    if top_p is not None:
        warpers.append(tf.TopPLogitsWarper(top_p))
    law = {}

    def walk(seq, prob):
        if len(seq) == length or (seq and seq[-1] == eos):
            law[tuple(seq)] = prob
            return
        ids = torch.cat([x, torch.tensor([seq], dtype=torch.long)], 1)
        scores = model(input_ids=ids).logits[:, -1].float()
        for w in warpers:
            scores = w(ids, scores)
        p = scores.softmax(-1)[0]
        for t in range(SMALL_VOCAB):
            if p[t] > 0:
                walk(seq + [t], prob * p[t].item())

    with torch.no_grad():
        walk([], 1.0)
    return law


def chi_square_p(samples, law):
    keys = sorted(law)
    expected = np.array([law[k] for k in keys])
    expected = expected / expected.sum() * len(samples)
    counts = {k: 0 for k in keys}
    for s in samples:
        counts[tuple(s)] += 1  # a sample outside the support raises KeyError: the test fails
    observed = np.array([counts[k] for k in keys])
    # pool cells with small expectations so the chi-square approximation holds
    order = np.argsort(expected)
    exp_sorted, obs_sorted = expected[order], observed[order]
    pooled_e, pooled_o, acc_e, acc_o = [], [], 0.0, 0
    for e, o in zip(exp_sorted, obs_sorted):
        acc_e += e
        acc_o += o
        if acc_e >= 10:
            pooled_e.append(acc_e)
            pooled_o.append(acc_o)
            acc_e, acc_o = 0.0, 0
    if acc_e > 0:
        pooled_e[-1] += acc_e
        pooled_o[-1] += acc_o
    return sps.chisquare(pooled_o, pooled_e).pvalue


@pytest.fixture(scope="module")
def sampling_pair():
    target = tiny("gpt2", seed=3, vocab=SMALL_VOCAB)
    # sharper, and unrelated to the target
    draft = tiny("gpt2", seed=99, vocab=SMALL_VOCAB, layers=1, scale=2.0)
    return target, draft


@pytest.mark.parametrize(
    "processing, n_samples",
    [(dict(temperature=1.0), 800), (dict(temperature=0.7, top_k=4, top_p=0.9), 1500)],
)
def test_speculative_sampling_reproduces_target_law(sampling_pair, processing, n_samples):
    target, draft = sampling_pair
    x = torch.tensor([[1, 3, 4]])
    length, eos = 3, 2
    law = target_law(
        target,
        x,
        length,
        eos,
        processing.get("temperature", 1.0),
        processing.get("top_k"),
        processing.get("top_p"),
    )
    draft_law = target_law(
        draft,
        x,
        length,
        eos,
        processing.get("temperature", 1.0),
        processing.get("top_k"),
        processing.get("top_p"),
    )
    tv = 0.5 * sum(abs(law.get(s, 0) - draft_law.get(s, 0)) for s in set(law) | set(draft_law))
    assert tv > 0.3  # the draft really is very different from the target
    samples, paths = [], set()
    for i in range(n_samples):
        out = bildlab.generate(
            target,
            x,
            small=draft,
            method="speculative",
            k=2,
            do_sample=True,
            seed=i,
            max_new_tokens=length,
            eos_token_id=eos,
            **processing,
        )
        samples.append(out.tokens)
        st = out.stats
        paths.add(
            "residual"
            if st["rollbacks"]
            else "bonus"
            if len(out.tokens) > st["accepted"] > 0
            else "other"
        )
    # both resampling from norm(max(0, p - q)) and the bonus token were used
    assert {"residual", "bonus"} <= paths
    assert chi_square_p(samples, law) > 1e-3
    # the test has power: the draft's own samples are told apart from the target law
    drafts = [
        bildlab.generate(
            draft, x, method="sample", seed=i, max_new_tokens=length, eos_token_id=eos, **processing
        ).tokens
        for i in range(400)
    ]
    assert chi_square_p(drafts, {s: law.get(s, 1e-9) for s in set(law) | set(draft_law)}) < 1e-6


def test_plain_sampling_reproduces_target_law(sampling_pair):
    target, _ = sampling_pair
    x = torch.tensor([[1, 3, 4]])
    law = target_law(target, x, 3, 2, 0.8, None, None)
    samples = [
        bildlab.generate(
            target, x, method="sample", temperature=0.8, seed=i, max_new_tokens=3, eos_token_id=2
        ).tokens
        for i in range(800)
    ]
    assert chi_square_p(samples, law) > 1e-3


def test_sampling_is_reproducible_with_a_seed(sampling_pair):
    target, draft = sampling_pair
    x = torch.tensor([[1, 3, 4]])
    runs = [
        bildlab.generate(
            target,
            x,
            small=draft,
            method="speculative",
            do_sample=True,
            seed=7,
            max_new_tokens=20,
            eos_token_id=[],
        ).tokens
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and len(runs[0]) == 20
    other = [
        bildlab.generate(
            target,
            x,
            small=draft,
            method="speculative",
            do_sample=True,
            seed=s,
            max_new_tokens=20,
            eos_token_id=[],
        ).tokens
        for s in range(8, 12)
    ]
    assert any(o != runs[0] for o in other)


def test_probs_processing_matches_transformers_warpers():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 3
    for temperature, top_k, top_p in [
        (1.0, None, None),
        (0.5, 5, None),
        (1.3, None, 0.8),
        (0.7, 10, 0.5),
    ]:
        ref = logits / temperature
        if top_k:
            ref = tf.TopKLogitsWarper(top_k)(None, ref)
        if top_p:
            ref = tf.TopPLogitsWarper(top_p)(None, ref)
        torch.testing.assert_close(_probs(logits, temperature, top_k, top_p), ref.softmax(-1))


# ---------------------------------------------------------------------------------------------------------------------
# Caches: encoders run once, the prefix is never recomputed, rejected positions are cropped


@pytest.mark.parametrize("arch", ["t5", "gpt2"])
def test_each_call_feeds_only_new_positions(models, arch):
    large, drafts = models[arch]
    small = drafts["perturbed"]
    fed = {"large": [], "small": []}
    encoder_calls = {"large": 0, "small": 0}
    hooks = []
    for name, m in (("large", large), ("small", small)):
        if m.config.is_encoder_decoder:
            hooks.append(
                m.get_decoder().register_forward_pre_hook(
                    lambda mod, args, kwargs, name=name: fed[name].append(
                        kwargs["input_ids"].shape[1]
                    ),
                    with_kwargs=True,
                )
            )
            hooks.append(
                m.get_encoder().register_forward_hook(
                    lambda *a, name=name: encoder_calls.__setitem__(name, encoder_calls[name] + 1)
                )
            )
        else:
            hooks.append(
                m.get_input_embeddings().register_forward_hook(
                    lambda mod, args, out, name=name: fed[name].append(args[0].shape[1])
                )
            )
    try:
        x = prompt(1)
        out = bildlab.generate(
            large, x, small=small, method="speculative", k=4, max_new_tokens=N_NEW, eos_token_id=[]
        )
    finally:
        for h in hooks:
            h.remove()
    if arch == "t5":
        assert encoder_calls == {"large": 1, "small": 1}  # the encoders run once per input
    st = out.stats
    first = 1 if large.config.is_encoder_decoder else x.shape[1]
    assert len(fed["large"]) == st["large_calls"] and len(fed["small"]) == st["small_calls"]
    # the prompt (or decoder start) and the first k drafted tokens
    assert fed["large"][0] == first + 4
    assert all(n <= 1 + 4 for n in fed["large"][1:])  # at most the pending token + k drafted ones
    # at most the correction and the last accepted token
    assert all(n <= 2 for n in fed["small"][1:])
    # in total the large model saw each kept position once (the last one only if it was drafted),
    # plus the rejected drafts: nothing was recomputed
    assert sum(fed["large"]) - (st["drafted"] - st["accepted"]) in (
        first + len(out.tokens) - 1,
        first + len(out.tokens),
    )


# ---------------------------------------------------------------------------------------------------------------------
# Precision and device


def rounding_tie(model, x, ref: list[int], out: list[int], steps: int = 2) -> bool:
    """Whether `out` leaves `ref` (transformers' greedy output) at a tie of `model` in its own
    precision: at the first differing position the two tokens' logits, from one full forward pass
    over the common prefix, are within `steps` rounding steps (units in the last place of the larger
    logit). Two ways of computing the same logits (a cache and a multi-token pass against one token
    at a time) may then rank them differently, and both outputs are greedy."""
    i = next(i for i, (a, b) in enumerate(zip(out + [None], ref + [None])) if a != b)
    if i >= min(len(out), len(ref)):
        return False  # one output is a prefix of the other: a length bug, never a tie
    prefix = torch.tensor([ref[:i]], dtype=torch.long)
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            start = torch.tensor([[model.config.decoder_start_token_id]])
            logits = (
                model(input_ids=x, decoder_input_ids=torch.cat([start, prefix], 1))
                .logits[0, -1]
                .float()
            )
        else:
            logits = model(input_ids=torch.cat([x, prefix], 1)).logits[0, -1].float()
    a, b = logits[ref[i]].item(), logits[out[i]].item()
    ulp = 2.0 ** math.floor(math.log2(max(abs(a), abs(b), 1e-30))) * torch.finfo(model.dtype).eps
    return abs(a - b) <= steps * ulp


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lossless_methods_in_low_precision_equal_greedy_of_the_same_model(dtype):
    """In bf16 and fp16 every lossless mode equals transformers' greedy generate of the same
    low-precision model, example by example; an output may leave it only at a rounding tie of that
    model (`rounding_tie`), and those outputs are counted (at most 1 in 8; bf16 here: 6 of 144),
    named in a warning and not compared further."""
    seen = {"identical": 0, "ties": 0}
    for i, arch in enumerate(ARCHS):
        large32 = tiny(arch, seed=4)
        large = tiny(arch, seed=4).to(dtype)
        drafts = {
            "random": tiny(arch, seed=5, layers=1).to(dtype),
            "perturbed": perturbed(large32, 0.05, seed=i).to(dtype),
            "exit": exit_draft(large, 1),
        }
        for seed in range(3):
            x = prompt(seed)
            ref = hf_greedy(large, x, 16, [])
            for draft, small in drafts.items():
                for name in ("greedy", "speculative-k1", "speculative-k4", "bild-rollback0-fb"):
                    out = bildlab.generate(
                        large, x, small=small, max_new_tokens=16, eos_token_id=[], **LOSSLESS[name]
                    ).tokens
                    if out == ref:
                        seen["identical"] += 1
                    else:
                        assert rounding_tie(large, x, ref, out), (arch, draft, name, seed, out, ref)
                        seen["ties"] += 1
    total = len(ARCHS) * 3 * len(drafts) * 4
    if seen["ties"]:
        warnings.warn(
            f"{dtype}: {seen['ties']} of {total} lossless outputs left transformers' greedy output at a "
            f"rounding tie of the model (not compared past it); {seen['identical']} identical",
            stacklevel=2,
        )
    assert seen["identical"] + seen["ties"] == total and seen["ties"] <= total // 8, seen


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_sampling_runs_and_is_seeded(dtype):
    large = tiny("llama", seed=4).to(dtype)
    small = tiny("llama", seed=5, layers=1).to(dtype)
    x = prompt(0)
    for method in ("sample", "speculative"):
        runs = [
            bildlab.generate(
                large,
                x,
                small=small,
                method=method,
                do_sample=True,
                max_new_tokens=12,
                eos_token_id=[],
                seed=0,
            ).tokens
            for _ in range(2)
        ]
        assert runs[0] == runs[1] and len(runs[0]) == 12 and all(0 <= t < VOCAB for t in runs[0])


# ---------------------------------------------------------------------------------------------------------------------
# Bad input: fails before any model call, naming the parameter


class Boom(torch.nn.Module):
    pass


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(method="beam"), ValueError, ["method", "'greedy'", "'bild'"]),
        (dict(method="bild", fallback=1.5), ValueError, ["fallback", "[0, 1]"]),
        (dict(method="bild", fallback=-0.1), ValueError, ["fallback", "[0, 1]"]),
        (dict(method="bild", rollback=-1.0), ValueError, ["rollback", ">= 0"]),
        (dict(method="bild", rollback=float("nan")), ValueError, ["rollback"]),
        (dict(method="speculative", k=0), ValueError, ["k", ">= 1"]),
        (dict(method="speculative", k=2.5), ValueError, ["k", ">= 1"]),
        (dict(max_new_tokens=-1), ValueError, ["max_new_tokens", ">= 0"]),
        (dict(method="bild", max_small_steps=0), ValueError, ["max_small_steps", ">= 1"]),
        (dict(method="speculative", small=None), ValueError, ["small"]),
        (dict(method="bild", small=None), ValueError, ["small"]),
        (dict(method="speculative", small="gpt2"), TypeError, ["small", "PreTrainedModel"]),
        (dict(method="speculative", small=Boom()), TypeError, ["small", "PreTrainedModel"]),
        (dict(method="sample", temperature=0.0), ValueError, ["temperature", "> 0"]),
        (
            dict(method="speculative", do_sample=True, temperature=-1.0),
            ValueError,
            ["temperature", "> 0"],
        ),
        (dict(method="sample", top_k=0), ValueError, ["top_k"]),
        (dict(method="sample", top_p=1.5), ValueError, ["top_p", "(0, 1]"]),
        (dict(method="greedy", do_sample=True), ValueError, ["do_sample", "method='sample'"]),
        (dict(method="bild", do_sample=True), ValueError, ["do_sample", "bild"]),
        (dict(do_sample="yes"), TypeError, ["do_sample"]),
        (dict(seed=1.5), TypeError, ["seed"]),
    ],
)
def test_bad_arguments_fail_fast(models, kwargs, error, words):
    large, drafts = models["gpt2"]
    calls = []
    hook = large.register_forward_hook(lambda *a: calls.append(1))
    kwargs = {"small": drafts["random"], **kwargs}
    try:
        with pytest.raises(error) as info:
            bildlab.generate(large, prompt(0), **kwargs)
    finally:
        hook.remove()
    for w in words:
        assert w in str(info.value)
    assert not calls  # nothing ran


def test_bad_model_pairs(models):
    gpt2, _ = models["gpt2"]
    t5, _ = models["t5"]
    x = prompt(0)
    with pytest.raises(ValueError, match="small is encoder-decoder but model is decoder-only"):
        bildlab.generate(gpt2, x, small=t5, method="speculative")
    with pytest.raises(ValueError, match="small is decoder-only but model is encoder-decoder"):
        bildlab.generate(t5, x, small=gpt2, method="bild")
    other_vocab = tiny("gpt2", seed=0, vocab=VOCAB + 8)
    with pytest.raises(ValueError, match="vocabulary sizes differ: 56 vs 48"):
        bildlab.generate(gpt2, x, small=other_vocab, method="speculative")
    with pytest.raises(TypeError, match="model must be a transformers PreTrainedModel"):
        bildlab.generate(Boom(), x)


@pytest.mark.parametrize(
    "input_ids, error, words",
    [
        ([[1, 2, 3]], TypeError, ["input_ids", "LongTensor"]),
        (torch.tensor([[1.0, 2.0]]), TypeError, ["input_ids", "integer"]),
        (torch.tensor([[True, False]]), TypeError, ["input_ids", "integer"]),
        (torch.zeros((1, 0), dtype=torch.long), ValueError, ["input_ids", "[1, n]", "[1, 0]"]),
        (torch.zeros((0,), dtype=torch.long), ValueError, ["input_ids", "[1, n]"]),
        (torch.ones((1, 2, 3), dtype=torch.long), ValueError, ["input_ids", "[1, 2, 3]"]),
        (
            torch.ones((2, 3), dtype=torch.long),
            ValueError,
            ["input_ids", "batch size 2", "batch size 1"],
        ),
    ],
)
def test_bad_input_ids(models, input_ids, error, words):
    large, drafts = models["gpt2"]
    with pytest.raises(error) as info:
        bildlab.generate(large, input_ids, small=drafts["random"], method="speculative")
    for w in words:
        assert w in str(info.value)


# ---------------------------------------------------------------------------------------------------------------------
# The side-by-side benchmark


@pytest.mark.parametrize("arch", ["t5", "llama"])
def test_benchmark_times_every_input_under_the_protocol(models, arch):
    from bildlab.harness.benchmark import LOSSLESS as BENCH_LOSSLESS
    from bildlab.harness.benchmark import compare, transformers_version

    if arch == "t5" and transformers_version() < (5, 22):
        pytest.skip(
            "HF assisted generation of encoder-decoder models crashes in transformers < 5.22"
        )
    large, drafts = models[arch]
    inputs = [prompt(seed) for seed in range(3)]
    result = compare(large, drafts["perturbed"], inputs, warmup=1, max_new_tokens=8, eos=[])
    for name in result.seconds:
        assert (
            len(result.outputs[name]) == 3
            and result.tokens[name] == 24
            and result.seconds[name] > 0
        )
    assert [hf_greedy(large, x, 8, []) for x in inputs] == result.outputs["hf_greedy"]
    assert all(result.identical(name) for name in BENCH_LOSSLESS)
    assert {row["method"] for row in result.table()} == set(result.seconds)
    with pytest.raises(ValueError, match="warmup must be an integer >= 0"):
        compare(large, drafts["perturbed"], inputs, warmup=-1)
    with pytest.raises(ValueError, match="methods must be among"):
        compare(large, drafts["perturbed"], inputs, methods=("hf_greedy", "beam"))


def test_benchmark_refuses_hf_assisted_where_transformers_breaks_it(models, monkeypatch):
    import bildlab.harness.benchmark as bench

    monkeypatch.setattr(bench, "transformers_version", lambda: (5, 21))
    large, drafts = models["t5"]
    with pytest.raises(
        RuntimeError, match=r"transformers < 5\.22 .*leave 'hf_assisted' out of methods"
    ):
        bench.compare(large, drafts["random"], [prompt(0), prompt(1)], warmup=1)
    large, drafts = models["llama"]  # decoder-only models are not affected
    result = bench.compare(
        large, drafts["random"], [prompt(0), prompt(1)], warmup=1, max_new_tokens=4
    )
    assert result.identical("hf_assisted")


# ---------------------------------------------------------------------------------------------------------------------
# the rollback rule: bildlab's "first-differing" (default) and the paper's public code's
# "first-above"


def test_rollback_rules_differ_on_a_constructed_verification():
    from bildlab.engine.decoding import _accept_rollback

    # 3 drafted tokens; the large model's logits at the 4 positions. Position 0: a flat distribution
    # whose argmax (1) is the drafted token but has -log p = 1.19 > 1.0; position 1: the drafted
    # token 3 is unlikely (-log p = 10.0) and differs from the argmax 2; position 2: drafted 4 =
    # argmax, confident.
    logits = torch.full((4, 5), -10.0)
    logits[0] = torch.tensor([0.0, 0.5, 0.0, 0.0, 0.0])
    logits[1, 2] = 0.0
    logits[2, 4] = 0.0
    logits[3, 0] = 0.0
    draft = torch.tensor([1, 3, 4])
    nll = -logits[:3].log_softmax(-1).gather(-1, draft[:, None])[:, 0]
    assert nll[0] > 1.0 and nll[1] > 9.0 and nll[2] < 1e-3
    # bildlab: the first token above the threshold that differs from the argmax (position 1) is
    # replaced by 2
    assert _accept_rollback(1.0, "first-differing")(draft, logits, None) == ([1], 2)
    assert _accept_rollback(1.0)(draft, logits, None) == ([1], 2)  # the default
    # the public code: the first token above the threshold (position 0) equals the argmax, so
    # nothing is rolled back and the unlikely token 3 stays; the large model's token after the draft
    # follows
    assert _accept_rollback(1.0, "first-above")(draft, logits, None) == ([1, 3, 4], 0)
    # the same verdict when the first token above the threshold differs from the argmax
    assert _accept_rollback(2.0, "first-differing")(draft, logits, None) == ([1], 2)
    assert _accept_rollback(2.0, "first-above")(draft, logits, None) == ([1], 2)
    # rollback=0 is lossless (greedy) only under bildlab's rule
    assert _accept_rollback(0.0, "first-differing")(draft, logits, None) == ([1], 2)
    assert _accept_rollback(0.0, "first-above")(draft, logits, None) == ([1, 3, 4], 0)


def test_bild_rollback_rules_equal_the_reference():
    differ = 0
    pairs = {arch: (tiny(arch, seed=21, scale=2.0),) for arch in ("gpt2", "t5")}
    pairs = {arch: (large, perturbed(large, 0.3, seed=5)) for arch, (large,) in pairs.items()}
    for (large, small), seed in [(pair, s) for pair in pairs.values() for s in range(3)]:
        x = prompt(seed)
        for fallback, rollback, n_max in [
            (0.2, 1.0, 10),
            (0.5, 0.5, 3),
            (0.0, 2.0, 4),
            (0.9, 0.1, 10),
        ]:
            outs = {}
            for rule in ("first-differing", "first-above"):
                ref = reference_bild(
                    large, small, x, N_NEW, fallback, rollback, n_max, EOS, rule=rule
                )
                out = bildlab.generate(
                    large,
                    x,
                    small=small,
                    method="bild",
                    max_new_tokens=N_NEW,
                    fallback=fallback,
                    rollback=rollback,
                    max_small_steps=n_max,
                    eos_token_id=EOS,
                    rollback_rule=rule,
                )
                assert out.tokens == ref, (rule, seed, fallback, rollback, n_max)
                outs[rule] = out.tokens
            differ += outs["first-differing"] != outs["first-above"]
    # the sweep reaches verifications where the two rules disagree (on the gpt2 pair)
    assert differ > 0


def test_rollback_rule_is_checked():
    from bildlab.engine.decoding import ROLLBACK_RULES, Policy

    assert ROLLBACK_RULES == ("first-differing", "first-above")
    with pytest.raises(
        ValueError,
        match="rollback_rule must be one of 'first-differing', 'first-above'; got 'paper'",
    ):
        Policy("bild", rollback_rule="paper")
    large = tiny("t5", seed=1)
    with pytest.raises(ValueError, match="rollback_rule must be one of"):
        bildlab.generate(large, prompt(0), small=large, method="bild", rollback_rule="official")


def test_assisted_generation_stores_no_transformers_notice_about_its_own_code():
    """transformers' assisted generation logs a deprecation notice about the arguments that its own
    candidate generator passes to the assistant (once per process); bildlab drops that one notice
    and no other."""
    import logging

    from transformers.utils import logging as hf_logging

    from bildlab.harness.benchmark import _NOTICE, hf_generate

    class Seen(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    from bildlab.world import models, tasks

    # the shipped zoo's pair (tiny random models do not reach the notice)
    pair = models.load_pair("toy-mt-llama")
    large, small, eos = pair.large, pair.small, pair.large.generation_config.eos_token_id
    x = pair.encode(tasks.load_task("toy-mt", "test", limit=1)[0]["source"])
    logger, seen = logging.getLogger("transformers.generation.utils"), Seen()
    logger.addHandler(seen)
    verbosity = hf_logging.get_verbosity()
    # conftest quiets transformers; here its warnings are the subject
    hf_logging.set_verbosity_warning()
    try:
        for quiet in (False, True):
            hf_logging.warning_once.cache_clear()  # "once per process": let it speak again
            if not quiet:
                logger.removeFilter(_NOTICE)
            seen.messages.clear()
            out = (
                hf_generate(large, x, max_new_tokens=8, eos=eos, assistant=small, k=3)
                if quiet
                else large.generate(
                    x,
                    do_sample=False,
                    max_new_tokens=8,
                    pad_token_id=0,
                    eos_token_id=eos,
                    assistant_model=small,
                    num_assistant_tokens=3,
                )[0, x.shape[1] :].tolist()
            )
            notices = [m for m in seen.messages if "generation_config" in m]
            assert (len(notices), out) == ((0 if quiet else 1), hf_greedy(large, x, 8, eos)), quiet
    finally:
        logger.removeHandler(seen)
        hf_logging.set_verbosity(verbosity)
    keep = logging.LogRecord(
        "transformers.generation.utils", logging.WARNING, "", 0, "another notice", None, None
    )
    assert _NOTICE.filter(keep)
