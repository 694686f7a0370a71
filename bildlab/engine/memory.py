"""Batches that fit: what a batch of `generate_batch` rows holds at its peak, a memory budget, and
rows packed under it.

    budget = memory.budget("12GiB", "cuda")      # bytes; None: the device's free memory less a margin (CPU: CPU_MEMORY)
    g = memory.geometry(model)                   # layers, heads, head size, widths, vocabulary, from the config
    memory.peak_bytes([g_large, g_small], rows=8, source=1024, new=128)

The estimate is an upper bound built from the pair's geometry, per model, in the model's dtype
(logits in float32):

    kept while decoding   encoder outputs B x S x d; the KV cache 2 x layers x B x kv_heads x head_dim x (S + new)
                          (self- and cross-attention for an encoder-decoder, S + new positions for a decoder-only
                          model); the logits of one position, B x vocab, in the model's dtype, in float32 and in
                          SOFTMAX_COPIES float32 temporaries of the rules (softmax, log-softmax, argmax)
    passing through       the prefill over S tokens (the encoder, or a decoder-only model's prompt): ACTIVATIONS
                          hidden-size tensors and two feed-forward tensors per token, and SCORE_COPIES attention
                          score tensors B x heads x S x S (scores, bias + mask, softmax); a model that cannot keep
                          only the last logits (no `logits_to_keep`) also B x S x vocab

The models prefill one after the other, and a prefill's temporaries are gone before the next one
starts. A decoder-only batch's peak is the kept bytes of both models plus the larger prefill (a
prompt's cache fills during its prefill); an encoder-decoder batch's is the larger of the kept bytes
and the encoder outputs plus the larger encoder pass (the encoders run before the decoders cache
anything); both times SLACK for the allocator and a decoder step's per-layer temporaries. Batches
are packed from rows sorted by length (the longest source of a batch sets its S), as many rows as
the budget allows and at most `batch_size`; a row that alone exceeds the budget runs alone (said in
the report). The estimate leaves out the weights (they are loaded before any budget is spent) and
the allocator's slack: `budget`'s default keeps MARGIN of a GPU's free memory free."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

GIB = 2**30
# the budget on a CPU when none is given (the smallest of our users' machines has 16 GB)
CPU_MEMORY = 8 * GIB
MARGIN = 0.1  # of a GPU's free memory, kept free for the allocator and the kernels' workspaces
SOFTMAX_COPIES, ACTIVATIONS, SCORE_COPIES = 4, 4, 4
# the allocator's rounding and fragmentation, and the small per-layer temporaries of a decoder step
SLACK = 1.25
UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse(memory) -> int | None:
    """A memory size in bytes: None, an integer >= 1 or a string such as "12GiB", "16GB", "512 MiB"."""
    if memory is None:
        return None
    if isinstance(memory, int) and not isinstance(memory, bool) and memory >= 1:
        return memory
    if isinstance(memory, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", memory)
        if m and m.group(2).lower() in UNITS and float(m.group(1)) > 0:
            return int(float(m.group(1)) * UNITS[m.group(2).lower()])
    raise ValueError(
        f"memory must be None (the device's free memory, {CPU_MEMORY // GIB} GiB on a CPU), a number of "
        f"bytes >= 1 or a size such as '12GiB', '16GB' or '512MiB'; got {memory!r}"
    )


def budget(memory, device) -> int:
    """The bytes a batch may take on `device`: `memory` parsed, else a GPU's free memory less
    MARGIN, else CPU_MEMORY."""
    given = parse(memory)
    if given is not None:
        return given
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * (1 - MARGIN))
    return CPU_MEMORY


@dataclass(frozen=True)
class Geometry:
    """What one model's batch memory is a function of."""

    encoder_decoder: bool
    layers: int  # decoder layers (the cache)
    kv_heads: int
    head_dim: int
    d_model: int
    d_ff: int
    heads: int  # attention heads of the prefill (the encoder's, or the decoder-only model's)
    vocab: int  # rows of the output layer
    dtype_bytes: int
    full_logits: bool = False  # a decoder-only prefill returns logits at every position


