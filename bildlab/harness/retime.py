"""Time a registry's sweeps again on this machine, priced by a calibration of this machine made in
the same run.

A speedup is a ratio of clocks on one machine, and a calibration prices the calls of one machine:
two virtual machines that report the same CPU model can differ in what a call costs (docs/costs.md).
`retime` measures both in one run, so that a record's prediction and its measurement come from the
same machine:

    retime(Registry("results/toy"))            # also `bildlab registry --retime [--pair toy-mt]`
    retime(Registry("results/toy"), only=pick(machines=["AMD EPYC"]))   # [--machine "AMD EPYC"]
    retime(reg, retimed_before="2026-12-07T06:00:00Z")   # [--retimed-before TIME]

For each pair it calibrates this machine (`calibrate.calibrate`, written to the registry's
`.calibrations/`; again before a sweep that starts more than `FRESH` seconds after it: a shared
machine's speed drifts), then times every sweep of that pair again under the one protocol
(`shard.time_shard`: the vanilla runs and every policy of the sweep interleaved on the examples the
sweep timed). The new batch-1 outputs must equal the record's stored ones (text and length of every
timed example, and their counts); a record whose outputs differ is left as it was and named in the
result. Only the timings, the machine, the summary's speeds and the prediction change; the outputs,
the scores and the mechanism do not. A sweep timed with compiled steps (`compile=True`) is timed
again compiled, its steps compiled before its first timed decode (`protocol.compile_seconds`); it is
not priced (the calibration measures eager calls). Each sweep is checkpointed as it goes (in this
run's calibration's name) and its records are written whole, so an interrupted retime resumes: a
record already retimed with a calibration of its own run (`calibration.same_run`) is skipped.
`retimed_before` times once more the records retimed before that time (a retime made on a busy
machine, made again on a quiet one); those retimed since are skipped, so that run resumes too."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime, timezone

from ..engine import timing
from ..measure.summary import summarize
from ..world import tasks
from ..world.models import zoo_dir
from . import calibrate, pricing, shard
from .records import counts_agree, label
from .registry import Registry, digest, versions

# seconds: a pair's calibration is made again before a sweep that starts later than this after it
FRESH = 600


def _sweeps(registry: Registry, only, retimed_before) -> tuple[dict[str, list[dict]], int]:
    """The records to retime grouped by sweep ({sweep: records}), and how many were skipped: retimed
    already with their own run's calibration (and not before `retimed_before`), or not chosen by
    `only`."""
    sweeps, skipped = defaultdict(list), 0
    for record in registry.records():
        cal, made = record.get("calibration") or {}, (record.get("retimed") or {}).get("made")
        done = cal.get("same_run") and (retimed_before is None or (made or "") >= retimed_before)
        if done or (only is not None and not only(record)):
            skipped += 1
        else:
            sweeps[record["protocol"]["sweep"]].append(record)
    return sweeps, skipped


def pick(pairs=(), splits=(), machines=()):
    """`retime`'s `only`: records of these pairs and splits, timed on a machine whose processor or
    device name contains one of `machines` (case-sensitive); an empty choice admits all."""

    def only(record: dict) -> bool:
        key = record["key"]
        names = [f"{m.get('processor', '')} {m.get('device_name', '')}" for m in record["machines"]]
        return (
            (not pairs or key["pair"] in pairs)
            and (not splits or key["split"] in splits)
            and (not machines or any(m in n for m in machines for n in names))
        )

    return only


def _spec(records: list[dict]) -> tuple[dict, list[int]]:
    """The shard spec that times the records of one sweep again, and the examples the sweep timed."""
    key, protocol = records[0]["key"], records[0]["protocol"]
    entries = [
        {
            **shard.DEFAULTS,
            "method": r["key"]["method"],
            "draft": r["key"]["draft"] or "small",
            **r["key"]["policy"],
        }
        for r in records
    ]
    timed = [i for i, row in enumerate(records[0]["examples"]) if row["seconds"] is not None]
    for r in records[1:]:
        if [i for i, row in enumerate(r["examples"]) if row["seconds"] is not None] != timed:
            raise ValueError(f"the records of sweep {protocol['sweep']} timed different examples")
    spec = {
        "pair": key["pair"],
        "task": key["task"],
        "split": key["split"],
        "limit": key["limit"],
        "entries": entries,
        "zoo": str(zoo_dir()),
        "seed": key["seed"],
        "max_new_tokens": key["max_new_tokens"],
        "warmup": protocol["warmup"],
        "threads": key["threads"],
        "repeats": key["repeats"],
        "hf_baseline": any(r["key"]["secondary"] == "hf_greedy" for r in records),
        "device": key["device"],
        "compile": bool(key.get("compile")),
    }
    return spec, timed


def _update(
    record: dict, n: int, spec: dict, done: dict[int, dict], p, cal: dict, made: str
) -> bool:
    """Put the new timings (`done`, {index: row}) of policy n into `record`, priced by `cal`; False
    (record unchanged) where a timed output differs from the stored one."""
    e = spec["entries"][n]
    base = f"sample@{float(e['temperature'])}" if e["do_sample"] else "greedy"
    rows = [dict(row) for row in record["examples"]]
    for i, row in done.items():
        r, b, h = row[f"policy{n}"], row[base], None if e["do_sample"] else row.get("hf_greedy")
        old = rows[i]
        same = (
            len(r["tokens"]) == old["tokens"]
            and p.decode(r["tokens"]) == old["output"]
            and len(b["tokens"]) == old["baseline_tokens"]
            and p.decode(b["tokens"]) == old["baseline_output"]
        )
        if not same or (
            old["stats"] and not counts_agree(shard.counts(old["stats"]), shard.counts(r["stats"]))
        ):
            return False
        old.update(
            seconds=timing.ns(r["seconds"]),
            stats=timing.ns(r["stats"]),
            baseline_seconds=timing.ns(b["seconds"]),
            hf_seconds=timing.ns(h["seconds"]) if h else None,
            hf_identical=h["tokens"] == b["tokens"] if h else None,
            machine=0,
        )
    key = record["key"]
    examples = tasks.load_task(key["task"], key["split"], limit=key["limit"])
    record["examples"], record["machines"] = rows, [next(iter(done.values()))["machine"]]
    compiled = [row["compile_seconds"] for row in done.values() if "compile_seconds" in row]
    record["protocol"] = {
        **timing.settings(spec["threads"], spec["repeats"], spec["warmup"]),
        "interleaved_with": shard.runner_names(spec["entries"], spec["hf_baseline"]),
        "sweep": record["protocol"]["sweep"],
        **({"compile_seconds": timing.ns(sum(compiled))} if compiled else {}),
    }
    record["retimed"] = {"made": made, "versions": versions()}
    record["summary"] = summarize(
        rows, [ex["target"] for ex in examples], metric=tasks.task_metric(key["task"])
    )
    sources, enc_dec = pricing.source_lengths(key["pair"], key["task"], key["split"], key["limit"])
    # a compiled record: named, not priced
    pricing.attach(record, cal, sources, encoder_decoder=enc_dec)
    record["calibration"]["same_run"] = True
    return True


def retime(
    registry,
    *,
    only=None,
    retimed_before: str | None = None,
    progress: bool = True,
    calibration: dict | None = None,
) -> dict:
    """Retime the records of `registry` (module docstring); `only(record) -> bool` picks records, and
    `retimed_before` (UTC, "2026-12-07T06:00:00Z") times again those retimed before it.
    `calibration` ({pair: calibration record} made in this run) skips the calibration of those pairs
    (tests). Returns {"retimed": n, "differ": [labels], "skipped": n, "calibrations": {pair: digest
    and date}}."""
    if retimed_before is not None:
        try:
            datetime.strptime(retimed_before, "%Y-%m-%dT%H:%M:%SZ")
        except (TypeError, ValueError):
            raise ValueError(
                f"retimed_before must be a UTC time like 2026-12-07T06:00:00Z, got {retimed_before!r}"
            ) from None
    reg = Registry.of(registry)
    sweeps, skipped = _sweeps(reg, only, retimed_before)
    out = {"retimed": 0, "differ": [], "skipped": skipped, "calibrations": {}}
    cals = dict(calibration or {})
    given, made_at = set(cals), {}
    for sweep, records in sorted(
        sweeps.items(), key=lambda s: (s[1][0]["key"]["pair"], s[1][0]["key"]["split"])
    ):
        spec, timed = _spec(records)
        pair = spec["pair"]
        if pair not in given and (pair not in cals or time.monotonic() - made_at[pair] > FRESH):
            # this machine, now: the costs that price what is timed next (a machine drifts: again
            # after FRESH s)
            cals[pair] = calibrate.calibrate(
                pair,
                device=spec["device"],
                threads=spec["threads"],
                registry=reg,
                progress=progress,
            )
            made_at[pair] = time.monotonic()
        cal = cals[pair]
        out["calibrations"][pair] = {"digest": digest(cal["key"]), "made": cal["made"]}
        point = {"retime": sweep, "keys": [r["key"] for r in records], "calibration": cal["made"]}
        done = reg.load_partial(point)
        rest = [i for i in timed if i not in done]

        def keep(i, row, done=done, point=point):
            done[i] = row
            if len(done) % 25 == 0:
                reg.save_partial(point, done)

        name = f"{pair} {spec['split']}: " + (
            label(spec["entries"][0]) if len(records) == 1 else f"{len(records)} policies"
        )
        try:
            if rest:
                shard.time_shard(spec, rest, progress=name if progress else False, on_row=keep)
        finally:
            if len(done) < len(timed) and done:
                reg.save_partial(point, done)
        p = shard.load(pair, "small", spec["device"], spec["zoo"])
        made = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        updated = [_update(record, n, spec, done, p, cal, made) for n, record in enumerate(records)]
        # the sweep's vanilla columns are timed again: its file is written anew by the first put
        if all(updated):
            reg.drop_sweep_columns(sweep)
        for n, (record, ok) in enumerate(zip(records, updated)):
            if ok:
                reg.put(record["key"], record)
                out["retimed"] += 1
            else:
                out["differ"].append(f"{pair} {spec['split']}: {label(spec['entries'][n])}")
        reg.drop_partial(point)
    return out
