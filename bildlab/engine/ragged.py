"""Draft and verify over a batch of rows that advance raggedly: `generate`'s greedy speculative
decoding, BiLD (both rollback rules, an early exit as the draft) and prompt lookup, many inputs at
once, each row's tokens and counts the engine's at batch 1.

Each round every unfinished row drafts (the small model batched, one token per row and step, until
each row's own draft-stop rule ends it; prompt lookup: on the host), the large model verifies every
row's draft in one batched pass, and each row keeps its own prefix (its own acceptance rule and
counts, `tally`). Rows that end leave the batch.

Layout: every model keeps one KV cache for the batch (transformers' `DynamicCache`), its rows
*right-aligned*: the positions a row holds are contiguous and end at the cache's last column, with
left padding masked out. A round feeds the same number of columns to every row (a row whose draft
is shorter than the longest feeds tokens that are cropped unread: causal attention never lets its
kept tokens see them). After the verification each row keeps its own number of the new columns
and is shifted right to the common end (`Rows.realign`, one gather per layer), so a row never
has a hole. Positions: a decoder-only model takes position ids built from the mask (as transformers'
generate); an encoder-decoder's decoder must give a left-padded row the unpadded row's logits
(relative positions, as T5's), which `capabilities.ragged` probes. What a model cannot do this way
is named by `capabilities.ragged`, and `batch.generate_batch` then runs its lockstep.

What each cache holds, as in the engine: the large model every committed token but the last (the
token it chose, fed with the next draft); the draft model every committed token but the last two
(it is fed two at the start of a draft, so that a draft accepted in full, whose last token the draft
model never read, costs no extra step). Sampling is not batched (`generate_batch` refuses it)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from . import capabilities, tally
from .decoding import Output, decoder_start
from .early_exit import shares_bottom_layers
from .lookup import NgramDraft
from .policy import Policy

TIMINGS = ("large_seconds", "small_seconds", "seconds")


class Rows:
    """One model over the rows of a batch: its KV cache, the mask of the columns its rows hold,
    and the columns fed since the rows were last aligned. `calls`, a Counter, counts each forward
    by (name, rows, columns) (`tally.call`)."""

    def __init__(
        self,
        model: PreTrainedModel,
        source=None,
        source_mask=None,
        encoded=None,
        *,
        calls=None,
        name: str = "large",
    ):
        self.model, self.calls, self.name = model, calls, name
        fwd = capabilities.forward(model)
        self.cache_kw, self.keep_kw, self.positions = fwd.cache_kw, fwd.keep_kw, fwd.positions
        self.source_mask, self.encoded = source_mask, None
        if model.config.is_encoder_decoder:
            if encoded is None:
                encoded = model.get_encoder()(input_ids=source, attention_mask=source_mask)
                tally.call(calls, f"{name} encoder", source)
            self.encoded, self.wrap = encoded.last_hidden_state, type(encoded)
        self.cache = capabilities.new_cache(model, record=False)
        self.mask = None  # [rows, columns]: 1 where a column holds one of the row's positions
        self.fed = 0

    def feed(self, ids: torch.Tensor, mask: torch.Tensor, keep: int) -> torch.Tensor:
        """Feed ids [rows, n] (`mask` [rows, n]: 0 for left padding) after the cached columns;
        float logits [rows, keep, vocab] of the last `keep` of them."""
        self.mask = mask if self.mask is None else torch.cat([self.mask, mask], 1)
        self.fed += ids.shape[1]
        tally.call(self.calls, self.name, ids)
        kw = {self.cache_kw: self.cache, "use_cache": True}
        if self.encoded is not None:
            kw.update(
                decoder_input_ids=ids,
                decoder_attention_mask=self.mask,
                attention_mask=self.source_mask,
                encoder_outputs=self.wrap(last_hidden_state=self.encoded),
            )
        else:
            kw.update(input_ids=ids, attention_mask=self.mask)
            if self.positions:
                kw["position_ids"] = capabilities.positions(self.mask)[:, -ids.shape[1] :]
            if self.keep_kw:
                kw["logits_to_keep"] = keep
        return self.model(**kw).logits[:, -keep:].float()

    def realign(self, kept: torch.Tensor) -> None:
        """Each row keeps the first `kept[row]` of the columns fed since the last alignment; rows
        are shifted right to end at the same column (left padding masked)."""
        before = self.mask.shape[1] - self.fed
        width = before + int(kept.max())
        shift = (width - before) - kept
        self.fed = 0
        layers = _self_attention(self.cache).layers
        if not bool(shift.any()):
            self.mask = self.mask[:, :width]
            for layer in layers:
                layer.keys, layer.values = layer.keys[:, :, :width], layer.values[:, :, :width]
            return
        src = torch.arange(width, device=kept.device)[None, :] - shift[:, None]
        inside = src >= 0
        src = src.clamp_min(0)
        self.mask = self.mask.gather(1, src) * inside
        for layer in layers:
            index = src[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.keys, layer.values = layer.keys.gather(2, index), layer.values.gather(2, index)

    def select(self, rows: torch.Tensor) -> None:
        """Keep only these rows (the others ended)."""
        if self.mask is not None:  # else nothing is cached yet
            self.cache.reorder_cache(rows)
            self.mask = self.mask[rows]
        if self.encoded is not None:
            self.encoded, self.source_mask = self.encoded[rows], self.source_mask[rows]


def _self_attention(cache):
    return getattr(cache, "self_attention_cache", cache)


def _left_padded(rows: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of tokens right-aligned in one block: ids and mask [rows, longest]."""
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, device=device)
        mask[i, width - len(r) :] = 1
    return ids, mask


