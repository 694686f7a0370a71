"""Static caches whose rollback is free, and compiled decoding steps (`generate(..., cache="static",
compile=True)`).

gpt-fast's way over unmodified transformers models: every model gets a preallocated `StaticCache`
sized to the input, the budget and the longest fed chunk; keys and values are written at the cache's
current position (transformers 5.x keeps it in a tensor per layer, `StaticLayer.cumulative_length`)
and attention is masked by position, so a rollback only moves the position back: nothing is copied,
and a stale position past the end is never visible (the causal mask hides every position after the
last one fed; the next feed overwrites it).

    view          one model's cache                         rollback
    View          DynamicCache (views.py)                   crop: tensors sliced
    StaticView    StaticCache, the same buffer per model,   the position moves back (one in-place op for all
                  role and cache length, reset per input    layers)

Encoder outputs are computed once per input and the cross-attention keys and values once, at the
first decoder call (transformers' `EncoderDecoderCache.is_updated`); an early exit of the large
model (`early_exit.py`) writes the large model's own static cache, its bottom layers, which it moves
back at hand-over.

With `compile=True` each model's forward and encoder are compiled once (`torch.compile`; CUDA
graphs, the options of mode "reduce-overhead", on a GPU; the default mode on CPU) and every call
after the first feeds a fixed number of positions: the fed chunk is padded up to the next of
`BUCKETS`, the padding written past the real positions and moved back at once, so the compiled step
sees a few fixed shapes and is reused for every input. The cache length is rounded up to a multiple
of `LENGTH_STEP`, so inputs of different lengths share one cache and one compiled graph, and an
encoder-decoder's graphs take any source length from the first. A chunk longer than the largest
bucket runs eagerly on the same cache, as does the first call (a prompt; the cross-attention keys
and values). Compilation happens at the first call of each shape: `warm_up` runs those calls ahead,
once (on CUDA for every source length: a CUDA graph has one shape), so that no timed example pays
for it. A decode that meets a model (and draft) whose steps for its cache were not warmed runs
`warm_up` on its own input first (`views`: every bucket, not only the ones this decode feeds), with
one `CompileNotice` warning saying so and how long it took; later decodes compile nothing more. A
call whose signature has run once with every guard runs with only the guards that tell
graphs apart (`StaticView._compiled`)."""

from __future__ import annotations

import logging
import warnings
import weakref

import torch
from transformers import DynamicCache, EncoderDecoderCache, PreTrainedModel, StaticCache
from transformers.cache_utils import StaticSlidingWindowLayer

from . import capabilities
from .early_exit import decoder_layers, shares_bottom_layers
from .timing import clock as _clock
from .views import View

CACHES = ("dynamic", "static")
# fed positions per compiled call (a verification of m drafted tokens feeds m + 1)
BUCKETS = (1, 2, 4, 8, 16)
LENGTH_STEP = 64  # cache lengths are rounded up to a multiple of this (fewer shapes to compile)

OPTIONS = {"guard_filter_fn": torch.compiler.skip_guard_on_inbuilt_nn_modules_unsafe}
# mode "reduce-overhead" (torch.compile takes a mode or options, not both)
CUDA_GRAPHS = {"triton.cudagraphs": True}
# model -> {(length, device, dtype, role): cache}
_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# model -> {"forward"/"encoder": compiled}
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# model -> call signatures its compiled forward ran
_SEEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# model -> the caches whose every step `warm_up` compiled (`_warm_key`)
_WARM: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
log = logging.getLogger(__name__)


class CompileNotice(UserWarning):
    """A decode with `compile=True` compiled its steps first (`warm_up` does it ahead of timing)."""


def check(cache: str, compile: bool) -> None:
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {', '.join(map(repr, CACHES))}; got {cache!r}")
    if not isinstance(compile, bool):
        raise TypeError(f"compile must be True or False; got {compile!r}")
    if compile and cache != "static":
        raise ValueError(
            "compile=True needs cache='static' (a dynamic cache changes shape at every step)"
        )


