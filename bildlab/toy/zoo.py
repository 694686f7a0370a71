"""The toy model zoo: one tokenizer, a multitask T5 pair (large with an early exit, small,
prediction-aligned small) and a decoder-only Llama pair, trained from scratch on the synthetic tasks
and measured for the card.

    bildlab zoo --jobs 2                        # rebuild bildlab/toy/_zoo, resumable
    bildlab zoo --jobs 2 --reuse DIR            # the same, the models DIR holds by this recipe copied
    bildlab zoo --profile smoke --out DIR       # a minutes-long miniature (checks the pipeline)

The large models are trained in stages, each grown (train.grow) from the one before and trained again
on the same data: T5 10 + 10 layers (v2), 10 + 24 (v3), 10 + 32 (v4); Llama 10 layers (v2), 32 (v3
and v4). The intermediate stages are kept in the build's work folder. Every stage writes its
output atomically (a temporary folder renamed into place) and is skipped when its output is already
there, so an interrupted build resumes; training itself also checkpoints every few hundred steps.
`--reuse DIR` copies each stage whose model an earlier zoo in DIR holds, built by this recipe,
instead of training it. Without --out, the build writes into its work folder and
replaces the shipped zoo only when every model and the card are done."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from ..atomic import atomic_path
from ..engine.early_exit import exit_draft
from ..harness.shard import processor
from ..measure import metrics
from ..world import tasks
from ..world.models import EXIT_LAYER, TOY_PAIRS, zoo_dir
from . import train
from .card import latency as card_latency
from .card import measure

# BPE trained on all the text the zoo trains on. The toy-sum names are invented syllable strings: a
# 4,096-piece tokenizer trained on 4,500 stories split them into 3-4 pieces, and the models'
# summaries that had to copy 8 or more name pieces ran into loops repeating a fragment (25 of the
# small's 194 such summaries, none of the 106 others; 12 of the large's 194 and 1 of 106); with
# 6,144 pieces over 30,000 stories a name is 1-2 pieces
VOCAB = 6144
# ids 0..5: pad, eos, unk, sep, task prefixes
SPECIAL = ["<pad>", "</s>", "<unk>", "<sep>", "<mt>", "<sum>"]
PREFIX = {task: prefix for _, _, _, prefix, task in TOY_PAIRS.values()}  # "<mt> ", "<sum> "
MAX_NEW = {"toy-mt": 96, "toy-sum": 128}

# Per-token latency at batch 1 on a CPU is dominated by per-layer overhead, so depth sets the large
# / small cost ratio c (small / large per token; the paper's T5 pair: about 0.09). Random weights,
# one CPU thread (benchmarks/zoo-geometry/): the v3 T5 (10 + 24 layers) measured c 0.110 eager and
# 0.092 compiled on an AMD EPYC VM, but 0.115 and 0.169 on an Intel Xeon VM, where compiled calls
# cost the small model more; 10 + 32 layers gave 0.088 and 0.116-0.124 there, and trained (zoo v4)
# 0.090 eager and 0.102 compiled in benchmarks/bench_compile.py. The Llama (32 layers) measured
# 0.059-0.071 eager. Each large model is grown from the stage before it (train.grow: same width,
# the encoder kept).
ARCHS = {
    "t5-large": dict(
        arch="t5", d_model=128, d_ff=512, num_heads=4, d_kv=32, num_layers=10, num_decoder_layers=32
    ),
    "t5-small": dict(
        arch="t5", d_model=128, d_ff=512, num_heads=4, d_kv=32, num_layers=2, num_decoder_layers=1
    ),
    "llama-large": dict(
        arch="llama",
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=32,
        num_attention_heads=4,
        num_key_value_heads=4,
    ),
    "llama-small": dict(
        arch="llama",
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
    ),
}
# the earlier stages: the same models, shallower (zoo v2's and zoo v3's large models)
ARCHS["t5-large-v2"] = {**ARCHS["t5-large"], "num_decoder_layers": 10}
ARCHS["t5-large-v3"] = {**ARCHS["t5-large"], "num_decoder_layers": 24}
ARCHS["llama-large-v2"] = {**ARCHS["llama-large"], "num_hidden_layers": 10}
# each stage's torch seed is the build's seed plus this offset (part of the recipe)
SEEDS = {
    "t5-large-v2": 1,
    "t5-seed": 2,
    "t5-small-aligned": 3,
    "llama-large-v2": 4,
    "llama-small": 5,
    "t5-small": 6,
    "t5-large-v3": 7,
    "llama-large": 8,
    "t5-large": 9,
}
# the stages `reuse` may copy, and the folder an earlier zoo ships each in (zoo v2 shipped its
# 10 + 10 T5 as t5-large, zoo v3 its 10 + 24); t5-seed is never shipped, and t5-small-aligned is
# trained on the large model's outputs
REUSABLE = {
    "t5-large-v2": "t5-large",
    "t5-large-v3": "t5-large",
    "t5-large": "t5-large",
    "t5-small": "t5-small",
    "llama-small": "llama-small",
    "llama-large-v2": "llama-large",
    "llama-large": "llama-large",
}

# how much data each stage sees; "smoke" checks the pipeline in minutes, "full" builds the shipped
# zoo
PROFILES = {
    "full": dict(
        mt=32000,
        sum=4500,
        seed_sum=30000,
        calib_mt=12000,
        calib_sum=4000,
        llama_mt=26000,
        eval=300,
        latency=20,
        epochs=2,
        large_epochs=2,
        mt_epochs=3,
        lr_large=1e-3,
        lr_small=2e-3,
        lr_align=5e-4,
        batch_tokens=1600,
        short_first=300,
    ),
    "smoke": dict(
        mt=600,
        sum=200,
        seed_sum=400,
        calib_mt=100,
        calib_sum=50,
        llama_mt=400,
        eval=40,
        latency=3,
        epochs=2,
        large_epochs=1,
        mt_epochs=2,
        lr_large=1e-3,
        lr_small=2e-3,
        lr_align=5e-4,
        batch_tokens=1200,
        short_first=5,
    ),
}


def build_tokenizer(out: Path, profile: dict):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    def texts():
        for ex in tasks.load_task("toy-mt", "train")[: profile["mt"]]:
            yield ex["source"]
            yield ex["target"]
        for ex in tasks.load_task("toy-sum", "train")[: profile["seed_sum"]]:
            yield ex["source"]
            yield ex["target"]

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(texts(), trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        sep_token="<sep>",
        additional_special_tokens=["<mt>", "<sum>"],
    )
    with _staged(out) as tmp:
        fast.save_pretrained(tmp)
    return fast


def new_model(name: str, vocab: int):
    """A freshly initialised model of the zoo architecture `name`."""
    import transformers as tf

    spec = dict(ARCHS[name])
    arch = spec.pop("arch")
    common = dict(vocab_size=vocab, pad_token_id=0, eos_token_id=1)
    if arch == "t5":
        config = tf.T5Config(decoder_start_token_id=0, dropout_rate=0.0, **common, **spec)
        return tf.T5ForConditionalGeneration(config)
    config = tf.LlamaConfig(
        max_position_embeddings=512, tie_word_embeddings=True, bos_token_id=None, **common, **spec
    )
    return tf.LlamaForCausalLM(config)


@contextlib.contextmanager
def _staged(out: Path):
    """Write into a temporary folder, rename it to `out` only when complete."""
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def _save(model, out: Path):
    with _staged(out) as tmp:
        model.to(torch.float16).save_pretrained(tmp)
    model.to(torch.float32)


def _load(path: Path):
    from ..world.models import load_model

    return load_model(path, torch.float32)


def _seq2seq_data(tokenizer, task: str, n: int):
    """The first `n` training pairs of a toy task, encoded with its prefix."""
    examples = tasks.load_task(task, "train")[:n]
    return train.encode_pairs(tokenizer, examples, PREFIX[task], max_target=MAX_NEW[task])


def _llama_data(tokenizer, examples: list[dict]):
    pairs = train.encode_pairs(tokenizer, examples, PREFIX["toy-mt"], max_target=MAX_NEW["toy-mt"])
    sep = tokenizer.sep_token_id
    # prompt: prefix + source + <sep>; then target + EOS
    return [(s[:-1] + [sep], t) for s, t in pairs]


def work_dir(profile_name: str, seed: int) -> Path:
    """The folder of a build's intermediate files (the seed model, calibration data, training
    checkpoints), named by a digest of the recipe (profile, task VERSION, seed, architectures): a
    changed recipe never resumes from them."""
    recipe = json.dumps([PROFILES[profile_name], tasks.VERSION, seed, ARCHS], sort_keys=True)
    return (
        Path(tasks.cache_root())
        / "zoo-work"
        / f"{profile_name}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"
    )


def _geometry(name: str) -> dict:
    """Stage `name`'s model settings, as its config.json holds them."""
    return {k: v for k, v in ARCHS[name].items() if k != "arch"}


