"""The model table: on architectures of every cache kind and position scheme, each method's tokens
equal transformers' greedy `generate`, or bildlab refuses with `Unsupported` before the first token
-- never other tokens.

Tiny random models (configs in the spirit of transformers' own model tests); the small model is a
one-layer copy of the large one with its weights shared, so that drafts are accepted and BiLD's
small model writes. `benchmarks/ models_table.py` writes docs/models.md from `outcomes`. The CI set
is `CHEAP`; every other architecture is `slow`."""

import copy
import re
from pathlib import Path

import pytest
import torch
import transformers as tf

import bildlab
from bildlab.engine import capabilities
from bildlab.engine.batch import generate_batch

DOC = Path(__file__).resolve().parent.parent / "docs" / "models.md"
SCRIPT = "benchmarks/models_table.py"
# two prompts of one length: equal-length batches hold more than one row
VOCAB, N_NEW, LENGTHS = 64, 8, (5, 3, 5)
COMMON = dict(vocab_size=VOCAB, eos_token_id=2, bos_token_id=1, pad_token_id=0)
ATTN = dict(
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    initializer_range=0.3,
)
SEQ2SEQ = dict(
    d_model=32,
    encoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=128,
    init_std=0.3,
    decoder_start_token_id=2,
)
T5 = dict(
    d_model=32,
    d_ff=64,
    num_heads=2,
    d_kv=16,
    num_layers=2,
    decoder_start_token_id=0,
    initializer_factor=3.0,
)

