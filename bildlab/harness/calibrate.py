"""A calibration of the machine: what each call that decoding makes costs here, for one pair, under
the one timing protocol (`timing.interleave`: warm-up excluded, a fixed thread count, rotating
order, CUDA sync).

    cal = calibrate("toy-mt", registry="results/toy")      # also `bildlab calibrate --pair toy-mt`
    cal["costs"]["large_pass"]                             # the large model's pass over m tokens, per prefix

Measured through the loop's own code path (`views.View`: the same forward, cache and crop), on a
sample of the pair's validation inputs (random inputs of `lengths` tokens for a pair built with
random weights):

- `encoder`: the large and the small model's encoder per input length (a decoder-only model's
  prefill); - `large_pass`: the large model's pass over m new tokens, m = 1 ... max(max_small_steps,
  k) + 1 of the study's policies, after `prefixes` cached positions (then cropped back, as a
  rollback does); - `small_step` and `drafts`: each draft's one-token step (the small model, the
  aligned one, the early exit); - `vanilla_decode`: a whole batch-1 greedy decode of the large
  model; - `overhead`: the loop's own host work, from whole decodes of the vanilla model and
  `OVERHEAD_POLICIES` (`_overhead`), each value the median over this run and the earlier calibrations
  of the same key (`pooled`); - `batch_gain`: batch-1 seconds over batched seconds per output
  (`generate_batch`) at the study's batch sizes, with `batched_identical`, the batched outputs that
  equal the batch-1 ones on this device (counted).

Every component above but the batch gain is timed in one `timing.interleave` (the overhead's whole
decodes too): for each input all of them run back to back in an order that rotates from input to
input, so a slow moment of a shared machine hits every component alike instead of the one measured
then (the batch gain, a ratio of its own batch-1 and batched decodes, is timed after).

Each cost is the mean over the sampled inputs with its 95% bootstrap interval; how sure the whole
calibration is, `uncertainty` (`_uncertainty`): a vanilla decode of the sample's mean length priced
from each input's own components, its 95% bootstrap interval over the inputs and the interval's
relative half-width `inputs`; with `between_runs` (`_with_drift`), how far one calibration's price
lies from this machine's typical price, from the earlier calibrations of the same key and sample
(a machine drifts between runs by more than the spread over one run's inputs); and `relative`, the
two combined (shown by `bildlab calibrate`; `costs.predict` widens a predicted speedup's interval by
it). The record lives in the registry's `.calibrations/` and in this machine's
store (`machine_store`: under bildlab's cache folder, for every registry), keyed by the pair and the
machine (device type and name, CPU model, threads, protocol); library versions are provenance.
`for_machine` finds the newest one of this machine: the registry's own first (a committed study
prices from its own calibrations), else the machine store's."""

from __future__ import annotations

import json
import math
import os
import time
from datetime import datetime, timezone

import numpy as np
import torch
from scipy import stats

from ..engine import timing
from ..engine.policy import Policy
from ..measure.intervals import interval, mean
from ..world.models import DRAFTS, PAPER_PAIRS, TOY_PAIRS, fingerprint, zoo_dir
from . import shard
from .registry import Registry, versions

MS = tuple(range(1, 12))  # pass sizes: BiLD's max_small_steps (10) + 1 and speculative k (<= 8) + 1
PREFIXES = (0, 16, 48)
# one-token steps back to back, as a greedy loop makes them  # cached output positions before the
# timed call (a decoder-only model's prompt comes first)
GREEDY_STEPS = 8
TOY_BATCH_SIZES = (64, 256)
# the machine's own calibrations (any registry's sweeps find them): this folder, else
# calibrations/ under bildlab's cache folder ($BILDLAB_CACHE, ~/.cache/bildlab)
STORE_ENV = "BILDLAB_CALIBRATIONS"
# the spread between runs: from the newest DRIFT_HISTORY earlier calibrations of the same key and
# sample, stated once there are DRIFT_RUNS calibrations (this one included)
DRIFT_HISTORY = 10
DRIFT_RUNS = 3


