"""The speculative decoding pipeline (notebooks/speculative_pipeline.ipynb): acceptance and speedup
against k, against BiLD, transformers' assisted generation and prompt lookup (a draft without a
model)."""

from __future__ import annotations

from ..harness import evaluate as ev
from ..measure import summary as sm
from . import plots
from .common import (
    Result,
    Table,
    against,
    bullets,
    csv_note,
    lookup_entry,
    lookup_sweep,
    n_text,
    pair_list,
    pin_speed,
    policy_label,
    record_cells,
    short_cells,
    speed,
    speed_text,
    speedup_ci,
    to_table,
    tokens_per_call,
    value,
    versus_text,
    write_csv,
)
from .compiled import against_compiled


def speculative(
    pair: str = "toy-mt-llama",
    *,
    ks=(1, 2, 3, 4, 6, 8),
    temperature: float = 1.0,
    bild_fallback: float = 0.5,
    bild_rollback: float = 3.0,
    reference_pairs=("toy-mt", "toy-sum"),
    lookup_ngrams=(),
    lookup_ks=(),
    lookup_val_limit=None,
    lookup_val_timing_limit=200,
    compiled_pairs=(),
    compiled_rq5=None,
    compile: bool = False,
    figures="figures",
    sweep=None,
    **run,
) -> Result:
    """The speculative decoding pipeline: acceptance against k, measured speedup against the
    expected (1 - a^(k+1)) / ((1 - a)(k c + v)), v the verifier pass over k + 1 tokens in one-token
    passes (1 without a calibration); greedy against greedy, sampling against sampling (each
    labelled); BiLD on the same examples; and on each of `reference_pairs` (T5 pairs; None for none)
    fixed-k speculative decoding (k = 4) as the lossless reference next to BiLD. With
    `lookup_ngrams` and `lookup_ks`, on every pair prompt lookup (no small model): the grid on
    validation (`lookup_val_limit` examples, `lookup_val_timing_limit` of them timed), the fastest
    reported on test beside the two-model methods (paired differences), on a decoder-only pair with
    transformers' prompt lookup (same n-gram size and k) in the same sweep. With `compiled_pairs`, a
    section against a compiled baseline (`compiled.against_compiled`: speculative k = 4, this BiLD
    policy and RQ5's choices on the pairs of `compiled_rq5`, eager and, with `compile`, compiled):
    `sections["compiled"]`."""
    sweep = sweep or ev.sweep  # the harness; a plan passes one that records instead of computing
    grid = (
        [{"method": "speculative", "k": k} for k in ks]
        + [
            {"method": "speculative", "k": k, "do_sample": True, "temperature": temperature}
            for k in ks
        ]
        + [{"method": "hf_assisted", "k": k} for k in ks]
        + [{"method": "bild", "fallback": bild_fallback, "rollback": bild_rollback}]
    )
    recs = sweep(pair, grid, **run)
    greedy, sampled, assisted = (
        recs[: len(ks)],
        recs[len(ks) : 2 * len(ks)],
        recs[2 * len(ks) : 3 * len(ks)],
    )
    bild = recs[-1]
    rows = []
    for mode, group in (
        ("greedy vs greedy", greedy),
        (f"sampling (T={temperature:g}) vs sampling", sampled),
    ):
        for k, rec in zip(ks, group):
            a, c = sm.acceptance(rec), sm.cost_ratio(rec)
            rows.append(
                {
                    "pair": pair,
                    "mode": mode,
                    "k": k,
                    "acceptance a": round(a, 3),
                    "cost ratio c": round(c, 3),
                    "tokens / large call": tokens_per_call(rec),
                    "expected tokens / call": round(sm.expected_tokens_per_call(a, k), 3),
                    "accepted at draft position 1…k": _by_position(rec),
                    "speedup": sm.fmt(rec["summary"]["speedup"], rec["summary"]["speedup_ci"], "x"),
                    "verifier cost": sm.verify_cost(rec, k),
                    "expected speedup": round(
                        sm.expected_speedup(a, k, c, sm.verify_cost(rec, k)), 3
                    ),
                    "predicted speedup": rec["summary"].get("predicted_speedup"),
                    "N": rec["summary"]["examples"],
                    "identical to vanilla": f"{rec['summary']['identical_count']}/{rec['summary']['examples']}",
                }
            )
    # transformers' assisted generation with the same draft, same examples
    for k, rec in zip(ks, assisted):
        rows.append(
            {"pair": pair, "mode": "transformers assisted generation", "k": k, **record_cells(rec)}
        )
    rows.append(
        {
            "pair": pair,
            "mode": f"BiLD ({policy_label(bild)})",
            **record_cells(bild),
            "tokens / large call": tokens_per_call(bild),
        }
    )
    ref, versus, lookups, looked, beside = [], [], {}, [], []

    # prompt lookup on pair p: validation grid, the chosen on test, against `rivals`
    def lookup(p, rivals):
        val, best = lookup_sweep(
            p,
            lookup_ngrams,
            lookup_ks,
            sweep,
            run,
            "validation",
            lookup_val_limit,
            lookup_val_timing_limit,
        )
        if best is None:
            return
        rows.extend(
            {"pair": p, "mode": f"prompt lookup, validation ({policy_label(r)})", **record_cells(r)}
            for r in val
        )
        decoder_only = not ev.encoder_decoder(p)
        tests = sweep(
            p, [lookup_entry(best)] + [lookup_entry(best, "hf_prompt_lookup")] * decoder_only, **run
        )
        t = tests[0]
        beside.append(_beside(p, "prompt lookup (no small model)", t))
        if decoder_only:
            beside.append(_beside(p, "transformers' prompt lookup", tests[1]))
        rows.append(
            {
                "pair": p,
                "mode": f"prompt lookup, no small model ({policy_label(t)}, chosen on validation)",
                **record_cells(t),
            }
        )
        s = t["summary"]
        text = (
            f"Prompt lookup (no small model) on {p} ({n_text(s)}; n and k chosen on validation, "
            f"{n_text(val[0]['summary'])}"
            f"): {speed_text(t)}, {s['identical_count']} of {s['examples']} outputs identical"
        )
        if decoder_only:
            h = tests[1]
            rows.append(
                {
                    "pair": p,
                    "mode": f"transformers prompt lookup ({policy_label(h)})",
                    **record_cells(h),
                }
            )
            text += f"; transformers' prompt lookup with the same n and k {speed_text(h)}"
        text += "".join(
            f"; {name} against it: {versus_text(r, t, (name, 'prompt lookup'))}"
            for name, r in rivals
        )
        versus.append(text + ".")
        lookups[p] = {
            "record": t,
            "policy": policy_label(t),
            "speedup": speedup_ci(t),
            "identical": s["identical_count"],
            "outputs": s["examples"],
        }
        looked.extend(val + tests)

    best_greedy = max(greedy, key=lambda r: r["summary"]["speedup"])
    lookup(
        pair, [(f"speculative k={best_greedy['key']['policy']['k']}", best_greedy), ("BiLD", bild)]
    )
    for ref_pair in pair_list(reference_pairs) if reference_pairs else []:
        spec, ref_bild = sweep(
            ref_pair,
            [
                {"method": "speculative", "k": 4},
                {"method": "bild", "fallback": bild_fallback, "rollback": bild_rollback},
            ],
            **run,
        )
        for r in (spec, ref_bild):
            rows.append(
                {
                    "pair": ref_pair,
                    "mode": f"{r['key']['method']} ({policy_label(r)})",
                    **record_cells(r),
                    "tokens / large call": tokens_per_call(r),
                }
            )
        s = spec["summary"]
        versus.append(
            f"On {ref_pair} (N = {s['examples']}), fixed-k speculative decoding {speed_text(spec)}, "
            f"{s['identical_count']} of {s['examples']} outputs identical, against BiLD {speed_text(ref_bild)}: "
            f"{versus_text(spec, ref_bild, ('speculative decoding', 'BiLD'))}."
        )
        ref += [spec, ref_bild]
        beside += [_beside(ref_pair, "speculative", spec), _beside(ref_pair, "BiLD", ref_bild)]
        lookup(ref_pair, [("speculative k=4", spec), ("BiLD", ref_bild)])
    table = to_table(rows)
    series, cis = {}, {}
    for mode, group in (("greedy", greedy), ("sampling", sampled)):
        series[f"{mode}: measured"] = [r["summary"]["speedup"] for r in group]
        cis[f"{mode}: measured"] = [r["summary"]["speedup_ci"] for r in group]
        series[f"{mode}: expected"] = [
            sm.expected_speedup(sm.acceptance(r), k, sm.cost_ratio(r), sm.verify_cost(r, k))
            for r, k in zip(group, ks)
        ]
    series["transformers assisted (greedy): measured"] = [r["summary"]["speedup"] for r in assisted]
    cis["transformers assisted (greedy): measured"] = [r["summary"]["speedup_ci"] for r in assisted]
    fig = plots.lines(
        list(ks),
        series,
        cis=cis,
        reference=1.0,
        xlabel="draft length k",
        ylabel="speedup over the large model alone (x)",
        title=f"{pair}: speculative decoding, N = {greedy[0]['summary']['examples']}",
    )
    plots.save(fig, "speculative_pipeline", figures)
    best = max(greedy, key=lambda r: r["summary"]["speedup"])
    others = [r for r in greedy if r is not best]
    rival = max(others, key=lambda r: r["summary"]["speedup"]) if others else None
    best_k, rival_k = best["key"]["policy"]["k"], rival["key"]["policy"]["k"] if rival else None
    identical = sum(r["summary"]["identical_count"] for r in greedy)
    total = sum(r["summary"]["examples"] for r in greedy)
    answer = (
        f"Greedy speculative decoding on {pair} (N = {best['summary']['examples']}) is lossless: {identical} of "
        f"{total} outputs identical to the large model's. Fastest at k={best['key']['policy']['k']}: "
        f"{speed_text(best)}"
        + (
            f"; against k={rival['key']['policy']['k']} ({speed_text(rival)}): "
            f"{versus_text(best, rival, (f'k={best_k}', f'k={rival_k}'))}"
            if rival
            else ""
        )
        + f". transformers' assisted generation at k={best['key']['policy']['k']}: "
        f"{speed_text(assisted[list(ks).index(best['key']['policy']['k'])])}. BiLD on the same examples: "
        f"{speed_text(bild)}." + "".join(" " + v for v in versus)
    )
    headline = {
        "best_k": best["key"]["policy"]["k"],
        "speedup": speedup_ci(best),
        "identical": identical,
        "outputs": total,
        **({"prompt_lookup": lookups} if lookups else {}),
    }
    sections = {}
    if compiled_pairs:
        sections["compiled"] = against_compiled(
            compiled_pairs,
            bild_fallback=bild_fallback,
            bild_rollback=bild_rollback,
            rq5=compiled_rq5,
            compile=compile,
            figures=figures,
            sweep=sweep,
            **run,
        )
    at_best = assisted[list(ks).index(best_k)]
    lines = [
        f"Fastest at k = {best_k}: {speed(best, policy=False)}"
        + (f", {against(best, rival, f'k = {rival_k}')}" if rival else "")
        + ".",
        f"transformers' assisted generation at k = {best_k}: {speed(at_best, policy=False)}; "
        f"BiLD ({policy_label(bild)}) on the same examples: {speed(bild, policy=False)}.",
    ]
    if pair in lookups:
        lk = lookups[pair]["record"]
        lines.append(
            f"Prompt lookup (no small model, {policy_label(lk)}): {speed(lk, policy=False)}; "
            f"k = {best_k} is {against(best, lk, 'prompt lookup')}."
        )
    short = (
        f"Greedy speculative decoding on {pair} is lossless: {identical} of {total} outputs identical "
        f"to the large model's (N = {best['summary']['examples']} per k). With 95% intervals:\n\n"
        + bullets(lines)
    )
    shown = [
        {
            "method": mode,
            "k": k,
            "acceptance a": f"{sm.acceptance(r):.2f}",
            "tokens / large call": _two(tokens_per_call(r)),
            "expected tokens / call": f"{sm.expected_tokens_per_call(sm.acceptance(r), k):.2f}",
            "speedup": value(r["summary"]["speedup"], r["summary"]["speedup_ci"], "x"),
            "expected speedup": f"{_expected(r, k):.2f}x",
            "identical to vanilla": f"{r['summary']['identical_count']}/{r['summary']['examples']}",
        }
        for mode, group in (("greedy", greedy), (f"sampling (T={temperature:g})", sampled))
        for k, r in zip(ks, group)
    ] + [
        {
            "method": "transformers assisted",
            "k": k,
            "tokens / large call": _two(tokens_per_call(r)),
            "speedup": value(r["summary"]["speedup"], r["summary"]["speedup_ci"], "x"),
            "identical to vanilla": f"{r['summary']['identical_count']}/{r['summary']['examples']}",
        }
        for k, r in zip(ks, assisted)
    ]
    full = table
    link = write_csv(full, "speculative_pipeline", figures)
    pins = [
        f"{pair}: {identical}/{total} greedy outputs identical; fastest k = {best_k} {pin_speed(best)}"
    ] + [f"{p} prompt lookup {v['policy']}: {pin_speed(v['record'])}" for p, v in lookups.items()]
    for v in lookups.values():
        v.pop("record")
    details = []
    if beside:
        details += [
            "**On every pair, beside the two-model methods**: prompt lookup (no small model; n and k "
            "chosen on validation) and, on the T5 pairs, fixed-k speculative decoding (k = 4) next to "
            "BiLD, on the same test examples.",
            Table(beside),
        ]
    details += [
        csv_note(link, len(full), "with every validation row of prompt lookup and every column"),
    ]
    return Result(
        "speculative pipeline",
        table,
        fig,
        short,
        headline,
        recs + ref + looked,
        sections,
        summary=Table(shown),
        details=[d for d in details if d],
        pin="\n".join(pins),
        account=answer,
    )


def _two(x) -> str:
    return "" if x is None else f"{x:.2f}"


def _expected(r: dict, k: int) -> float:
    return sm.expected_speedup(sm.acceptance(r), k, sm.cost_ratio(r), sm.verify_cost(r, k))


def _beside(pair: str, method: str, record: dict) -> dict:
    return {
        "pair": pair,
        "method": method,
        "policy": policy_label(record),
        **short_cells(record),
        "identical to vanilla": f"{record['summary']['identical_count']}/{record['summary']['examples']}",
    }


def _by_position(record: dict) -> str | None:
    """The share of drafts whose i-th token was accepted, i = 1 ... k (vLLM's per-position
    acceptance; counted on every example), e.g. '0.97 0.87 0.67'; None where the record does not
    count it."""
    shares = (record.get("mechanism") or {}).get("accepted_by_position")
    return None if shares is None else " ".join(f"{x:.2f}" for x in shares)
