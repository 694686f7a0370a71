"""References written apart from the package, shared by the tests: the BiLD algorithm as plainly as
possible."""

import torch


def _next_logits(model, x, seq):
    if model.config.is_encoder_decoder:
        return model(input_ids=x, decoder_input_ids=torch.tensor([seq])).logits[0]
    return model(input_ids=torch.tensor([seq])).logits[0]


@torch.no_grad()
def reference_bild(
    large, small, x, max_new, fallback, rollback, n_max, eos, rule="first-differing"
):
    """Algorithm 1 of Kim et al. written as plainly as possible (full recomputation, no caches),
    with the two fixes bildlab makes: no second large pass after a rollback, and trailing small
    tokens are checked by the large model. rule "first-differing": roll back at the first token
    above the threshold that differs from the large argmax; "first-above" (the public code): only
    the first token above the threshold is examined. `eos`: an id or a list of ids (empty: none)."""
    eos = {eos} if isinstance(eos, int) else set(eos)
    start = (
        [large.config.decoder_start_token_id] if large.config.is_encoder_decoder else x[0].tolist()
    )
    seq = list(start)
    checked = len(seq)  # seq[:checked] was written or checked by the large model

    def out():
        return seq[len(start) :]

    # one non-autoregressive pass over the unchecked chunk: rollback, else the next token
    def large_step():
        nonlocal seq, checked
        rows = _next_logits(large, x, seq)[checked - 1 :]
        chunk = seq[checked:]
        cut = None
        for i, tok in enumerate(chunk):
            above = bool(-rows[i].log_softmax(-1)[tok] > rollback)
            if above and int(rows[i].argmax()) != tok:
                cut = i
                break
            if above and rule == "first-above":
                break  # the first token above the threshold is the large argmax: no rollback
        if cut is not None:
            seq = seq[: checked + cut] + [int(rows[cut].argmax())]
        elif len(out()) < max_new and not (chunk and chunk[-1] in eos):
            seq.append(int(rows[-1].argmax()))
        checked = len(seq)

    large_step()  # the first decoder step is the large model's
    while len(out()) < max_new and out()[-1] not in eos:
        # the small model writes until unsure (its token is discarded), N tokens in a row, EOS or
        # the budget
        n = 0
        while n < n_max and len(out()) < max_new:
            probs = _next_logits(small, x, seq)[-1].softmax(-1)
            if probs.max() < fallback:
                break
            seq.append(int(probs.argmax()))
            n += 1
            if seq[-1] in eos:
                break
        large_step()
    return out()
