"""Against a compiled baseline (notebooks/speculative_pipeline.ipynb, its last section): BiLD and
speculative decoding timed with compiled steps (static caches and `torch.compile`, `static.py`) over
compiled greedy, beside the same policies timed eagerly over eager greedy, on the same examples with
the same N.

Each group of policies is swept twice with the same arguments: eagerly (the records the study
already has) and with `compile=True` (the sweep compiles every step before it times anything). Each
speedup is over its own mode's greedy, timed interleaved with it; the two modes are compared by the
paired difference of their speedups over the same examples (`summary.speed_difference`): each side a
ratio within its own run, the two runs perhaps on different machines (said where they are). What
compilation buys greedy itself is shown against transformers' greedy `generate`, timed interleaved
in each run."""

from __future__ import annotations

import numpy as np

from ..harness import evaluate as ev
from ..measure import summary as sm
from ..measure.intervals import interval, ratio_of_sums
from . import plots
from .common import Result, Table, n_text, pair_list, policy_label, to_table, value
from .rq5_main_table import chosen

RQ5_CHOICE = (
    "fallbacks",
    "rollbacks",
    "tolerance",
    "degraded_tolerance",
    "val_split",
    "val_limit",
    "val_timing_limit",
)


def against_compiled(
    pairs=("toy-mt", "toy-mt-llama"),
    *,
    k: int = 4,
    bild_fallback: float = 0.5,
    bild_rollback: float = 3.0,
    rq5: dict | None = None,
    compile: bool = True,
    figures="figures",
    sweep=None,
    **run,
) -> Result:
    """On each of `pairs`: speculative decoding (k) and BiLD (`bild_fallback`, `bild_rollback`) on
    the run's examples and, on the pairs of `rq5` (RQ5's parameters: `pairs`, its choice's
    `RQ5_CHOICE`, and its test `limit` and `timing_limit`), the policies RQ5 reports, on RQ5's test
    examples in its first timing pass; each eager and (with `compile`) compiled. `compile=False`:
    the eager rows alone (nothing is compiled)."""
    if not isinstance(compile, bool):
        raise TypeError(f"compile must be True or False; got {compile!r}")
    sweep = sweep or ev.sweep
    groups = []  # (pair, entries, run arguments)
    for pair in pair_list(pairs):
        groups.append(
            (
                pair,
                [
                    {"method": "speculative", "k": k},
                    {"method": "bild", "fallback": bild_fallback, "rollback": bild_rollback},
                ],
                run,
            )
        )
        if rq5 and pair in pair_list(rq5["pairs"]):
            test = {
                **run,
                "limit": rq5.get("limit"),
                "timing_limit": rq5.get("timing_limit"),
                "timing_pass": 2,
            }
            entries = chosen(pair, sweep=sweep, **{n: rq5[n] for n in RQ5_CHOICE}, **run)
            groups.append((pair, [{"method": "bild", **e} for e in entries], test))
    rows, records, headline, answers, labels, series, cis = [], [], {}, [], [], {}, {}
    heads = []  # each row's headline numbers
    for pair, entries, args in groups:
        eager = sweep(pair, entries, **args)
        compiled = sweep(pair, entries, compile=True, **args) if compile else [None] * len(eager)
        records += eager + [c for c in compiled if c is not None]
        for e, c in zip(eager, compiled):
            label = f"{e['key']['method']} ({policy_label(e)}" + (
                f", {e['key']['draft']})" if e["key"]["draft"] not in (None, "small") else ")"
            )
            row, head = compare(e, c)
            rows.append({"pair": pair, "policy": label, **row})
            headline.setdefault(pair, {})[label] = head
            heads.append(head)
            labels.append(f"{pair}: {label}")
            for mode, r in (("eager, over eager greedy", e), ("compiled, over compiled greedy", c)):
                series.setdefault(mode, []).append(r["summary"]["speedup"] if r else float("nan"))
                cis.setdefault(mode, []).append(r["summary"]["speedup_ci"] if r else None)
            answers.append(says(pair, label, e, c, head))
    if not compile:
        series.pop("compiled, over compiled greedy", None)
    n = sorted({n_text(r["summary"]) for r in records})
    fig = plots.dots(
        labels,
        series,
        cis=cis,
        reference=1.0,
        xlabel="speedup over its own mode's greedy (x)",
        title="Against a compiled baseline (" + "; ".join(n) + ")",
    )
    plots.save(fig, "speculative_compiled", figures)
    answer = (
        "Each speedup is over greedy decoding in the same mode, timed interleaved with it; compiled against "
        "eager by the paired difference of the two speedups over the same examples. "
        + lead(headline)
        + " ".join(answers)
        + ("" if compile else " compile=False: the compiled rows were not run.")
    )
    shown = [
        {
            "pair": r["pair"],
            "policy": r["policy"],
            "N": r["N"] if r["N timed"] == r["N"] else f"{r['N']} ({r['N timed']} timed)",
            "speedup, eager": value(*h["eager"], "x"),
            "speedup, compiled": value(*h["compiled"], "x") if "compiled" in h else "",
            "compiled − eager (paired)": value(*h["difference"], "x", signed=True)
            if "difference" in h
            else "",
            "same machine": {True: "yes", False: "no"}.get(h.get("same_machine"), ""),
            "compiling (s)": r.get("compilation (s)", ""),
        }
        for r, h in zip(rows, heads)
    ]
    pins = [
        f"{r['pair']} {r['policy']}: eager {sm.fmt(*h['eager'], 'x', 3)}"
        + (f", compiled {sm.fmt(*h['compiled'], 'x', 3)}" if "compiled" in h else "")
        for r, h in zip(rows, heads)
    ]
    short = (
        "Each speedup is over greedy decoding in the same mode, timed interleaved with it; compiled "
        "against eager by the paired difference of the two speedups over the same examples (95% "
        "intervals). "
        + lead(headline)
        + ("" if compile else " compile=False: the compiled rows were not run.")
    )
    return Result(
        "against a compiled baseline",
        to_table(rows),
        fig,
        short.strip(),
        headline,
        records,
        summary=Table(shown),
        pin="\n".join(pins),
        account=answer,
    )


