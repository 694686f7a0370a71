"""What a model allows the engine to do exactly, checked once per model before the first token.

bildlab's tokens are transformers' greedy tokens or bildlab refuses, before any token, with
`Unsupported` (one exception type, a ValueError) naming the model class, the method and the reason.
What is checked:

    forward     the cache argument (`cache`, or `past_key_values` before its rename): a model without one is refused;
                position ids: a decoder-only forward that takes them gets them built from the attention mask, as
                transformers' `generate` builds them (`_prepare_position_ids_for_generation`), in `generate` and
                `generate_batch` alike; one that takes none derives them itself, so a batch never left-pads it
                (`generate_batch` then batches equal-length rows only).
    cache       probed once per model (`probe`) on the cache bildlab builds: a forward that fails on it is refused
                with its error; a cache that cannot be cropped (a recurrent state; transformers' `Cache.is_croppable`,
                which its assisted generation also checks), or tokens fed several at once that do not give the logits
                of one token after another (a non-causal decoder, positions derived from the tokens), refuse the
                methods that roll back (speculative, bild with a draft) in `generate`; `generate_batch` pads only a
                model whose padded rows give the unpadded row's logits, and batches equal-length rows otherwise.
    generation  settings of the model's generation config that transformers' greedy `generate` turns into logits
    config      processors (forced_eos_token_id, no_repeat_ngram_size, ...) are refused by name: bildlab applies
                none, and does not ignore them silently. Clear them on `model.generation_config` to decode without.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import weakref

import torch
from transformers import DynamicCache, EncoderDecoderCache, PreTrainedModel


class Unsupported(ValueError):
    """bildlab cannot give this model's exact tokens with this method; raised before the first
    token."""


@dataclasses.dataclass(frozen=True)
class Forward:
    """What a model class's forward takes."""

    cache_kw: str | None  # the cache argument; None: the forward takes no cache
    keep_kw: bool  # logits_to_keep
    # decoder-only and takes position_ids: built from the attention mask, as transformers' generate
    positions: bool


@functools.cache
def forward_of(cls: type) -> Forward:
    params = inspect.signature(cls.forward).parameters
    cache_kw = next((k for k in ("cache", "past_key_values") if k in params), None)
    return Forward(cache_kw, "logits_to_keep" in params, "position_ids" in params)


def forward(model: PreTrainedModel) -> Forward:
    """What this model's forward takes; `positions` only for a decoder-only model (transformers'
    generate passes no decoder position ids)."""
    fwd = forward_of(type(model))
    return dataclasses.replace(fwd, positions=fwd.positions and not model.config.is_encoder_decoder)


def new_cache(model: PreTrainedModel, record: bool = True):
    """The KV cache bildlab builds for one model (`views.View`, `batch._Rows`), as transformers'
    generate builds it."""
    if model.config.is_encoder_decoder:
        # layers are added as the decoder uses them: a config-built cache takes the encoder's layer
        # count (transformers 5.x), which breaks models with more decoder than encoder layers
        return EncoderDecoderCache(DynamicCache(), DynamicCache())
    cache = DynamicCache(config=model.config)  # knows sliding-window and linear-attention layers
    if record:
        cache.activate_past_recording()  # ... and keeps the states that a crop may need
    return cache


def hf_cache(model: PreTrainedModel) -> dict:
    """The cache argument for transformers' own `generate` on `model`: for an encoder-decoder, a
    cache of ours ({cache keyword: new_cache}), since the one generate builds from the config takes
    the encoder's layer count (transformers 5.x) and fails on a deeper decoder; {} otherwise."""
    if not model.config.is_encoder_decoder:
        return {}
    return {forward(model).cache_kw: new_cache(model)}


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids from a [rows, n] attention mask, as transformers' generate: real tokens count
    from 0, pads 0."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)


# ----------------------------------------------------------------------------------------------------------------------
# The cache after a prefill, probed once per model


