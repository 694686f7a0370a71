"""The measurements on the toy zoo's card: each model's test score, its agreement with the large
model's greedy tokens (teacher-forced), the paired differences between models with 95% intervals,
and per-token latency under the one timing protocol."""

from __future__ import annotations

import numpy as np
import torch

from ..engine.decoding import eos_ids, generate, truncated
from ..engine.timing import interleave
from ..measure import metrics
from ..measure.intervals import interval, ratio_of_sums
from ..measure.summary import score_difference
from ..world import tasks
from . import train


def agreement_counts(
    large, small, sources: list[list[int]], outputs: list[list[int]], pad_id: int = 0
):
    """Per example: (positions where the small model's argmax equals the large model's greedy token,
    positions), teacher-forced on the large model's outputs."""
    same, total = [], []
    with torch.inference_mode():
        for start in range(0, len(sources), 64):
            src, out = sources[start : start + 64], outputs[start : start + 64]
            if small.config.is_encoder_decoder:
                enc = train.pad_rows(src, pad_id)
                dec = train.pad_rows([[0] + o[:-1] for o in out], pad_id)
                logits = small(
                    input_ids=enc, attention_mask=enc.ne(pad_id), decoder_input_ids=dec
                ).logits
                target = train.pad_rows(out, -100)
            else:
                ids = train.pad_rows([s + o for s, o in zip(src, out)], pad_id)
                mask = train.pad_rows([[1] * (len(s) + len(o)) for s, o in zip(src, out)], 0)
                logits = small(input_ids=ids, attention_mask=mask).logits[:, :-1]
                target = train.pad_rows([[-100] * (len(s) - 1) + o for s, o in zip(src, out)], -100)
                logits = logits[:, : target.shape[1]]
            valid = target.ne(-100)
            same += (logits.argmax(-1).eq(target) & valid).sum(-1).tolist()
            total += valid.sum(-1).tolist()
    return same, total


def agreement(
    large, small, sources: list[list[int]], outputs: list[list[int]], pad_id: int = 0
) -> float:
    """Share of all positions where the small model's argmax equals the large model's greedy token."""
    same, total = agreement_counts(large, small, sources, outputs, pad_id)
    return sum(same) / max(sum(total), 1)


def latency(models: dict, n: int, max_new_tokens: int = 32) -> dict:
    """Per-token greedy latency in ms at batch 1 (bildlab's greedy loop) under the one timing
    protocol: one thread, a warm-up, the models interleaved in a rotating order; each model decodes
    its own prompts[i] for input i."""

    def runner(model, prompts):
        return lambda x, i: (
            generate(model, prompts[i], max_new_tokens=max_new_tokens, eos_token_id=[]).tokens,
            {},
        )

    first = next(iter(models.values()))[1]
    rows = interleave(
        first[:n], {name: runner(*mp) for name, mp in models.items()}, warmup=1, threads=1
    )
    return {
        name: round(
            1000
            * sum(r[name]["seconds"] for r in rows)
            / sum(len(r[name]["tokens"]) for r in rows),
            3,
        )
        for name in models
    }


def measure(
    models: dict,
    sources: list[list[int]],
    refs: list[str],
    tokenizer,
    task: str,
    max_new_tokens: int,
    comparisons: list[tuple[str, str]],
) -> tuple[dict, dict]:
    """Each model's test score, outputs cut off at max_new_tokens and (for all but the first, the
    large model) agreement with the large model's greedy tokens; and for each (a, b) in
    `comparisons` the paired differences a - b in score and agreement, each as [value, low, high]
    (95% paired bootstrap over the examples)."""

    metric, large = tasks.task_metric(task), next(iter(models))
    outputs, data, counts, results = {}, {}, {}, {}
    for name, model in models.items():
        outputs[name] = train.greedy_batch(
            model, sources, pad_id=0, max_new_tokens=max_new_tokens, desc=f"{task} {name}"
        )
        data[name] = metrics.sentence_data(
            metric,
            [tokenizer.decode(o, skip_special_tokens=True).strip() for o in outputs[name]],
            refs,
        )
        ends = eos_ids(model, None)
        results[name] = {
            metric: round(
                float(metrics.corpus(metric, data[name], np.arange(len(refs))[None])[0]), 2
            ),
            "truncated": sum(truncated(o, max_new_tokens, ends) for o in outputs[name]),
        }
        if name != large:
            same, total = map(
                np.array, agreement_counts(models[large], model, sources, outputs[large])
            )
            counts[name] = same, total
            results[name]["agreement"] = round(same.sum() / total.sum(), 4)
            results[name]["agreement_ci"] = [
                round(x, 4) for x in interval(lambda i: ratio_of_sums(same, total, i), len(refs))
            ]
    differences = {}
    for a, b in comparisons:
        d, ci = score_difference(metric, data[a], data[b])
        differences[f"{a} - {b}"] = {metric: [d, *ci]}
        if a in counts and b in counts:
            (sa, total), (sb, _) = counts[a], counts[b]

            def gain(i):
                return ratio_of_sums(sa, total, i) - ratio_of_sums(sb, total, i)

            differences[f"{a} - {b}"]["agreement"] = [
                round(float(gain(np.arange(len(refs))[None])[0]), 4),
                *(round(x, 4) for x in interval(gain, len(refs))),
            ]
    return results, differences