# name: (model class, config class, config values, the config key of the decoder's depth)
ARCHITECTURES = {
    # the CI set: absolute / rotary / derived positions, no cache argument, a recurrent state,
    # seq2seq, MoE seq2seq, a processor in the generation config
    "gpt2": (
        "GPT2LMHeadModel",
        "GPT2Config",
        dict(n_embd=32, n_head=2, n_positions=128, initializer_range=0.3),
        "n_layer",
    ),
    "llama": ("LlamaForCausalLM", "LlamaConfig", ATTN, "num_hidden_layers"),
    "openai-gpt": (
        "OpenAIGPTLMHeadModel",
        "OpenAIGPTConfig",
        dict(n_embd=32, n_head=2, n_positions=128, initializer_range=0.3),
        "n_layer",
    ),
    "mamba": (
        "MambaForCausalLM",
        "MambaConfig",
        dict(hidden_size=32, state_size=8, intermediate_size=64, initializer_range=0.3),
        "num_hidden_layers",
    ),
    "roberta": (
        "RobertaForCausalLM",
        "RobertaConfig",
        dict(
            hidden_size=32,
            num_attention_heads=2,
            intermediate_size=64,
            is_decoder=True,
            max_position_embeddings=128,
            initializer_range=0.3,
            pad_token_id=1,
            bos_token_id=0,
        ),
        "num_hidden_layers",
    ),
    "bart-causal": (
        "BartForCausalLM",
        "BartConfig",
        {**SEQ2SEQ, "forced_eos_token_id": None},
        "decoder_layers",
    ),
    "t5": ("T5ForConditionalGeneration", "T5Config", T5, "num_decoder_layers"),
    # forced_eos_token_id=2
    "bart": ("BartForConditionalGeneration", "BartConfig", SEQ2SEQ, "decoder_layers"),
    "bart-no-forced-eos": (
        "BartForConditionalGeneration",
        "BartConfig",
        {**SEQ2SEQ, "forced_eos_token_id": None},
        "decoder_layers",
    ),
    "switch-transformers": (
        "SwitchTransformersForConditionalGeneration",
        "SwitchTransformersConfig",
        {**T5, "num_experts": 4, "expert_capacity": 8},
        "num_decoder_layers",
    ),
    "bert-not-a-decoder": (
        "BertLMHeadModel",
        "BertConfig",
        dict(
            hidden_size=32,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
            initializer_range=0.3,
        ),
        "num_hidden_layers",
    ),
    # slow
    "m2m100": (
        "M2M100ForConditionalGeneration",
        "M2M100Config",
        {**SEQ2SEQ, "decoder_start_token_id": 2, "forced_eos_token_id": None},
        "decoder_layers",
    ),
    "git": (
        "GitForCausalLM",
        "GitConfig",
        dict(
            hidden_size=32,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
            initializer_range=0.3,
            vision_config=dict(
                hidden_size=16,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=16,
                image_size=8,
                patch_size=4,
            ),
        ),
        "num_hidden_layers",
    ),
    "xlnet": (
        "XLNetLMHeadModel",
        "XLNetConfig",
        dict(d_model=32, n_head=2, d_inner=64, initializer_range=0.3),
        "n_layer",
    ),
    "jamba": (
        "JambaForCausalLM",
        "JambaConfig",
        {
            **ATTN,
            "num_experts": 2,
            "num_experts_per_tok": 1,
            "attn_layer_period": 2,
            "attn_layer_offset": 0,
            "expert_layer_period": 2,
            "expert_layer_offset": 1,
            "mamba_d_state": 8,
            "use_mamba_kernels": False,
        },
        "num_hidden_layers",
    ),
    "bamba": (
        "BambaForCausalLM",
        "BambaConfig",
        {
            **ATTN,
            "attn_layer_indices": [0],
            "mamba_n_heads": 4,
            "mamba_d_head": 16,
            "mamba_d_state": 8,
            "mamba_n_groups": 1,
        },
        "num_hidden_layers",
    ),
    "mistral-window": (
        "MistralForCausalLM",
        "MistralConfig",
        {**ATTN, "sliding_window": 4},
        "num_hidden_layers",
    ),
    "opt": (
        "OPTForCausalLM",
        "OPTConfig",
        dict(
            hidden_size=32,
            ffn_dim=64,
            num_attention_heads=2,
            word_embed_proj_dim=32,
            max_position_embeddings=128,
            init_std=0.3,
        ),
        "num_hidden_layers",
    ),
    "gpt-neox": (
        "GPTNeoXForCausalLM",
        "GPTNeoXConfig",
        {**ATTN, "num_key_value_heads": 4},
        "num_hidden_layers",
    ),
    "bloom": (
        "BloomForCausalLM",
        "BloomConfig",
        dict(hidden_size=32, n_head=4, initializer_range=0.3),
        "n_layer",
    ),
    "qwen2-moe": (
        "Qwen2MoeForCausalLM",
        "Qwen2MoeConfig",
        {
            **ATTN,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
        },
        "num_hidden_layers",
    ),
    "falcon-mamba": (
        "FalconMambaForCausalLM",
        "FalconMambaConfig",
        dict(hidden_size=32, state_size=8, intermediate_size=64, initializer_range=0.3),
        "num_hidden_layers",
    ),
    "mamba2": (
        "Mamba2ForCausalLM",
        "Mamba2Config",
        dict(
            hidden_size=32,
            num_heads=4,
            head_dim=16,
            state_size=8,
            n_groups=1,
            expand=2,
            initializer_range=0.3,
        ),
        "num_hidden_layers",
    ),
    "recurrent-gemma": (
        "RecurrentGemmaForCausalLM",
        "RecurrentGemmaConfig",
        dict(
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            lru_width=32,
            attention_window_size=16,
            block_types=["attention", "recurrent"],
            initializer_range=0.3,
        ),
        "num_hidden_layers",
    ),
    "falcon-h1": (
        "FalconH1ForCausalLM",
        "FalconH1Config",
        {
            **ATTN,
            "mamba_d_ssm": 32,
            "mamba_n_heads": 4,
            "mamba_d_head": 8,
            "mamba_d_state": 8,
            "mamba_n_groups": 1,
            "mamba_expand": 1,
        },
        "num_hidden_layers",
    ),
    "lfm2": ("Lfm2ForCausalLM", "Lfm2Config", {**ATTN, "full_attn_idxs": [0]}, "num_hidden_layers"),
    "pegasus": (
        "PegasusForConditionalGeneration",
        "PegasusConfig",
        {**SEQ2SEQ, "decoder_start_token_id": 0, "forced_eos_token_id": None},
        "decoder_layers",
    ),
    "marian": (
        "MarianMTModel",
        "MarianConfig",
        {**SEQ2SEQ, "decoder_start_token_id": 0, "forced_eos_token_id": None},
        "decoder_layers",
    ),
    "mt5": ("MT5ForConditionalGeneration", "MT5Config", T5, "num_decoder_layers"),
    "led": (
        "LEDForConditionalGeneration",
        "LEDConfig",
        {
            **{k: v for k, v in SEQ2SEQ.items() if k != "max_position_embeddings"},
            "max_encoder_position_embeddings": 128,
            "max_decoder_position_embeddings": 128,
            "attention_window": 8,
            "decoder_start_token_id": 2,
        },
        "decoder_layers",
    ),
    "fsmt": (
        "FSMTForConditionalGeneration",
        "FSMTConfig",
        {
            **SEQ2SEQ,
            "langs": ["en", "de"],
            "src_vocab_size": VOCAB,
            "tgt_vocab_size": VOCAB,
            "forced_eos_token_id": None,
        },
        "decoder_layers",
    ),
    "prophetnet": (
        "ProphetNetForConditionalGeneration",
        "ProphetNetConfig",
        dict(
            hidden_size=32,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            num_encoder_attention_heads=2,
            num_decoder_attention_heads=2,
            num_encoder_layers=2,
            ngram=2,
            decoder_start_token_id=0,
            init_std=0.3,
        ),
        "num_decoder_layers",
    ),
    "xlm": (
        "XLMWithLMHeadModel",
        "XLMConfig",
        dict(emb_dim=32, n_heads=2, init_std=0.3),
        "n_layers",
    ),
    "ctrl": (
        "CTRLLMHeadModel",
        "CTRLConfig",
        dict(n_embd=32, n_head=2, dff=64, n_positions=128),
        "n_layer",
    ),
    "rwkv": (
        "RwkvForCausalLM",
        "RwkvConfig",
        dict(
            hidden_size=32,
            attention_hidden_size=32,
            intermediate_size=64,
            context_length=128,
            rescale_every=0,
        ),
        "num_hidden_layers",
    ),
}
CHEAP = (
    "gpt2",
    "llama",
    "openai-gpt",
    "mamba",
    "roberta",
    "bart-causal",
    "t5",
    "bart",
    "bart-no-forced-eos",
    "switch-transformers",
    "bert-not-a-decoder",
)
# the checks: (name, generate's keywords, whether the small model is the large one itself)
CHECKS = [
    ("greedy", dict(method="greedy"), False),
    ("speculative", dict(method="speculative", k=3), False),
    # rollback 0: lossless
    ("bild", dict(method="bild", fallback=0.0, rollback=0.0, max_small_steps=3), False),
    (
        "bild-first-above",
        dict(method="bild", fallback=0.0, rollback=1.0, rollback_rule="first-above"),
        True,
    ),
]
METHODS = [name for name, _, _ in CHECKS]
# each method by generate, by generate_batch and by generate on a static cache
ROUTES = METHODS + [f"{way} {m}" for way in ("batch", "static") for m in METHODS]
# what bildlab refuses where the table is expected to hold (every other route is exact)
ALL = set(ROUTES)
ROLLBACK = {"speculative", "bild", "bild-first-above"}
STATIC = {f"static {m}" for m in METHODS}  # a static cache refused whatever the method
REFUSED = {
    "openai-gpt": ALL,
    "xlnet": ALL,
    "rwkv": ALL,
    "bart": ALL,
    "mamba": ROLLBACK | STATIC,
    "jamba": ROLLBACK | STATIC,
    "bamba": ROLLBACK | STATIC,
    "falcon-mamba": ROLLBACK | STATIC,
    "mamba2": ROLLBACK | STATIC,
    "falcon-h1": ROLLBACK | STATIC,
    "recurrent-gemma": ROLLBACK | STATIC,
    "lfm2": STATIC,
    "mistral-window": STATIC,  # its window is shorter than the static cache
    "prophetnet": ROLLBACK | STATIC,
    "xlm": ALL,
    "bert-not-a-decoder": ROLLBACK | STATIC,
    "led": STATIC,
    "fsmt": ROLLBACK | STATIC,
}
# (large, small) decoder layers where not (2, 1): RWKV's init divides by layers - 1
DEPTHS = {"rwkv": (3, 2)}