def lead(headline: dict) -> str:
    """What the compiled rows allow, all together: how many stay detectably faster than compiled
    greedy, how many speedups are detectably below or above their eager ones, and what compilation
    bought greedy itself."""
    done = [h for rows in headline.values() for h in rows.values() if "compiled" in h]
    if not done:
        return ""
    faster = sum(h["compiled"][1][0] > 1 for h in done)
    below, above = (
        sum(f(h["difference"][1]) for h in done)
        for f in (lambda ci: ci[1] < 0, lambda ci: ci[0] > 0)
    )
    d = [h["difference"][0] for h in done]
    hf = {
        m: [h["greedy_over_hf"][m][0] for h in done if h["greedy_over_hf"][m]]
        for m in ("eager", "compiled")
    }
    text = (
        f"Over compiled greedy, {faster} of {len(done)} rows stay detectably faster than greedy; {below} of "
        f"{len(done)} speedups are detectably below their eager ones and {above} above (compiled − eager "
        f"{min(d):+.2f}x to {max(d):+.2f}x)."
    )
    if hf["eager"] and hf["compiled"]:
        text += (
            f" Greedy over transformers' greedy `generate` in the same runs: {min(hf['eager']):.2f}-"
            f"{max(hf['eager']):.2f}x eager, {min(hf['compiled']):.2f}-{max(hf['compiled']):.2f}x compiled."
        )
    if not all(h["same_machine"] for h in done):
        text += (
            " The eager rows were timed in another run, on another machine, than the compiled ones."
        )
    return text + " "