def _wrong_geometry(src: Path, name: str) -> dict | None:
    """The settings in which the model `src` holds for stage `name` differs from the stage's
    geometry ({} when none; None when `src` holds no model there)."""
    config = _load_json(Path(src) / REUSABLE[name] / "config.json")
    if config is None:
        return None
    return {k: config.get(k) for k, v in _geometry(name).items() if config.get(k) != v}


def holds(src: Path, name: str) -> bool:
    """Whether the zoo folder `src` holds a model of stage `name`'s geometry (in the folder
    REUSABLE names)."""
    return name in REUSABLE and _wrong_geometry(src, name) == {}


def copy_stage(
    src: Path, name: str, dest: Path, tokenizer: Path, profile_name: str, seed: int
) -> dict:
    """Copy the model of stage `name` from the earlier zoo folder `src` into `dest`, the stage's
    output. Only a model the stage would write bit for bit is copied: it has the stage's geometry,
    `src`'s tokenizer equals this build's (`tokenizer`), and `src`'s train-log says it was built
    by this recipe's profile, seed and stage seed (SEEDS). Anything else is a ValueError. Returns
    the stage's log entry: the earlier build's, with its training seconds (`trained_seconds`) and
    the copied model's sha256 (a path would name whatever that folder holds later)."""
    src = Path(src)
    if name not in REUSABLE:
        raise ValueError(f"name must be one of {', '.join(REUSABLE)}; got {name!r}")
    folder = src / REUSABLE[name]
    if not holds(src, name) or not (folder / "model.safetensors").is_file():
        wrong = _wrong_geometry(src, name) or "no model"
        raise ValueError(
            f"reuse: {folder} is not a model of stage {name} ({_geometry(name)}): {wrong}"
        )
    if not (src / "tokenizer" / "tokenizer.json").is_file() or (
        (src / "tokenizer" / "tokenizer.json").read_bytes()
        != (Path(tokenizer) / "tokenizer.json").read_bytes()
    ):
        raise ValueError(f"reuse: the tokenizer in {src} differs from this build's ({tokenizer})")
    entry = (_load_json(src / "train-log.json") or {}).get(REUSABLE[name], {})
    recipe = f"--profile {profile_name} --seed {seed}"
    if recipe not in entry.get("command", "") or entry.get("seed") != seed + SEEDS[name]:
        raise ValueError(
            f"reuse: {src}/train-log.json does not record {REUSABLE[name]} as stage {name} of "
            f"`bildlab zoo {recipe}` (seed {seed + SEEDS[name]}); it records "
            f"{entry.get('command')!r}, seed {entry.get('seed')!r}"
        )
    with _staged(dest) as tmp:
        for f in folder.iterdir():
            shutil.copyfile(f, tmp / f.name)
    own = ("seconds", "command", "copied", "copied_from", "trained_seconds", "model_sha256")
    return {
        **{k: v for k, v in entry.items() if k not in own},
        "trained_seconds": entry.get("trained_seconds", entry.get("seconds")),
        "model_sha256": hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest(),
        "copied": f"trained by an earlier build of this recipe ({entry['command']}) and copied "
        "from it: geometry, tokenizer, profile and seeds checked",
    }


