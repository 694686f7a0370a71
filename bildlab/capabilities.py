"""What a model allows the engine to do exactly, checked once per model before the first token.

bildlab's tokens are transformers' greedy tokens or bildlab refuses, before any token, with `Unsupported` (one
exception type, a ValueError) naming the model class, the method and the reason. What is checked:

    forward     the cache argument (`cache`, or `past_key_values` before its rename): a model without one is refused;
                position ids: a decoder-only forward that takes them gets them built from the attention mask, as
                transformers' `generate` builds them (`_prepare_position_ids_for_generation`), in `generate` and
                `generate_batch` alike; one that takes none derives them itself, so a batch never left-pads it
                (`generate_batch` then batches equal-length rows only).
    cache       probed once per model with a two-token prefill on the cache bildlab builds: a forward that fails on it
                is refused with its error; a cache that cannot be cropped (a recurrent or convolution state, transformers'
                `Cache.is_croppable`, which its assisted generation also checks) refuses the methods that roll back
                (speculative, bild with a draft), and keeps `generate_batch` to equal-length rows (no padding).
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
    """bildlab cannot give this model's exact tokens with this method; raised before the first token."""


@dataclasses.dataclass(frozen=True)
class Forward:
    """What a model class's forward takes."""

    cache_kw: str | None  # the cache argument; None: the forward takes no cache
    keep_kw: bool  # logits_to_keep
    positions: bool  # decoder-only and takes position_ids: built from the attention mask, as transformers' generate


@functools.lru_cache(maxsize=None)
def forward_of(cls: type) -> Forward:
    params = inspect.signature(cls.forward).parameters
    cache_kw = next((k for k in ("cache", "past_key_values") if k in params), None)
    return Forward(cache_kw, "logits_to_keep" in params, "position_ids" in params)


def forward(model: PreTrainedModel) -> Forward:
    """What this model's forward takes; `positions` only for a decoder-only model (generate passes none to a
    decoder)."""
    fwd = forward_of(type(model))
    return dataclasses.replace(fwd, positions=fwd.positions and not model.config.is_encoder_decoder)


def new_cache(model: PreTrainedModel, record: bool = True):
    """The KV cache bildlab builds for one model (`views.View`, `batch._Rows`), as transformers' generate builds it."""
    if model.config.is_encoder_decoder:
        # layers are added as the decoder uses them: a config-built cache takes the encoder's layer count
        # (transformers 5.x), which breaks models with more decoder than encoder layers
        return EncoderDecoderCache(DynamicCache(), DynamicCache())
    cache = DynamicCache(config=model.config)  # knows sliding-window and linear-attention layers
    if record:
        cache.activate_past_recording()  # ... and keeps the states that a crop may need
    return cache


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids from a [rows, n] attention mask, as transformers' generate: real tokens count from 0, pads 0."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)


# ----------------------------------------------------------------------------------------------------------------------
# The cache after a prefill, probed once per model


@dataclasses.dataclass(frozen=True)
class Cache:
    error: str | None  # a one-token-a-step forward failed on bildlab's cache: its exception, one line
    chunks: str | None  # feeding several new tokens at once (a verification) failed: its exception, one line
    croppable: bool
    kind: str  # what the cache holds, for messages


