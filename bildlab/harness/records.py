"""A sweep's records, built from its timed rows and (with `timing_limit`) every example's batched
outputs: the rows a record holds, its summary, where each example was timed and how its outputs were
batched."""

from __future__ import annotations

import warnings

from ..engine import timing
from ..engine.decoding import eos_ids, truncated
from ..measure.mechanism import mechanism
from ..measure.summary import summarize
from ..world import tasks
from ..world.models import zoo_dir
from . import pricing, shard
from .registry import versions

# where a record's mechanism was counted (`mechanism["source"]`): on every example of its split,
# from its batched outputs, from its timed rows (every example timed), or (`recount`, sampling) by
# the engine at batch 1 with the seeds
WHOLE, TIMED, SAMPLED = (
    "every example (batched outputs)",
    "every example (timed)",
    "every example (batch 1, seeded)",
)


def build_records(
    spec: dict,
    keys: list[dict],
    done: dict[int, dict],
    *,
    sweep: str,
    batched: dict[str, list[list[int]]] | None = None,
    layouts: dict[str, dict] | None = None,
    counts: dict[str, list[dict] | None] | None = None,
    calibration: dict | None = None,
) -> list[dict]:
    """One record per policy from the timed rows (`done`, {index: row}): of every example, or, with
    `batched` (every runner's output tokens on every example, `shard.outputs`), of a sample whose
    batch-1 outputs are checked against the batched ones (`timed_identical`; a mismatch is a bug
    unless a numerical tie). Where each example was timed (its row's `machine`) goes into the
    record's `machines` list, and each timed example's `machine` is its index there; an example that
    was not timed has `seconds` None. Speedups are ratios of times taken on one kind of device: rows
    timed on different device models (`device_name`) are refused. `layouts` ({runner: how its
    outputs were batched}, `shard.outputs`) go into each record as `batching` (its policy's and the
    vanilla model's)."""
    pair, mnt = spec["pair"], spec["max_new_tokens"]
    p = shard.load(pair, spec["entries"][0]["draft"], spec["device"], spec["zoo"])
    examples = tasks.load_task(spec["task"], spec["split"], limit=spec["limit"])
    missing = [i for i in range(len(examples)) if i not in done] if batched is None else []
    if missing:
        raise ValueError(f"done must hold a row for every example; missing {missing[:5]}")
    eos = eos_ids(p.large, None)
    references = [ex["target"] for ex in examples]
    names = shard.runner_names(spec["entries"], spec["hf_baseline"])
    # for rows checkpointed before rows said where they were timed
    here = shard.machine(spec["device"])
    where, machines = {i: row.get("machine", here) for i, row in done.items()}, []
    for i in sorted(where):
        if where[i] not in machines:
            machines.append(where[i])
    kinds = sorted({m["device_name"] for m in machines})
    if len(kinds) > 1:
        raise ValueError(
            f"the timed examples of {spec['pair']} {spec['split']} were timed on {', '.join(kinds)}: a "
            f"speedup is a ratio of times taken on one kind of device; time the sweep on one GPU type "
            f"(a Ray accelerator_type), or drop its checkpoint (.partial/) and rerun it there"
        )
    records, made_with = [], versions()
    # compiled steps (`shard.warm_up`): the seconds every shard spent compiling before it timed
    # anything
    compiled = [row["compile_seconds"] for row in done.values() if "compile_seconds" in row]
    compiling = {"compile_seconds": timing.ns(sum(compiled))} if compiled else {}
    sources = [p.encode(ex["source"]).shape[1] for ex in examples] if calibration else []
    for n, (e, key) in enumerate(zip(spec["entries"], keys)):
        base = f"sample@{float(e['temperature'])}" if e["do_sample"] else "greedy"
        rows, same = [], 0
        for i in range(len(examples)):
            timed = done.get(i)
            r, b = timed[f"policy{n}"] if timed else None, timed[base] if timed else None
            h = timed.get("hf_greedy") if timed and not e["do_sample"] else None
            tokens = batched[f"policy{n}"][i] if batched else r["tokens"]
            base_tokens = batched[base][i] if batched else b["tokens"]
            same += bool(timed) and r["tokens"] == tokens and b["tokens"] == base_tokens
            rows.append(
                {
                    "output": p.decode(tokens),
                    "tokens": len(tokens),
                    "seconds": timing.ns(r["seconds"]) if r else None,
                    "stats": timing.ns(r["stats"]) if r else None,
                    "truncated": truncated(tokens, mnt, eos),
                    "baseline_output": p.decode(base_tokens),
                    "baseline_tokens": len(base_tokens),
                    "baseline_seconds": timing.ns(b["seconds"]) if b else None,
                    "baseline_truncated": truncated(base_tokens, mnt, eos),
                    "identical": tokens == base_tokens,
                    "hf_seconds": timing.ns(h["seconds"]) if h else None,
                    "hf_identical": h["tokens"] == base_tokens if h else None,
                    "machine": machines.index(where[i]) if timed else None,
                }
            )
        timed_rows = {"timed": sorted(done), "timed_identical": same} if batched else {}
        if layouts:
            timed_rows["batching"] = {"policy": layouts[f"policy{n}"], "vanilla": layouts["greedy"]}
        if batched and same < len(done):
            warnings.warn(
                f"{label(e)} on {spec['pair']} {spec['split']}: {len(done) - same} of {len(done)} timed "
                f"examples' batch-1 outputs differ from the batched ones (a bug unless a numerical tie; "
                f"the record counts them: timed_identical)",
                stacklevel=2,
            )
        if batched:
            got = (counts or {}).get(f"policy{n}")
            mech = (
                mechanism(got, [len(t) for t in batched[f"policy{n}"]], WHOLE)
                if got is not None
                else None
            )
        else:
            mech = mechanism([r["stats"] for r in rows], [r["tokens"] for r in rows], TIMED)
        records.append(
            {
                "key": key,
                "versions": made_with,
                **timed_rows,
                "mechanism": mech,
                "summary": summarize(rows, references, metric=tasks.task_metric(spec["task"])),
                "protocol": {
                    **timing.settings(spec["threads"], spec["repeats"], spec["warmup"]),
                    "interleaved_with": names,
                    "sweep": sweep,
                    **compiling,
                },
                "machines": machines,
                "examples": rows,
            }
        )
        pricing.attach(
            records[-1],
            calibration,
            sources,
            encoder_decoder=bool(p.large.config.is_encoder_decoder),
        )
    return records