def build(name: str, seed: int = 0):
    """The large model (two decoder layers) and its one-layer copy, sharing weights (`DEPTHS`: other
    depths)."""
    model_cls, config_cls, values, depth = ARCHITECTURES[name]
    model_cls, config_cls = getattr(tf, model_cls), getattr(tf, config_cls)
    values = {**COMMON, **values}
    torch.manual_seed(seed)
    layers = DEPTHS.get(name, (2, 1))
    large = model_cls(config_cls(**{depth: layers[0]}, **values)).eval()
    small = model_cls(config_cls(**{depth: layers[1]}, **values)).eval()
    small.load_state_dict(large.state_dict(), strict=False)
    return large, small


def hf_greedy(model, x, eos):
    """transformers' greedy generate, new tokens only, with the model's own generation config (its
    processors)."""
    out = model.generate(
        x, do_sample=False, num_beams=1, max_new_tokens=N_NEW, eos_token_id=eos, pad_token_id=0
    )
    return out[0, 1 if model.config.is_encoder_decoder else x.shape[1] :].tolist()


def _run(route: str, large, small, xs, eos, written: list) -> list[list[int]]:
    """The route's tokens for every prompt; the small model's tokens are counted in `written`."""
    name, kw, self_draft = next(c for c in CHECKS if c[0] == route.split()[-1])
    kw = dict(kw, small=large if self_draft else small, max_new_tokens=N_NEW, eos_token_id=eos)
    if route.startswith("batch "):
        outs = generate_batch(large, xs, batch_size=4, **kw)
    elif route.startswith("static "):
        outs = [bildlab.generate(large, x, cache="static", **kw) for x in xs]
    else:
        outs = [bildlab.generate(large, x, **kw) for x in xs]
    written.extend(out.stats["small_tokens"] for out in outs)
    return [out.tokens for out in outs]


