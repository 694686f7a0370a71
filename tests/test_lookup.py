"""Prompt-lookup decoding (a draft copied from the input and output, no model): outputs equal
transformers' greedy generate, `generate_batch` gives the engine's tokens and counts, the draft rule
is transformers', and on a model that copies its source the tokens per large call are what the
construction implies."""

import math

import pytest
import torch
import transformers as tf
from conftest import ARCHS, EOS, VOCAB, hf_greedy, tiny

import bildlab
from bildlab.engine.batch import TIMINGS, generate_batch
from bildlab.engine.lookup import NgramDraft, counts
from bildlab.harness.benchmark import hf_generate

N_NEW = 20
POLICIES = [dict(ngram=1, k=1), dict(ngram=2, k=4), dict(ngram=3, k=8)]
MODELS = {"gpt2": (21, 2.0), "llama": (22, 2.0), "t5": (21, 0.7), "bart": (33, 1.0)}


def prompt(seed: int, n: int = 8, low: int = 3, high: int = VOCAB) -> torch.Tensor:
    return torch.randint(low, high, (1, n), generator=torch.Generator().manual_seed(seed))


def echo(seed: int, n: int = 12) -> torch.Tensor:
    """An input that repeats itself (a random half twice): n-gram matches from the first step on."""
    half = prompt(seed, n // 2)
    return torch.cat([half, half], dim=1)


def new_at(tokens: list[int], at: int) -> int | None:
    """The token at `at` if it does not occur before it: as EOS it ends this output right there."""
    return tokens[at] if tokens[at] not in tokens[:at] else None


@pytest.fixture(scope="module")
def larges():
    """Per architecture a tiny random model whose greedy outputs vary (seed, scale): matches right
    and wrong."""
    return {
        arch: tiny(arch, seed=seed, layers=2, scale=scale) for arch, (seed, scale) in MODELS.items()
    }


@pytest.mark.parametrize("arch", ARCHS)
def test_prompt_lookup_equals_transformers_greedy(larges, arch):
    large = larges[arch]
    seen = dict(drafted=0, accepted=0, rollbacks=0, eos_inside=0, eos_at_budget=0)
    for seed, x in enumerate([prompt(0), prompt(1, 3), echo(2), echo(3, 16)]):
        full = hf_greedy(large, x, N_NEW, [])
        inside = next((t for j in range(2, N_NEW - 2) if (t := new_at(full, j)) is not None), None)
        # EOS as the last token the budget allows: the budget cut to the last new token of the
        # output
        at = next((j for j in range(N_NEW - 1, 2, -1) if new_at(full, j) is not None), None)
        cases = [(N_NEW, []), (N_NEW, inside), (at and at + 1, at and full[at])]
        # no EOS; inside; the last of the budget
        for budget, eos in [(b, e) for b, e in cases if e is not None]:
            ref = hf_greedy(large, x, budget, eos)
            seen["eos_inside"] += len(ref) < budget
            seen["eos_at_budget"] += len(ref) == budget and ref[-1] == eos
            for policy in POLICIES:
                out = bildlab.generate(
                    large,
                    x,
                    method="prompt-lookup",
                    max_new_tokens=budget,
                    eos_token_id=eos,
                    **policy,
                )
                assert out.tokens == ref, (seed, eos, policy)
                st = out.stats
                assert (
                    st["small_tokens"] == st["accepted"]
                    and st["small_calls"] == 0
                    and st["fallbacks"] == 0
                )
                assert st["small_tokens"] + st["large_tokens"] == len(ref)
                assert st["accepted"] <= st["drafted"] <= policy["k"] * st["large_calls"]
                # every call adds one token of the large model's, except a call that ends at the
                # budget
                assert st["large_tokens"] in (st["large_calls"], st["large_calls"] - 1)
                for key in ("drafted", "accepted", "rollbacks"):
                    seen[key] += st[key]
    # matches accepted and rejected, EOS inside and at the budget
    assert all(v > 0 for v in seen.values()), seen


def test_counts_are_the_engines(larges):
    """The replay that generate_batch reports equals the engine's own counts, call by call."""
    for arch in ARCHS:
        for x in [prompt(4), echo(5)]:
            for policy in POLICIES:
                out = bildlab.generate(
                    larges[arch],
                    x,
                    method="prompt-lookup",
                    max_new_tokens=N_NEW,
                    eos_token_id=EOS,
                    **policy,
                )
                c = counts(
                    x[0].tolist(), out.tokens, max_new_tokens=N_NEW, eos=frozenset([EOS]), **policy
                )
                assert c == {key: out.stats[key] for key in c}


def test_the_draft_rule():
    """n-grams from the longest down; the first occurrence; up to k tokens, never past the context,
    cut before EOS."""
    d = NgramDraft([5, 6, 7, 8, 5, 6, 9, 5, 6], ngram=2, k=3, eos=frozenset([2]))
    assert d.draft(10) == [7, 8, 5]  # "5 6" first occurs at 0
    assert d.draft(2) == [7, 8]  # the budget
    d.extend([4])
    assert d.draft(10) == []  # "6 4" and "4": no earlier occurrence
    d.extend([6])
    assert d.draft(10) == [7, 8, 5]  # "4 6" is new, "6" first occurs at 1
    d = NgramDraft([3, 4, 2, 3, 4], ngram=2, k=4, eos=frozenset([2]))
    # the continuation of "3 4" starts with EOS: cut to nothing, no shorter n-gram tried
    assert d.draft(10) == []
    d = NgramDraft([3, 4, 5, 9, 3, 4], ngram=1, k=4, eos=frozenset())
    assert d.draft(10) == [5, 9, 3, 4]  # "4" first occurs at 1; up to k tokens
    d = NgramDraft([7, 7], ngram=3, k=4, eos=frozenset())
    assert d.draft(10) == [7]  # never past the context's end
    assert NgramDraft([7], ngram=3, k=4, eos=frozenset()).draft(10) == []


# ----------------------------------------------------------------------------------------------------------------------
# A model that copies: its decoder's attention and feed-forward outputs are zero, so its next token
# is a function of the current token alone, here t -> t + 1 (the decoder start token 0 -> 11). Its
# greedy output from a source or prompt ...10 is 11, 12, 13, ...: where the input holds that run,
# every draft is right.


def copier(arch: str) -> tf.PreTrainedModel:
    d = 64
    if arch == "llama":
        cfg = tf.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=d,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            eos_token_id=EOS,
            bos_token_id=1,
            pad_token_id=0,
            tie_word_embeddings=False,
        )
        model = tf.LlamaForCausalLM(cfg).eval()
        zero, embed = ("o_proj", "down_proj"), model.model.embed_tokens.weight
    else:
        cfg = tf.T5Config(
            vocab_size=VOCAB,
            d_model=d,
            d_ff=64,
            num_layers=2,
            num_heads=2,
            d_kv=16,
            decoder_start_token_id=0,
            eos_token_id=EOS,
            pad_token_id=0,
            tie_word_embeddings=False,
        )
        model = tf.T5ForConditionalGeneration(cfg).eval()
        zero, embed = ("SelfAttention.o", "EncDecAttention.o", "wo"), model.shared.weight
    nxt = {t: t + 1 for t in range(3, VOCAB - 1)} | {0: 11}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(tuple(z + ".weight" for z in zero)):
                p.zero_()
        # one-hot embeddings, through the residual stream unchanged
        embed.copy_(torch.eye(VOCAB, d))
        head = torch.full((VOCAB, d), 0.0)
        for t, u in nxt.items():
            head[u, t] = 1.0
        # its own matrix (T5 ties it to the embeddings)
        model.lm_head.weight = torch.nn.Parameter(head)
    return model