# ----------------------------------------------------------------------------------------------------------------------
# The round's phases


def _draft(drafter: Rows, tail, policy: Policy, room: torch.Tensor, eos: torch.Tensor, st):
    """The draft model writes up to `room[row]` tokens for every row, one step for all rows at a
    time, until each row's draft-stop rule ends its draft (`decoding.draft`, per row); returns the
    drafts [rows, steps] and their lengths [rows]. Counts each row's steps and fallbacks in `st`."""
    bild = policy.method == "bild"
    cap = torch.clamp(room, max=policy.max_small_steps if bild else policy.k)
    length = torch.zeros_like(room)
    active = cap > 0
    ids, mask = tail
    tokens = []
    while bool(active.any()):
        logits = drafter.feed(ids, mask, 1)[:, -1]
        token = logits.argmax(-1)
        st["small_calls"] += active
        write = active
        if bild:  # float64, as the engine compares its .tolist()
            confidence = logits.softmax(-1).gather(-1, token[:, None])[:, 0].double()
            fell = active & (confidence < policy.fallback)
            st["fallbacks"] += fell
            write = active & ~fell
        tokens.append(token)
        length += write
        active = write & (length < cap)
        if bild:  # a confident EOS ends the draft; the large model still checks it
            active &= ~torch.isin(token, eos)
        ids, mask = token[:, None], torch.ones_like(token)[:, None]
    if not tokens:
        return room.new_zeros((len(room), 0)), length
    return torch.stack(tokens, 1), length


def _copied(lookups: list, rows: list[int], room: list[int], device):
    """Prompt lookup's drafts (`lookup.NgramDraft`, on the host): [rows, longest] and lengths."""
    found = [lookups[i].draft(r) for i, r in zip(rows, room)]
    drafts = torch.zeros((len(rows), max(map(len, found))), dtype=torch.long, device=device)
    for b, f in enumerate(found):
        drafts[b, : len(f)] = torch.tensor(f, dtype=torch.long, device=device)
    return drafts, torch.tensor([len(f) for f in found], device=device)


def _verify(large: Rows, tail, drafts: torch.Tensor, length: torch.Tensor, policy: Policy):
    """The large model scores every row's tail and draft in one pass; per row the number of drafted
    tokens kept (`decoding`'s acceptance rule) and the large model's token after them."""
    ids, mask = tail
    J = drafts.shape[1]
    logits = large.feed(
        torch.cat([ids, drafts], 1), torch.cat([mask, torch.ones_like(drafts)], 1), J + 1
    )
    target = logits.argmax(-1)
    bad = drafts != target[:, :J]
    if policy.method == "bild":
        nll = -logits[:, :J].log_softmax(-1).gather(-1, drafts[:, :, None])[:, :, 0]
        above = (nll > policy.rollback) & (torch.arange(J, device=drafts.device) < length[:, None])
        if policy.rollback_rule == "first-above":
            above &= above.cumsum(1) == 1
        bad &= above
    bad &= torch.arange(J, device=drafts.device) < length[:, None]
    kept = torch.where(bad.any(1), bad.int().argmax(1), length) if J else length
    return kept, target.gather(1, kept[:, None])[:, 0]


# ----------------------------------------------------------------------------------------------------------------------
# One batch


