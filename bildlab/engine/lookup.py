"""Prompt-lookup drafts: a draft without a model (Saxena 2023, "prompt lookup decoding"), for
`decoding.generate`'s method "prompt-lookup" and `batch.generate_batch`.

The draft is copied from the context: the input (an encoder-decoder model's source tokens, a
decoder-only model's prompt) followed by the output so far. The rule is transformers'
`PromptLookupCandidateGenerator`'s, so that on a decoder-only model bildlab's drafts and
transformers' `generate(prompt_lookup_num_tokens=k, max_matching_ngram_size=ngram)` drafts are the
same:

    for n = min(ngram, L - 1) down to 1: the context's last n tokens; their FIRST (leftmost) occurrence in the context;
    if that occurrence is not the tail itself, the draft is the up to k tokens that follow it (never past the
    context's end), cut before its first EOS (a cut that leaves nothing is no draft: smaller n are not tried);
    no occurrence for any n: no draft, and the large model decodes one token.

Drafts hold no EOS, so whether a drafted token is accepted depends only on the large model's greedy
output up to its end: `counts` replays a greedy output's verifications exactly (what
`generate_batch` reports). Cost: the first start of every n-gram (n <= ngram) is kept in a dict as
the context grows, O(ngram) per committed token and per draft."""

from __future__ import annotations

from . import tally


class NgramDraft:
    """The context (input, then the committed output) and the first start of each of its n-grams, n
    <= ngram."""

    def __init__(self, input_tokens: list[int], ngram: int, k: int, eos: frozenset):
        self.ngram, self.k, self.eos = ngram, k, eos
        self.context: list[int] = []
        self.first: dict[tuple, int] = {}  # n-gram -> where it first starts in the context
        self.extend(input_tokens)

    def extend(self, tokens: list[int]) -> None:
        """Append committed tokens to the context."""
        ctx, first = self.context, self.first
        for t in tokens:
            ctx.append(t)
            end = len(ctx)
            for n in range(1, min(self.ngram, end) + 1):
                first.setdefault(tuple(ctx[end - n :]), end - n)

    def draft(self, budget: int) -> list[int]:
        """The draft for the next verification, at most `budget` tokens (the module docstring's
        rule)."""
        ctx, end = self.context, len(self.context)
        for n in range(min(self.ngram, end - 1), 0, -1):
            start = self.first.get(tuple(ctx[end - n :]))
            # an earlier occurrence: its continuation is not empty
            if start is not None and start + n < end:
                out = ctx[start + n : min(start + n + self.k, end)]
                cut = next((i for i, t in enumerate(out) if t in self.eos), len(out))
                return out[: min(cut, budget)]
        return []


def counts(
    input_tokens: list[int],
    output: list[int],
    ngram: int,
    k: int,
    max_new_tokens: int,
    eos: frozenset,
) -> dict:
    """The engine's counts (`tally`) for prompt lookup, replayed from its (greedy) `output`: each
    verification keeps the longest prefix of the draft that equals the output and then adds the
    large model's token, unless the budget is used up."""
    lookup = NgramDraft(input_tokens, ngram, k, eos)
    c, pos = tally.counts(k), 0
    while pos < len(output):
        draft = lookup.draft(max_new_tokens - pos)
        n = next(
            (i for i, t in enumerate(draft) if pos + i >= len(output) or t != output[pos + i]),
            len(draft),
        )
        new = n + (pos + n < max_new_tokens)
        tally.verification(c, len(draft), n, new)
        lookup.extend(output[pos : pos + new])
        pos += new
    return c
