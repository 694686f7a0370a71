"""One model's view of the sequence that `decoding.generate` writes: the model, its KV cache
(transformers `Cache` objects) and how many positions of the shared sequence buffer that cache
holds; feeding new positions, cropping rejected ones. An early exit of the large model as the draft
is a view of the large model's own cache."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from . import capabilities
from .early_exit import decoder_layers
from .timing import clock as _clock


class View:
    """A model, its KV cache, and how many tokens of the shared sequence buffer that cache holds."""

    def __init__(self, model: PreTrainedModel, input_ids: torch.Tensor):
        self.model = model
        self.encoder_decoder = bool(model.config.is_encoder_decoder)
        fwd = capabilities.forward(model)  # position ids as transformers' generate builds them
        self.cache_kw, self.keep_kw, self.positions = fwd.cache_kw, fwd.keep_kw, fwd.positions
        self.cached = 0  # positions of the sequence buffer already in the cache
        self.pad_split = capabilities.probe(model).pad_split
        self.calls = 0
        self.seconds = 0.0
        t0 = _clock(input_ids.device)
        if self.encoder_decoder:
            self.encoder_outputs = model.get_encoder()(input_ids=input_ids, return_dict=True)
        # a state: no crop
        self.cache = capabilities.new_cache(model, record=capabilities.probe(model).croppable)
        self.seconds += _clock(input_ids.device) - t0

    def logits(self, seq: torch.Tensor, end: int, keep: int) -> torch.Tensor:
        """Feed seq[cached:end] and return float logits [keep, vocab] for the last `keep` fed
        positions. A model that derives positions from the tokens (`capabilities.Cache.pad_split`)
        is fed a chunk holding its pad token in pieces, each ending after a pad, counted as one
        call."""
        if self.pad_split is not None and end - self.cached > 1:
            pieces = capabilities.split_after_pad(seq[:, self.cached : end], self.pad_split)
            if len(pieces) > 1:
                ends = (self.cached + torch.tensor([p.shape[1] for p in pieces]).cumsum(0)).tolist()
                logits = torch.cat([self._logits(seq, e, e - self.cached) for e in ends], 0)
                self.calls -= len(pieces) - 1
                return logits[-keep:]
        return self._logits(seq, end, keep)

    def _logits(self, seq: torch.Tensor, end: int, keep: int) -> torch.Tensor:
        new = seq[:, self.cached : end]
        kwargs = {self.cache_kw: self.cache, "use_cache": True}
        if self.encoder_decoder:
            kwargs.update(decoder_input_ids=new, encoder_outputs=self.encoder_outputs)
        else:
            kwargs["input_ids"] = new
            # no padding at batch size 1: the mask's cumsum - 1 is the buffer position
            if self.positions:
                kwargs["position_ids"] = torch.arange(self.cached, end, device=seq.device)[None]
            if self.keep_kw:
                kwargs["logits_to_keep"] = keep
        logits = self.model(**kwargs).logits
        self.cached = end
        self.calls += 1
        return logits[0, -keep:].float()

    def crop(self, length: int) -> None:
        """Drop cached positions >= length (the self-attention cache only; cross-attention stays)."""
        if self.cached > length:
            # transformers 5.x: a negative count of tokens to remove
            self.cache.crop(length - self.cached)
            self.cached = length

    def hand_over(self) -> None:
        """Called when a draft ends, before the large model verifies it (a separate draft keeps its
        own cache)."""


class EarlyExitView(View):
    """An early exit of the large model as the draft (`early_exit.exit_draft`): its layers are the
    large model's bottom layers, so it runs on the large model's encoder outputs and KV cache,
    writing only the bottom `depth` layers."""

    def __init__(self, model: PreTrainedModel, large: View):
        self.model, self.large = model, large
        self.encoder_decoder = large.encoder_decoder
        fwd = capabilities.forward(model)
        self.cache_kw, self.keep_kw, self.positions = fwd.cache_kw, fwd.keep_kw, large.positions
        self.encoder_outputs = getattr(large, "encoder_outputs", None)
        self.cache = large.cache
        self.self_cache = large.cache.self_attention_cache if large.encoder_decoder else large.cache
        self.depth = len(decoder_layers(model))
        self.cached, self.pad_split = large.cached, large.pad_split
        self.calls = 0
        self.seconds = 0.0

    def hand_over(self) -> None:
        """Drop the draft's own positions from the shared layers: the large model's forward runs all
        its layers for every token it is fed, so it recomputes them (in its one parallel pass) and
        the cache stays one sequence."""
        for layer in self.self_cache.layers[: self.depth]:
            extra = layer.get_seq_length() - self.large.cached
            if extra > 0:
                layer.crop(-extra)
        self.cached = self.large.cached

    def crop(self, length: int) -> None:
        """After verification the large model has cropped the shared cache: the draft goes on from
        there."""
        self.cached = self.large.cached
