"""Pricing the registry's records: a calibration of a machine (`calibrate`) applied to the records a
sweep stored (`costs.predict`), with the calibration named in each record, and the registry's
records priced on another machine.

    attach(record, calibration, sources, encoder_decoder=True)   # the predicted speedup beside the measured one
    reprice(Registry("results/toy"), {"toy-mt": calibration})    # every record of the pair priced again
    reprice(Registry("results/toy"))                             # each record by the calibration it names
    elsewhere(records, other_calibration)                        # the speedups another machine's costs predict
"""

from __future__ import annotations

from functools import lru_cache

from ..measure.costs import FIELDS, PRICED, cost_ratio, pass_ratios, predict, timed_here
from ..world import tasks
from ..world.models import zoo_dir
from . import shard
from .registry import digest


def reference(cal: dict, draft: str = "small", record: dict | None = None) -> dict:
    """What a record says of the calibration that priced it: the machine, when (its key's digest
    finds it), whether the record was timed there (`timed_here`), and the cost ratios it priced with
    (c of the record's draft; the verifier's pass over m tokens in one-token passes)."""
    k = cal["key"]
    try:
        c = round(cost_ratio(cal, draft), 4)
    except ValueError:  # a draft this calibration did not measure
        c = None
    return {
        "digest": digest(k),
        "pair": k["pair"],
        "device_name": k["device_name"],
        "processor": k["processor"],
        "threads": k["threads"],
        "made": cal["made"],
        "timed_here": timed_here(record or {}, cal),
        "c": c,
        "pass_ratio": {str(m): r for m, r in pass_ratios(cal).items()},
    }


def attach(record: dict, cal: dict | None, sources: list[int], *, encoder_decoder: bool) -> dict:
    """The record with its predicted speedup beside the measured one (`predict`) and the calibration
    named (`record["calibration"]`); without a calibration, both are None."""
    record["summary"].update(
        predict(record, cal, sources, encoder_decoder=encoder_decoder)
        if cal
        else dict.fromkeys(FIELDS)
    )
    record["calibration"] = (
        reference(cal, record["key"].get("draft", "small"), record) if cal else None
    )
    return record


@lru_cache(maxsize=16)
def source_lengths(pair: str, task: str, split: str, limit) -> tuple[list[int], bool]:
    """Every example's source length in the pair's large-model input (`Pair.encode`), and whether
    the pair is encoder-decoder."""
    p = shard.load(pair, "small", "cpu", str(zoo_dir()))
    lengths = [p.encode(ex["source"]).shape[1] for ex in tasks.load_task(task, split, limit=limit)]
    return lengths, bool(p.large.config.is_encoder_decoder)


def reprice(registry, calibrations: dict[str, dict] | None = None) -> int:
    """Price every record of `registry` again, storing its predicted speedup and the calibration's
    name; nothing else in a record changes. `calibrations` ({pair: calibration}): each pair's records
    by its one; None: every record by the calibration it names (`record["calibration"]`, found in
    the registry by its key's digest and when it was made; records that name none stay as they
    are). Returns the records rewritten."""
    if calibrations is None:
        named = {(digest(c["key"]), c["made"]): c for c in registry.calibrations()}
    done = 0
    for record in registry.records():
        key, ref = record["key"], record.get("calibration") or {}
        if calibrations is not None:
            cal = calibrations.get(key["pair"])
        else:
            cal = named.get((ref.get("digest"), ref.get("made")))
        if cal is None:
            continue
        sources, enc_dec = source_lengths(key["pair"], key["task"], key["split"], key["limit"])
        before = (dict(record["summary"]), record.get("calibration"))
        attach(record, cal, sources, encoder_decoder=enc_dec)
        # how the record was timed against its calibration, which pricing again does not change
        if calibrations is None and "same_run" in ref:
            record["calibration"]["same_run"] = ref["same_run"]
        if (record["summary"], record["calibration"]) != before:
            registry.put(key, record)
            done += 1
    return done


def elsewhere(records: list[dict], cal: dict) -> list[dict]:
    """Every priced record's speedup on the machine of `cal` (a calibration of another machine, e.g.
    one a user made with `bildlab calibrate` on their GPU) beside the one measured here and the one
    predicted here: the counts are the machine-independent mechanism, the costs the other machine's.
    Records of another pair than the calibration's are left out."""
    out = []
    for r in records:
        key = r["key"]
        if key["pair"] != cal["key"]["pair"] or key["method"] not in PRICED:
            continue
        sources, enc_dec = source_lengths(key["pair"], key["task"], key["split"], key["limit"])
        there = predict(r, cal, sources, encoder_decoder=enc_dec)
        if there["predicted_speedup"] is None:
            continue
        s = r["summary"]
        out.append(
            {
                "key": key,
                "pair": key["pair"],
                "split": key["split"],
                "method": key["method"],
                "draft": key.get("draft", "small"),
                "measured here": s["speedup"],
                "measured here ci": s["speedup_ci"],
                "predicted here": s.get("predicted_speedup"),
                "predicted there": there["predicted_speedup"],
                "predicted there ci": there["predicted_speedup_ci"],
            }
        )
    return out