def cache_length(prefix: int, max_new_tokens: int) -> int:
    """Positions a model's static cache holds: the prefix, the budget, and the padding of the
    largest bucket."""
    need = prefix + max_new_tokens + BUCKETS[-1]
    return -(-need // LENGTH_STEP) * LENGTH_STEP


def require(
    model: PreTrainedModel, cache: StaticCache, length: int, compile: bool, role: str = "model"
) -> None:
    """Refuse, naming the model, what its static cache cannot do exactly: layers that are not
    attention layers (a recurrent state), sliding-window layers whose window is shorter than the
    cache (a rollback past an evicted position could not be undone: transformers' `is_croppable`),
    sliding-window layers compiled (their position is a Python int, one graph per position), and a
    model whose logits on a static cache are not those on the dynamic cache (`_probe`)."""
    name = f"{type(model).__name__} (the {role})"
    kinds = {type(layer).__name__ for layer in cache.layers}
    if kinds - {"StaticLayer", "StaticSlidingWindowLayer"}:
        raise capabilities.Unsupported(
            f"cache='static': {name} has cache layers {sorted(kinds)}; bildlab's static cache takes "
            "attention layers only: use cache='dynamic'"
        )
    sliding = [layer for layer in cache.layers if isinstance(layer, StaticSlidingWindowLayer)]
    if sliding and not cache.is_croppable:
        raise capabilities.Unsupported(
            f"cache='static': {name} has sliding-window layers (window {sliding[0].max_cache_len}) "
            f"shorter than the static cache ({length} positions): a rollback could not "
            "restore evicted positions; lower max_new_tokens or use cache='dynamic'"
        )
    if sliding and compile:
        raise capabilities.Unsupported(
            f"compile=True: {name} has sliding-window layers, whose cache position is a Python int "
            "(a compiled graph per position); use compile=False (cache='static' works eagerly)"
        )
    why = _probe(model)
    if why is not None:
        raise capabilities.Unsupported(f"cache='static': {name}: {why}; use cache='dynamic'")


# model -> why its static cache is not exact (None: it is)
_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@torch.inference_mode()
def _probe(model: PreTrainedModel) -> str | None:
    """Why the model's logits on a static cache differ from those on the dynamic cache (the one
    `capabilities.probe` vets), or None: a prefill, one token, then two at once, fed to both and
    compared beyond rounding. Once per model."""
    if model in _PROBED:
        return _PROBED[model]
    fwd, device = capabilities.forward(model), model.device
    vocab = model.config.get_text_config().vocab_size

    def ids(*tokens):
        return torch.tensor([tokens], device=device) % vocab

    why = None
    try:
        encoded = None
        if model.config.is_encoder_decoder:
            encoded = model.get_encoder()(input_ids=ids(3, 4, 5), return_dict=True)
            chunks = [ids(model.generation_config.decoder_start_token_id or 0)]
        else:
            chunks = [ids(3, 4)]
        static = StaticCache(config=_decoder_config(model), max_cache_len=LENGTH_STEP)
        cache = EncoderDecoderCache(static, DynamicCache()) if encoded is not None else static
        dynamic = capabilities.new_cache(model, record=False)
        past = 0
        for chunk in chunks + [ids(5), ids(6, 7)]:
            got = capabilities.feed_logits(model, fwd, cache, chunk, past, encoded=encoded)
            want = capabilities.feed_logits(model, fwd, dynamic, chunk, past, encoded=encoded)
            past += chunk.shape[1]
            if capabilities.differs(want, got):
                why = (
                    "its logits on a static cache differ from those on the dynamic cache (by "
                    f"{capabilities.max_gap(want, got):.3g} after {past} positions)"
                )
                break
    except Exception as e:  # noqa: BLE001 -- a forward that fails on a static cache: refused, with its reason
        why = f"its forward fails on a static cache ({capabilities.one_line(e)})"
    _PROBED[model] = why
    return why


def _decoder_config(model: PreTrainedModel):
    """The config that sizes the decoder's cache: the decoder stack's own where it has one (T5's
    counts num_decoder_layers), else the model's (FSMT's decoder keeps none)."""
    return getattr(model.get_decoder(), "config", model.config)


def _static_cache(model: PreTrainedModel, length: int, device, role: str) -> StaticCache:
    """The model's cache of this length in this role (a model that drafts for itself holds two),
    reset."""
    held, key = _CACHES.setdefault(model, {}), (length, str(device), model.dtype, role)
    cache = held.get(key)
    # sized by the decoder's own config: an encoder-decoder's top-level config may count the
    if cache is None:
        # encoder's layers (T5's num_layers; its decoder stack's config holds num_decoder_layers)
        cache = held[key] = StaticCache(config=_decoder_config(model), max_cache_len=length)
    # positions back to 0 (and stale keys zeroed: cheap, and no NaN can ever enter a masked product)
    cache.reset()
    return cache


def compiled(model: PreTrainedModel, part: str = "forward"):
    """The model's forward (or its encoder's, `part="encoder"`) compiled once, held per model: CUDA
    graphs on a GPU, the default mode on CPU."""
    held = _COMPILED.setdefault(model, {})
    if part not in held:
        # one graph per model, bucket and (encoder-decoder) source-length class: above dynamo's
        # default
        limit = 64
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, limit)
        # a fresh dict for each: torch.compile pops "guard_filter_fn" from the one it is given
        options = dict(OPTIONS, **(CUDA_GRAPHS if model.device.type == "cuda" else {}))
        fn = model.get_encoder().forward if part == "encoder" else model.forward
        held[part] = torch.compile(fn, options=options)
    return held[part]