@torch.inference_mode()
def outcomes(name: str, pair=None) -> dict[str, str]:
    """{route: "exact" | "refused: <bildlab's message>" | "WRONG ..."} over three prompts, without an EOS and with one
    that ends an output inside the budget; "lossy" compares bild's first-above rule with a lossy policy between the
    engine and generate_batch (two implementations of one definition). `pair`: (large, small), else `build(name)`."""
    large, small = pair or build(name)
    xs = [
        torch.randint(3, VOCAB, (1, n), generator=torch.Generator().manual_seed(s))
        for s, n in enumerate(LENGTHS)
    ]
    full = [hf_greedy(large, x, []) for x in xs]
    inside = next((t for out in full for j, t in enumerate(out[2:-1], 2) if t not in out[:j]), None)
    refs = {(): full}
    if inside is not None:
        refs[(inside,)] = [hf_greedy(large, x, [inside]) for x in xs]
    table = {}
    for route in ROUTES:
        written = []
        try:
            got = {eos: _run(route, large, small, xs, list(eos), written) for eos in refs}
        except capabilities.Unsupported as e:
            table[route] = f"refused: {e}"
            continue
        table[route] = "exact" if got == refs else f"WRONG: {got} != {refs}"
        table[f"{route}: small tokens"] = sum(written)
    policy = dict(
        small=small,
        method="bild",
        fallback=0.3,
        rollback=1.0,
        rollback_rule="first-above",
        max_new_tokens=N_NEW,
        eos_token_id=[],
    )
    try:
        one = [bildlab.generate(large, x, **policy).tokens for x in xs]
        table["lossy"] = (
            "exact" if [o.tokens for o in generate_batch(large, xs, **policy)] == one else "WRONG"
        )
    except capabilities.Unsupported as e:
        table["lossy"] = f"refused: {e}"
    return table


