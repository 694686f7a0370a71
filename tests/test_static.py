"""Static caches (`generate(cache="static")`): token for token the dynamic-cache engine; a rollback
leaves no stale position visible; refusals; and (slow) compiled steps equal to eager ones."""

import pytest
import torch
import transformers as tf
from conftest import ARCHS, VOCAB, perturbed, tiny

import bildlab
from bildlab.engine import static
from bildlab.engine.early_exit import exit_draft

N_NEW = 20

METHODS = {
    "greedy": dict(method="greedy"),
    "speculative-k1": dict(method="speculative", k=1),
    "speculative-k4": dict(method="speculative", k=4),
    "bild-first-differing": dict(method="bild", fallback=0.3, rollback=1.0, max_small_steps=4),
    "bild-first-above": dict(
        method="bild", fallback=0.9, rollback=1.0, max_small_steps=4, rollback_rule="first-above"
    ),
    "bild-long-drafts": dict(method="bild", fallback=0.05, rollback=3.0, max_small_steps=10),
    "prompt-lookup": dict(method="prompt-lookup", k=3),
}


def prompt(seed: int, n: int = 6) -> torch.Tensor:
    return torch.randint(3, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def pairs():
    zoo = {}
    for i, arch in enumerate(ARCHS):
        # sharp: drafts are often confident, rollbacks happen
        large = tiny(arch, seed=60 + i, layers=3, scale=2.0)
        zoo[arch] = (
            large,
            {
                "perturbed": perturbed(large, 0.3, i),
                "exit": exit_draft(large, 1),
                "self": large,
                "random": tiny(arch, seed=70 + i, layers=1),
            },
        )
    return zoo


def cases(large, x):
    """(max_new_tokens, eos ids) triples: no EOS, an EOS inside the output, an EOS that is the
    budget's last token."""
    ref = bildlab.generate(large, x, max_new_tokens=N_NEW, eos_token_id=[]).tokens
    eos = next((t for t in ref[3:] if t not in ref[:3]), ref[-1])
    at = ref.index(eos) + 1
    return [(N_NEW, []), (N_NEW, [eos]), (at, [eos])]


def _same_counts(out, ref, name: str, seen: dict) -> None:
    """The static decode `out` counted what the dynamic one `ref` did; its counts added to `seen`."""
    for key in ("rollbacks", "fallbacks", "accepted", "drafted", "large_calls", "small_calls"):
        assert out.stats[key] == ref.stats[key], (name, key)
    for key in seen:
        seen[key] += out.stats[key]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("draft", ["perturbed", "exit", "random", "self"])
def test_static_cache_equals_dynamic_cache(pairs, arch, draft):
    large, drafts = pairs[arch]
    small = drafts[draft]
    seen = {"rollbacks": 0, "fallbacks": 0, "accepted": 0}
    for seed in range(2):
        x = prompt(seed)
        for budget, eos in cases(large, x):
            for name, kw in METHODS.items():
                kw = dict(kw, small=small, max_new_tokens=budget, eos_token_id=eos)
                ref = bildlab.generate(large, x, **kw)
                out = bildlab.generate(large, x, cache="static", **kw)
                assert out.tokens == ref.tokens, (name, budget, eos)
                _same_counts(out, ref, name, seen)
            assert len(out.tokens) == budget or out.tokens[-1] in eos
    if draft != "self":
        # the sweep rolled back, fell back and kept drafts
        assert all(v > 0 for v in seen.values()), seen


# T5 with more decoder layers than encoder layers, and fewer: the static cache follows the decoder
# (T5's top-level config counts the encoder's layers: a cache sized by it ran out of layers when the
# decoder was deeper)
DEPTHS = [(2, 4), (4, 2)]  # (encoder layers, decoder layers)
UNEVEN = {
    name: METHODS[name]
    for name in ("greedy", "speculative-k4", "bild-first-differing", "bild-long-drafts")
}


@pytest.fixture(scope="module")
def uneven():
    zoo = {}
    for i, (enc, dec) in enumerate(DEPTHS):
        large = tiny("t5", seed=80 + i, layers=dec, encoder_layers=enc, scale=2.0)
        zoo[enc, dec] = (
            large,
            {"perturbed": perturbed(large, 0.3, i), "exit": exit_draft(large, 1)},
        )
    return zoo


@pytest.mark.parametrize("depths", DEPTHS, ids=lambda d: f"{d[0]}enc-{d[1]}dec")
@pytest.mark.parametrize("draft", ["perturbed", "exit"])
def test_static_cache_follows_the_decoders_depth(uneven, depths, draft):
    large, drafts = uneven[depths]
    assert (large.config.num_layers, large.config.num_decoder_layers) == depths
    seen = {"rollbacks": 0, "accepted": 0}
    for seed in range(2):
        x = prompt(seed)
        for name, kw in UNEVEN.items():
            kw = dict(kw, small=drafts[draft], max_new_tokens=N_NEW, eos_token_id=[])
            ref = bildlab.generate(large, x, **kw)
            out = bildlab.generate(large, x, cache="static", **kw)
            assert out.tokens == ref.tokens, name
            _same_counts(out, ref, name, seen)
    # one cache layer per decoder layer
    assert {len(c.layers) for c in static._CACHES[large].values()} == {depths[1]}
    assert all(v > 0 for v in seen.values()), seen  # drafts were kept and rolled back


@pytest.mark.parametrize("depths", DEPTHS, ids=lambda d: f"{d[0]}enc-{d[1]}dec")
def test_transformers_baselines_run_on_uneven_depths(uneven, depths):
    """The timed baselines (transformers' greedy, assisted and prompt-lookup generate) run on a T5
    whose decoder is deeper or shallower than its encoder (transformers' own cache, sized by the
    encoder, fails on the deeper one) and give the engine's greedy tokens; an assistant whose
    decoder is the deeper, whose cache transformers builds itself, is refused by name."""
    from bildlab.harness.benchmark import hf_generate

    large, drafts = uneven[depths]
    for seed in range(2):
        x = prompt(seed)
        ref = bildlab.generate(large, x, max_new_tokens=N_NEW, eos_token_id=[]).tokens
        for kw in (dict(), dict(assistant=drafts["exit"], k=3), dict(lookup=True, k=3)):
            assert hf_generate(large, x, max_new_tokens=N_NEW, eos=[], **kw) == ref, kw
        deeper = dict(assistant=drafts["perturbed"], k=3)
        if depths[1] > depths[0]:
            with pytest.raises(bildlab.Unsupported, match=r"T5ForCond.*decoder \(4 layers\)"):
                hf_generate(large, x, max_new_tokens=N_NEW, eos=[], **deeper)
        else:
            assert hf_generate(large, x, max_new_tokens=N_NEW, eos=[], **deeper) == ref


@pytest.mark.parametrize("arch", ["llama", "t5"])
def test_static_cache_sampling_equals_dynamic_with_the_same_seed(pairs, arch):
    large, drafts = pairs[arch]
    x = prompt(4)
    for kw in (
        dict(method="sample"),
        dict(method="speculative", do_sample=True, k=3, temperature=0.8, top_k=20),
    ):
        for seed in (0, 1):
            ref = bildlab.generate(
                large, x, small=drafts["perturbed"], max_new_tokens=N_NEW, seed=seed, **kw
            )
            out = bildlab.generate(
                large,
                x,
                small=drafts["perturbed"],
                max_new_tokens=N_NEW,
                seed=seed,
                cache="static",
                **kw,
            )
            assert out.tokens == ref.tokens


@pytest.mark.parametrize("arch", ARCHS)
def test_rollback_on_a_static_cache_leaves_no_stale_position(pairs, arch):
    """Feed a prefix and four tokens, roll back three, feed two others: the logits are a fresh
    decode's of the final sequence (the rolled-back positions are still in memory, past the end, and
    must not be seen)."""
    large, _ = pairs[arch]
    x = prompt(7)
    start = [[0]] if large.config.is_encoder_decoder else x.tolist()
    P = len(start[0])
    first = torch.tensor([start[0] + [5, 6, 7, 8]])
    final = torch.tensor([start[0] + [5, 9, 10]])
    length = static.cache_length(P, 8)
    with torch.inference_mode():
        view = static.StaticView(large, x, length)
        view.logits(first, P, 1)
        view.logits(first, P + 4, 4)
        view.crop(P + 1)
        # the position moved back; nothing was copied
        assert view.self_cache.get_seq_length() == P + 1
        rolled = view.logits(final, P + 3, 2)  # feeds 9, 10 over the stale 6, 7
        stale = view.self_cache.layers[0].keys[0, :, P + 3]  # token 8's key, past the end
        assert stale.abs().sum() > 0
        fresh_view = static.StaticView(large, x, length)
        fresh_view.logits(final, P + 1, 1)
        fresh = torch.cat([fresh_view.logits(final, P + 2, 1), fresh_view.logits(final, P + 3, 1)])
        dynamic = bildlab.engine.views.View(large, x)
        dynamic.logits(final, P + 1, 1)
        dyn = dynamic.logits(final, P + 3, 2)
    torch.testing.assert_close(rolled, fresh, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rolled, dyn, rtol=1e-5, atol=1e-5)


def test_static_caches_are_reused_input_after_input():
    large = tiny("llama", seed=99)
    for n in (4, 9, 13):  # prompt lengths that round to one cache length
        bildlab.generate(large, prompt(n, n), max_new_tokens=N_NEW, cache="static")
    assert len(static._CACHES[large]) == 1


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (
            dict(cache="paged"),
            ValueError,
            ["cache must be one of", "'dynamic', 'static'", "'paged'"],
        ),
        (dict(compile=True), ValueError, ["compile=True needs cache='static'"]),
        (dict(cache="static", compile="yes"), TypeError, ["compile must be True or False"]),
    ],
)
def test_bad_cache_arguments_fail_fast(pairs, kwargs, error, words):
    large, _ = pairs["t5"]
    with pytest.raises(error) as e:
        bildlab.generate(large, prompt(0), max_new_tokens=4, **kwargs)
    for w in words:
        assert w in str(e.value)