def backfill_mechanism(registry) -> int:
    """Give every record of `registry` without mechanism numbers those of its timed examples (the
    engine's exact counts, kept in every record; records made before the batched outputs' counts
    were kept); nothing else in a record changes. Returns the records rewritten. `recount` replaces
    them with every example's."""
    done = 0
    for record in registry.records():
        if record.get("mechanism") is not None:
            continue
        timed = [e for e in record["examples"] if e["seconds"] is not None]
        mech = mechanism(
            [e["stats"] for e in timed],
            [e["tokens"] for e in timed],
            f"the {len(timed)} timed examples (made before every example's counts were kept)",
        )
        if mech is not None:
            record["mechanism"] = mech
            registry.put(record["key"], record)
            done += 1
    return done


def recount(registry, *, batch_size: int = 64, only=None, progress: bool = True) -> dict:
    """Count the mechanism of every record of `registry` whose numbers are of its timed sample only,
    on every example of its split: its policy's outputs are computed again in batches
    (`shard.compute_outputs`, the engine's exact counts; a sampling policy's by the engine at batch
    1 with each example's seed), checked against the record's stored outputs (every example's text
    and length) and its timed examples' counts, and the record's `mechanism` is replaced; nothing
    else changes. One record at a time, each written whole, so an interrupted recount resumes.
    `only(record) -> bool` picks records. A record whose outputs come out different is left as it
    was and named in the result: {"recounted": n, "differ": [labels], "skipped": n (counted already,
    or a method bildlab does not count)}."""
    out = {"recounted": 0, "differ": [], "skipped": 0}
    todo = []
    for record in registry.records():
        m, key = record.get("mechanism"), record["key"]
        if (
            (m is not None and m["source"] in (WHOLE, TIMED, SAMPLED))
            or key["method"] in ("hf_assisted", "hf_prompt_lookup")
            or (only is not None and not only(record))
        ):
            out["skipped"] += 1
        else:
            todo.append(record)
    # a pair's models and a split's inputs once
    todo.sort(key=lambda r: (r["key"]["pair"], r["key"]["split"]))
    bar = timing.progress_bar(todo, desc="recount") if progress else todo
    for record in bar:
        key = record["key"]
        e = {
            **shard.DEFAULTS,
            "method": key["method"],
            "draft": key["draft"] or "small",
            **key["policy"],
        }
        spec = {
            "pair": key["pair"],
            "task": key["task"],
            "split": key["split"],
            "limit": key["limit"],
            "entries": [e],
            "zoo": str(zoo_dir()),
            "device": key["device"],
            "threads": key["threads"],
            "max_new_tokens": key["max_new_tokens"],
        }
        indices = list(range(len(record["examples"])))
        # sampled outputs are the engine's at batch 1, example i's seed the sweep's + i
        if e["do_sample"]:
            pairs, xs = shard.models_and_inputs(spec, indices)
            run = shard.policy_runner(pairs[e["draft"]], e, key["seed"], key["max_new_tokens"])
            with timing.fixed_threads(key["threads"]):
                made = [run(x, i) for i, x in zip(indices, xs)]
            tokens, counts = [t for t, _ in made], [shard.counts(st) for _, st in made]
        else:
            tokens, _, counts = shard.compute_outputs(spec, indices, ["policy0"], batch_size)[
                "policy0"
            ]
        p = shard.load(key["pair"], e["draft"], key["device"], spec["zoo"])
        same = all(
            len(t) == row["tokens"] and p.decode(t) == row["output"]
            for t, row in zip(tokens, record["examples"])
        )
        same = same and all(
            counts_agree(shard.counts(row["stats"]), counts[i])
            for i, row in enumerate(record["examples"])
            if row["stats"] is not None
        )
        if not same:
            out["differ"].append(f"{key['pair']} {key['split']}: {label(e)}")
            continue
        record["mechanism"] = mechanism(
            counts, [len(t) for t in tokens], SAMPLED if e["do_sample"] else WHOLE
        )
        registry.put(key, record)
        out["recounted"] += 1
    return out


def counts_agree(timed: dict, batched: dict) -> bool:
    """A timed example's counts and its batched output's agree on every count both have (a timed row
    made before a counter was kept lacks it; a batched BiLD row with a rollback lacks what it cannot
    count exactly)."""
    return all(timed[k] == batched[k] for k in timed.keys() & batched.keys())


def label(e: dict) -> str:
    """e.g. 'bild fb=0.5 rb=3 (small)', for progress bars and messages."""
    if e["method"] == "bild":
        return f"bild fb={e['fallback']:g} rb={e['rollback']:g} ({e['draft']})"
    if e["method"] in ("prompt-lookup", "hf_prompt_lookup"):
        return f"{e['method']} n={e['ngram']} k={e['k']}"
    if e["method"] == "speculative":
        return f"speculative k={e['k']}" + (
            f" sampling T={e['temperature']:g}" if e["do_sample"] else ""
        )
    return e["method"]
