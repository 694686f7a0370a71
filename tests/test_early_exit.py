"""The early exit as a view of the large model (bildlab/engine/early_exit.py): its tensors are the
large model's, the encoder runs once, draft and verifier keep one KV cache, and decoding with it
stays lossless."""

import pytest
import torch
from conftest import ARCHS, hf_greedy, probed, tiny

import bildlab
from bildlab.engine.early_exit import decoder_layers, exit_draft, shares_bottom_layers

EXIT = 2


def exit_friendly(arch: str, seed: int) -> torch.nn.Module:
    """A 4-layer random model whose layers above the exit are damped, so that its early exit agrees
    on some tokens."""
    large = tiny(arch, seed=seed, layers=4)
    with torch.no_grad():
        for layer in decoder_layers(large)[EXIT:]:
            for p in layer.parameters():
                if p.dim() > 1:
                    p.mul_(0.5)
    return large


@pytest.fixture(scope="module")
def exits():
    """(large, early-exit view, standalone copy of the same early exit) per architecture."""
    out = {}
    for i, arch in enumerate(ARCHS):
        large = exit_friendly(arch, seed=20 + i)
        draft = exit_draft(large, EXIT)
        copy = type(large)(draft.config).eval()
        missing, _ = copy.load_state_dict(large.state_dict(), strict=False)
        assert not missing
        out[arch] = probed(large, draft, copy)
    return out


def prompts(n):
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, 48, (1, 3 + i % 4), generator=g) for i in range(n)]


@pytest.mark.parametrize("arch", ARCHS)
def test_exit_draft_is_made_of_the_large_models_tensors(exits, arch):
    large, draft, copy = exits[arch]
    own = {id(t): t.data_ptr() for t in [*large.parameters(), *large.buffers()]}
    mine = [*draft.parameters(), *draft.buffers()]
    # the same tensor objects, the same storage
    assert mine and all(own.get(id(t)) == t.data_ptr() for t in mine)
    assert all(a is b for a, b in zip(decoder_layers(draft), decoder_layers(large)))
    assert len(decoder_layers(draft)) == EXIT < len(decoder_layers(large))
    assert sum(p.numel() for p in draft.parameters()) < sum(p.numel() for p in large.parameters())
    if large.config.is_encoder_decoder:
        assert draft.get_encoder() is large.get_encoder()
    assert shares_bottom_layers(draft, large)
    assert not shares_bottom_layers(large, draft) and not shares_bottom_layers(copy, large)
    # the large model as its own draft keeps its own cache
    assert not shares_bottom_layers(large, large)
    x = torch.tensor([[5, 9, 13, 2]])
    kw = (
        {"decoder_input_ids": torch.tensor([[0, 7, 8, 21]])}
        if large.config.is_encoder_decoder
        else {}
    )
    with torch.no_grad():  # computes what the standalone copy computes, bit for bit
        torch.testing.assert_close(
            draft(input_ids=x, **kw).logits, copy(input_ids=x, **kw).logits, rtol=0, atol=0
        )


@pytest.mark.parametrize("arch", ARCHS)
def test_exit_draft_is_lossless_and_drafts_what_a_copy_drafts(exits, arch):
    large, draft, copy = exits[arch]
    totals = {"accepted": 0, "rollbacks": 0}
    for x in prompts(4):
        ref = hf_greedy(large, x, 16, None)
        for method, kw in (("speculative", {"k": 3}), ("bild", {"rollback": 0.0, "fallback": 0.3})):
            out = bildlab.generate(large, x, small=draft, method=method, max_new_tokens=16, **kw)
            old = bildlab.generate(large, x, small=copy, method=method, max_new_tokens=16, **kw)
            assert out.tokens == ref == old.tokens, (method, kw)
            counts = {k: v for k, v in out.stats.items() if "seconds" not in k}
            assert counts == {k: v for k, v in old.stats.items() if "seconds" not in k}, (
                method,
                kw,
            )
            totals["accepted"] += counts["accepted"]
            totals["rollbacks"] += counts["rollbacks"]
        # speculative sampling: the same draws as with the copy (the draft's distributions are the
        # copy's)
        kw = dict(
            method="speculative", k=3, do_sample=True, temperature=0.8, max_new_tokens=16, seed=3
        )
        sampled = bildlab.generate(large, x, small=draft, **kw).tokens
        assert sampled == bildlab.generate(large, x, small=copy, **kw).tokens
    # both the kept and the cropped paths ran
    assert totals["accepted"] > 0 and totals["rollbacks"] > 0


