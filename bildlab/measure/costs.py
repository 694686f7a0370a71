"""What a decode costs on a machine: a record's exact call counts priced by a calibration of that
machine (`calibrate`), so that a speedup is predicted from the mechanism and checked against the
clock.

    p = predict(record, calibration, source_lengths)   # {"predicted_speedup", "_ci", "measured_over_predicted", ...}

The cost model (one decode at batch 1, the calls `decoding.generate` makes):

    vanilla   encoder(L) + greedy run(T) + T * overhead per call
    policy    encoder(L) [+ the draft's encoder(L)] + C * (pass(1) + overhead per call) + D * slope
              + R * run(S / R) + S * overhead per draft step

with L the source length, T the vanilla output's tokens (a greedy step: the large model's one-token
steps back to back), C the large model's calls, D the drafted tokens (each call feeds the large
model's last token and the draft after it, as the loop does after drafting: pass(m + 1) ~ pass(1) +
m * slope, the least-squares line through the calibrated pass(m)), S the draft model's calls (its
steps inside a draft), and every per-call cost read at the decode's mean number of cached output
positions (interpolated between the calibrated prefixes). The small model alone is priced by its own
greedy step and the greedy loop's overhead per call; prompt lookup (no draft model between its
passes) by the greedy step in place of pass(1), which is measured after draft steps. A decoder-only
model's first call is its prefill over the prompt (the calibration's `encoder` of a decoder-only
model), not a one-token pass. The overheads (the loop's host work: acceptance rule, commit, crops,
BiLD's confidence read, sampling, n-gram search) come from the calibration's whole decodes of fixed
policies (`calibrate.OVERHEAD_POLICIES`), a sampling decode's from sampling ones; each the median
over the machine's runs (`calibrate.pooled`). A model's steps
are priced by their position in their run (`run_seconds`: the first steps after the other model ran
are dearer, its weights cold): a draft model's S steps as R drafts of S / R steps each (R, the
drafts: one before each large call but the first), a greedy loop's as one run. Left out: the spread
of draft lengths around their mean (priced as if all were of the mean length), host work that grows
otherwise than the fixed policies', cache growth beyond the calibrated prefixes, and a machine's
drift between calibration and timing (from the point prediction; the interval below takes it in).

How sure the prediction is: its interval is the paired bootstrap's over the timed examples (their
counts), widened by the calibration's own uncertainty u (`calibrate`'s `uncertainty.relative`: the
relative half-width of the interval of a vanilla decode's price over the calibration's inputs, with
the spread between runs of the machine once it has 3 calibrations of the pair): a
predicted speedup's [lo, hi] becomes [lo * (1 - u), hi * (1 + u)], and the measured speedup over it
[lo / (1 + u), hi / (1 - u)] (`widened`). Point estimates do not change, and a calibration made
before it stated u (u = 0) gives the intervals it gave."""

from __future__ import annotations

import numpy as np

from ..engine.tally import draft_runs
from .intervals import interval, ratio_of_sums

# methods whose engine counts its calls
PRICED = ("greedy", "small", "bild", "speculative", "prompt-lookup")
FIELDS = (
    "predicted_speedup",
    "predicted_speedup_ci",
    "measured_over_predicted",
    "measured_over_predicted_ci",
)
TOLERANCE = 0.05  # measured / predicted within +-5%: the cost model explains the speedup