def _replace_folder(dest: Path, src: Path) -> None:
    """Put a copy of the folder `src` in place of the folder `dest`: copied beside `dest` first,
    then two renames."""
    tmp, old = dest.with_name(dest.name + ".partial"), dest.with_name(dest.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(src, tmp)
    if dest.exists():
        os.replace(dest, old)
    os.replace(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)


# the stages that do not need the large T5; with jobs=2 a second process trains them while this one
# trains the large
TRAIN_THREADS = 1  # torch threads of every stage: part of the recipe (the bits depend on it)
SIDE_STAGES = ("llama-small", "llama-large-v2", "llama-large", "t5-small")
# the stages whose models the zoo ships (the others stay in the build's work folder)
SHIPPED = ("t5-large", "t5-small", "t5-small-aligned", "llama-large", "llama-small")


def build(
    out: Path | None = None,
    profile_name: str = "full",
    seed: int = 0,
    progress: bool = True,
    jobs: int = 1,
    stages: list[str] | None = None,
    reuse: Path | None = None,
) -> dict | None:
    """Build (or resume building) the zoo in `out` and write its card. Returns the card.

    Without `out`, the full profile builds into its work folder and replaces the shipped zoo
    (zoo_dir) only when every stage and the card are done: the shipped folder never holds a mix of
    two builds. `reuse`, an earlier zoo folder built by this recipe (the same profile and seed),
    gives every stage whose model it holds (`holds`: the stage's geometry) by copying it
    (`copy_stage` checks the recipe: a mismatch is a ValueError) instead of training it; a chain
    of large-model stages starts from its last stage done or held.

    Every stage computes on TRAIN_THREADS torch threads, whatever `jobs` and the machine: float sums
    depend on the thread count (a model trained on two threads differs in its bits from one trained
    on one), so the thread count is part of the recipe, and a rebuild from an empty cache reproduces
    the shipped files. jobs=2 trains SIDE_STAGES in a second process, beside the large T5; `stages`
    runs only those stages and writes no card (that second process)."""
    if jobs not in (1, 2):
        raise ValueError(f"jobs must be 1 or 2; got {jobs!r}")
    if stages is not None and not set(stages) <= set(SIDE_STAGES):
        raise ValueError(f"stages must be among {', '.join(SIDE_STAGES)}; got {stages!r}")
    if profile_name not in PROFILES:
        raise ValueError(f"profile_name must be one of {', '.join(PROFILES)}; got {profile_name!r}")
    if out is None and profile_name != "full":
        raise ValueError(
            f"out: the {profile_name} profile needs an output folder (not the shipped zoo)"
        )
    profile = PROFILES[profile_name]
    work = work_dir(profile_name, seed)
    work.mkdir(parents=True, exist_ok=True)
    final = None if out is not None else zoo_dir()
    out = Path(out) if out is not None else work / "zoo"
    out.mkdir(parents=True, exist_ok=True)
    reuse = Path(reuse) if reuse is not None else None
    if reuse is not None and not any(holds(reuse, name) for name in REUSABLE):
        raise ValueError(f"reuse: {reuse} holds no model of any stage ({', '.join(REUSABLE)})")
    torch.set_num_threads(TRAIN_THREADS)
    command = f"bildlab zoo --profile {profile_name} --seed {seed}" + (
        f" --jobs {jobs}" if jobs > 1 else ""
    )
    t_start = time.time()

    def where(name: str) -> Path:
        """A stage's output: the shipped models in `out`, the intermediate ones in the work
        folder."""
        return (out if name in SHIPPED else work) / name

    def stage(name: str, fn):
        dest = where(name)
        if dest.exists() or (stages is not None and name not in stages):
            return
        if reuse is not None and holds(reuse, name):
            tokenizer = out / "tokenizer"
            fn = lambda: copy_stage(reuse, name, dest, tokenizer, profile_name, seed)  # noqa: E731
        t0 = time.time()
        info = fn()
        info["seconds"] = round(time.time() - t0, 1)
        info["command"] = command
        if "copied" not in info:  # the same bits come back on one machine, not on every CPU
            info["trained_on"] = {"processor": processor(), "torch": torch.__version__}
        _log_stage(out / "train-log.json", work / "train-log.lock", name, info)
        print(f"[zoo] {name}: {info['seconds']} s", file=sys.stderr)

    def chain(*links):
        """Stages (name, fn), each grown from the one before: run from the last one done or held
        by `reuse` on."""
        done = [
            where(name).exists() or (reuse is not None and holds(reuse, name)) for name, _ in links
        ]
        first = max((i for i, d in enumerate(done) if d), default=0)
        for name, fn in links[first:]:
            stage(name, fn)

    from ..world.models import load_tokenizer

    if not (out / "tokenizer").exists():
        build_tokenizer(out / "tokenizer", profile)
    tokenizer = load_tokenizer(out / "tokenizer")
    vocab = len(tokenizer)
    mt_data = _seq2seq_data(tokenizer, "toy-mt", profile["mt"])
    sum_data = _seq2seq_data(tokenizer, "toy-sum", profile["sum"])
    data = mt_data + sum_data

    def fit(name, model, pairs, lr, stage_seed, **kw):
        torch.manual_seed(stage_seed)
        fn = train.train_causal_lm if name.startswith("llama") else train.train_seq2seq
        losses = fn(
            model,
            pairs,
            pad_id=0,
            lr=lr,
            seed=stage_seed,
            batch_tokens=profile["batch_tokens"],
            checkpoint=str(work / f"{name}.pt"),
            desc=name,
            progress=progress,
            **kw,
        )
        _save(model, where(name))
        return {
            "steps": len(losses),
            "examples": len(pairs),
            "seed": stage_seed,
            "lr": lr,
            "loss_first": round(sum(losses[:20]) / len(losses[:20]), 3),
            "loss_last": round(sum(losses[-50:]) / len(losses[-50:]), 3),
            **{k: v for k, v in kw.items() if k != "plan"},
        }

    def from_scratch(name: str):
        # A small T5 from scratch, on the references only. Short translation pairs first
        # (alignment), then translation-only epochs (trained on both tasks from the start, the
        # models learned summaries and a language model that ignores the source; after one such
        # epoch four of five seeds still did, BLEU 6-12), then both tasks with many summaries:
        # copying names and numbers from the document is learned only after thousands of summary
        # steps, and 5x cheaper in this shallow model than in the large one, which inherits it
        # (train.grow)
        stage_seed = seed + SEEDS[name]
        torch.manual_seed(stage_seed)
        pairs = mt_data + _seq2seq_data(tokenizer, "toy-sum", profile["seed_sum"])
        plan = train.short_first_plan(
            mt_data,
            profile["batch_tokens"],
            stage_seed,
            profile["mt_epochs"],
            profile["short_first"],
        )
        plan += train.batches(
            pairs, profile["batch_tokens"], stage_seed + 100, profile["epochs"] - 1
        )
        info = fit(
            name,
            new_model("t5-small", vocab),
            pairs,
            profile["lr_small"],
            stage_seed,
            plan=plan,
        )
        info["init"] = f"random (torch seed {stage_seed})"
        info["schedule"] = (
            f"{profile['short_first']} batches of short toy-mt pairs, {profile['mt_epochs']} "
            f"epoch(s) of toy-mt, "
            f"{profile['epochs'] - 1} epoch(s) of toy-mt + {profile['seed_sum']} toy-sum pairs"
        )
        return info

    def grown(name: str, init: str):
        """Stage `name`: stage `init`'s model grown to ARCHS[name] (train.grow), then trained as
        the large models train (T5: both tasks with the early exit; Llama: its toy-mt data)."""

        def run():
            if name.startswith("llama"):
                pairs, kw = _llama_data(tokenizer, llama_examples()), {}
            else:
                pairs, kw = data, dict(exit_layer=EXIT_LAYER, exit_weight=0.5)
            stage_seed = seed + SEEDS[name]
            torch.manual_seed(stage_seed)
            model = train.grow(_load(where(init)), new_model(name, vocab).config)
            c = model.config
            depth = (
                c.num_hidden_layers
                if name.startswith("llama")
                else f"{c.num_layers} + {c.num_decoder_layers}"
            )
            lr, epochs = profile["lr_large"], profile["large_epochs"]
            info = fit(name, model, pairs, lr, stage_seed, **kw, epochs=epochs)
            info["init"] = f"{init}, grown to {depth} layers (train.grow)"
            return info

        return run

    def aligned():
        calib_path = work / "calibration.json"
        calib = _load_json(calib_path)
        if calib is None:
            big = _load(out / "t5-large")
            calib = []
            for task, key in (("toy-mt", "calib_mt"), ("toy-sum", "calib_sum")):
                # fresh training inputs, after those the models were trained on
                examples = tasks.load_task(task, "train")[-profile[key] :]
                pairs = train.encode_pairs(
                    tokenizer, examples, PREFIX[task], max_target=MAX_NEW[task]
                )
                calib += train.calibration_data(
                    big, pairs, pad_id=0, max_new_tokens=MAX_NEW[task], progress=progress
                )
            _dump_json(calib, calib_path)
        model = _load(out / "t5-small")
        info = fit(
            "t5-small-aligned",
            model,
            [tuple(p) for p in calib],
            profile["lr_align"],
            seed + SEEDS["t5-small-aligned"],
            warmup=20,
            epochs=profile["epochs"],
        )
        info["init"] = "t5-small"
        return info

    def llama_examples():
        return tasks.load_task("toy-mt", "train")[: profile["llama_mt"]]

    def llama_small():
        pairs = _llama_data(tokenizer, llama_examples())
        stage_seed = seed + SEEDS["llama-small"]
        torch.manual_seed(stage_seed)
        model = new_model("llama-small", vocab)
        return fit(
            "llama-small", model, pairs, profile["lr_small"], stage_seed, epochs=profile["epochs"]
        )

    side = None
    # after the tokenizer and the task data exist: the side process only reads them
    if jobs > 1 and stages is None:
        side = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bildlab.cli",
                "zoo",
                "--out",
                str(out),
                "--profile",
                profile_name,
                "--seed",
                str(seed),
                "--jobs",
                str(jobs),
                *(["--reuse", str(reuse)] if reuse is not None else []),
                *[arg for name in SIDE_STAGES for arg in ("--stage", name)],
            ]
        )
    # the large T5 is grown from a seed: a small T5 trained from scratch (t5-small's recipe, another
    # seed: the paper's small is trained on its own, not cut out of the large model, so that
    # prediction alignment has work to do); the large Llama from llama-small
    chain(
        ("t5-seed", lambda: from_scratch("t5-seed")),
        ("t5-large-v2", grown("t5-large-v2", "t5-seed")),
        ("t5-large-v3", grown("t5-large-v3", "t5-large-v2")),
        ("t5-large", grown("t5-large", "t5-large-v3")),
    )
    if side is not None and side.wait() != 0:
        raise RuntimeError(f"the side process of the zoo build ({', '.join(SIDE_STAGES)}) failed")
    stage("t5-small", lambda: from_scratch("t5-small"))
    stage("t5-small-aligned", aligned)
    stage("llama-small", llama_small)
    chain(
        ("llama-large-v2", grown("llama-large-v2", "llama-small")),
        ("llama-large", grown("llama-large", "llama-large-v2")),
    )
    if stages is not None:
        return None
    card = write_card(out, tokenizer, profile, _load_json(out / "train-log.json") or {})
    if final is not None:
        _replace_folder(final, out)
        out = final
    print(f"[zoo] built in {time.time() - t_start:.0f} s: {out}", file=sys.stderr)
    return card