@dataclasses.dataclass(frozen=True)
class Cache:
    # a one-token-a-step forward failed on bildlab's cache: its exception, one line
    error: str | None
    # why several new tokens fed at once (a verification) are not one token after another
    chunks: str | None
    croppable: bool
    kind: str  # what the cache holds, for messages
    # decoder-only: a left-padded row gets the unpadded row's logits (prefill and a step)
    pads: bool = False
    # encoder-decoder: a decoder row left-padded by one gets the unpadded row's logits
    shifts: bool = False
    # a model that derives positions from the tokens (M2M100's decoder): the pad token; a chunk is
    # fed in pieces ending after it, so that every token keeps its one-after-another position
    pad_split: int | None = None


_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def one_line(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def feed_logits(model, fwd, cache, ids, past=0, mask=None, encoded=None) -> torch.Tensor:
    """Float logits [rows, n, vocab] of feeding ids [rows, n] on `cache` (`past` positions cached,
    or `mask`)."""
    kw = {fwd.cache_kw: cache, "use_cache": True}
    if encoded is not None:
        kw.update(encoder_outputs=encoded, decoder_input_ids=ids)
    else:
        kw["input_ids"] = ids
        if mask is not None:
            kw["attention_mask"] = mask
        if fwd.positions:
            kw["position_ids"] = (
                positions(mask)[:, -ids.shape[1] :]
                if mask is not None
                else torch.arange(past, past + ids.shape[1], device=ids.device)[None]
            )
    return model(**kw).logits.float()


def max_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def differs(a: torch.Tensor, b: torch.Tensor, noise: float = 0.0) -> bool:
    """Beyond rounding: ten times the `noise` seen between two equal computations, and 1e-4 of the
    logits' scale."""
    return max_gap(a, b) > 10 * noise + 1e-4 * a.abs().max().item()


@torch.inference_mode()
def probe(model: PreTrainedModel) -> Cache:
    """On a fresh cache: a prefill (two prompt tokens, or one decoder token after a two-token
    source) -- can the cache then be cropped? -- and a step of one token; then `_chunks` and
    `_pads`. Once per model."""
    if model in _PROBED:
        return _PROBED[model]
    fwd, device, vocab = forward(model), model.device, model.config.get_text_config().vocab_size

    def ids(*rows):
        return torch.tensor(rows, device=device) % vocab

    encoded = None
    try:
        cache = new_cache(model)
        if model.config.is_encoder_decoder:
            # as views.View runs it
            encoded = model.get_encoder()(input_ids=ids([3, 4]), return_dict=True)
            prefix = ids([model.generation_config.decoder_start_token_id or 0])
        else:
            prefix = ids([3, 4])
        first = feed_logits(model, fwd, cache, prefix, encoded=encoded)
        # after a prefill, as transformers' assisted generation checks it
        croppable = bool(cache.is_croppable)
        self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        layers = {type(layer).__name__ for layer in getattr(self_cache, "layers", [])}
        kind = (
            "a recurrent state"
            if any("Linear" in n for n in layers)
            else ", ".join(sorted(layers)) or "empty"
        )
        step = feed_logits(model, fwd, cache, ids([5]), prefix.shape[1], encoded=encoded)
    except Exception as e:  # noqa: BLE001 -- any failure here is a model bildlab cannot run: refused, with its reason
        found = _PROBED[model] = Cache(one_line(e), None, False, "unknown")
        return found
    chunks = _chunks(model, fwd, cache, prefix.shape[1] + 1, encoded, ids) if croppable else None
    pad_split = None
    if isinstance(chunks, int):  # exact once split after the pad token
        chunks, pad_split = None, chunks
    pads = encoded is None and fwd.positions and croppable and _pads(model, fwd, ids, first, step)
    shifts = encoded is not None and croppable and _shifts(model, fwd, ids, prefix, encoded)
    found = _PROBED[model] = Cache(None, chunks, croppable, kind, pads, shifts, pad_split)
    return found


def _chunks(model, fwd, cache, past, encoded, ids) -> str | int | None:
    """Why tokens fed several at once, as a verification feeds them, do not give the logits of one
    token after another (None: they do): the first token must not see the second. A pad token that
    moves the positions after it (a model that derives positions from the tokens, as M2M100's
    decoder) gives the pad token's id instead: fed in pieces that end after a pad, the chunk is
    exact (`split_after_pad`)."""

    def feed(*tokens):
        return feed_logits(model, fwd, cache, ids(list(tokens)), past, encoded=encoded)[0]

    def back(n):
        cache.crop(-n)

    try:
        chunk = feed(6, 7)
        back(2)
        if differs(chunk[0], feed(6, 8)[0]):
            return (
                "a token sees the tokens fed after it in the same call: not a causal decoder (for a BERT-like "
                "model, config.is_decoder=False)"
            )
        pad = model.generation_config.pad_token_id
        if isinstance(pad, int):
            back(2)
            feed(6)
            noise = max_gap(chunk[1], feed(7)[-1])
            back(2)
            padded = feed(pad, 7)
            back(2)
            feed(pad)
            if differs(padded[1], feed(7)[-1], noise):
                return pad
        back(2)
    except Exception as e:  # noqa: BLE001
        return one_line(e)
    return None


def _pads(model, fwd, ids, first, step) -> bool:
    """Whether a row left-padded by one gets the unpadded row's logits at the prefill and the next
    step (beyond the rounding between a batch row and the same row alone)."""
    pad = model.generation_config.pad_token_id
    pad = pad if isinstance(pad, int) else 0
    try:
        cache = new_cache(model, record=False)
        mask = torch.tensor([[0, 1, 1], [1, 1, 1]], device=first.device)
        batch = feed_logits(model, fwd, cache, ids([pad, 3, 4], [9, 3, 4]), mask=mask)
        noise = max_gap(
            batch[1, -1],
            feed_logits(model, fwd, new_cache(model, record=False), ids([9, 3, 4]))[0, -1],
        )
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        after = feed_logits(model, fwd, cache, ids([5], [5]), mask=mask)
        return not differs(batch[0, -1], first[0, -1], noise) and not differs(
            after[0, -1], step[0, -1], noise
        )
    except Exception:  # noqa: BLE001 -- a model that cannot take a padded batch is batched without padding
        return False


def _shifts(model, fwd, ids, prefix, encoded) -> bool:
    """Whether a decoder row left-padded by one (masked by decoder_attention_mask) gets the
    unpadded row's logits at its last position: the decoder's positions are relative (T5), not
    counted from the first column (BART's learned positions)."""
    pad = model.generation_config.pad_token_id
    pad = pad if isinstance(pad, int) else 0
    start = int(prefix[0, 0])
    try:

        def feed(rows, mask):
            kw = {fwd.cache_kw: new_cache(model, record=False), "use_cache": True}
            twice = type(encoded)(
                last_hidden_state=encoded.last_hidden_state.expand(len(rows), -1, -1)
            )
            kw.update(encoder_outputs=twice, decoder_input_ids=ids(*rows))
            if mask is not None:
                kw["decoder_attention_mask"] = torch.tensor(mask, device=prefix.device)
            return model(**kw).logits.float()

        alone = feed([[start, 5, 6]], None)[0, -1]
        noise = max_gap(alone, feed([[start, 5, 6], [start, 5, 6]], None)[1, -1])
        padded = feed([[pad, start, 5, 6], [start, 5, 6, 7]], [[0, 1, 1, 1], [1, 1, 1, 1]])
        return not differs(padded[0, -1], alone, noise)
    except Exception:  # noqa: BLE001 -- a decoder that cannot take the mask is not batched raggedly
        return False


def ragged(model: PreTrainedModel) -> str | None:
    """Why rows of this model cannot advance raggedly in one batch (`ragged.py`), or None: its
    cache must be cropped and realigned per row (transformers' DynamicLayer tensors), several
    tokens fed at once must be one token after another, and a left-padded row must get the
    unpadded row's logits (decoder-only: position ids; encoder-decoder: relative positions)."""
    cache = probe(model)
    if cache.error is not None:
        return f"its forward fails on bildlab's cache ({cache.error})"
    if not cache.croppable or cache.kind != "DynamicLayer":
        return f"its cache holds {cache.kind}, not rows of DynamicLayer tensors to realign"
    if cache.chunks is not None:
        return cache.chunks
    if cache.pad_split is not None:
        return (
            "it derives positions from the tokens: a drafted pad token moves the positions after it"
        )
    if model.config.is_encoder_decoder and not cache.shifts:
        return "a decoder row shifted right by padding gets other logits (absolute positions)"
    if not model.config.is_encoder_decoder and not cache.pads:
        return "a left-padded row gets other logits than the same row alone"
    return None


# ----------------------------------------------------------------------------------------------------------------------
# The generation config's logits processors (transformers' `GenerationMixin._get_logits_processor`,
# greedy)

_NEUTRAL = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "guidance_scale": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": 0,
}
PROCESSORS = (
    "forced_bos_token_id",
    "forced_eos_token_id",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "repetition_penalty",
    "encoder_repetition_penalty",
    "min_length",
    "min_new_tokens",
    "bad_words_ids",
    "suppress_tokens",
    "begin_suppress_tokens",
    "sequence_bias",
    "exponential_decay_length_penalty",
    "guidance_scale",
    "watermarking_config",
)