def compare(e: dict, c: dict | None) -> tuple[dict, dict]:
    """A policy's eager record and its compiled one (None: not run) as table cells and headline
    numbers."""
    s = e["summary"]
    row = {
        "N": s["examples"],
        "N timed": s.get("timed_examples", s["examples"]),
        "identical to vanilla (eager)": f"{s['identical_count']}/{s['examples']}",
        "speedup, eager": sm.fmt(s["speedup"], s["speedup_ci"], "x"),
    }
    head = {"eager": [s["speedup"], s["speedup_ci"]], "n": s["examples"]}
    if c is None:
        return row, head
    t = c["summary"]
    d = sm.speed_difference(c, e)
    hf = {mode: greedy_over_hf(r) for mode, r in (("eager", e), ("compiled", c))}
    row.update(
        {
            "identical to vanilla (compiled)": f"{t['identical_count']}/{t['examples']}",
            "speedup, compiled": sm.fmt(t["speedup"], t["speedup_ci"], "x"),
            "compiled − eager (paired)": sm.fmt(
                d["speedup_difference"], d["speedup_difference_ci"], "x", signed=True
            ),
            **{
                f"{mode} greedy over transformers' greedy": sm.fmt(*x, "x") if x else None
                for mode, x in hf.items()
            },
            "same machine": where(e) == where(c),
            "compilation (s)": round(c["protocol"].get("compile_seconds", 0.0)),
        }
    )
    head.update(
        {
            "compiled": [t["speedup"], t["speedup_ci"]],
            "difference": [d["speedup_difference"], d["speedup_difference_ci"]],
            "timed": d["n"],
            "greedy_over_hf": hf,
            "same_machine": where(e) == where(c),
            "identical": t["identical_count"],
        }
    )
    return row, head


def greedy_over_hf(record: dict) -> tuple[float, list] | None:
    """How much faster the record's greedy ran than transformers' greedy `generate`, timed
    interleaved with it on the same examples (hf seconds over greedy seconds, summed) with its 95%
    interval; None where it was not timed."""
    timed = [
        x
        for x in record["examples"]
        if x.get("hf_seconds") is not None and x["baseline_seconds"] is not None
    ]
    if not timed:
        return None
    hf, greedy = (np.array([x[f] for x in timed]) for f in ("hf_seconds", "baseline_seconds"))
    lo, hi = interval(lambda idx: ratio_of_sums(hf, greedy, idx), len(timed))
    return round(float(hf.sum() / greedy.sum()), 3), [round(lo, 3), round(hi, 3)]


def where(record: dict) -> list:
    """The machines a record was timed on, as the comparison of two records needs them."""
    return [
        (m.get("host"), m.get("platform"), m.get("processor"), m.get("device_name"))
        for m in record["machines"]
    ]


def says(pair: str, label: str, e: dict, c: dict | None, head: dict) -> str:
    """One row's answer, from its intervals: does the speedup hold over a compiled baseline?"""
    eager = sm.fmt(*head["eager"], "x")
    if "compiled" not in head:
        return f"On {pair} ({n_text(e['summary'])}), {label}: {eager} eager."
    (x, (lo, hi)), (d, (dlo, dhi)) = head["compiled"], head["difference"]
    over = (
        "detectably faster than compiled greedy"
        if lo > 1
        else "detectably slower than compiled greedy"
        if hi < 1
        else "not detectably faster than compiled greedy"
    )
    change = (
        "no detectable difference from its eager speedup"
        if dlo <= 0 <= dhi
        else "detectably above its eager speedup"
        if dlo > 0
        else "detectably below its eager speedup"
    )
    return (
        f"On {pair} ({n_text(e['summary'])}), {label}: {eager} eager, {sm.fmt(x, [lo, hi], 'x')} compiled, "
        f"{over}; {change} (compiled − eager {sm.fmt(d, [dlo, dhi], 'x', 3, signed=True)}, paired"
        + ("" if head["same_machine"] else "; the two were timed on different machines")
        + ")."
    )