@pytest.mark.parametrize("arch", ["llama", "t5"])
@pytest.mark.parametrize("k", [1, 4, 6])
def test_a_copied_source_gives_k_plus_one_tokens_a_call(arch, k):
    model = copier(arch)
    run = list(range(11, 11 + 30))
    if arch == "llama":  # the prompt: the run to copy, then its first token's predecessor
        x = torch.tensor([[10] + run + [10]])
    else:  # the source is the run itself
        x = torch.tensor([run])
    out = bildlab.generate(
        model, x, method="prompt-lookup", k=k, ngram=2, max_new_tokens=N_NEW, eos_token_id=EOS
    )
    assert out.tokens == run[:N_NEW] == hf_greedy(model, x, N_NEW, EOS)  # the output copies the run
    # decoder-only: the prompt's last token 10 first occurs at 0, so every call verifies k copied
    # tokens and adds one of its own: k + 1 tokens a call. Encoder-decoder: at the first step the
    # context (the source) ends in a token that occurs only there, so the first call drafts nothing
    # and decodes 11; every later call k + 1 tokens. The last call drafts what the budget leaves and
    # adds no token when that fills it.
    first = 0 if arch == "llama" else 1
    calls = first + math.ceil((N_NEW - first) / (k + 1))
    # what the last call finds left of the budget: 1 ... k + 1
    last = N_NEW - first - (calls - first - 1) * (k + 1)
    large_tokens = first + (calls - first - 1) + (last == k + 1)
    assert out.stats["large_calls"] == calls
    assert out.stats["accepted"] == out.stats["drafted"] == N_NEW - large_tokens
    assert out.stats["rollbacks"] == 0
    assert out.stats["large_tokens"] == large_tokens
    # 20 tokens in 4 calls (decoder-only) or 5 (encoder-decoder): 5 and 4 tokens per large call
    if k == 4:
        assert N_NEW / calls == {"llama": 5.0, "t5": 4.0}[arch]