def _check(pair, device, threads, n, ms, prefixes, batch_sizes, batch_n, max_new_tokens) -> None:
    from ..world.models import PAIRS

    if pair not in PAIRS:
        raise ValueError(f"pair must be one of {', '.join(PAIRS)}; got {pair!r}")
    if not isinstance(device, str) or device.split(":")[0] not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:i]'; got {device!r}")
    timing.check(threads, 1, 0)
    for name, v in (("n", n), ("batch_n", batch_n), ("max_new_tokens", max_new_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {v!r}")
    for name, vs, low in (
        ("ms", ms, 1),
        ("prefixes", prefixes, 0),
        ("batch_sizes", batch_sizes, 1),
    ):
        if not vs or any(isinstance(v, bool) or not isinstance(v, int) or v < low for v in vs):
            raise ValueError(f"{name} must be a non-empty list of integers >= {low}; got {vs!r}")
    if 1 not in ms or max(ms) < 2:
        raise ValueError(
            f"ms must include 1 (the one-token pass every price starts from) and a larger m (a draft "
            f"step comes before it); got {ms!r}"
        )


def _models(pair: str, device: str, random_weights: bool) -> tuple[dict, object]:
    """{draft name: (large, draft)} for every draft the pair has, and its tokenizer-side Pair (None
    when random)."""
    if random_weights:
        from ..world.models import random_pair

        large, small = random_pair(pair, device)
        return {"small": (large, small)}, None
    out, first = {}, None
    for draft in DRAFTS:
        if draft == "aligned" and pair in TOY_PAIRS and TOY_PAIRS[pair][2] is None:
            continue
        if draft == "early-exit" and (
            pair not in TOY_PAIRS or TOY_PAIRS[pair][0].startswith("llama")
        ):
            continue  # the early exit is trained into the toy T5 only (RQ4)
        p = shard.load(pair, draft, device, str(zoo_dir()))
        first = first or p
        out[draft] = (p.large, p.small)
    return out, first


def _inputs(pair, p, n, lengths, device, vocab: int) -> list[torch.Tensor]:
    if p is not None:
        return p.inputs("validation", limit=n)
    g = torch.Generator().manual_seed(0)
    return [
        torch.randint(3, vocab, (1, lengths[i % len(lengths)]), generator=g).to(device)
        for i in range(n)
    ]


def _seq(view, x: torch.Tensor, length: int) -> tuple[torch.Tensor, int]:
    """A sequence buffer as the loop builds it (the decoder start, or the prompt) with `length`
    filler positions after it, and where the output starts."""
    from ..engine.decoding import decoder_start

    start = (
        torch.tensor([[decoder_start(view.model)]], device=x.device) if view.encoder_decoder else x
    )
    seq = torch.full((1, start.shape[1] + length), 5, dtype=torch.long, device=x.device)
    seq[:, : start.shape[1]] = start
    return seq, start.shape[1]


def _runners(models: dict, ms, prefixes, max_new_tokens: int) -> dict:
    """The timed calls: each runner measures its own call with `timing.clock` (the view is built and
    the prefix fed before the clock starts) and returns its seconds in its stats."""
    from ..engine.decoding import generate
    from ..engine.views import EarlyExitView, View

    large = models["small"][0]
    dev = large.device
    span = max(prefixes) + max(*ms, GREEDY_STEPS) + 1

    def encoder(model):
        def run(x, i):
            t0 = timing.clock(dev)
            v = View(model, x)
            if not v.encoder_decoder:  # a decoder-only model's prefill over the prompt
                seq, start = _seq(v, x, 1)
                v.logits(seq, start, 1)
            return [], {"seconds": timing.clock(dev) - t0, "length": x.shape[1]}

        return run

    def drafts(draft, model, p):
        """The loop's pattern after `p` cached positions: for each m, m - 1 consecutive draft steps,
        then the large model's pass over the m positions (its last token and the draft), then both
        cropped back (a rollback)."""

        def run(x, i):
            lv = View(large, x)
            seq, start = _seq(lv, x, span)
            # the prompt (or the decoder start) and the prefix, untimed
            lv.logits(seq, start + p, 1)
            v = EarlyExitView(model, lv) if draft == "early-exit" else View(model, x)
            if draft != "early-exit":
                v.logits(seq, start + p, 1)
            steps, passes = [], []
            for m in ms:
                for j in range(m - 1):
                    t0 = timing.clock(dev)
                    v.logits(seq, start + p + j + 1, 1)
                    steps.append(timing.clock(dev) - t0)
                v.hand_over()
                t0 = timing.clock(dev)
                lv.logits(seq, start + p + m, m)
                passes.append(timing.clock(dev) - t0)
                lv.crop(start + p)
                v.crop(start + p)
            return [], {"steps": steps, "passes": passes}

        return run

    def greedy(model, p):
        """A greedy loop's steps after `p` cached positions: GREEDY_STEPS one-token steps back to
        back."""

        def run(x, i):
            v = View(model, x)
            seq, start = _seq(v, x, span)
            v.logits(seq, start + p, 1)
            steps = []
            for j in range(GREEDY_STEPS):
                t0 = timing.clock(dev)
                v.logits(seq, start + p + j + 1, 1)
                steps.append(timing.clock(dev) - t0)
            return [], {"steps": steps}

        return run

    def decode(x, i):
        out = generate(large, x, max_new_tokens=max_new_tokens)
        return out.tokens, {}

    runners = {
        "encoder large": encoder(large),
        "encoder small": encoder(models["small"][1]),
        "decode": decode,
    }
    for draft, (_, model) in models.items():
        runners.update({f"draft {draft} {p}": drafts(draft, model, p) for p in prefixes})
    for name, model in (("large", large), ("small", models["small"][1])):
        runners.update({f"greedy {name} {p}": greedy(model, p) for p in prefixes})
    return runners


def _cost(values) -> tuple[float, list[float]]:
    values = np.asarray(values, dtype=float)
    lo, hi = interval(lambda idx: mean(values, idx), len(values))
    return float(values.mean()), [lo, hi]


def _steps(rows, runner, prefixes, n, positions: list[int]) -> dict:
    """A step's mean cost per prefix (`seconds`, with its interval), and by position in its run
    (`by_position`: the mean of the j-th step of a draft, j = 0 right after the large model's pass,
    or of a greedy run; `positions` gives each timed step's): a model's first steps after another
    model ran are dearer (its weights are cold)."""
    cells = [_cost([np.mean(r[f"{runner} {p}"]["stats"]["steps"]) for r in rows]) for p in prefixes]
    at = np.asarray(positions)
    by = (
        [
            [
                float(
                    np.mean(
                        [
                            np.asarray(r[f"{runner} {p}"]["stats"]["steps"])[at == j].mean()
                            for r in rows
                        ]
                    )
                )
                for j in range(at.max() + 1)
            ]
            for p in prefixes
        ]
        if len(at)
        else [[] for _ in prefixes]
    )
    return {
        "prefix": list(prefixes),
        "seconds": [c[0] for c in cells],
        "ci": [c[1] for c in cells],
        "n": n,
        "by_position": by,
    }


def defaults(pair: str, device: str = "cpu") -> dict:
    """The sample a calibration measures unless told otherwise (`calibrate`'s None arguments): the
    toy pairs' on any device; a paper pair's on a GPU (under 10 minutes for all four on one); a
    paper pair's on a CPU, where a decode at the paper's sizes takes minutes: a small sample of the
    same calls."""
    if pair in TOY_PAIRS:
        return dict(
            n=16,
            ms=MS,
            prefixes=PREFIXES,
            batch_sizes=TOY_BATCH_SIZES,
            batch_n=64,
            max_new_tokens=128,
            lengths=(64,),
            warmup=2,
        )
    if str(device).startswith("cuda"):
        return dict(
            n=8,
            ms=MS,
            prefixes=PREFIXES,
            batch_sizes=(32,),
            batch_n=32,
            max_new_tokens=127,
            lengths=(64, 256, 1024),
            warmup=1,
        )
    return dict(
        n=2,
        ms=MS,
        prefixes=(0, 16),
        batch_sizes=(2,),
        batch_n=2,
        max_new_tokens=8,
        lengths=(64,),
        warmup=1,
    )


def calibrate(
    pair: str,
    *,
    device: str = "cpu",
    threads: int | None = 1,
    n: int | None = None,
    ms=None,
    prefixes=None,
    batch_sizes=None,
    batch_n: int | None = None,
    max_new_tokens: int | None = None,
    lengths=None,
    random_weights: bool | None = None,
    warmup: int | None = None,
    registry=None,
    progress: bool = False,
) -> dict:
    """Calibrate this machine for `pair` (module docstring): `n` inputs for the per-call costs,
    `batch_n` for the batch gain at `batch_sizes` (at most `batch_n` rows); every None from
    `defaults(pair, device)`. `random_weights` (default: for a paper pair whose checkpoints cannot
    be read) builds the models from the checkpoints' configurations, fed random inputs of `lengths`
    tokens (their outputs run to `max_new_tokens`). Written to `registry` (a path or Registry) when
    given; returns the record."""
    if pair in TOY_PAIRS or pair in PAPER_PAIRS:
        d = defaults(pair, device)
        n, ms, prefixes, batch_n, max_new_tokens, lengths, warmup = (
            d[k] if v is None else v
            for k, v in (
                ("n", n),
                ("ms", ms),
                ("prefixes", prefixes),
                ("batch_n", batch_n),
                ("max_new_tokens", max_new_tokens),
                ("lengths", lengths),
                ("warmup", warmup),
            )
        )
        batch_sizes = d["batch_sizes"] if batch_sizes is None else batch_sizes
    ms, prefixes, batch_sizes = list(ms or ()), list(prefixes or ()), list(batch_sizes or ())
    _check(pair, device, threads, n, ms, prefixes, batch_sizes, batch_n, max_new_tokens)
    if random_weights is None:
        random_weights = pair in PAPER_PAIRS and not _readable(pair)
    t_start = time.perf_counter()
    models, p = _models(pair, device, random_weights)
    large = models["small"][0]
    vocab = large.get_output_embeddings().weight.shape[0]
    xs = _inputs(pair, p, max(n, batch_n), lengths, device, vocab)
    runners = _runners(models, list(ms), list(prefixes), max_new_tokens)
    # the overhead's whole decodes in the same rotation as the calls they are priced against
    runners.update(_overhead_runners(models["small"], max_new_tokens))
    rows = timing.interleave(
        xs[:n],
        runners,
        warmup=min(warmup, n),
        threads=threads,
        progress="calibrating" if progress else False,
    )
    costs: dict = {"encoder": {}}
    for model in ("large", "small"):
        s = [r[f"encoder {model}"]["stats"] for r in rows]
        costs["encoder"][model] = {
            "lengths": [x["length"] for x in s],
            "seconds": [x["seconds"] for x in s],
            "n": n,
        }
    cells = [
        [_cost([r[f"draft small {q}"]["stats"]["passes"][j] for r in rows]) for j in range(len(ms))]
        for q in prefixes
    ]
    costs["large_pass"] = {
        "m": list(ms),
        "prefix": list(prefixes),
        "seconds": [[c[0] for c in row] for row in cells],
        "ci": [[c[1] for c in row] for row in cells],
        "n": n,
    }
    # each step's position in its draft (m - 1 steps, then the pass)
    in_draft = [j for m in ms for j in range(m - 1)]
    costs["small_step"] = _steps(rows, "draft small", prefixes, n, in_draft)
    costs["drafts"] = {
        d: _steps(rows, f"draft {d}", prefixes, n, in_draft) for d in models if d != "small"
    }
    costs["greedy_step"] = {
        m: _steps(rows, f"greedy {m}", prefixes, n, list(range(GREEDY_STEPS)))
        for m in ("large", "small")
    }
    seconds, ci = _cost([r["decode"]["seconds"] for r in rows])
    costs["vanilla_decode"] = {
        "seconds": seconds,
        "ci": ci,
        "tokens": float(np.mean([len(r["decode"]["tokens"]) for r in rows])),
        "n": n,
    }
    dec_only = not large.config.is_encoder_decoder
    costs["overhead"] = _overhead(costs, rows, xs[:n], dec_only)
    uncertainty = _uncertainty(costs, rows, xs[:n], prefixes, dec_only)
    costs["batch_gain"], identical = _batch_gain(
        large, xs[:batch_n], batch_sizes, max_new_tokens, threads, warmup
    )
    machine = shard.machine(device)
    key = {
        "kind": "calibration",
        "pair": pair,
        "device": torch.device(device).type,
        "device_name": machine["device_name"],
        "processor": machine["processor"],
        "threads": threads,
        "protocol": timing.settings(threads, 1, warmup),
        **_models_key(pair, random_weights),
    }
    sources = [machine_store()] + ([] if registry is None else [Registry.of(registry)])
    known = [c for source in sources for c in source.calibrations()]
    uncertainty = _with_drift(uncertainty, _earlier_prices(key, uncertainty, known))
    costs["overhead"] = pooled(costs["overhead"], _same_key(key, known))
    record = {
        "key": key,
        "made": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "versions": versions(),
        "machine": machine,
        "weights": "random" if random_weights else "trained",
        "encoder_decoder": bool(large.config.is_encoder_decoder),
        "costs": costs,
        "uncertainty": uncertainty,
        "batched_identical": identical,
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    if registry is not None:
        store(record, registry)
    return record


def machine_store() -> Registry:
    """This machine's calibrations, whichever registry they were made for: a registry of
    calibrations only, at $BILDLAB_CALIBRATIONS, else calibrations/ under bildlab's cache folder
    (`tasks.cache_root`: $BILDLAB_CACHE, ~/.cache/bildlab)."""
    from ..world.tasks import cache_root

    return Registry(os.environ.get(STORE_ENV) or os.path.join(cache_root(), "calibrations"))


def store(record: dict, registry) -> None:
    """Write a calibration to `registry` (a path or Registry) and to this machine's store
    (`machine_store`), where a sweep into any other registry finds it (`for_machine`)."""
    Registry.of(registry).put_calibration(record)
    machine_store().put_calibration(record)


def _uncertainty(costs: dict, rows: list[dict], xs, prefixes, dec_only: bool) -> dict:
    """How sure the calibration is: a vanilla decode of the sample's mean tokens and mean source
    length priced from each input's own components (the large model's encoder, moved along the
    calibration's line to the mean length, and its greedy steps by position; the loop's host work per
    call, a median over the sample, is the calibration's), the mean of those prices with its 95%
    bootstrap interval over the inputs, and `relative`, the interval's half-width over the mean. The
    spread of the components over the inputs, not a drift of the whole machine between the
    calibration and a sweep."""
    from ..measure import costs as pricing

    tokens = costs["vanilla_decode"]["tokens"]
    source = float(np.mean([x.shape[1] for x in xs]))
    full = {"costs": costs}
    prices = []
    for x, r in zip(xs, rows):
        steps = [
            np.asarray(r[f"greedy large {p}"]["stats"]["steps"], dtype=float) for p in prefixes
        ]
        own = r["encoder large"]["stats"]["seconds"]
        encoder = (
            own
            - pricing.encoder(full, "large", x.shape[1])
            + pricing.encoder(full, "large", source)
        )
        cal = {
            "costs": {
                **costs,
                "encoder": {"large": {"lengths": [source], "seconds": [encoder]}},
                "greedy_step": {
                    "large": {
                        "prefix": list(prefixes),
                        "seconds": [float(s.mean()) for s in steps],
                        "by_position": [s.tolist() for s in steps],
                    }
                },
            }
        }
        prices.append(
            pricing.decode_seconds(cal, "greedy", "small", None, tokens, source, dec_only)
        )
    seconds, ci = _cost(prices)
    return {
        "vanilla_seconds": seconds,
        "ci": ci,
        "relative": round((ci[1] - ci[0]) / 2 / seconds, 4) if seconds > 0 else 0.0,
        "tokens": tokens,
        "source": source,
        "n": len(prices),
    }


def _same_key(key: dict, calibrations, before: str | None = None, where=None) -> list[dict]:
    """The newest DRIFT_HISTORY of `calibrations` (records read from registries) with this `key`
    (pair, models, machine, threads, protocol) that `where` (a predicate; None: any) accepts, each
    once (a registry's and the store's copies), made before `before` (a `made` time; None: any),
    oldest first."""
    want = json.dumps(key, sort_keys=True)
    found = {
        c["made"]: c
        for c in calibrations
        if json.dumps(c["key"], sort_keys=True) == want
        and (before is None or c["made"] < before)
        and (where is None or where(c))
    }
    return [found[made] for made in sorted(found)[-DRIFT_HISTORY:]]


def _earlier_prices(key: dict, u: dict, calibrations) -> list[float]:
    """The vanilla-decode prices (`_uncertainty`) of the newest DRIFT_HISTORY of `calibrations`
    with this `key` and the same sample (`u`'s inputs: their count, mean length and mean
    output tokens), oldest first."""

    def same_sample(c: dict) -> bool:
        v = c.get("uncertainty") or {}
        return all(v.get(f) == u[f] for f in ("n", "source", "tokens"))

    return [
        c["uncertainty"]["vanilla_seconds"] for c in _same_key(key, calibrations, where=same_sample)
    ]


def pooled(own: dict, earlier: list[dict]) -> dict:
    """The loop's host work (`_overhead`: this run's, `own`) as the median of each of its values over
    this run and `earlier` calibrations of the same key (`_same_key`; each its own run's values,
    `overhead["own"]`), with `runs` and `own` kept. Host work is a small difference of two large
    times, measured on 16 decodes: one run's value swings by more than itself (BiLD's per draft step
    from -0.30 to +0.32 ms in five runs of one AMD EPYC VM, against a 1 ms step), while the same
    code on the same CPU does the same work in every run."""
    earlier = [c["costs"].get("overhead") or {} for c in earlier]
    runs = [own] + [o.get("own", o) for o in earlier if o]

    def median(get) -> float:
        values = [v for v in (get(r) for r in runs) if v is not None]
        return float(np.median(values))

    out = {"large_call": median(lambda r: r.get("large_call"))}
    for group in ("call", "draft_step"):
        out[group] = {
            name: median(lambda r, g=group, n=name: (r.get(g) or {}).get(n))
            for name in own.get(group) or {}
        }
    return {**out, "n": own.get("n"), "runs": len(runs), "own": own}


def repool(registry) -> int:
    """Pool the host work of every calibration of `registry` over the calibrations of its key made
    before it there (`pooled`, as `calibrate` does when it is made); returns those rewritten."""
    reg, done = Registry.of(registry), 0
    for cal in (known := reg.calibrations()):
        o = cal["costs"].get("overhead")
        if not o:
            continue
        own = o.get("own") or {k: v for k, v in o.items() if k not in ("runs", "own")}
        new = pooled(own, _same_key(cal["key"], known, before=cal["made"]))
        if new != o:
            cal["costs"]["overhead"] = new
            reg.put_calibration(cal)
            done += 1
    return done


def _with_drift(u: dict, earlier: list[float]) -> dict:
    """`u` (`_uncertainty`: `relative` is the spread over the inputs) with the spread between runs:
    `between_runs`, the 95% prediction half-width of one calibration's log price about the mean of
    `runs` calibrations' (this one's and `earlier`'s: t quantile with runs - 1 degrees of freedom,
    times their standard deviation, times sqrt(1 + 1 / runs)); None below DRIFT_RUNS runs. `inputs`
    keeps the spread over the inputs; `relative` becomes the two combined (root sum of squares)."""
    inputs, runs = u["relative"], len(earlier) + 1
    between = None
    if runs >= DRIFT_RUNS:
        sd = float(np.std(np.log([*earlier, u["vanilla_seconds"]]), ddof=1))
        between = round(float(stats.t.ppf(0.975, runs - 1)) * sd * math.sqrt(1 + 1 / runs), 4)
    relative = inputs if between is None else round(math.hypot(inputs, between), 4)
    return {**u, "inputs": inputs, "between_runs": between, "runs": runs, "relative": relative}


# the fixed policies whose whole decodes measure the loop's host work beyond the greedy loop's: a
# drafting method's per draft step, prompt lookup's (no draft model) and the vanilla model's
# sampling ("sample", the baseline of the sampling policies) per large-model call
OVERHEAD_POLICIES = {
    "speculative": Policy("speculative", k=4),
    "speculative sampling": Policy("speculative", k=4, do_sample=True),
    "bild": Policy("bild", fallback=0.5, rollback=3.0),
    "prompt-lookup": Policy("prompt-lookup", k=4, ngram=2),
    "sample": Policy("sample"),
}


def _overhead_runners(models: tuple, max_new_tokens: int) -> dict:
    """The whole decodes `_overhead` reads, as runners of the calibration's one interleave: the
    small model's greedy decode and every `OVERHEAD_POLICIES` one ("whole <name>")."""
    from ..engine.decoding import generate

    large, small = models
    runners = {
        "whole greedy small": lambda x, i: _out(generate(small, x, max_new_tokens=max_new_tokens))
    }
    for name, policy in OVERHEAD_POLICIES.items():
        drafts = policy.method in ("speculative", "bild")
        runners[f"whole {name}"] = (
            lambda p, q, seeded: (
                lambda x, i: _out(
                    generate(
                        large,
                        x,
                        small=q,
                        max_new_tokens=max_new_tokens,
                        seed=i if seeded else None,
                        policy=p,
                    )
                )
            )
        )(policy, small if drafts else None, policy.sampling)
    return runners


def _overhead(costs: dict, rows: list[dict], xs, dec_only: bool) -> dict:
    """The loop's own host work (the acceptance rule, the commit, the crops, BiLD's confidence read,
    sampling's probabilities and draws, prompt lookup's n-gram search), which the calls above leave
    out: whole decodes of the small model alone and of `OVERHEAD_POLICIES` on the sample
    (`_overhead_runners`, timed in the calibration's one interleave: `rows`); their time beyond what
    their exact counts cost on the calls above. `large_call`: the greedy loop's, per call; beyond
    it, a drafting method's per draft step (`draft_step`), prompt lookup's and sampling's per
    large-model call (`call`). `large_call` is read from the small model's greedy decodes (the same
    loop, whichever model it runs): there a step is a few times cheaper, so the same noise of the
    clock is a few times smaller against it (from the large model's, under load, it came out below
    zero). Medians over the decodes: one slow decode (the machine's other work) moves a mean, not a
    median."""
    from ..measure import costs as pricing

    cal = {"costs": {**costs, "overhead": None}}

    # per decode: seconds beyond its counts' price, its large calls, its draft steps
    def extra(name, method):
        out = []
        for x, r in zip(xs, rows):
            r = r[f"whole {name}"]
            st = r["stats"]
            priced = pricing.decode_seconds(
                cal,
                method,
                "small",
                None if method == "greedy" else st,
                # with no host work
                len(r["tokens"]),
                x.shape[1],
                dec_only,
            )
            out.append((r["seconds"] - priced, st["large_calls"], st["small_calls"]))
        return out

    per_call = float(np.median([e / max(c, 1) for e, c, _ in extra("greedy small", "small")]))
    out = {"large_call": per_call, "call": {}, "draft_step": {}, "n": len(xs)}
    for name, policy in OVERHEAD_POLICIES.items():
        method = "greedy" if name == "sample" else policy.method
        got = extra(name, method)
        if method in ("speculative", "bild"):
            out["draft_step"][name] = float(
                np.median([(e - c * per_call) / max(s, 1) for e, c, s in got])
            )
        else:
            out["call"][name] = float(np.median([e / max(c, 1) - per_call for e, c, _ in got]))
    return out


def _out(o) -> tuple[list[int], dict]:
    return o.tokens, o.stats


def _batch_gain(large, xs, batch_sizes, max_new_tokens, threads, warmup) -> tuple[dict, dict]:
    """Batch-1 decodes of `xs` (the protocol) against batched ones at each size: the gain per
    output, its interval over the batch-1 examples, and how many batched outputs equal the batch-1
    ones."""
    from ..engine.batch import generate_batch
    from ..engine.decoding import generate

    rows = timing.interleave(
        xs,
        {"decode": lambda x, i: (generate(large, x, max_new_tokens=max_new_tokens).tokens, {})},
        warmup=min(warmup, len(xs)),
        threads=threads,
    )
    one = np.array([r["decode"]["seconds"] for r in rows])
    gains, cis, same, sizes = [], [], 0, sorted({min(b, len(xs)) for b in batch_sizes})
    with timing.fixed_threads(threads), torch.inference_mode():
        for size in sizes:
            # warm-up
            generate_batch(large, xs[:size], max_new_tokens=max_new_tokens, batch_size=size)
            t0 = timing.clock(large.device)
            outs = generate_batch(large, xs, max_new_tokens=max_new_tokens, batch_size=size)
            per_output = (timing.clock(large.device) - t0) / len(xs)
            gains.append(float(one.mean() / per_output))
            lo, hi = interval(lambda idx: mean(one, idx) / per_output, len(one))
            cis.append([lo, hi])
            same += sum(o.tokens == r["decode"]["tokens"] for o, r in zip(outs, rows))
    return (
        {"batch_sizes": sizes, "gain": gains, "ci": cis, "n": len(xs)},
        {"n": len(xs) * len(sizes), "identical": int(same)},
    )


def _readable(pair: str) -> bool:
    """Whether a paper pair's checkpoints can be read here (a local mirror or the hub's cache)."""
    try:
        from ..world.models import load_pair

        load_pair(pair)
        return True
    # no mirror, no hub: the calibration builds the models from their configurations
    except Exception:
        return False


def _models_key(pair: str, random_weights: bool) -> dict:
    """A toy pair's calibration prices its zoo's models only: {"models": their content hash}
    (`models.fingerprint`), which `for_machine` matches; paper pairs and random weights: {}."""
    return {} if random_weights or pair not in TOY_PAIRS else {"models": fingerprint(pair)}


def for_machine(
    registry,
    pair: str,
    device: str = "cpu",
    threads: int | None = 1,
    machine: dict | None = None,
    *,
    from_store: bool = True,
) -> dict | None:
    """The newest calibration of `pair` made on this machine (device type and name, CPU model,
    threads), or on `machine` (a record's `machines` entry: where its examples were timed), or None:
    the registry's own first (a committed study prices from its own calibrations), then, with
    `from_store`, this machine's store (`machine_store`: every calibration made here, for any registry).
    """
    reg = Registry.of(registry)
    here = machine or shard.machine(device)
    # timed before records named the CPU model: no calibration can be matched
    if "processor" not in here:
        return None
    want = {
        "pair": pair,
        "device": torch.device(here["device"]).type,
        "device_name": here["device_name"],
        "processor": here["processor"],
        "threads": threads,
    }
    models = _models_key(pair, False).get("models")
    for source in (reg, machine_store()) if from_store else (reg,):
        found = [
            c
            for c in source.calibrations()
            if all(c["key"].get(k) == v for k, v in want.items())
            # made before calibrations named their models: any toy zoo's
            and c["key"].get("models", models) == models
        ]
        if found:
            return max(found, key=lambda c: c["made"])
    return None