@pytest.mark.parametrize("arch", ["t5", "bart"])
def test_encoder_runs_once_per_input(exits, arch):
    large, draft, copy = exits[arch]
    calls = {"large": 0, "copy": 0}
    hooks = [
        m.get_encoder().register_forward_hook(
            lambda *a, name=name: calls.__setitem__(name, calls[name] + 1)
        )
        for name, m in (("large", large), ("copy", copy))
    ]
    try:
        for method in ("speculative", "bild"):
            bildlab.generate(
                large, prompts(1)[0], small=draft, method=method, max_new_tokens=8, fallback=0.3
            )
        # one encoder run per input (the draft's encoder is the large one)
        assert calls == {"large": 2, "copy": 0}
        bildlab.generate(large, prompts(1)[0], small=copy, method="speculative", max_new_tokens=8)
        assert calls == {"large": 3, "copy": 1}  # a separate model runs its own
    finally:
        for h in hooks:
            h.remove()


@pytest.mark.parametrize("arch", ARCHS)
def test_draft_and_verifier_keep_one_cache(exits, arch):
    large, draft, copy = exits[arch]
    seen = {"large": [], "draft": []}
    fed = []
    hooks = [
        m.register_forward_pre_hook(
            lambda mod, args, kwargs, name=name: seen[name].append(
                kwargs.get("cache", kwargs.get("past_key_values"))
            ),
            with_kwargs=True,
        )
        for name, m in (("large", large), ("draft", draft))
    ]
    key = "decoder_input_ids" if large.config.is_encoder_decoder else "input_ids"
    hooks.append(
        draft.register_forward_pre_hook(
            lambda mod, args, kwargs: fed.append(kwargs[key].shape[1]), with_kwargs=True
        )
    )
    try:
        out = bildlab.generate(
            large,
            prompts(1)[0],
            small=draft,
            method="speculative",
            k=3,
            max_new_tokens=16,
            eos_token_id=[],
        )
    finally:
        for h in hooks:
            h.remove()
    assert len({id(c) for c in seen["large"] + seen["draft"]}) == 1  # one cache object for both
    assert len(seen["draft"]) == out.stats["small_calls"] and out.stats["accepted"] > 0
    # after its first call the draft is fed one token per call: every committed position of the
    # shared layers was written by the verifier, which the draft never recomputes (a separate draft
    # re-feeds its last draft)
    assert fed[1:] and all(n == 1 for n in fed[1:])


def test_exit_draft_rejects_bad_exits():
    large = tiny("t5", seed=1, layers=3)
    for layers in (0, 3, 4, True, 1.5, None):
        with pytest.raises(ValueError, match=r"layers \(the exit\) must be an integer in \[1, 2\]"):
            exit_draft(large, layers)
    with pytest.raises(TypeError, match="large must be a transformers PreTrainedModel"):
        exit_draft(torch.nn.Linear(2, 2), 1)


@pytest.mark.parametrize("name", ["toy-mt", "toy-mt-llama"])
def test_shipped_pairs_early_exit_is_lossless(name):
    from bildlab.world import models

    if not (models.zoo_dir() / "card.json").is_file():
        pytest.skip("the toy zoo is not shipped")
    pair = models.load_pair(name, early_exit=True)
    assert shares_bottom_layers(pair.small, pair.large)
    eos = pair.large.generation_config.eos_token_id
    for x in pair.inputs("test", limit=4):
        ref = hf_greedy(pair.large, x, 40, eos)  # transformers' own greedy generate, not bildlab's
        assert ref and len(ref) <= 40
        for method, kw in (("speculative", {"k": 4}), ("bild", {"rollback": 0.0, "fallback": 0.6})):
            assert (
                bildlab.generate(
                    pair.large, x, small=pair.small, method=method, max_new_tokens=40, **kw
                ).tokens
                == ref
            ), (method, x.tolist())