@pytest.mark.parametrize("arch, calls, drafted", [("llama", 3, 10), ("t5", 4, 9)])
def test_a_copied_source_with_eos_inside(arch, calls, drafted):
    """EOS 23 ends the copy at its 13th token. k=4, decoder-only: 11-14 + 15, 16-19 + 20, then the
    draft 21 22 (cut before 23) + 23. Encoder-decoder: 11 alone, 12-15 + 16, 17-20 + 21, then 22
    (cut before 23) + 23."""
    model = copier(arch)
    run = list(range(11, 41))
    x = torch.tensor([[10] + run + [10]] if arch == "llama" else [run])
    out = bildlab.generate(
        model, x, method="prompt-lookup", k=4, ngram=2, max_new_tokens=N_NEW, eos_token_id=23
    )
    assert out.tokens == list(range(11, 24)) == hf_greedy(model, x, N_NEW, 23)
    st = out.stats
    assert (st["large_calls"], st["drafted"], st["accepted"], st["rollbacks"]) == (
        calls,
        drafted,
        drafted,
        0,
    )


@pytest.mark.parametrize("arch, source", [("llama", [3, 4, 5]), ("t5", [40, 41, 42])])
def test_no_match_decodes_one_token_a_call(arch, source):
    """Input and output share no token, and the output repeats none: no draft, one large call per
    token."""
    model = copier(arch)
    x = torch.tensor([source])
    out = bildlab.generate(
        model, x, method="prompt-lookup", k=4, max_new_tokens=N_NEW, eos_token_id=EOS
    )
    assert out.tokens == hf_greedy(model, x, N_NEW, EOS) and len(out.tokens) == N_NEW
    assert (out.stats["large_calls"], out.stats["drafted"], out.stats["accepted"]) == (N_NEW, 0, 0)


# ----------------------------------------------------------------------------------------------------------------------
# Batches and the peer


