"""The early exit of a large model as a draft model, built from the large model itself
(self-speculative decoding).

    draft = exit_draft(large, 2)     # a PreTrainedModel: the large model's decoder cut after 2 layers
    generate(large, x, small=draft, method="speculative")

The draft is a view, not a copy: every module of it except the cut decoder layer list IS the large
model's module (embeddings, encoder, final norm, LM head), and its decoder layers are the large
model's bottom layers, so its parameters are the large model's tensors. Used as the draft of
`decoding.generate`, it also shares the large model's encoder outputs (the encoder runs once per
input) and its KV cache (`shares_bottom_layers`): the bottom layers keep one cache for draft and
verifier. On an unmodified transformers model the verifier's forward runs all its layers for every
token it is fed, so the cache entries the draft writes for its own tokens are dropped before
verification and recomputed by the verifier in its one parallel pass; the committed prefix is never
recomputed by either."""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import PreTrainedModel

# the config field that sets the decoder's depth, where it is not `num_hidden_layers`
# (encoder-decoder models)
_DEPTH_KEYS = {
    "t5": "num_decoder_layers",
    "mt5": "num_decoder_layers",
    "umt5": "num_decoder_layers",
    "bart": "decoder_layers",
    "mbart": "decoder_layers",
    "marian": "decoder_layers",
}


def decoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    """The decoder's list of layers (T5 `block`, Llama/BART `layers`, GPT-2 `h`): the one ModuleList
    of the decoder."""
    lists = [m for m in model.get_decoder().children() if isinstance(m, nn.ModuleList)]
    if len(lists) != 1:
        raise ValueError(
            f"model: cannot find the decoder layers of {type(model).__name__} "
            f"({len(lists)} layer lists in its decoder)"
        )
    return lists[0]


def exit_draft(large: PreTrainedModel, layers: int) -> PreTrainedModel:
    """The draft model that exits after decoder layer `layers` of `large`: the large model's own
    modules (no copy), with the decoder's final norm and the LM head applied to the hidden state
    after that layer."""
    if not isinstance(large, PreTrainedModel):
        raise TypeError(f"large must be a transformers PreTrainedModel; got {type(large).__name__}")
    depth = len(decoder_layers(large))
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers < depth:
        raise ValueError(
            f"layers (the exit) must be an integer in [1, {depth - 1}] for this {depth}-layer decoder; "
            f"got {layers!r}"
        )
    config = copy.deepcopy(large.config)
    setattr(config, _DEPTH_KEYS.get(config.model_type, "num_hidden_layers"), layers)
    # the skeleton only: every tensor is replaced by the large model's below
    with torch.device("meta"):
        draft = type(large)(config)
    cut = decoder_layers(draft)
    if len(cut) != layers:
        raise ValueError(
            f"model type {config.model_type!r}: setting its decoder depth did not cut the decoder "
            f"({len(cut)} layers built, {layers} asked)"
        )
    _share(draft, large, cut, nn.ModuleList(decoder_layers(large)[:layers]))
    left = [n for n, t in [*draft.named_parameters(), *draft.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(
            f"exit_draft: {type(large).__name__} keeps tensors outside its modules' children "
            f"({left[:3]}); it is not supported"
        )
    draft.generation_config = copy.deepcopy(large.generation_config)
    return draft.train(large.training)


def _share(draft: nn.Module, large: nn.Module, cut: nn.ModuleList, layers: nn.ModuleList) -> None:
    """Make every child of `draft` the large model's child of the same name, down the path to the
    decoder layer list `cut`, which becomes `layers`. Tensors held directly by the modules on that
    path are shared by name too."""
    for name, child in list(draft.named_children()):
        if child is cut:
            setattr(draft, name, layers)
        elif any(m is cut for m in child.modules()):
            _share(child, getattr(large, name), cut, layers)
        else:
            setattr(draft, name, getattr(large, name))
    for name, _ in list(draft.named_parameters(recurse=False)):
        setattr(draft, name, getattr(large, name))
    for name, _ in list(draft.named_buffers(recurse=False)):
        setattr(draft, name, getattr(large, name))


def shares_bottom_layers(draft: PreTrainedModel, large: PreTrainedModel) -> bool:
    """Whether `draft` is an early exit of `large` (as `exit_draft` builds it): all its tensors are
    the large model's and its decoder layers are the large model's bottom layers, so their KV cache
    entries are the large model's."""
    if draft is large or draft.get_input_embeddings() is not large.get_input_embeddings():
        return False  # (a separate model: its decoder is never searched)
    ours, theirs = decoder_layers(draft), decoder_layers(large)
    if not len(ours) < len(theirs) or any(a is not b for a, b in zip(ours, theirs)):
        return False
    own = {id(t) for t in [*large.parameters(), *large.buffers()]}
    return all(id(t) in own for t in [*draft.parameters(), *draft.buffers()])