def _reason(message: str) -> str:
    """A refusal's reason: the message after the model class, the method and the route."""
    message = re.sub(r"^refused: cache='static': \w+ \(the [\w ]+\):? ", "static cache: ", message)
    return re.sub(
        r"^refused: \w+: method '[\w-]+'( in generate_batch)?( \(as the small model\))?:? ",
        "",
        message,
    )


def row(name: str, table: dict[str, str]) -> str:
    """The architecture's line of docs/models.md."""
    cells = [name, f"`{ARCHITECTURES[name][0]}`"] + [
        table[r].split(":")[0] for r in ROUTES + ["lossy"]
    ]
    reasons = list(
        dict.fromkeys(_reason(m) for m in table.values() if str(m).startswith("refused"))
    )
    return "| " + " | ".join(cells + ["<br>".join(reasons).replace("|", "\\|") or "–"]) + " |"


def _check(name: str):
    table = outcomes(name)
    assert row(name, table) in DOC.read_text(), f"docs/models.md is not up to date: python {SCRIPT}"
    wrong = {route: result for route, result in table.items() if str(result).startswith("WRONG")}
    assert not wrong  # no silent mismatch
    refused = {route for route in ROUTES if table[route].startswith("refused")}
    drafted = set(ROUTES) - refused - {"greedy", "batch greedy"}
    if drafted:  # drafted tokens were kept: the table checks more than the large model alone
        assert sum(table[f"{route}: small tokens"] for route in drafted) > 0
    assert refused == REFUSED.get(name, set()), {r: table[r] for r in refused}
    # bildlab's message names the model class, the method (and generate_batch)
    for route in refused:
        method = next(kw["method"] for check, kw, _ in CHECKS if check == route.split()[-1])
        batch = " in generate_batch" if route.startswith("batch") else ""
        static = f"refused: cache='static': {ARCHITECTURES[name][0]} (the "
        assert table[route].startswith(
            f"refused: {ARCHITECTURES[name][0]}: method '{method}'{batch}"
        ) or (route.startswith("static") and table[route].startswith(static)), table[route]


@pytest.mark.parametrize("name", CHEAP)
def test_every_route_is_exact_or_refused(name):
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ARCHITECTURES if n not in CHEAP])
def test_every_route_is_exact_or_refused_slow(name):
    _check(name)


# ----------------------------------------------------------------------------------------------------------------------
# The generation config's logits processors, and the refusal before any model call

SETTINGS = {
    "forced_bos_token_id": 1,
    "forced_eos_token_id": 2,
    "no_repeat_ngram_size": 2,
    "encoder_no_repeat_ngram_size": 2,
    "repetition_penalty": 1.2,
    "encoder_repetition_penalty": 1.2,
    "min_length": 3,
    "min_new_tokens": 2,
    "bad_words_ids": [[5]],
    "suppress_tokens": [5],
    "begin_suppress_tokens": [5],
    "sequence_bias": {(5,): -1.0},
    "exponential_decay_length_penalty": (2, 1.1),
    "guidance_scale": 1.5,
}


def _transformers_processors(model, config) -> list[str]:
    model._prepare_special_tokens(config, True, device="cpu")
    return [
        type(p).__name__
        for p in model._get_logits_processor(
            config,
            input_ids_seq_length=1,
            encoder_input_ids=torch.tensor([[5, 6, 7]]),
            device="cpu",
            model_kwargs={},
        )
    ]


def test_each_processor_setting_is_refused_by_name():
    large, small = build("t5")
    x = torch.tensor([[5, 6, 7]])
    default = large.generation_config
    assert (
        _transformers_processors(large, copy.deepcopy(default)) == []
        and capabilities.processors(large) == []
    )
    assert set(SETTINGS) <= set(capabilities.PROCESSORS)
    try:
        for field, value in SETTINGS.items():
            large.generation_config = copy.deepcopy(default)
            setattr(large.generation_config, field, value)
            # a processor
            assert _transformers_processors(large, copy.deepcopy(large.generation_config)), field
            for method in ("greedy", "speculative"):
                with pytest.raises(
                    capabilities.Unsupported, match=f"generation config sets {field}="
                ):
                    bildlab.generate(large, x, small=small, method=method, max_new_tokens=4)
            with pytest.raises(
                bildlab.Unsupported, match=f"in generate_batch: the generation config sets {field}="
            ):
                generate_batch(large, [x], max_new_tokens=4)
    finally:
        large.generation_config = default
    assert bildlab.generate(large, x, max_new_tokens=4).tokens == hf_greedy(large, x, [])[:4]