def _first(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value:
            return value
    return default


def geometry(
    model_or_config, vocab: int | None = None, dtype: torch.dtype | None = None
) -> Geometry:
    """A model's geometry from its config (a model: its output layer's rows and its dtype; a config
    alone: `vocab`, else its vocab_size, and `dtype`, else float32)."""
    from .capabilities import forward_of

    config = getattr(model_or_config, "config", model_or_config)
    if config is not model_or_config:  # a model
        out = model_or_config.get_output_embeddings()
        vocab = vocab or (out.weight.shape[0] if out is not None else None)
        dtype = dtype or model_or_config.dtype
        full = not config.is_encoder_decoder and not forward_of(type(model_or_config)).keep_kw
    else:
        full = False
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    d = _first(text, "d_model", "hidden_size", "n_embd")
    # (a model without attention, e.g. a recurrent one, counts as one head: its state is a small
    # part of the estimate)
    heads = _first(
        text, "encoder_attention_heads", "num_heads", "num_attention_heads", "n_head", default=1
    )
    dec_heads = _first(
        text, "decoder_attention_heads", "num_heads", "num_attention_heads", "n_head", default=1
    )
    return Geometry(
        encoder_decoder=bool(config.is_encoder_decoder),
        layers=_first(
            text,
            "num_decoder_layers",
            "decoder_layers",
            "num_layers",
            "num_hidden_layers",
            "n_layer",
            default=1,
        ),
        kv_heads=_first(text, "num_key_value_heads", default=dec_heads)
        if not config.is_encoder_decoder
        else dec_heads,
        head_dim=_first(text, "d_kv", "head_dim", default=d // dec_heads),
        d_model=d,
        d_ff=_first(text, "d_ff", "encoder_ffn_dim", "intermediate_size", "n_inner", default=4 * d),
        heads=heads,
        vocab=vocab or text.vocab_size,
        dtype_bytes=torch.finfo(dtype or torch.float32).bits // 8,
        full_logits=full,
    )


def encoded_bytes(g: Geometry, rows: int, source: int) -> int:
    """An encoder-decoder model's encoder outputs (none for a decoder-only one)."""
    return rows * source * g.d_model * g.dtype_bytes if g.encoder_decoder else 0


def cache_bytes(g: Geometry, rows: int, source: int, new: int) -> int:
    """A model's KV cache after `new` tokens of rows of `source` input tokens: keys and values of
    every decoder layer over the source (cross-attention, or a decoder-only prompt) and the new
    positions."""
    return 2 * g.layers * rows * g.kv_heads * g.head_dim * (source + new) * g.dtype_bytes


def kept_bytes(g: Geometry, rows: int, source: int, new: int) -> int:
    """What one model holds while its rows decode: encoder outputs, KV cache, one position's logits."""
    logits = rows * g.vocab * (g.dtype_bytes + 4 * (1 + SOFTMAX_COPIES))
    return cache_bytes(g, rows, source, new) + encoded_bytes(g, rows, source) + logits


def prefill_bytes(g: Geometry, rows: int, source: int) -> int:
    """The temporaries of one model's prefill over `source` tokens (its encoder, or a decoder-only
    prompt)."""
    s, B, S = g.dtype_bytes, rows, source
    tensors = B * S * (ACTIVATIONS * g.d_model + 2 * g.d_ff) * s
    scores = SCORE_COPIES * B * g.heads * S * S * s
    logits = B * S * g.vocab * 4 if g.full_logits else 0
    return tensors + scores + logits


def peak_bytes(geometries: list[Geometry], rows: int, source: int, new: int) -> int:
    """The peak of a batch of `rows` rows of at most `source` input tokens and `new` new tokens,
    over the models it runs (the large model and the small one when it drafts)."""
    kept = sum(kept_bytes(g, rows, source, new) for g in geometries)
    prefill = max(prefill_bytes(g, rows, source) for g in geometries)
    if not geometries[0].encoder_decoder:  # a prompt's cache fills during its prefill
        return int(SLACK * (kept + prefill))
    encoded = sum(encoded_bytes(g, rows, source) for g in geometries)
    # the encoders run before the decoders cache anything
    return int(SLACK * max(kept, encoded + prefill))


def pack(
    lengths: list[int], geometries: list[Geometry], new: int, budget_bytes: int, batch_size: int
) -> list[list[int]]:
    """Batches of row indices: rows sorted by length (stable), each batch as many as fit
    `budget_bytes` (at least one) and at most `batch_size`."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches, b = [], 0
    while b < len(order):
        n = 1
        while (
            n < batch_size
            and b + n < len(order)
            and peak_bytes(geometries, n + 1, lengths[order[b + n]], new) <= budget_bytes
        ):
            n += 1
        batches.append(order[b : b + n])
        b += n
    return batches


def rows_that_fit(
    geometries: list[Geometry], source: int, new: int, budget_bytes: int, batch_size: int
) -> int:
    """How many rows of `source` tokens one batch takes under `budget_bytes` (0: not even one)."""
    if peak_bytes(geometries, 1, source, new) > budget_bytes:
        return 0
    lo, hi = 1, batch_size
    while lo < hi:  # peak_bytes grows with rows
        mid = (lo + hi + 1) // 2
        lo, hi = (
            (mid, hi) if peak_bytes(geometries, mid, source, new) <= budget_bytes else (lo, mid - 1)
        )
    return lo


def fmt(n: int) -> str:
    """Bytes for people: '48.0 GiB', '134 MiB'."""
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / 2**20:.0f} MiB"