_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _one_line(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


@torch.inference_mode()
def probe(model: PreTrainedModel) -> Cache:
    """On a fresh cache: a prefill (two prompt tokens, or one decoder token after a two-token source) -- can the cache
    then be cropped? -- a step of one token, then two tokens at once, as a verification feeds them."""
    if model in _PROBED:
        return _PROBED[model]
    fwd, cache, device = forward(model), new_cache(model), model.device
    vocab = model.config.get_text_config().vocab_size
    kw, past = {fwd.cache_kw: cache, "use_cache": True}, 0

    def feed(ids):
        nonlocal past
        ids = torch.tensor([ids], device=device) % vocab
        if model.config.is_encoder_decoder:
            kw["decoder_input_ids"] = ids
        else:
            kw["input_ids"] = ids
            if fwd.positions:
                kw["position_ids"] = torch.arange(past, past + ids.shape[1], device=device)[None]
        model(**kw)
        past += ids.shape[1]

    error = chunks = None
    croppable, kind = False, "unknown"
    try:
        if model.config.is_encoder_decoder:
            kw["encoder_outputs"] = model.get_encoder()(input_ids=torch.tensor([[3, 4]], device=device) % vocab,
                                                        return_dict=True)  # as views.View runs it
            feed([model.generation_config.decoder_start_token_id or 0])
        else:
            feed([3, 4])
        croppable = bool(cache.is_croppable)  # after a prefill, as transformers' assisted generation checks it
        self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        layers = {type(layer).__name__ for layer in getattr(self_cache, "layers", [])}
        kind = "a recurrent state" if any("Linear" in n for n in layers) else ", ".join(sorted(layers)) or "empty"
        feed([5])
    except Exception as e:  # noqa: BLE001 -- any failure here is a model bildlab cannot run: refused, with its reason
        error = _one_line(e)
    if error is None and croppable:
        try:
            feed([6, 7])
        except Exception as e:  # noqa: BLE001
            chunks = _one_line(e)
    found = Cache(error, chunks, croppable, kind)
    _PROBED[model] = found
    return found


# ----------------------------------------------------------------------------------------------------------------------
# The generation config's logits processors (transformers' `GenerationMixin._get_logits_processor`, greedy)

_NEUTRAL = {"repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "guidance_scale": 1.0,
            "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "min_length": 0, "min_new_tokens": 0}
PROCESSORS = ("forced_bos_token_id", "forced_eos_token_id", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
              "repetition_penalty", "encoder_repetition_penalty", "min_length", "min_new_tokens", "bad_words_ids",
              "suppress_tokens", "begin_suppress_tokens", "sequence_bias", "exponential_decay_length_penalty",
              "guidance_scale", "watermarking_config")


def processors(model: PreTrainedModel) -> list[str]:
    """The settings of the model's generation config that make transformers' greedy generate process the logits."""
    config = model.generation_config
    found = []
    for name in PROCESSORS:
        value = getattr(config, name, None)
        if value is None or value == _NEUTRAL.get(name) or (isinstance(value, (list, tuple, dict)) and not value):
            continue
        found.append(f"{name}={value!r}")
    return found


# ----------------------------------------------------------------------------------------------------------------------
# The check that `generate` and `generate_batch` make before the first token


def require(model: PreTrainedModel, method: str, rolls_back: bool, batch: bool = False,
            role: str = "model") -> Forward:
    """Refuse (`Unsupported`) what cannot be exact for `model` with `method`; `rolls_back`: the engine will crop the
    cache (a draft runs). Returns what the forward takes."""
    name = type(model).__name__
    where = f"{name}: method {method!r}" + (" in generate_batch" if batch else "")
    if role != "model":
        where += f" (as the {role} model)"
    fwd = forward(model)
    if fwd.cache_kw is None:
        raise Unsupported(f"{where} needs a forward that takes a cache (past_key_values); this model's forward takes "
                          "none, and bildlab does not re-feed the whole sequence at every step")
    settings = processors(model)
    if settings:
        raise Unsupported(f"{where}: the generation config sets {', '.join(settings)}, which transformers' generate "
                          "applies as logits processors and bildlab does not; clear them on model.generation_config "
                          "(e.g. model.generation_config.forced_eos_token_id = None) to decode without them")
    cache = probe(model)
    if cache.error is not None:
        raise Unsupported(f"{where}: its forward fails on bildlab's cache ({cache.error})")
    if rolls_back and not batch and not cache.croppable:
        raise Unsupported(f"{where} needs a cache that can be cropped (this model's cache holds {cache.kind}); "
                          "greedy and generate_batch work")
    if rolls_back and not batch and cache.chunks is not None:
        raise Unsupported(f"{where} needs a forward that takes several new tokens at once on its cache, to verify a "
                          f"draft ({cache.chunks}); greedy and generate_batch work")
    return fwd


def pads(model: PreTrainedModel) -> bool:
    """Whether `generate_batch` may left-pad this decoder-only model: it takes position ids, and its cache holds no
    state that padding would enter (a croppable cache)."""
    return forward(model).positions and probe(model).croppable


def require_pair(model: PreTrainedModel, small: PreTrainedModel | None, method: str, drafts: bool,
                 batch: bool = False) -> None:
    """`require` for the large model, and for the small one where a draft runs."""
    require(model, method, drafts, batch)
    if drafts and small is not None:
        require(small, method, drafts, batch, role="small")