# ---------------------------------------------------------------------------------------------------------------------
# The card: what each model is and how well it does


def write_card(out: Path, tokenizer, profile: dict, log: dict) -> dict:
    t5 = {name: _load(out / name) for name in ("t5-large", "t5-small", "t5-small-aligned")}
    # a view of the large model, as load_pair gives
    t5["t5-early-exit"] = exit_draft(t5["t5-large"], EXIT_LAYER)
    llama = {name: _load(out / name) for name in ("llama-large", "llama-small")}
    results, differences = {}, {}
    for task in ("toy-mt", "toy-sum"):
        examples = tasks.load_task(task, "test")[: profile["eval"]]
        pairs = train.encode_pairs(tokenizer, examples, PREFIX[task], max_target=MAX_NEW[task])
        results[task], differences[task] = measure(
            t5,
            [s for s, _ in pairs],
            [ex["target"] for ex in examples],
            tokenizer,
            task,
            MAX_NEW[task],
            [("t5-large", "t5-small"), ("t5-small-aligned", "t5-small")],
        )
    examples = tasks.load_task("toy-mt", "test")[: profile["eval"]]
    prompts = [s for s, _ in _llama_data(tokenizer, examples)]
    results["toy-mt-llama"], differences["toy-mt-llama"] = measure(
        llama,
        prompts,
        [ex["target"] for ex in examples],
        tokenizer,
        "toy-mt",
        MAX_NEW["toy-mt"],
        [("llama-large", "llama-small")],
    )

    n = profile["latency"]
    mt_inputs = [
        torch.tensor([s])
        for s, _ in train.encode_pairs(
            tokenizer, tasks.load_task("toy-mt", "test")[:n], PREFIX["toy-mt"]
        )
    ]
    llama_inputs = [torch.tensor([p]) for p in prompts[:n]]
    latency = card_latency(
        {
            **{name: (m, mt_inputs) for name, m in t5.items() if name != "t5-small-aligned"},
            **{name: (m, llama_inputs) for name, m in llama.items()},
        },
        n,
    )
    card = {
        "tokenizer": {
            "type": "BPE (tokenizers), Metaspace",
            "vocab_size": len(tokenizer),
            "special": SPECIAL,
        },
        "pairs": {
            name: {"large": v[0], "small": v[1], "aligned": v[2], "prefix": v[3], "task": v[4]}
            for name, v in TOY_PAIRS.items()
        },
        "early_exit": {
            "model": "t5-large",
            "exit_after_decoder_layer": EXIT_LAYER,
            "load": "load_pair(name, early_exit=True)",
        },
        "models": {},
        "test": results,
        "differences": differences,
        "latency_ms_per_token": latency,
        "latency_ratio": {
            "t5-large / t5-small": round(latency["t5-large"] / latency["t5-small"], 2),
            "t5-large / t5-early-exit": round(latency["t5-large"] / latency["t5-early-exit"], 2),
            "llama-large / llama-small": round(latency["llama-large"] / latency["llama-small"], 2),
        },
        "test_examples": profile["eval"],
    }
    for name in ("t5-large", "t5-small", "t5-small-aligned", "llama-large", "llama-small"):
        model = t5.get(name) or llama[name]
        card["models"][name] = {
            "architecture": type(model).__name__,
            "config": {
                k: v for k, v in ARCHS["t5-small" if name == "t5-small-aligned" else name].items()
            },
            "parameters": sum(p.numel() for p in model.parameters()),
            "file_bytes": (out / name / "model.safetensors").stat().st_size,
            "training": log.get(name, {}),
        }
    _dump_json(card, out / "card.json")
    (out / "card.md").write_text(card_markdown(card))
    return card