def processors(model: PreTrainedModel) -> list[str]:
    """The settings of the model's generation config that make transformers' greedy generate process
    the logits."""
    config = model.generation_config
    found = []
    for name in PROCESSORS:
        value = getattr(config, name, None)
        if (
            value is None
            or value == _NEUTRAL.get(name)
            or (isinstance(value, (list, tuple, dict)) and not value)
        ):
            continue
        found.append(f"{name}={value!r}")
    return found


# ----------------------------------------------------------------------------------------------------------------------
# The check that `generate` and `generate_batch` make before the first token


def require(
    model: PreTrainedModel, method: str, rolls_back: bool, batch: bool = False, role: str = "model"
) -> Forward:
    """Refuse (`Unsupported`) what cannot be exact for `model` with `method`; `rolls_back`: the
    engine will crop the cache (a draft runs). Returns what the forward takes."""
    name = type(model).__name__
    where = f"{name}: method {method!r}" + (" in generate_batch" if batch else "")
    if role != "model":
        where += f" (as the {role} model)"
    fwd = forward(model)
    if fwd.cache_kw is None:
        raise Unsupported(
            f"{where} needs a forward that takes a cache (past_key_values); this model's forward takes "
            "none, and bildlab does not re-feed the whole sequence at every step"
        )
    settings = processors(model)
    if settings:
        raise Unsupported(
            f"{where}: the generation config sets {', '.join(settings)}, which transformers' generate "
            "applies as logits processors and bildlab does not; clear them on model.generation_config "
            "(e.g. model.generation_config.forced_eos_token_id = None) to decode without them"
        )
    cache = probe(model)
    if cache.error is not None:
        raise Unsupported(f"{where}: its forward fails on bildlab's cache ({cache.error})")
    if rolls_back and not batch and not cache.croppable:
        raise Unsupported(
            f"{where} needs a cache that can be cropped (this model's cache holds {cache.kind}); "
            "greedy and generate_batch work"
        )
    if rolls_back and not batch and cache.chunks is not None:
        raise Unsupported(
            f"{where} needs a forward that takes several new tokens at once on its cache, as one "
            f"token after another, to verify a draft ({cache.chunks}); greedy and generate_batch work"
        )
    return fwd


def split_after_pad(ids: torch.Tensor, pad: int) -> list[torch.Tensor]:
    """ids [1, n] cut after every pad token but the last position: fed one piece after another, a
    model that derives positions from the tokens gives each token its one-after-another position."""
    ends = (ids[0, :-1] == pad).nonzero()[:, 0].tolist()
    if not ends:
        return [ids]
    bounds = [0] + [e + 1 for e in ends] + [ids.shape[1]]
    return [ids[:, a:b] for a, b in zip(bounds, bounds[1:])]


def pads(model: PreTrainedModel) -> bool:
    """Whether `generate_batch` may left-pad this decoder-only model: it takes position ids, its
    cache holds no state that padding would enter (a croppable cache), and a padded row gets the
    unpadded row's logits (probed)."""
    return probe(model).pads


def require_pair(
    model: PreTrainedModel,
    small: PreTrainedModel | None,
    method: str,
    drafts: bool,
    batch: bool = False,
) -> None:
    """`require` for the large model, and for the small one where a draft runs."""
    require(model, method, drafts, batch)
    if drafts and small is not None:
        require(small, method, drafts, batch, role="small")
