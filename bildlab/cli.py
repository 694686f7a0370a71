"""The `bildlab` command line.

bildlab demo        decode a few inputs with every method and print the statistics
bildlab zoo         (re)build the toy model zoo in bildlab/toy/_zoo and its card
bildlab study       run the study notebooks through papermill (toy profile by default)
bildlab registry    look after a results registry (--migrate: keys of bildlab <= 0.2 to keys without versions)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _demo(args) -> int:
    from .harness.benchmark import compare, random_pair

    if args.pair == "random":
        large, small, inputs = random_pair(args.n)
        what = "a random T5 pair (6 and 2 layers, no zoo needed), random inputs"
    else:
        from . import load_pair

        pair = load_pair(args.pair)
        large, small = pair.large, pair.small
        inputs = pair.inputs("test", limit=args.n)
        what = f"{args.pair} from the shipped zoo, its first {len(inputs)} test sources"
    from .engine.policy import DEFAULTS as policy

    methods = ("greedy", "speculative", "bild")
    r = compare(
        large,
        small,
        inputs,
        methods,
        max_new_tokens=args.max_new_tokens,
        warmup=1,
        threads=args.threads,
        policy=policy,
    )
    n = len(inputs)
    print(
        f"{what}; max {args.max_new_tokens} new tokens, threads={args.threads}, 1 warm-up decode, "
        f"speculative k={policy.k}, BiLD fallback {policy.fallback} rollback {policy.rollback}"
    )
    print(
        f"{'method':>12} {'tokens':>7} {'large calls':>12} {'small-model tokens':>19}  "
        f"{'speedup over greedy [95% CI]':<29} identical to greedy"
    )
    for name in methods:
        value, lo, hi = r.speedup(name)
        speed = "1x" if name == "greedy" else f"{value:.2f}x [{lo:.2f}, {hi:.2f}]"
        print(
            f"{name:>12} {r.tokens[name]:>7} {r.large_calls.get(name, 0):>12} {r.small_tokens[name]:>19}  "
            f"{speed:<29} {r.same(name)}/{n}"
        )
    print(
        f"speedup: greedy's time over the method's, summed over the {n} inputs (paired bootstrap); speculative "
        f"decoding is lossless by construction, BiLD is not"
    )
    return 0


def _zoo(args) -> int:
    import shutil
    from pathlib import Path

    from .toy.zoo import build

    if args.force and args.out is None:
        raise SystemExit("--force needs an explicit --out (it deletes that folder)")
    if args.force:
        shutil.rmtree(Path(args.out), ignore_errors=True)
    build(
        args.out,
        args.profile,
        seed=args.seed,
        jobs=args.jobs,
        stages=args.stage,
        reuse=args.reuse,
    )
    return 0


def _study(args) -> int:
    import yaml

    from .study import runner
    from .study.params import ParameterError

    runner.use_root(runner.find_root(args.root))  # no study: one line, exit status 2
    known = runner.notebook_names()
    for name in args.notebook or []:
        if name not in known:
            args.parser.error(
                f"argument --notebook: invalid choice: {name!r} (choose from {', '.join(known)})"
            )

    overrides = {}
    for name, value in args.param or []:
        try:
            # like papermill -p: numbers, lists, null, strings
            overrides[name] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ParameterError(f"-p {name}: {value!r} is not a YAML value") from None
    from_file = (yaml.safe_load(Path(args.params).read_text()) or {}) if args.params else {}
    if args.plan:
        from .study.plan import format_plan, plan

        if args.recompute:
            overrides["recompute"] = True
        print(
            format_plan(plan(args.profile, args.notebook, {**from_file, **overrides}), args.profile)
        )
        return 0
    _check_machine(args.profile, args.notebook, {**from_file, **overrides})
    from .study.plan import check
    from .study.runner import NotebookFailed, run_study

    # every sweep each notebook would make
    check(args.profile, args.notebook, {**from_file, **overrides})
    try:
        run_study(
            profile=args.profile,
            notebooks=args.notebook,
            out=args.out,
            overrides=overrides,
            params_file=args.params,
            recompute=args.recompute,
        )
    except NotebookFailed as e:
        if args.verbose and e.traceback:
            print(e.traceback, file=sys.stderr)
        print(f"bildlab study: {e}", file=sys.stderr)
        return 1
    return 0


def _registry(args) -> int:
    from pathlib import Path

    from .harness.evaluate import migrate
    from .harness.registry import Registry

    for root in args.root:
        if not Path(root).is_dir():
            print(f"bildlab registry: error: no registry folder {root!r}", file=sys.stderr)
            return 2
        if args.migrate:
            print(
                f"{root}: {migrate(root)} records moved to keys without library versions (none recomputed)"
            )
            print(
                f"{root}: {Registry(root).compact()} records stored as columns, each sweep's vanilla runs once"
            )
        if args.compact:
            n = Registry(root).compact()
            print(
                f"{root}: {n} records rewritten in the current storage (values unchanged; seconds to the ns)"
            )
        if args.recount:
            from .harness.records import recount

            out = recount(Registry(root), progress=not args.quiet)
            print(
                f"{root}: {out['recounted']} records' mechanism counted on every example ({out['skipped']} "
                f"already were, or count nothing)"
            )
            for name in out["differ"]:
                print(
                    f"{root}: {name}: outputs computed again differ from the record's; left as it was",
                    file=sys.stderr,
                )
            if out["differ"]:
                return 1
        if args.reprice:
            from .harness.calibrate import repool
            from .harness.pricing import reprice

            reg = Registry(root)
            pooled = repool(reg)
            print(
                f"{root}: {pooled} calibrations rewritten, their host work pooled over their machine's "
                f"earlier runs; "
                f"{reprice(reg)} records priced again by the calibration each names"
            )
        if args.retime:
            from .harness.retime import pick, retime

            out = retime(
                Registry(root),
                only=pick(args.pair or (), args.split or (), args.machine or ()),
                retimed_before=args.retimed_before,
                progress=not args.quiet,
            )
            made = ", ".join(f"{p} {c['made']}" for p, c in out["calibrations"].items()) or "none"
            print(
                f"{root}: {out['retimed']} records timed again on this machine, priced by its calibrations of "
                f"this run ({made}); {out['skipped']} skipped (retimed already, or not chosen)"
            )
            for name in out["differ"]:
                print(
                    f"{root}: {name}: batch-1 outputs differ from the record's; left as it was",
                    file=sys.stderr,
                )
            if out["differ"]:
                return 1
        if args.unused or args.prune:
            from .study import runner
            from .study.plan import Planner, plan, unused

            runner.use_root(runner.find_root())
            planner = Planner()
            plan(args.profile, overrides={"registry": str(Path(root).resolve())}, planner=planner)
            for path in unused(root, planner.read, planner.resumes):
                print(path)
                if args.prune:
                    path.unlink()
    return 0


CALIBRATE_PARAMS = (
    "device",
    "threads",
    "n",
    "batch_n",
    "batch_sizes",
    "max_new_tokens",
    "lengths",
    "ms",
    "prefixes",
    "random_weights",
    "warmup",
)


def _calibrate(args) -> int:
    import yaml

    from .harness.calibrate import calibrate, store
    from .study import runner
    from .study.params import ParameterError
    from .world.models import PAPER_PAIRS, TOY_PAIRS

    kwargs = {}
    for name, value in args.param or []:
        if name not in CALIBRATE_PARAMS:
            raise ParameterError(
                f"-p {name}: unknown; bildlab calibrate takes {', '.join(CALIBRATE_PARAMS)}"
            )
        try:
            kwargs[name] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ParameterError(f"-p {name}: {value!r} is not a YAML value") from None
    pairs = args.pair or list(PAPER_PAIRS if args.profile == "paper" else TOY_PAIRS)
    if args.registry is None:
        runner.use_root(runner.find_root(args.root))
        args.registry = str(runner.ROOT / "results" / args.profile)
    kwargs.setdefault("device", "cuda" if args.profile == "paper" and _cuda() else "cpu")
    # random-weight paper pairs of one geometry (XSum and CNN/DM; IWSLT and WMT): measured once
    measured: dict = {}
    for pair in pairs:
        from .world.models import PAPER_GEOMETRY

        same = measured.get(PAPER_GEOMETRY.get(pair))
        try:
            if same is not None and same["weights"] == "random":
                cal = {
                    **same,
                    "key": {**same["key"], "pair": pair},
                    "measured_as": same["key"]["pair"],
                }
                store(cal, args.registry)
            else:
                cal = calibrate(pair, registry=args.registry, progress=not args.quiet, **kwargs)
        except (ValueError, TypeError) as e:
            raise ParameterError(str(e)) from None
        measured.setdefault(PAPER_GEOMETRY.get(pair), cal)
        print(describe(cal))
    return 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def describe(cal: dict) -> str:
    """A calibration in a few lines: the machine, each cost (ms) with its interval, the batch gain,
    the check."""
    k, c = cal["key"], cal["costs"]

    def ms(v, ci):
        return f"{1e3 * v:.3f} ms [{1e3 * ci[0]:.3f}, {1e3 * ci[1]:.3f}]"

    lp = c["large_pass"]
    lines = [
        f"calibration of {k['pair']} on {k['device_name']} ({k['processor']}), {k['threads']} thread(s), "
        f"{cal['weights']} weights, {cal['seconds']:.0f} s: {cal['made']}"
    ]
    for j, p in enumerate(lp["prefix"]):
        cells = ", ".join(f"m={m}: {1e3 * s:.3f}" for m, s in zip(lp["m"], lp["seconds"][j]))
        lines.append(f"  large pass over m tokens after {p} cached (ms): {cells}")
    lines.append(f"  large one-token pass: {ms(lp['seconds'][0][0], lp['ci'][0][0])}")
    for name, s in [("small", c["small_step"]), *c["drafts"].items()]:
        lines.append(
            f"  {name} draft step: {ms(s['seconds'][0], s['ci'][0])}; c = "
            f"{s['seconds'][0] / lp['seconds'][0][0]:.3f}"
        )
    v = c["vanilla_decode"]
    lines.append(
        f"  vanilla decode: {ms(v['seconds'], v['ci'])} for {v['tokens']:.1f} tokens (N = {v['n']})"
    )
    u = cal.get("uncertainty")
    if u:  # calibrations made before they stated it have none
        lines.append(
            f"  uncertainty: a vanilla decode of {u['tokens']:.1f} tokens priced from each input's "
            f"components: {ms(u['vanilla_seconds'], u['ci'])}; {_drift(u)}: +-{100 * u['relative']:.1f}%"
            " (predicted speedups' intervals widen by it)"
        )
    o = c.get("overhead")
    if o:  # the loop's host work: the median over the machine's runs, this run's in brackets
        own = o.get("own", o)
        cells = [f"per call {1e3 * o['large_call']:.3f} ({1e3 * own['large_call']:.3f})"] + [
            f"{name} per {unit} {1e3 * v:.3f} ({1e3 * own[group][name]:.3f})"
            for group, unit in (("draft_step", "draft step"), ("call", "call"))
            for name, v in o.get(group, {}).items()
        ]
        lines.append(
            f"  host work (ms, median over {o.get('runs', 1)} run(s); this run's): "
            + ", ".join(cells)
        )
    g = c["batch_gain"]
    lines.append(
        "  batch gain: "
        + ", ".join(
            f"{gain:.1f}x [{ci[0]:.1f}, {ci[1]:.1f}] at {b} rows"
            for b, gain, ci in zip(g["batch_sizes"], g["gain"], g["ci"])
        )
        + f"; batched = batch-1 outputs: {cal['batched_identical']['identical']}/"
        f"{cal['batched_identical']['n']}"
    )
    return "\n".join(lines)


def _drift(u: dict) -> str:
    """A calibration's uncertainty in words: over its inputs, and between runs of the machine
    (`calibrate._with_drift`; calibrations made before it was stated have neither)."""
    from .harness.calibrate import DRIFT_RUNS

    if "inputs" not in u:
        return "over the inputs"
    inputs = f"+-{100 * u['inputs']:.1f}% over the inputs"
    if u["between_runs"] is None:
        return (
            f"{inputs}, between runs not known yet ({u['runs']} calibration(s) of this pair and "
            f"sample on this machine; stated from {DRIFT_RUNS})"
        )
    return f"{inputs} and +-{100 * u['between_runs']:.1f}% between {u['runs']} runs here, together"


def _check_machine(profile: str, notebooks: list[str] | None, extra: dict) -> None:
    """check_params' device check, before the imports that take most of a failing run's time
    (papermill and transformers, about 10 s on 2 cores): the device and executor each chosen
    notebook gets from the profile, the parameter file and -p (`extra`; a notebook's own default is
    "cpu", "local"; every parameter is checked again in full)."""
    from .study.params import check_device
    from .study.runner import notebook_names, profile_params

    for name in notebooks or notebook_names():
        params = {**profile_params(profile, name), **extra}
        if "device" in params:
            check_device(params["device"], here=params.get("executor", "local") == "local")


def _file(text: str) -> str:
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file {text!r}")
    return text


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1; got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    from .study.params import ParameterError

    ap = argparse.ArgumentParser(
        prog="bildlab", description="Big Little Decoder and speculative decoding study"
    )
    sub = ap.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="decode a few inputs with every method and print the statistics"
    )
    demo.add_argument(
        "--pair",
        default="toy-mt",
        help="a pair name (default toy-mt, from the zoo shipped in the package) or 'random' (a tiny "
        "random T5 pair: engine overhead only, its small model is never confident)",
    )
    demo.add_argument("--n", type=_positive, default=20, help="inputs to time (default 20)")
    demo.add_argument("--max-new-tokens", type=int, default=32)
    demo.add_argument("--threads", type=int, default=1)
    demo.set_defaults(run=_demo)
    zoo = sub.add_parser(
        "zoo",
        help="(re)build the toy model zoo and its card (resumes an interrupted build)",
        description="Build the toy zoo v4: each large model is trained in stages, each grown from "
        "the one before and trained again (T5 10 + 10, 10 + 24, 10 + 32 layers; Llama 10, 32); "
        "the small models and the tokenizer as before. Resumable: stages and checkpoints are kept "
        "in $BILDLAB_CACHE/zoo-work/<profile>-<recipe digest>/.",
    )
    zoo.add_argument(
        "--out",
        default=None,
        help="output folder (default: the shipped zoo bildlab/toy/_zoo, replaced only when the "
        "whole build is done; the build is made in its work folder until then)",
    )
    zoo.add_argument(
        "--profile",
        default="full",
        choices=("full", "smoke"),
        help="full: the shipped zoo (from the logged stage times about 2.5 hours on 2 cores with "
        "--jobs 2, 4 hours without; under an hour with --reuse of zoo v3; see "
        "docs/toy-world.md); smoke: a 2-minute miniature, needs --out",
    )
    zoo.add_argument(
        "--reuse",
        default=None,
        metavar="DIR",
        help="an earlier zoo folder built by this recipe (e.g. bildlab/toy/_zoo before a rebuild): "
        "the models it holds of this build's stages are copied instead of trained (refused "
        "unless their geometry, tokenizer, profile and seeds match)",
    )
    zoo.add_argument("--seed", type=int, default=0)
    zoo.add_argument(
        "--jobs",
        type=int,
        default=1,
        choices=(1, 2),
        help="2: train the Llama pair and the small T5 in a second process, beside the large T5",
    )
    # the second process's stages
    zoo.add_argument("--stage", action="append", default=None, help=argparse.SUPPRESS)
    zoo.add_argument("--force", action="store_true", help="delete the output folder first")
    zoo.set_defaults(run=_zoo)
    study = sub.add_parser(
        "study", help="run the study notebooks through papermill into a run folder"
    )
    study.add_argument(
        "--profile",
        default="toy",
        choices=("toy", "paper"),
        help="toy: the stored (fast, offline) defaults; paper: params/paper/*.yaml on a GPU box",
    )
    study.add_argument(
        "--root",
        default=None,
        metavar="CHECKOUT",
        help="the study checkout (notebooks/, params/); default $BILDLAB_ROOT, else the current "
        "folder or the first above it that holds one",
    )
    study.add_argument(
        "--notebook",
        action="append",
        metavar="NOTEBOOK",
        help="run only this notebook (name without .ipynb); repeatable",
    )
    study.add_argument(
        "--plan",
        action="store_true",
        help="print the sweeps, the decodes still to run and an estimate of the hours; run nothing",
    )
    study.add_argument("--out", default=None, help="run folder (default: runs/<profile>)")
    study.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="override a parameter in every chosen notebook (YAML value), like papermill -p",
    )
    study.add_argument(
        "--params",
        default=None,
        type=_file,
        help="a YAML file of parameters for every chosen notebook",
    )
    study.add_argument(
        "--verbose",
        action="store_true",
        help="on a failed notebook, print the failing cell's traceback too (default: one line)",
    )
    study.add_argument(
        "--recompute",
        action="store_true",
        help="recompute the records that other library versions made (default: replay them)",
    )
    study.set_defaults(run=_study, parser=study)
    cal = sub.add_parser(
        "calibrate",
        help="measure what each decoding call costs on this machine (a calibration "
        "record in the registry and in this machine's store under the cache folder: the plan and "
        "the records' predictions of any registry use it, the registry's own first)",
    )
    cal.add_argument(
        "--pair", action="append", help="a pair (repeatable; default every pair of the profile)"
    )
    cal.add_argument(
        "--profile",
        default="toy",
        choices=("toy", "paper"),
        help="toy: the toy pairs on this CPU; paper: the paper's pairs (on a GPU when there is one; "
        "random weights at the checkpoints' sizes where the checkpoints cannot be read)",
    )
    cal.add_argument(
        "--registry", default=None, help="registry folder (default results/<profile> of the study)"
    )
    cal.add_argument(
        "--root", default=None, metavar="CHECKOUT", help="the study checkout (as for bildlab study)"
    )
    cal.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help=f"a calibration parameter (YAML value): {', '.join(CALIBRATE_PARAMS)}",
    )
    cal.add_argument("--quiet", action="store_true", help="no progress bar")
    cal.set_defaults(run=_calibrate)
    registry = sub.add_parser("registry", help="look after a results registry")
    registry.add_argument(
        "root", nargs="*", default=["results/toy"], help="registry folders (default: results/toy)"
    )
    what = registry.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--migrate",
        action="store_true",
        help="move records keyed by library versions (bildlab <= 0.2) to keys without them",
    )
    what.add_argument(
        "--unused",
        action="store_true",
        help="list the records that no notebook with its stored parameters reads (and the "
        "checkpoints in .partial/ that no sweep still to compute resumes from)",
    )
    what.add_argument("--prune", action="store_true", help="remove those files (listed as they go)")
    what.add_argument(
        "--compact",
        action="store_true",
        help="rewrite every record in the current storage (same values, fewer bytes)",
    )
    what.add_argument(
        "--recount",
        action="store_true",
        help="count the mechanism of records counted on their timed sample only on every example "
        "(their outputs computed again in batches and checked against the stored ones)",
    )
    what.add_argument(
        "--reprice",
        action="store_true",
        help="price every record again by the calibration it names, each calibration's host work "
        "pooled over the calibrations of its machine made before it (nothing is timed)",
    )
    what.add_argument(
        "--retime",
        action="store_true",
        help="time every sweep again on this machine, after a calibration of it in the same run (the "
        "outputs checked against the stored ones; resumes an interrupted retime)",
    )
    registry.add_argument(
        "--pair", action="append", help="--retime: only this pair's records (repeatable)"
    )
    registry.add_argument(
        "--split", action="append", help="--retime: only this split's records (repeatable)"
    )
    registry.add_argument(
        "--machine",
        action="append",
        help="--retime: only records timed on a machine whose processor or device name contains this "
        "(repeatable; e.g. 'AMD EPYC')",
    )
    registry.add_argument(
        "--retimed-before",
        metavar="TIME",
        help="--retime: also the records retimed already, before TIME (UTC, e.g. "
        "2026-12-07T06:00:00Z); a rerun resumes, since what it retimes is later than TIME",
    )
    registry.add_argument(
        "--quiet", action="store_true", help="no progress bar (--recount, --retime)"
    )
    registry.add_argument(
        "--profile",
        default="toy",
        choices=("toy", "paper"),
        help="the notebooks' parameters that --unused and --prune read with (default: toy)",
    )
    registry.set_defaults(run=_registry)
    args = ap.parse_args(argv)
    try:
        return args.run(args)
    # a bad parameter or machine, found before anything ran: one line, like argparse's
    except ParameterError as e:
        print(f"{ap.prog} {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