def _seconds(training: dict) -> str:
    """A model's training seconds on the card: a copied model's are its earlier build's."""
    if "copied" in training:
        return f"{training.get('trained_seconds')} (copied)"
    return str(training.get("seconds"))


def card_markdown(card: dict) -> str:
    lines = [
        "# bildlab toy zoo",
        "",
        "Generated by `bildlab zoo` (do not edit by hand).",
        "",
        "## Models",
        "",
        "| model | architecture | parameters | file (MB) | steps | examples | seed | training seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in card["models"].items():
        t = m["training"]
        lines.append(
            f"| {name} | {m['architecture']} {m['config']} | {m['parameters']:,} | "
            f"{m['file_bytes'] / 1e6:.1f} | {t.get('steps')} | {t.get('examples')} | {t.get('seed')} | "
            f"{_seconds(t)} |"
        )
    lines += [
        "",
        f"Training command: `{next(iter(card['models'].values()))['training'].get('command')}`",
        "",
        f"## Test metrics (first {card['test_examples']} test examples, batched greedy)",
        "",
        "Agreement: the share of positions where the model's argmax equals the large model's greedy token, "
        "teacher-forced on the large model's outputs. Truncated: outputs cut off at max_new_tokens "
        f"({', '.join(f'{k} {v}' for k, v in MAX_NEW.items())}). Intervals: 95% paired bootstrap over the "
        "examples.",
        "",
        "| pair | model | metric | truncated | agreement with large [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for pair, models in card["test"].items():
        for name, r in models.items():
            metric = next(k for k in r if k not in ("truncated", "agreement", "agreement_ci"))
            agree = (
                f"{r['agreement']:.4f} [{r['agreement_ci'][0]:.4f}, {r['agreement_ci'][1]:.4f}]"
                if "agreement" in r
                else ""
            )
            lines.append(
                f"| {pair} | {name} | {metrics.METRIC_NAMES[metric]} {r[metric]:.2f} | {r['truncated']} | {agree} |"
            )
    lines += [
        "",
        "Paired differences on the same examples:",
        "",
        "| pair | difference | score [95% CI] | agreement [95% CI] |",
        "|---|---|---|---|",
    ]
    for pair, diffs in card["differences"].items():
        for name, d in diffs.items():
            cells = [
                f"{v[0]:+.{p}f} [{v[1]:+.{p}f}, {v[2]:+.{p}f}]" if v else ""
                for v, p in (
                    (next(v for k, v in d.items() if k != "agreement"), 2),
                    (d.get("agreement"), 4),
                )
            ]
            lines.append(f"| {pair} | {name} | {cells[0]} | {cells[1]} |")
    lines += [
        "",
        "## Per-token latency at batch 1 (bildlab greedy, 1 CPU thread)",
        "",
        "| model | ms/token |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in card["latency_ms_per_token"].items()]
    lines += ["", "| ratio | value |", "|---|---|"] + [
        f"| {k} | {v} |" for k, v in card["latency_ratio"].items()
    ]
    return "\n".join(lines) + "\n"


def _log_stage(path: Path, lock: Path, name: str, info: dict) -> None:
    """Record a finished stage in the build log; a lock file keeps the side process's entries
    (jobs=2)."""
    import fcntl

    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        log = _load_json(path) or {}
        log[name] = info
        _dump_json(log, path)


def _load_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _dump_json(obj, path: Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1))
