"""Training: the same functions build the toy zoo from scratch and fine-tune real checkpoints (paper
profile).

- `train_seq2seq`   fine-tune (or train from scratch) an encoder-decoder model on (source, target) pairs, optionally
                    with an auxiliary early-exit loss after decoder layer `exit_layer`;
- `train_causal_lm` the same for a decoder-only model on "prompt + target" sequences (loss on the target only);
- `calibration_data` the large model's greedy outputs for training inputs (the paper's prediction alignment data).
The draft made of the large model's first decoder layers is `early_exit.exit_draft` (a view, not a copy).

Training is resumable: with `checkpoint=path`, model, optimizer and step are saved every
`save_every` steps (atomically) and a rerun continues from the last save with the same data order.
"""

from __future__ import annotations

import math
import os
import random
import re

import torch
from tqdm.auto import tqdm

from ..atomic import atomic_path
from ..engine import capabilities
from ..engine.decoding import eos_ids


def encode_pairs(
    tokenizer, examples: list[dict], prefix: str = "", max_source: int = 256, max_target: int = 128
):
    """Token ids of (prefix + source + EOS, target + EOS) for each example."""
    eos = tokenizer.eos_token_id
    src = tokenizer([prefix + ex["source"] for ex in examples], add_special_tokens=False)[
        "input_ids"
    ]
    tgt = tokenizer([ex["target"] for ex in examples], add_special_tokens=False)["input_ids"]
    return [(s[: max_source - 1] + [eos], t[: max_target - 1] + [eos]) for s, t in zip(src, tgt)]


def batches(
    pairs: list[tuple[list[int], list[int]]], batch_tokens: int, seed: int, epochs: int = 1
):
    """Length-bucketed batches (lists of pair indices) of about `batch_tokens` padded tokens, in a
    seeded order."""
    rng = random.Random(seed)
    out = []
    for _ in range(epochs):
        order = list(range(len(pairs)))
        rng.shuffle(order)
        # sort within chunks: little padding, still shuffled
        for start in range(0, len(order), 4096):
            chunk = sorted(
                order[start : start + 4096], key=lambda i: (len(pairs[i][0]), len(pairs[i][1]))
            )
            batch, longest = [], 0
            for i in chunk:
                longest_new = max(longest, len(pairs[i][0]) + len(pairs[i][1]))
                if batch and longest_new * (len(batch) + 1) > batch_tokens:
                    out.append(batch)
                    batch, longest_new = [], len(pairs[i][0]) + len(pairs[i][1])
                batch.append(i)
                longest = longest_new
            if batch:
                out.append(batch)
    rng.shuffle(out)
    return out


def short_first_plan(
    pairs: list[tuple[list[int], list[int]]],
    batch_tokens: int,
    seed: int,
    epochs: int = 1,
    short_first: int = 0,
    short_len: int = 8,
) -> list[list[int]]:
    """`batches`, preceded by `short_first` batches of only the pairs whose target has at most
    `short_len` tokens (as many passes over them as that takes)."""
    plan = batches(pairs, batch_tokens, seed, epochs)
    if not short_first:
        return plan
    short = [i for i, (_, t) in enumerate(pairs) if len(t) <= short_len]
    if not short:
        raise ValueError(
            f"short_first={short_first}: no pair has a target of at most short_len={short_len} tokens"
        )
    warm, repeat = [], 0
    while len(warm) < short_first:
        repeat += 1
        warm += batches([pairs[i] for i in short], batch_tokens, seed + repeat, 1)
    return [[short[i] for i in batch] for batch in warm[:short_first]] + plan


def pad_rows(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows])


def exit_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """Logits of an early exit of a T5 decoder: the final layer norm and LM head applied to an inner
    hidden state, exactly as the draft `early_exit.exit_draft` computes them."""
    hidden = model.decoder.final_layer_norm(hidden)
    if getattr(model.config, "scale_decoder_outputs", model.config.tie_word_embeddings):
        hidden = hidden * model.model_dim**-0.5
    return model.lm_head(hidden)


_LAYER = re.compile(r"^(encoder\.block|decoder\.block|model\.layers)\.(\d+)\.")
_BRANCH_OUTPUTS = (".o.weight", ".wo.weight", "o_proj.weight", "down_proj.weight")  # T5, Llama