def test_a_refusal_comes_before_any_model_call():
    large, small = build("mamba")
    x = torch.tensor([[5, 6, 7]])
    # greedy runs (and the cache was probed)
    assert bildlab.generate(large, x, max_new_tokens=2).tokens
    calls = []
    hooks = [m.register_forward_hook(lambda *a: calls.append(1)) for m in (large, small)]
    try:
        for method in ("speculative", "bild"):
            with pytest.raises(
                ValueError,
                match=r"^MambaForCausalLM: method '\w+' needs a cache that can be cropped",
            ):
                bildlab.generate(large, x, small=small, method=method, max_new_tokens=4)
    finally:
        for h in hooks:
            h.remove()
    # the large model was probed by greedy; refused, the small model is not even probed
    assert calls == []
    assert issubclass(bildlab.Unsupported, ValueError)


def test_a_model_whose_positions_padding_moves_is_batched_by_length():
    from bildlab.engine.batch import EQUAL

    xs = [
        torch.randint(3, VOCAB, (1, n), generator=torch.Generator().manual_seed(s))
        for s, n in enumerate(LENGTHS)
    ]
    for name, prefills, layout in (
        ("bart-causal", [(1, 3), (2, 5)], EQUAL),
        ("gpt2", [(3, 5)], None),
    ):
        large, _ = build(name)
        capabilities.probe(large)  # once per model, before the first batch
        shapes = []
        hook = large.register_forward_pre_hook(
            lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
        )
        try:
            outs = generate_batch(large, xs, max_new_tokens=3, eos_token_id=[])
        finally:
            hook.remove()
        # the prompts' prefills: which rows share a batch
        assert [s for s in shapes if s[1] > 1] == prefills
        assert [o.stats.get("layout") for o in outs] == [layout] * 3
        assert [o.tokens for o in outs] == [
            bildlab.generate(large, x, max_new_tokens=3, eos_token_id=[]).tokens for x in xs
        ]


def test_a_chunk_holding_the_pad_token_keeps_every_positions_one_after_another(monkeypatch):
    """M2M100's decoder derives positions from the tokens, and a pad token fed with tokens after it
    in one call moves their positions: the views feed such a chunk in pieces that end after the pad
    (`capabilities.split_after_pad`), and a verification's logits equal those of one token after
    another, on both caches; fed whole, they would not."""
    import dataclasses

    from bildlab.engine import static, views

    large, _ = build("m2m100")
    pad = large.generation_config.pad_token_id
    assert capabilities.probe(large).pad_split == pad
    x = torch.tensor([[5, 9, 7, 2]])
    seq = torch.tensor([[large.generation_config.decoder_start_token_id, 11, pad, 13, 14]])

    def view(cache):
        if cache == "static":
            return static.StaticView(large, x, static.cache_length(seq.shape[1], 4))
        return views.View(large, x)

    with torch.inference_mode():
        for cache in ("dynamic", "static"):
            one = view(cache)
            alone = torch.cat([one.logits(seq, end, 1) for end in range(1, seq.shape[1] + 1)])
            split = view(cache)
            split.logits(seq, 1, 1)
            chunk = split.logits(seq, seq.shape[1], 4)
            assert split.calls == 2  # the split verification counts as one call
            torch.testing.assert_close(chunk, alone[1:])
            probed = capabilities._PROBED[large]
            monkeypatch.setitem(
                capabilities._PROBED, large, dataclasses.replace(probed, pad_split=None)
            )
            whole = view(cache)
            whole.logits(seq, 1, 1)
            assert capabilities.differs(alone[1:], whole.logits(seq, seq.shape[1], 4))
            monkeypatch.setitem(capabilities._PROBED, large, probed)