def _any_length(tensor: torch.Tensor, dim: int) -> None:
    """Compile `tensor`'s source-length dimension for any length from the first graph on (else
    dynamo compiles each graph twice: for the first length, then again for any at the second)."""
    torch._dynamo.maybe_mark_dynamic(tensor, dim)


class StaticView(View):
    """A model on a static cache: `logits` writes at the cache's position, `crop` moves it back (no
    copy)."""

    def __init__(
        self,
        model: PreTrainedModel,
        input_ids: torch.Tensor,
        length: int,
        compile: bool = False,
        role: str = "model",
    ):
        static = _static_cache(model, length, input_ids.device, role)
        require(model, static, length, compile, role)
        self.model, self.encoder_decoder = model, bool(model.config.is_encoder_decoder)
        fwd = capabilities.forward(model)
        self.cache_kw, self.keep_kw, self.positions = fwd.cache_kw, fwd.keep_kw, fwd.positions
        self.length, self.compile, self.self_cache = length, compile, static
        self.sliding = any(isinstance(layer, StaticSlidingWindowLayer) for layer in static.layers)
        self.forward = compiled(model) if compile else model
        self.seen = _SEEN.setdefault(model, set())
        self.source = input_ids.shape[1] if self.encoder_decoder else 0
        # CUDA graphs: outputs are overwritten by the next run
        self.graphs = compile and model.device.type == "cuda"
        self.cached, self.calls, self.seconds = 0, 0, 0.0
        self.pad_split = capabilities.probe(model).pad_split
        t0 = _clock(input_ids.device)
        if self.encoder_decoder:  # once per input; compiled, any source length takes one graph
            encoder = compiled(model, "encoder") if compile else model.get_encoder()
            self._step()
            # compiled: a copy made here, as every input's (a caller's tensor may carry other
            # dispatch keys)
            source = input_ids.clone() if compile else input_ids
            if compile:
                _any_length(source, 1)
            self.encoder_outputs = encoder(input_ids=source, return_dict=True)
            if self.graphs:
                self.encoder_outputs.last_hidden_state = (
                    self.encoder_outputs.last_hidden_state.clone()
                )
            if compile:
                _any_length(self.encoder_outputs.last_hidden_state, 1)
        # cross-attention: computed once, at the first decoder call, then read
        self.cache = EncoderDecoderCache(static, DynamicCache()) if self.encoder_decoder else static
        self.seconds += _clock(input_ids.device) - t0

    def _step(self) -> None:
        if self.graphs:  # the previous run's outputs are no longer read (cloned where kept)
            torch.compiler.cudagraph_mark_step_begin()

    def _logits(self, seq: torch.Tensor, end: int, keep: int) -> torch.Tensor:
        """Feed seq[cached:end] and return float logits [keep, vocab] for the last `keep` fed
        positions (`View.logits` splits a chunk where positions derive from the tokens)."""
        n = end - self.cached
        # compiled: every call of at most BUCKETS[-1] positions but the first (a prompt; the
        # cross-attention keys, computed once and kept)
        eager = not self.compile or self.cached == 0
        width = None if eager else next((b for b in BUCKETS if b >= n), None)
        new = seq[:, self.cached : end]
        kwargs = {self.cache_kw: self.cache, "use_cache": True}
        if width is None:  # eager
            width, forward = n, self.model
        # compiled: a fresh [1, width] tensor (a slice's stride would change with the buffer), width
        # static
        else:
            forward = self.forward
            new = (
                torch.cat([new, new[:, -1:].expand(1, width - n)], 1)
                if width > n
                else new[0].clone()[None]
            )
            # the encoder's length may vary (one graph), the bucket may not
            torch._dynamo.mark_static(new, 1)
        if self.encoder_decoder:
            kwargs.update(decoder_input_ids=new, encoder_outputs=self.encoder_outputs)
        else:
            kwargs["input_ids"] = new
            # padded positions repeat the last real one (their outputs are never read)
            if self.positions:
                kwargs["position_ids"] = (
                    self.cached + torch.arange(width, device=seq.device).clamp(max=n - 1)
                )[None]
                torch._dynamo.mark_static(kwargs["position_ids"], 1)
            if self.keep_kw:
                # compiled: one constant
                kwargs["logits_to_keep"] = keep if forward is self.model else 0
        if forward is self.model:
            logits = forward(**kwargs).logits
        else:
            self._step()
            # an early exit that drafts before the large model's first call sees the cross-attention
            # keys of its own layers only: another graph
            cross = len(self.cache.cross_attention_cache.layers) if self.encoder_decoder else 0
            logits = self._compiled(
                forward, kwargs, (id(self.self_cache), width, self.source, new.dtype, cross)
            )
        # the cross-attention keys and values, made
        if self.compile and self.encoder_decoder and self.cached == 0:
            # now: the compiled steps read them at any length
            for layer in self.cache.cross_attention_cache.layers:
                _any_length(layer.keys, 2)
                _any_length(layer.values, 2)
        if width > n:
            self._back(width - n)  # the padding's positions: written, and moved back at once
            logits = logits[:, :n]
        self.cached = end
        self.calls += 1
        logits = logits[0, -keep:].float()
        return logits.clone() if self.graphs else logits

    def _compiled(self, forward, kwargs: dict, signature: tuple) -> torch.Tensor:
        """The compiled forward's logits. The first call of a signature (cache, bucket, source
        length, token dtype, cross-attention layers made, grad mode) runs every dynamo guard and
        compiles if it must; every later one only the guards that tell the compiled graphs apart
        (`skip_guard_eval_unsafe`; the rest cost about a tenth of a compiled toy step on CPU). Two
        calls of one signature differ in nothing else a guard reads, as long as the model's modules
        and config are left as they are (docs/decoding.md); a call that would need a new graph
        raises (torch's own check)."""
        signature += (torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        if signature not in self.seen:
            logits = forward(**kwargs).logits
            self.seen.add(signature)
            return logits
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            return forward(**kwargs).logits

    def _back(self, count: int, layers=None) -> None:
        layers = self.self_cache.layers if layers is None else layers
        # a sliding layer keeps a Python int beside its position tensor: its own crop moves both
        if self.sliding:
            for layer in layers:
                layer.crop(-count)
        # StaticLayer.crop, for all layers in one call: their position tensors move back (nothing is
        # copied)
        else:
            torch._foreach_sub_([layer.cumulative_length for layer in layers], count)

    def crop(self, length: int) -> None:
        """Move the position back to `length`: rejected positions stay in memory, past the end,
        never seen again."""
        if self.cached > length:
            self._back(self.cached - length)
            self.cached = length


class StaticEarlyExitView(StaticView):
    """An early exit of the large model as the draft, on the large model's static cache (its bottom
    layers): see `views.EarlyExitView`; the hand-over moves those layers' positions back to the
    large model's."""

    def __init__(self, model: PreTrainedModel, large: StaticView):
        self.model, self.large = model, large
        self.encoder_decoder, self.positions = large.encoder_decoder, large.positions
        fwd = capabilities.forward(model)
        self.cache_kw, self.keep_kw = fwd.cache_kw, fwd.keep_kw
        self.encoder_outputs = getattr(large, "encoder_outputs", None)
        self.cache, self.self_cache, self.length = large.cache, large.self_cache, large.length
        self.sliding = large.sliding
        self.compile, self.graphs = large.compile, large.graphs
        self.forward = compiled(model) if self.compile else model
        self.seen, self.source = _SEEN.setdefault(model, set()), large.source
        self.depth = len(decoder_layers(model))
        self.cached, self.pad_split = large.cached, large.pad_split
        self.calls = 0
        self.seconds = 0.0

    def _back(self, count: int, layers=None) -> None:
        super()._back(count, self.self_cache.layers[: self.depth])

    def hand_over(self) -> None:
        """Move the draft's own positions out of the shared bottom layers (the large model
        recomputes them)."""
        if self.cached > self.large.cached:
            self._back(self.cached - self.large.cached)
        self.cached = self.large.cached

    def crop(self, length: int) -> None:
        self.cached = self.large.cached


def views(
    model: PreTrainedModel,
    small: PreTrainedModel | None,
    input_ids: torch.Tensor,
    prefix: int,
    max_new_tokens: int,
    compile: bool,
    drafts: bool,
) -> tuple[StaticView, StaticView | None]:
    """The large model's view and the draft's (None where no draft runs), on static caches; compiled
    steps not warmed for these caches yet are compiled first (`warm_up`, with a `CompileNotice`)."""
    length = cache_length(prefix, max_new_tokens)
    if compile:
        _ensure_warm(model, small if drafts else None, input_ids, max_new_tokens)
    large = StaticView(model, input_ids, length, compile)
    if not drafts:
        return large, None
    if shares_bottom_layers(small, model):
        return large, StaticEarlyExitView(small, large)
    return large, StaticView(small, input_ids, length, compile, role="small")


def _warm_key(model: PreTrainedModel, role: str, x: torch.Tensor, max_new_tokens: int) -> tuple:
    """What the compiled steps of `model` in `role` ('model', 'small', or 'exit': an early exit on
    the large model's cache) depend on for input `x`: the cache (its length, device, dtype) and, for
    CUDA graphs of an encoder-decoder, the source length (one graph per shape)."""
    enc_dec = bool(model.config.is_encoder_decoder)
    length = cache_length(1 if enc_dec else x.shape[1], max_new_tokens)
    source = x.shape[1] if enc_dec and x.device.type == "cuda" else None
    return (role, length, str(x.device), model.dtype, source)


def _roles(model: PreTrainedModel, small: PreTrainedModel | None) -> list:
    """(model, role) of every compiled step a decode of `model` drafted by `small` runs."""
    if small is None:
        return [(model, "model")]
    return [(model, "model"), (small, "exit" if shares_bottom_layers(small, model) else "small")]


def _ensure_warm(model, small, x: torch.Tensor, max_new_tokens: int) -> None:
    """Compile, before the decode of `x`, every step it can meet that no earlier `warm_up` (or
    decode) compiled, with one notice: a user who asks for compiled steps gets them whole, never a
    decode that compiles inside (and a later one that meets a new bucket)."""
    roles = _roles(model, small)
    if all(_warm_key(m, r, x, max_new_tokens) in _WARM.get(m, ()) for m, r in roles):
        return
    name = type(model).__name__ + ("" if small is None else " and its draft")
    log.info("compile=True: compiling the decoding steps of %s (once)", name)
    seconds = warm_up(model, x, small=small, max_new_tokens=max_new_tokens)
    warnings.warn(
        f"compile=True: compiled every decoding step of {name} for this cache before the first "
        f"decode, in {seconds:.1f} s (once per model and cache length; static.warm_up does it "
        "ahead of timing)",
        CompileNotice,
        stacklevel=5,  # the caller of generate (through views and inference_mode's wrapper)
    )


@torch.inference_mode()
def warm_up(
    model: PreTrainedModel, inputs, small: PreTrainedModel | None = None, max_new_tokens: int = 128
) -> float:
    """Compile every bucket's step for `model` (and `small`: a separate model on its own cache, an
    early exit on the large model's) ahead of timing, for the cache lengths that `inputs` (a [1, n]
    tensor or a list of them) need: seconds spent, compilation mostly. Outputs are not kept; a
    decode of these inputs' caches compiles nothing more (`views`)."""
    inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
    inputs = [x if x.dim() == 2 else x[None] for x in inputs]
    t0 = _clock(inputs[0].device)
    # two source lengths: the graphs that take any length are built too
    if model.config.is_encoder_decoder:
        sources = [inputs[0], torch.cat([inputs[0], inputs[0][:, -1:]], 1)]
        # CUDA graphs are recorded per shape: one input per source length
        if inputs[0].device.type == "cuda":
            sources += list({x.shape[1]: x for x in inputs}.values())
    else:  # one prompt per cache length
        sources = list({cache_length(x.shape[1], max_new_tokens): x for x in inputs}.values())
    exit_draft = small is not None and shares_bottom_layers(small, model)
    for m, role in [(model, "model")] + ([(small, "small")] if small is not None else []):
        for x in sources:
            # any token compiles the same graphs
            prefix = x[:, :1] if m.config.is_encoder_decoder else x
            seq = torch.cat([prefix, prefix[:, -1:].expand(1, BUCKETS[-1] + 1)], 1)
            length = cache_length(prefix.shape[1], max_new_tokens)
            if exit_draft and role == "small":  # on the large model's cache, after its prefill
                large = StaticView(model, x, length, compile=True)
                large.logits(seq, prefix.shape[1], 1)
                view = StaticEarlyExitView(m, large)
            else:
                view = StaticView(m, x, length, compile=True, role=role)
                view.logits(seq, prefix.shape[1], 1)  # the prefill (eager)
            for b in BUCKETS:
                view.logits(seq, view.cached + b, b)
                view.hand_over()  # an early exit's positions out of the shared layers
                view.crop(prefix.shape[1])
            # an early exit that drafts before the large model's first call (speculative decoding)
            # steps on a cross-attention cache of its own layers only: other graphs
            for b in (
                BUCKETS if exit_draft and role == "small" and m.config.is_encoder_decoder else ()
            ):
                view = StaticEarlyExitView(m, StaticView(model, x, length, compile=True))
                view.logits(seq, prefix.shape[1], 1)  # its prefill (eager)
                view.logits(seq, view.cached + b, b)
    for m, role in _roles(model, small):
        _WARM.setdefault(m, set()).update(
            _warm_key(m, role, x, max_new_tokens) for x in [*inputs, *sources]
        )
    return _clock(inputs[0].device) - t0