@pytest.mark.parametrize("arch", ARCHS)
def test_generate_batch_equals_generate(larges, arch):
    large = larges[arch]
    xs = [prompt(0, 7), echo(1, 4), prompt(2, 9), echo(3, 10), prompt(4, 2)]
    seen = dict(accepted=0, rollbacks=0, eos_inside=0)
    for i, policy in enumerate(POLICIES):
        full = [
            bildlab.generate(large, x, max_new_tokens=N_NEW, eos_token_id=[]).tokens for x in xs
        ]
        inside = [
            t for out in full for j in range(3, N_NEW - 2) if (t := new_at(out, j)) is not None
        ][:1]
        for eos in ([], inside):
            outs = generate_batch(
                large,
                xs,
                method="prompt-lookup",
                batch_size=(1, 2, 64)[i],
                max_new_tokens=N_NEW,
                eos_token_id=eos,
                **policy,
            )
            for x, out in zip(xs, outs):
                ref = bildlab.generate(
                    large,
                    x,
                    method="prompt-lookup",
                    max_new_tokens=N_NEW,
                    eos_token_id=eos,
                    **policy,
                )
                assert out.tokens == ref.tokens
                assert out.stats.pop("inexact") == list(TIMINGS)
                assert out.stats == {key: ref.stats[key] for key in ref.stats if key not in TIMINGS}
                seen["accepted"] += ref.stats["accepted"]
                seen["rollbacks"] += ref.stats["rollbacks"]
                seen["eos_inside"] += len(ref.tokens) < N_NEW
    assert all(v > 0 for v in seen.values()), seen


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_transformers_prompt_lookup_gives_the_same_outputs(larges, arch):
    """The peer: transformers' generate(prompt_lookup_num_tokens=k, max_matching_ngram_size=ngram),
    greedy."""
    large = larges[arch]
    for x in [prompt(0), echo(1), echo(2, 16)]:
        for eos in ([], EOS):
            for policy in POLICIES:
                ours = bildlab.generate(
                    large,
                    x,
                    method="prompt-lookup",
                    max_new_tokens=N_NEW,
                    eos_token_id=eos,
                    **policy,
                )
                theirs = hf_generate(large, x, max_new_tokens=N_NEW, eos=eos, lookup=True, **policy)
                assert ours.tokens == theirs == hf_greedy(large, x, N_NEW, eos)
    model, run = copier("llama"), list(range(11, 41))
    x = torch.tensor([[10] + run + [10]])
    assert hf_generate(model, x, max_new_tokens=N_NEW, eos=EOS, lookup=True, k=4) == run[:N_NEW]


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(ngram=0), ValueError, ["ngram", ">= 1"]),
        (dict(ngram=1.5), ValueError, ["ngram", "integer"]),
        (dict(k=0), ValueError, ["k", ">= 1"]),
        (dict(do_sample=True), ValueError, ["do_sample"]),
    ],
)
def test_bad_arguments_fail_fast(larges, kwargs, error, words):
    large = larges["gpt2"]
    calls = []
    hook = large.register_forward_hook(lambda *a: calls.append(1))
    try:
        for run in (
            lambda: bildlab.generate(large, prompt(0), method="prompt-lookup", **kwargs),
            lambda: generate_batch(large, [prompt(0)], method="prompt-lookup", **kwargs),
        ):
            with pytest.raises(error) as info:
                run()
            assert all(w in str(info.value) for w in words), str(info.value)
    finally:
        hook.remove()
    assert not calls


# ----------------------------------------------------------------------------------------------------------------------
# The harness: a policy of the sweep, in batches, and transformers' prompt lookup as a runner

FAST = dict(limit=6, max_new_tokens=8, warmup=1, progress=False)