def _line(xs, ys) -> tuple[float, float]:
    """Intercept and slope of the least-squares line through (xs, ys) (a constant for one point)."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(xs) < 2:
        return float(ys[0]), 0.0
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept), float(slope)


def _at(prefixes, values, prefix: float) -> float:
    """A per-call cost at `prefix` cached positions, linear between the calibrated prefixes
    (constant beyond)."""
    return float(
        np.interp(prefix, np.asarray(prefixes, dtype=float), np.asarray(values, dtype=float))
    )


def encoder(cal: dict, model: str, length: float) -> float:
    """Seconds of the encoder (or a decoder-only model's prefill) of `model` ('large' or 'small')
    over `length` tokens: the least-squares line through the calibrated lengths."""
    e = cal["costs"]["encoder"][model]
    a, b = _line(e["lengths"], e["seconds"])
    return max(a + b * length, 0.0)


def large_pass(cal: dict, prefix: float) -> tuple[float, float]:
    """The large model's pass at `prefix` cached positions: (seconds of a one-token pass, seconds
    per extra token fed in the same pass)."""
    lp = cal["costs"]["large_pass"]
    per_m = [
        _at(lp["prefix"], [row[j] for row in lp["seconds"]], prefix) for j in range(len(lp["m"]))
    ]
    one = (
        per_m[lp["m"].index(1)]
        if 1 in lp["m"]
        else _line(lp["m"], per_m)[0] + _line(lp["m"], per_m)[1]
    )
    return one, max(_line(lp["m"], per_m)[1], 0.0)


def run_seconds(series: dict, prefix: float, steps: float) -> float:
    """Seconds of `steps` consecutive one-token steps of one model (a draft of that length, or a
    greedy run) from a step series of the calibration (`small_step`, a draft's, `greedy_step`): by
    position where it was measured (`by_position`: the first steps after another model ran are
    dearer), positions past the measured ones at the last one's cost, a fraction of a step at its
    position's; else `steps` times the mean step."""
    by = series.get("by_position")
    if not by or not by[0]:
        return steps * _at(series["prefix"], series["seconds"], prefix)
    c = [_at(series["prefix"], [row[j] for row in by], prefix) for j in range(len(by[0]))]
    whole = int(steps)
    return (
        sum(c[:whole])
        + max(whole - len(c), 0) * c[-1]
        + (steps - whole) * c[min(whole, len(c) - 1)]
    )


def greedy_step(cal: dict, model: str, prefix: float) -> float:
    """Seconds of a one-token step of `model` ('large' or 'small') in a greedy loop (steps back to
    back); a calibration without them prices it as the large model's one-token pass or the draft's
    step."""
    g = (cal["costs"].get("greedy_step") or {}).get(model)
    if g is None:
        return large_pass(cal, prefix)[0] if model == "large" else draft_step(cal, "small", prefix)
    return _at(g["prefix"], g["seconds"], prefix)


def _draft_series(cal: dict, draft: str) -> dict:
    c = cal["costs"]
    s = c["small_step"] if draft == "small" else (c.get("drafts") or {}).get(draft)
    if s is None:
        raise ValueError(
            f"draft must be 'small' or one the calibration measured "
            f"({', '.join(['small', *(c.get('drafts') or {})])}); got {draft!r}"
        )
    return s


def draft_step(cal: dict, draft: str, prefix: float) -> float:
    """Seconds of the draft's one-token step ('small', or a draft in the calibration's `drafts`),
    the mean over the calibration's drafts."""
    s = _draft_series(cal, draft)
    return _at(s["prefix"], s["seconds"], prefix)


def decode_seconds(
    cal: dict,
    method: str,
    draft: str,
    stats: dict | None,
    tokens: int,
    source: int,
    decoder_only: bool,
    sampled: bool = False,
) -> float:
    """The predicted seconds of one decode from its exact counts (`stats`, the engine's; None for
    the vanilla large model, whose calls are its `tokens`); `sampled`: a sampling decode (the
    vanilla model's or the policy's), whose host work per call and per draft step is the sampling
    loop's."""
    if method not in PRICED:
        raise ValueError(f"method must be one of {', '.join(PRICED)} to be priced; got {method!r}")
    # the mean number of output positions cached over the decode (the calibration's `prefix`)
    prefix = tokens / 2
    # the loop's host work (calibrate._overhead)
    over = cal["costs"].get("overhead") or {"large_call": 0.0}
    # per method, beyond the greedy loop's
    per_call, per_step = over.get("call") or {}, over.get("draft_step") or {}
    if method in ("greedy", "small") or stats is None:
        model = "small" if method == "small" else "large"
        # the small model alone counts as 'large'
        calls = tokens if stats is None else stats["large_calls"]
        g = (cal["costs"].get("greedy_step") or {}).get(model)
        steps = max(calls - decoder_only, 0)
        run = (
            run_seconds(g, prefix, steps)
            if g is not None
            else steps * greedy_step(cal, model, prefix)
        )
        # the greedy loop's host work per call (argmax over the vocabulary, EOS check, commit) is
        # the same code whichever model it runs (`calibrate._overhead`)
        host = over["large_call"] + (per_call.get("sample", 0.0) if sampled else 0.0)
        return encoder(cal, model, source) + run + calls * host
    name = f"{method} sampling" if sampled else method
    one, slope = large_pass(cal, prefix)
    # no draft model between its passes: their one-token part is a greedy step's
    if method == "prompt-lookup":
        one = greedy_step(cal, "large", prefix)
    calls, drafted, steps = (
        stats["large_calls"],
        stats.get("drafted", 0),
        stats.get("small_calls", 0),
    )
    t = (
        encoder(cal, "large", source)
        + max(calls - decoder_only, 0) * one
        + drafted * slope
        + calls * (over["large_call"] + per_call.get(name, 0.0))
    )
    if steps:
        # an early exit runs on the large model's encoder outputs and cache
        own = draft != "early-exit"
        # one-token steps (a decoder-only draft's first: prefill)
        drafting = max(steps - (decoder_only and own), 0)
        rounds = draft_runs(drafting, calls)
        t += (
            (encoder(cal, "small", source) if own else 0.0)
            + steps * per_step.get(name, 0.0)
            + (
                rounds * run_seconds(_draft_series(cal, draft), prefix, drafting / rounds)
                if rounds
                else 0.0
            )
        )
    return t


def uncertainty(cal: dict) -> float:
    """The calibration's relative uncertainty u (`calibrate._uncertainty`; 0 for a calibration made
    before it was stated)."""
    return float((cal.get("uncertainty") or {}).get("relative") or 0.0)


def widened(ci, u: float, inverse: bool = False) -> list[float]:
    """An interval of a predicted value widened by the calibration's relative uncertainty u: [lo *
    (1 - u), hi * (1 + u)]; `inverse`, of a value over the prediction: [lo / (1 + u), hi / (1 - u)].
    u = 0 leaves it as it is."""
    lo, hi = ci
    if not u:
        return [lo, hi]
    if not 0 < u < 1:
        raise ValueError(f"a calibration's relative uncertainty must be in [0, 1); got {u!r}")
    return [lo / (1 + u), hi / (1 - u)] if inverse else [lo * (1 - u), hi * (1 + u)]


def predict(record: dict, cal: dict, sources: list[int], *, encoder_decoder: bool) -> dict:
    """A record's predicted speedup over its vanilla model (the same timed examples, priced by
    `cal`), with its 95% paired-bootstrap interval widened by the calibration's uncertainty
    (`widened`), and the measured speedup over it, with its own;
    None where the method counts no calls (transformers' generate), its steps were compiled (a
    calibration prices eager calls) or the calibration's relative uncertainty is 1 or more (its
    interval wider than its value: measured on a machine too busy to price anything). `sources`:
    every example's source length in tokens (the large model's input); `encoder_decoder`: whether
    the pair's models are."""
    key, empty = record["key"], dict.fromkeys(FIELDS)
    # a calibration prices eager calls, not compiled ones
    if key["method"] not in PRICED or key.get("compile"):
        return empty
    # a calibration whose interval is wider than its value (a very busy machine) says nothing
    if uncertainty(cal) >= 1:
        return empty
    rows = [(e, s) for e, s in zip(record["examples"], sources) if e["seconds"] is not None]
    if not rows or any(e["stats"] is None or "large_calls" not in e["stats"] for e, _ in rows):
        return empty
    decoder_only = not encoder_decoder
    method, draft = key["method"], key.get("draft", "small")
    sampled = bool((key.get("policy") or {}).get("do_sample"))
    pm = np.array(
        [
            decode_seconds(cal, method, draft, e["stats"], e["tokens"], s, decoder_only, sampled)
            for e, s in rows
        ]
    )
    pb = np.array(
        [
            decode_seconds(
                cal, "greedy", draft, None, e["baseline_tokens"], s, decoder_only, sampled
            )
            for e, s in rows
        ]
    )
    t = np.array([e["seconds"] for e, _ in rows], dtype=float)
    tb = np.array([e["baseline_seconds"] for e, _ in rows], dtype=float)
    n, full = len(rows), np.arange(len(rows))[None]

    def ratio(idx):  # measured speedup over predicted, on one resample of the examples
        return ratio_of_sums(tb, t, idx) / ratio_of_sums(pb, pm, idx)

    u = uncertainty(cal)
    lo, hi = widened(interval(lambda idx: ratio_of_sums(pb, pm, idx), n), u)
    rlo, rhi = widened(interval(ratio, n), u, inverse=True)
    return {
        "predicted_speedup": round(float(pb.sum() / pm.sum()), 4),
        "predicted_speedup_ci": [round(lo, 4), round(hi, 4)],
        "measured_over_predicted": round(float(ratio(full)[0]), 4),
        "measured_over_predicted_ci": [round(rlo, 4), round(rhi, 4)],
    }


def explained(record: dict, tolerance: float = TOLERANCE) -> bool | None:
    """Is the measured speedup within `tolerance` of the predicted one (None where nothing was
    predicted)?"""
    r = record["summary"].get("measured_over_predicted")
    return None if r is None else abs(r - 1.0) <= tolerance


def cost_ratio(cal: dict, draft: str = "small", prefix: float = 16) -> float:
    """c: the draft's one-token step over the large model's one-token pass (Leviathan et al.'s cost
    ratio)."""
    return draft_step(cal, draft, prefix) / large_pass(cal, prefix)[0]


def pass_ratios(cal: dict, prefix: float = 16) -> dict[int, float]:
    """The large model's pass over m tokens over its one-token pass, for every calibrated m: the
    verifier's cost in one-token passes (Leviathan et al.'s expectation counts it as 1)."""
    lp = cal["costs"]["large_pass"]
    one = large_pass(cal, prefix)[0]
    return {
        m: round(_at(lp["prefix"], [row[j] for row in lp["seconds"]], prefix) / one, 4)
        for j, m in enumerate(lp["m"])
    }


def timed_here(record: dict, cal: dict) -> bool | None:
    """Were the record's examples timed on the calibrated machine (CPU model and device name)? None
    where its rows do not name the CPU model (records timed before they did)."""
    machines = record.get("machines") or []
    if not machines or any("processor" not in m for m in machines):
        return None
    k = cal["key"]
    return all(
        m["processor"] == k["processor"] and m["device_name"] == k["device_name"] for m in machines
    )


def with_cost_ratio(cal: dict, c: float, draft: str = "small") -> dict:
    """A copy of `cal` whose draft step costs c one-token passes of the large model at every prefix
    (the counts fixed, the costs varied: a speedup against c)."""
    import copy

    out = copy.deepcopy(cal)
    s = out["costs"]["small_step"] if draft == "small" else out["costs"]["drafts"][draft]
    new = [c * large_pass(cal, p)[0] for p in s["prefix"]]
    # each position scaled as the mean: its first steps stay as much dearer
    if s.get("by_position"):
        s["by_position"] = [
            [v * n / o for v in row] for row, n, o in zip(s["by_position"], new, s["seconds"])
        ]
    s["seconds"] = new
    return out