def grow(small, config):
    """A deeper model of `config` that computes exactly what `small` computes: the small model's
    layers at the bottom of each stack, and new layers on top whose residual branches end in zeroed
    output projections (each new layer starts as the identity and learns from there). Same width
    required. Used to train the toy zoo's large models from its small ones: a deep T5 trained from
    scratch learns far slower per step than a shallow one."""
    large = type(small)(config)
    old = small.state_dict()
    depth = {}
    for key in old:
        m = _LAYER.match(key)
        if m:
            depth[m.group(1)] = max(depth.get(m.group(1), 0), int(m.group(2)) + 1)
    state = {}
    for key, value in large.state_dict().items():
        m = _LAYER.match(key)
        if m is None or int(m.group(2)) < depth.get(m.group(1), 0):
            if key not in old or old[key].shape != value.shape:
                raise ValueError(
                    f"grow: the small model has no {key} of shape {tuple(value.shape)} "
                    f"(same width and vocabulary required)"
                )
            state[key] = old[key]
        elif key.endswith(_BRANCH_OUTPUTS):
            state[key] = torch.zeros_like(value)
        else:
            state[key] = value
    large.load_state_dict(state)
    return large


def shrink(large, config):
    """A shallower model of `config` that starts from the bottom layers of each of `large`'s stacks
    and its embeddings and final norms (to be trained further). Same width required."""
    small = type(large)(config)
    old = large.state_dict()
    state = {}
    for key, value in small.state_dict().items():
        if key not in old or old[key].shape != value.shape:
            raise ValueError(
                f"shrink: the large model has no {key} of shape {tuple(value.shape)} "
                f"(same width and vocabulary required)"
            )
        state[key] = old[key]
    small.load_state_dict(state)
    return small


def _lr(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, steps - warmup))))


def _atomic_save(obj, path: str) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _loop(
    model,
    make_loss,
    plan: list,
    *,
    lr: float,
    warmup: int,
    seed: int,
    checkpoint: str | None,
    save_every: int,
    desc: str,
    progress: bool,
) -> list[float]:
    """AdamW with warm-up and cosine decay over `plan` (a list of batches); returns the loss of
    every step."""
    torch.manual_seed(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    start, losses = 0, []
    if checkpoint and os.path.exists(checkpoint):
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start, losses = state["step"], state["losses"]
        torch.set_rng_state(state["rng"])
    bar = tqdm(
        range(start, len(plan)),
        desc=desc,
        initial=start,
        total=len(plan),
        disable=not progress,
        mininterval=2.0,
    )
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = _lr(step, len(plan), lr, warmup)
        loss = make_loss(plan[step])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
        if checkpoint and (step + 1) % save_every == 0 and step + 1 < len(plan):
            _atomic_save(
                {
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "step": step + 1,
                    "losses": losses,
                    "rng": torch.get_rng_state(),
                },
                checkpoint,
            )
    model.eval()
    if checkpoint and os.path.exists(checkpoint):
        os.remove(checkpoint)
    return losses


def train_seq2seq(
    model,
    pairs: list[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    epochs: int = 1,
    batch_tokens: int = 2048,
    lr: float = 2e-3,
    warmup: int = 100,
    seed: int = 0,
    exit_layer: int | None = None,
    exit_weight: float = 0.5,
    max_steps: int | None = None,
    checkpoint: str | None = None,
    save_every: int = 200,
    desc: str = "train",
    short_first: int = 0,
    short_len: int = 8,
    plan: list[list[int]] | None = None,
    progress: bool = True,
) -> list[float]:
    """Train an encoder-decoder model with cross-entropy on `pairs` (source ids, target ids).

    `plan` (a list of batches of pair indices) replaces the default order: `epochs` shuffled epochs,
    after `short_first` batches of short pairs (see `short_first_plan`).

    With `short_first`, the first `short_first` batches hold only the pairs whose target has at most
    `short_len` tokens: a T5 trained from scratch has no positions in its cross-attention and learns
    to align source and target far sooner on short sentences (without them, the toy models learn a
    language model that ignores the source).

    With `exit_layer`, the loss adds `exit_weight` times the cross-entropy of the early exit after
    that decoder layer (see `exit_logits`), so that the first layers of the decoder make a usable
    draft model on their own."""
    if plan is None:
        plan = short_first_plan(pairs, batch_tokens, seed, epochs, short_first, short_len)
    plan = plan[:max_steps]

    def loss_of(batch):
        src = pad_rows([pairs[i][0] for i in batch], pad_id)
        tgt = pad_rows([pairs[i][1] for i in batch], -100)
        out = model(
            input_ids=src,
            attention_mask=src.ne(pad_id),
            labels=tgt,
            output_hidden_states=exit_layer is not None,
        )
        if exit_layer is None:
            return out.loss
        logits = exit_logits(model, out.decoder_hidden_states[exit_layer])
        aux = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), tgt.flatten(), ignore_index=-100
        )
        return out.loss + exit_weight * aux

    return _loop(
        model,
        loss_of,
        plan,
        lr=lr,
        warmup=warmup,
        seed=seed,
        checkpoint=checkpoint,
        save_every=save_every,
        desc=desc,
        progress=progress,
    )