def test_prompt_lookup_is_a_policy_of_the_sweep(fake_zoo, tmp_path):
    from bildlab.harness import evaluate as ev

    grid = [
        {"method": "prompt-lookup", "ngram": 1, "k": 3},
        {"method": "prompt-lookup", "ngram": 3, "k": 2},
    ]
    whole = ev.sweep("toy-mt", grid, registry=tmp_path / "whole", **FAST)
    runs = ev.sweep(
        "toy-mt", grid, registry=tmp_path / "sample", timing_limit=3, batch_size=4, **FAST
    )
    for run, full, entry in zip(runs, whole, grid):
        assert full["key"]["method"] == "prompt-lookup" and full["key"]["draft"] is None
        assert full["key"]["policy"] == {"k": entry["k"], "ngram": entry["ngram"]}
        assert full["summary"]["identical_count"] == 6  # lossless, counted
        assert run["timed_identical"] == 3  # the batch-1 outputs equal the batched ones
        assert [e["output"] for e in run["examples"]] == [e["output"] for e in full["examples"]]
        stats = [e["stats"] for e in full["examples"]]
        assert full["summary"]["mean_accepted"] == round(
            sum(e["tokens"] for e in full["examples"]) / sum(s["large_calls"] for s in stats), 4
        )
    # reused from the registry
    assert ev.sweep("toy-mt", grid, registry=tmp_path / "whole", **FAST) == whole


def test_sweep_entries_of_prompt_lookup_are_checked():
    from bildlab.harness import evaluate as ev

    with pytest.raises(ValueError, match="hf_prompt_lookup.*decoder-only.*toy-mt"):
        ev.check_entry("toy-mt", {"method": "hf_prompt_lookup"})
    with pytest.raises(ValueError, match="ngram"):
        ev.check_entry("toy-mt-llama", {"method": "prompt-lookup", "ngram": 0})
    with pytest.raises(ValueError, match="needs timing_limit=None"):
        ev.check_timing_limit(3, 4, [{**ev.DEFAULTS, "method": "hf_prompt_lookup"}])
    # keys of the other methods do not change: ngram enters prompt lookup's only
    assert ev.policy_of("speculative", 4, 0.6, 5.0, 10, ngram=3) == {"k": 4}
    assert ev.policy_of("hf_prompt_lookup", 4, 0.6, 5.0, 10, ngram=3) == {"k": 4, "ngram": 3}


def test_the_sweeps_transformers_prompt_lookup_runner(larges):
    from types import SimpleNamespace

    from bildlab.harness import shard

    large = larges["llama"]
    pair = SimpleNamespace(large=large, small=None)
    for method in ("hf_prompt_lookup", "prompt-lookup"):
        run = shard.policy_runner(pair, {"method": method, "k": 4, "ngram": 2}, 0, N_NEW)
        for x in (prompt(0), echo(1)):
            tokens, stats = run(x, 0)
            assert tokens == hf_greedy(large, x, N_NEW, large.generation_config.eos_token_id)
            assert (stats == {}) == (method == "hf_prompt_lookup")


# ----------------------------------------------------------------------------------------------------------------------
# The study: prompt-lookup rows in the speculative notebook and RQ5's reference row (made-up
# records, no model runs)


def _fake(pair, e, speed, n):
    from test_study import _fake_record

    e = {"method": "bild", **e}
    if e["method"] not in ("prompt-lookup", "hf_prompt_lookup"):
        return _fake_record(
            pair,
            e,
            speed,
            -0.8 if e["method"] == "bild" else 0.0,
            6 if e["method"] == "bild" else n,
            n=n,
        )
    r = _fake_record(pair, {"method": e["method"]}, speed, 0.0, n, n=n)
    r["key"].update(draft=None, policy={"k": e["k"], "ngram": e["ngram"]})
    return r


def _lookup_speed(e):  # on validation n=3, k=6 is the fastest prompt-lookup policy
    return 1.1 + 0.05 * (e["k"] == 6) + 0.02 * (e["ngram"] == 3)