def qwen2(window: int) -> tf.PreTrainedModel:
    torch.manual_seed(0)
    cfg = tf.Qwen2Config(
        num_hidden_layers=2,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        use_sliding_window=True,
        sliding_window=window,
        max_window_layers=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return tf.Qwen2ForCausalLM(cfg).eval()


def test_sliding_window_layers_refused_or_exact():
    short = qwen2(window=8)
    with pytest.raises(
        ValueError, match=r"Qwen2ForCausalLM \(the model\) has sliding-window layers \(window 8\)"
    ):
        bildlab.generate(short, prompt(0), max_new_tokens=N_NEW, cache="static")
    wide = qwen2(window=256)  # wider than the cache: a sliding layer that never slides is exact
    x = prompt(1)
    for kw in (
        dict(method="greedy"),
        dict(method="speculative", small=perturbed(wide, 0.3, 0), k=3),
    ):
        ref = bildlab.generate(wide, x, max_new_tokens=N_NEW, eos_token_id=[], **kw)
        assert (
            bildlab.generate(
                wide, x, max_new_tokens=N_NEW, eos_token_id=[], cache="static", **kw
            ).tokens
            == ref.tokens
        )
    with pytest.raises(ValueError, match="compile=True: Qwen2ForCausalLM"):
        bildlab.generate(wide, x, max_new_tokens=N_NEW, cache="static", compile=True)


class _OnCuda:  # what `static.compiled` reads of a model on a GPU (no GPU needed)
    device = torch.device("cuda")

    def forward(self, **kw):
        pass

    def get_encoder(self):
        return self


def test_every_compiled_step_gets_the_guard_filter_and_cuda_graphs_on_a_gpu(monkeypatch):
    seen = []

    # as torch.compile: refuses a mode beside options, pops the guard filter
    def fake_compile(fn, **kw):
        assert kw.get("mode") is None or kw.get("options") is None, "a mode or options, not both"
        seen.append((kw["options"].pop("guard_filter_fn", None), dict(kw["options"])))
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    cpu, gpu = tiny("t5", seed=98), _OnCuda()
    for model in (cpu, gpu):
        static.compiled(model)
        static.compiled(model, "encoder")
    # the filter is never used up
    assert [f for f, _ in seen] == [static.OPTIONS["guard_filter_fn"]] * 4
    assert [o for _, o in seen] == [{}, {}, static.CUDA_GRAPHS, static.CUDA_GRAPHS]


# ----------------------------------------------------------------------------------------------------------------------
# Compiled steps (slow: compiling a tiny model's buckets takes a minute or more on one CPU thread)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "t5"])
@pytest.mark.parametrize("draft", ["perturbed", "exit"])
def test_compiled_steps_equal_eager(pairs, arch, draft):
    large, drafts = pairs[arch]
    small = drafts[draft]
    seconds = static.warm_up(large, prompt(0), small=small, max_new_tokens=N_NEW)
    assert seconds > 0
    for seed, length in [(0, 5), (1, 6), (2, 7), (3, 60)]:
        # inputs of several lengths reuse the compiled steps; the last needs a longer cache than
        # warm_up made (its calls run every guard and compile, and only its later calls skip the
        # guards)
        x = prompt(seed, length)
        for name, kw in list(METHODS.items())[:5]:
            kw = dict(kw, small=small, max_new_tokens=N_NEW, eos_token_id=[])
            ref = bildlab.generate(large, x, cache="static", **kw)
            out = bildlab.generate(large, x, cache="static", compile=True, **kw)
            assert out.tokens == ref.tokens, name
        kw = dict(
            method="speculative", do_sample=True, k=3, small=small, max_new_tokens=N_NEW, seed=seed
        )
        assert (
            bildlab.generate(large, x, cache="static", compile=True, **kw).tokens
            == bildlab.generate(large, x, **kw).tokens
        )


@pytest.mark.slow
@pytest.mark.parametrize("depths", DEPTHS, ids=lambda d: f"{d[0]}enc-{d[1]}dec")
@pytest.mark.parametrize("draft", ["perturbed", "exit"])
def test_compiled_steps_follow_the_decoders_depth(uneven, depths, draft):
    large, drafts = uneven[depths]
    small = drafts[draft]
    static.warm_up(large, prompt(0), small=small, max_new_tokens=N_NEW)
    for seed, length in [(0, 5), (1, 9)]:
        x = prompt(seed, length)
        for name, kw in UNEVEN.items():
            kw = dict(kw, small=small, max_new_tokens=N_NEW, eos_token_id=[])
            ref = bildlab.generate(large, x, **kw)  # the eager dynamic-cache engine
            assert (
                bildlab.generate(large, x, cache="static", compile=True, **kw).tokens == ref.tokens
            ), name