def ragged(
    large: PreTrainedModel,
    small: PreTrainedModel | None,
    xs: list[torch.Tensor],
    policy: Policy,
    budget: int,
    eos: torch.Tensor,
    calls=None,
) -> list[Output]:
    """Decode the rows `xs` together (`small`: None for prompt lookup); `calls`: a Counter of the
    forwards (`Rows`)."""
    B, device, method = len(xs), large.device, policy.method
    eos_set = frozenset(eos.tolist())
    counts = [tally.counts(policy.width) for _ in xs]
    if budget == 0:
        return [Output([], _stats(c, 0)) for c in counts]
    if large.config.is_encoder_decoder:
        P = max(x.shape[1] for x in xs)
        source = torch.zeros((B, P), dtype=torch.long, device=device)
        smask = torch.zeros_like(source)
        for i, x in enumerate(xs):
            source[i, : x.shape[1]], smask[i, : x.shape[1]] = x[0], 1
        L = Rows(large, source, smask, calls=calls)
        shared = (
            L.wrap(last_hidden_state=L.encoded)
            if small is not None and shares_bottom_layers(small, large)
            else None
        )
        S = Rows(small, source, smask, shared, calls=calls, name="small") if small else None
        seqs = [[decoder_start(large)] for _ in xs]
    else:
        L = Rows(large, calls=calls)
        S = Rows(small, calls=calls, name="small") if small else None
        seqs = [x[0].tolist() for x in xs]
    lookups = None
    if method == "prompt-lookup":
        lookups = [NgramDraft(x[0].tolist(), policy.ngram, policy.k, eos_set) for x in xs]
    start = [len(s) for s in seqs]
    rows = list(range(B))  # each batch row's index in xs
    zeros = torch.zeros(B, dtype=torch.long, device=device)
    st = {"small_calls": zeros.clone(), "fallbacks": zeros.clone()}
    final_calls, final_fallbacks = [0] * B, [0] * B
    tail_large = tail_small = _left_padded(seqs, device)
    first = method == "bild"  # BiLD: the first token is the large model's
    while rows:
        room = torch.tensor([start[i] + budget - len(seqs[i]) for i in rows], device=device)
        ran = S is not None and not first
        if lookups is not None:
            drafts, length = _copied(lookups, rows, room.tolist(), device)
        elif ran:
            drafts, length = _draft(S, tail_small, policy, room, eos, st)
        else:
            drafts, length = room.new_zeros((len(rows), 0)), torch.zeros_like(room)
        first = False
        kept, token = _verify(L, tail_large, drafts, length, policy)
        host_drafts, host = drafts.tolist(), torch.stack([length, kept, token]).tolist()
        ended, used = [], []
        for b, i in enumerate(rows):
            m, n, t = host[0][b], host[1][b], host[2][b]
            keep = host_drafts[b][:n]
            new = keep if len(seqs[i]) + n == start[i] + budget else keep + [t]
            cut = next((j + 1 for j, tok in enumerate(new) if tok in eos_set), None)
            new = new[:cut]
            tally.verification(counts[i], m, n, len(new))
            seqs[i] += new
            if lookups is not None:
                lookups[i].extend(new)
            used.append(len(new))
            ended.append(cut is not None or len(seqs[i]) >= start[i] + budget)
        used = torch.tensor(used, device=device)
        # the large model holds every committed token but the last; the draft model all but two
        L.realign((tail_large[0].shape[1] + used - 1).clamp(0, L.fed))
        if S is not None and ran:
            S.realign((tail_small[0].shape[1] + used - 2).clamp(0, S.fed))
        live = [b for b, e in enumerate(ended) if not e]
        for b, e in enumerate(ended):
            if e:
                final_calls[rows[b]] = int(st["small_calls"][b])
                final_fallbacks[rows[b]] = int(st["fallbacks"][b])
        if not live:
            break
        if len(live) < len(rows):
            keep_rows = torch.tensor(live, device=device)
            for model in (L, S) if S is not None else (L,):
                model.select(keep_rows)
            st = {k: v[keep_rows] for k, v in st.items()}
            rows = [rows[b] for b in live]
        ones = torch.ones((len(rows), 1), dtype=torch.long, device=device)
        tail_large = (torch.tensor([[seqs[i][-1]] for i in rows], device=device), ones)
        if S is not None:
            if ran:
                tail_small = (
                    torch.tensor([seqs[i][-2:] for i in rows], device=device),
                    ones.repeat(1, 2),
                )
            else:  # the draft model has not run yet: its tail grows by the token committed
                ids, mask = tail_small
                if len(live) < len(ended):
                    ids, mask = ids[keep_rows], mask[keep_rows]
                tail_small = (torch.cat([ids, tail_large[0]], 1), torch.cat([mask, ones], 1))
    outs = []
    for i in range(B):
        counts[i]["fallbacks"] = final_fallbacks[i]
        outs.append(Output(seqs[i][start[i] :], _stats(counts[i], final_calls[i])))
    return outs


def _stats(c: dict, small_calls: int) -> dict:
    stats = tally.stats(c, small_calls)
    stats["inexact"] = list(TIMINGS)  # rows share their model calls
    return stats