def test_rq5_gains_a_prompt_lookup_row_chosen_on_validation(monkeypatch, tmp_path):
    from bildlab import study
    from bildlab.study import runner

    seen = []

    def sweep(pair, grid, **run):
        seen.append(
            (run.get("split"), run.get("timing_pass", 1), [g.get("method", "bild") for g in grid])
        )
        if run.get("split") == "validation":  # BiLD lossless on validation, prompt lookup slower
            return [
                _fake(pair, g, _lookup_speed(g), 20)
                if g.get("method") == "prompt-lookup"
                else _fake(pair, {"method": "greedy", **g}, 1.4, 20)
                for g in grid
            ]
        return [
            _fake(pair, g, 1.2 if g.get("method") == "prompt-lookup" else 1.9, 20) for g in grid
        ]

    monkeypatch.setattr(study.ev, "sweep", sweep)
    for passes, timed in ((None, 2), (1, 1)):
        seen.clear()
        result = study.rq5(
            ("toy-mt",),
            fallbacks=[0.9],
            rollbacks=[3.0],
            val_limit=20,
            limit=20,
            split="test",
            lookup_ngrams=[1, 3],
            lookup_ks=[2, 6],
            lookup_passes=passes,
            figures=str(tmp_path),
        )
        # the grid in the BiLD rows' validation sweep; the chosen policy in their test sweeps (the
        # passes asked for)
        assert seen[0] == ("validation", 1, ["bild"] * 2 + ["prompt-lookup"] * 4)
        assert [s[2].count("prompt-lookup") for s in seen[1:]] == [1] * timed + [0] * (2 - timed)
        row = result.headline["toy-mt"][study.rq5_main_table.LOOKUP_ROW]
        assert (
            row["policy"] == "n=3, k=6" and len(row["speedups"]) == timed and row["identical"] == 20
        )
        assert (
            "prompt lookup (no small model; n=3, k=6, chosen on validation): 1.20x [1.15, 1.25]"
            in result.account
            and "against it (pass 1): unaligned lossless is detectably faster" in result.account
        )
        table = runner.results_table(tmp_path / "rq5_main_table.json")
        line = next(x for x in table.splitlines() if "prompt lookup" in x)
        assert line.count("|") == table.splitlines()[0].count("|") and "n=3, k=6" in line
    plain = study.rq5(
        ("toy-mt",), fallbacks=[0.9], rollbacks=[3.0], val_limit=20, limit=20, figures=str(tmp_path)
    )
    # no grid: no row, no sweep
    assert study.rq5_main_table.LOOKUP_ROW not in plain.headline["toy-mt"]


def test_the_speculative_notebook_gains_prompt_lookup_rows_on_every_pair(monkeypatch, tmp_path):
    from bildlab import study

    seen = []

    def sweep(pair, grid, **run):
        seen.append((pair, run.get("split"), [g["method"] for g in grid]))
        recs = []
        for g in grid:
            r = _fake(pair, g, _lookup_speed(g) if "lookup" in g["method"] else 1.4, 20)
            if g["method"] in ("speculative", "hf_assisted"):
                r["key"]["policy"] = {"k": g["k"]}
            recs.append(r)
        return recs

    monkeypatch.setattr(study.ev, "sweep", sweep)
    result = study.speculative(
        "toy-mt-llama",
        ks=[2],
        reference_pairs=["toy-mt", "toy-sum"],
        figures=tmp_path,
        progress=False,
        lookup_ngrams=[1, 3],
        lookup_ks=[2, 6],
    )
    tests = [s for s in seen if s[1] != "validation" and "prompt-lookup" in s[2]]
    assert [(p, m) for p, _, m in tests] == [
        ("toy-mt-llama", ["prompt-lookup", "hf_prompt_lookup"]),
        ("toy-mt", ["prompt-lookup"]),
        ("toy-sum", ["prompt-lookup"]),
    ]
    assert set(result.headline["prompt_lookup"]) == {"toy-mt-llama", "toy-mt", "toy-sum"}
    modes = list(result.table["mode"])
    assert modes.count("prompt lookup, no small model (n=3, k=6, chosen on validation)") == 3
    assert modes.count("transformers prompt lookup (n=3, k=6)") == 1
    assert "Prompt lookup (no small model) on toy-sum (N = 20;" in result.account
    assert "BiLD against it: BiLD is detectably faster" in result.account
