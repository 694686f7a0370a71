"""Tiny random Hugging Face models built from configs (no download), shared by the tests."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest
import torch
import transformers as tf

from bildlab.engine import capabilities

tf.logging.set_verbosity_error()
torch.set_num_threads(1)  # tiny models: one thread is faster and steadier on 2 shared cores

VOCAB = 48
EOS = 2
ARCHS = ("gpt2", "llama", "t5", "bart")


def tiny(
    arch: str,
    seed: int,
    layers: int = 2,
    vocab: int = VOCAB,
    scale: float = 1.0,
    encoder_layers: int | None = None,
) -> tf.PreTrainedModel:
    """A tiny random model in float32, eval mode. `scale` sharpens the output distribution (larger
    init). Encoder-decoder models get one encoder layer more than decoder layers unless
    `encoder_layers` says (caches must follow the decoder)."""
    enc = layers + 1 if encoder_layers is None else encoder_layers
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, eos_token_id=EOS, bos_token_id=1, pad_token_id=0)
    if arch == "gpt2":
        cfg = tf.GPT2Config(
            n_layer=layers,
            n_embd=32,
            n_head=2,
            n_positions=256,
            initializer_range=0.3 * scale,
            **common,
        )
        model = tf.GPT2LMHeadModel(cfg)
    elif arch in ("llama", "qwen2"):
        config_cls, model_cls = {
            "llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
            "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
        }[arch]
        cfg = config_cls(
            num_hidden_layers=layers,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            initializer_range=0.3 * scale,
            **common,
        )
        model = model_cls(cfg)
    elif arch == "t5":
        cfg = tf.T5Config(
            d_model=32,
            d_ff=64,
            num_layers=enc,
            num_decoder_layers=layers,
            num_heads=2,
            d_kv=16,
            decoder_start_token_id=0,
            tie_word_embeddings=False,
            **common,
        )
        model = tf.T5ForConditionalGeneration(cfg)
        # T5's default init makes random models repeat one token; wider weights vary more
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0, 0.5 * scale)
    elif arch == "bart":
        cfg = tf.BartConfig(
            d_model=32,
            encoder_layers=enc,
            decoder_layers=layers,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=256,
            init_std=0.1 * scale,
            decoder_start_token_id=EOS,
            forced_eos_token_id=None,
            forced_bos_token_id=None,
            tie_word_embeddings=False,
            **common,
        )
        model = tf.BartForConditionalGeneration(cfg)
    elif arch == "marian":
        cfg = tf.MarianConfig(
            d_model=32,
            encoder_layers=enc,
            decoder_layers=layers,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=256,
            init_std=0.1,
            decoder_start_token_id=0,
            forced_eos_token_id=None,
            # a tied output layer makes a random Marian repeat its input token
            tie_word_embeddings=False,
            **common,
        )
        model = tf.MarianMTModel(cfg)
        # wider weights make it repeat one token too: `scale` sharpens its output layer alone
        with torch.no_grad():
            model.lm_head.weight.mul_(3 * scale)
    else:
        raise ValueError(arch)
    return model.eval()


def perturbed(model: tf.PreTrainedModel, noise: float, seed: int) -> tf.PreTrainedModel:
    """A copy of `model` with Gaussian noise on every weight: a draft that agrees on some tokens,
    not all."""
    copy = type(model)(model.config).eval()
    copy.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in copy.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std().clamp_min(1e-3))
    return copy


def hf_greedy(model, input_ids, max_new_tokens, eos_token_id):
    """The reference: transformers' own greedy generate, new tokens only."""
    # None: the generation config's own
    kw = {} if eos_token_id is None else {"eos_token_id": eos_token_id}
    kw.update(capabilities.hf_cache(model))  # as benchmark.hf_generate
    out = model.generate(
        input_ids, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=0, **kw
    )
    start = 1 if model.config.is_encoder_decoder else input_ids.shape[1]
    return out[0, start:].tolist()


@pytest.fixture(scope="session")
def models():
    """(large, {draft name: draft}) per architecture, built once; "exit" is the large model's exit
    after layer 1."""
    from bildlab.engine.early_exit import exit_draft

    zoo = {}
    for i, arch in enumerate(ARCHS):
        large = tiny(arch, seed=10 + i, layers=2)
        zoo[arch] = (
            large,
            {
                "random": tiny(arch, seed=50 + i, layers=1),
                "perturbed": perturbed(large, 0.05, i),
                "self": large,
                "exit": exit_draft(large, 1),
            },
        )
    probed(*(m for large, drafts in zoo.values() for m in (large, *drafts.values())))
    return zoo


@pytest.fixture(autouse=True)
def _machine_store(tmp_path_factory, monkeypatch):
    """Every test gets its own empty store of this machine's calibrations
    (`calibrate.machine_store`, read by every registry's sweeps): no test writes into the user's
    cache folder or sees another test's calibrations (an environment variable: subprocesses and
    notebook kernels inherit it)."""
    from bildlab.harness import calibrate

    monkeypatch.setenv(calibrate.STORE_ENV, str(tmp_path_factory.mktemp("calibrations")))


def probed(*models):
    """Run bildlab's capability probe (a few forwards, once per model) now, before a test counts
    model calls."""
    from bildlab.engine.capabilities import probe

    for m in models:
        probe(m)
    return models


def tiny_tokenizer(path):
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tm

    vocab = {
        w: i
        for i, w in enumerate(
            ["<pad>", "</s>", "<unk>", "<sep>", "<mt>", "<sum>"] + [f"w{i}" for i in range(42)]
        )
    }
    tok = Tokenizer(tm.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = tf.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        sep_token="<sep>",
        additional_special_tokens=["<mt>", "<sum>"],
    )
    fast.save_pretrained(path)
    return fast


@pytest.fixture
def fake_zoo(tmp_path, monkeypatch):
    """A zoo folder laid out like bildlab/toy/_zoo, with tiny models."""
    tiny_tokenizer(tmp_path / "tokenizer")
    large = tiny("t5", seed=1, layers=3)
    large.save_pretrained(tmp_path / "t5-large")
    tiny("t5", seed=2, layers=1).save_pretrained(tmp_path / "t5-small")
    tiny("t5", seed=3, layers=1).save_pretrained(tmp_path / "t5-small-aligned")
    from bildlab.world import models

    monkeypatch.setenv(models.ZOO_ENV, str(tmp_path))
    return tmp_path, large