def train_causal_lm(
    model,
    pairs: list[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    epochs: int = 1,
    batch_tokens: int = 2048,
    lr: float = 2e-3,
    warmup: int = 100,
    seed: int = 0,
    max_steps: int | None = None,
    checkpoint: str | None = None,
    save_every: int = 200,
    desc: str = "train",
    progress: bool = True,
) -> list[float]:
    """Train a decoder-only model on prompt + target sequences, with the loss on the target tokens
    only."""
    plan = batches(pairs, batch_tokens, seed, epochs)[:max_steps]

    def loss_of(batch):
        ids = pad_rows([pairs[i][0] + pairs[i][1] for i in batch], pad_id)
        labels = pad_rows([[-100] * len(pairs[i][0]) + pairs[i][1] for i in batch], -100)
        mask = pad_rows([[1] * (len(pairs[i][0]) + len(pairs[i][1])) for i in batch], 0)
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    return _loop(
        model,
        loss_of,
        plan,
        lr=lr,
        warmup=warmup,
        seed=seed,
        checkpoint=checkpoint,
        save_every=save_every,
        desc=desc,
        progress=progress,
    )


@torch.inference_mode()
def greedy_batch(
    model,
    sources: list[list[int]],
    *,
    pad_id: int,
    max_new_tokens: int,
    batch_size: int = 64,
    desc: str = "decode",
    progress: bool = True,
) -> list[list[int]]:
    """Greedy outputs for many sources (encoder-decoder) or prompts (decoder-only), by batched HF
    `generate`: for data and metrics, not for timing. Outputs end at EOS (included) or at
    `max_new_tokens`."""
    model.eval()
    eos = model.generation_config.eos_token_id
    ends = eos_ids(model, eos)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    for start in tqdm(
        range(0, len(order), batch_size), desc=desc, disable=not progress, mininterval=2.0
    ):
        idx = order[start : start + batch_size]
        rows = [sources[i] for i in idx]
        if model.config.is_encoder_decoder:
            src = pad_rows(rows, pad_id)
            mask, skip = src.ne(pad_id), 1
        else:  # decoder-only: pad on the left, keep only what follows the prompt
            width = max(len(r) for r in rows)
            src = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows])
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
            skip = width
        gen = model.generate(
            input_ids=src,
            attention_mask=mask,
            **capabilities.hf_cache(model),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad_id,
            eos_token_id=eos,
        )
        for row, i in zip(gen[:, skip:].tolist(), idx):
            cut = next((j + 1 for j, t in enumerate(row) if t in ends), len(row))
            out[i] = row[:cut]  # padding only follows an EOS
    return out


def calibration_data(
    large,
    pairs: list[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    max_new_tokens: int,
    batch_size: int = 64,
    progress: bool = True,
) -> list[tuple[list[int], list[int]]]:
    """Prediction alignment data: each training source paired with the large model's greedy output
    for it. Outputs cut off at `max_new_tokens` are left out: they are mostly repetition loops, and
    a small model trained on them learns to loop (on the toy zoo, 1.4% of outputs made the aligned
    small's translations a third too long)."""
    outputs = greedy_batch(
        large,
        [s for s, _ in pairs],
        pad_id=pad_id,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        desc="calibration data",
        progress=progress,
    )
    ends = eos_ids(large, None)
    return [(s, o) for (s, _), o in zip(pairs, outputs) if o and o[-1] in ends]
