"""A wider search for silent mismatches than the model table: every causal-LM and seq2seq
architecture that transformers registers, built from its default config with generic tiny values,
run through the model table's checks.

    python benchmarks/models_sweep.py                 # all (about ten minutes on one core)
    python benchmarks/models_sweep.py bert m2m_100    # some model types

Prints one line per model type: SKIP (the generic values do not build it, or transformers' own
greedy generate fails on it), ok (every route exact or refused by bildlab) with the refusals'
reasons, WRONG (tokens that differ from transformers', the case that must not exist) or LOUD (an
exception other than bildlab's refusal). Exits non-zero on WRONG or LOUD. The model table
(tests/test_models.py, docs/models.md) holds the architectures worth keeping."""

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import transformers as tf  # noqa: E402
from test_models import _reason, outcomes  # noqa: E402
from transformers.models.auto import configuration_auto, modeling_auto  # noqa: E402

TINY = dict(
    hidden_size=32,
    d_model=32,
    n_embd=32,
    embed_dim=32,
    emb_dim=32,
    dim=32,
    num_attention_heads=4,
    n_head=4,
    n_heads=4,
    num_heads=4,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=64,
    d_ff=64,
    ffn_dim=64,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    n_inner=64,
    head_dim=8,
    d_kv=8,
    kv_channels=8,
    vocab_size=64,
    max_position_embeddings=128,
    n_positions=128,
    num_experts=4,
    num_local_experts=4,
    n_routed_experts=4,
    moe_intermediate_size=16,
    shared_expert_intermediate_size=32,
    num_experts_per_tok=2,
    encoder_layers=2,
    num_layers=2,
    initializer_range=0.3,
)
TOKENS = dict(
    eos_token_id=2,
    bos_token_id=1,
    pad_token_id=0,
    decoder_start_token_id=0,
    forced_eos_token_id=None,
    forced_bos_token_id=None,
)
DEPTH = (
    "num_hidden_layers",
    "decoder_layers",
    "num_decoder_layers",
    "n_layer",
    "n_layers",
    "num_layers",
)


def tiny(config_cls, model_cls, depth: int):
    config = config_cls()
    for key, value in {**TINY, **TOKENS}.items():
        current = getattr(config, key, "absent")
        if current != "absent" and (
            key in TOKENS or (current is not None and not isinstance(current, (list, dict)))
        ):
            setattr(config, key, value)
    setattr(config, next(k for k in DEPTH if hasattr(config, k)), depth)
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:depth]
    return model_cls(config).eval()


def main(only: list[str]) -> int:
    torch.set_num_threads(1)
    tf.logging.set_verbosity_error()
    bad = 0
    names = [
        *modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items(),
        *modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.items(),
    ]
    for model_type, cls_name in names:
        if only and model_type not in only:
            continue
        cls_name = cls_name[0] if isinstance(cls_name, (list, tuple)) else cls_name
        try:
            model_cls, config_cls = (
                getattr(tf, cls_name),
                configuration_auto.CONFIG_MAPPING[model_type],
            )
            torch.manual_seed(0)
            large, small = tiny(config_cls, model_cls, 2), tiny(config_cls, model_cls, 1)
            small.load_state_dict(large.state_dict(), strict=False)
            large.generate(
                torch.tensor([[5, 6, 7]]), do_sample=False, max_new_tokens=2, pad_token_id=0
            )
        except Exception as e:  # noqa: BLE001
            print(model_type, "SKIP", type(e).__name__, str(e)[:80].replace("\n", " "), flush=True)
            continue
        try:
            table = outcomes(model_type, (large, small))
        except Exception as e:  # noqa: BLE001
            print(
                model_type,
                cls_name,
                "LOUD",
                type(e).__name__,
                str(e)[:150].replace("\n", " "),
                flush=True,
            )
            bad += 1
            continue
        wrong = [route for route, result in table.items() if str(result).startswith("WRONG")]
        reasons = sorted({_reason(r)[:100] for r in table.values() if str(r).startswith("refused")})
        print(model_type, cls_name, f"WRONG {wrong}" if wrong else "ok", reasons, flush=True)
        bad += bool(wrong)
    return int(bad > 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
