"""Tasks: data sets as lists of {"source": str, "target": str} pairs.

Two synthetic tasks are generated on demand from fixed seeds, with no network:

- ``toy-mt``: translation from an invented source language into an invented
  target language (metric: BLEU; `toy_mt`);
- ``toy-sum``: summarization of invented news stories (metric: ROUGE-L; `toy_sum`).

Four paper tasks (IWSLT 2017 de-en, WMT14 de-en, XSum, CNN/DailyMail) are read
from their hub repos' parquet files (`paper`): from the hub, a local mirror
($BILDLAB_MIRROR), or local stand-in files passed as ``data_files``.

    >>> pairs = load_task("toy-mt", "validation", limit=2)
    >>> sorted(pairs[0])
    ['source', 'target']

Toy splits are cached as JSONL files under ``$BILDLAB_CACHE/tasks`` (default
``~/.cache/bildlab/tasks``; `toy`).
"""

from . import paper
from .paper import OVERRIDES, PAPER_TASKS, PREPROCESSING, SOURCES
from .toy import (
    MT_SIZES,
    SPLIT_BUCKETS,
    SPLIT_SEEDS,
    SPLITS,
    SUM_SIZES,
    TOY_SIZES,
    TOY_TASKS,
    VERSION,
    _cached_toy_split,
    cache_dir,
    cache_path,
    cache_root,
    generate_toy_split,
    split_bucket,
)
from .toy_mt import mt_lexicon
from .toy_sum import sum_lexicon

__all__ = [
    "paper",
    "OVERRIDES",
    "PAPER_TASKS",
    "PREPROCESSING",
    "SOURCES",
    "MT_SIZES",
    "SPLIT_BUCKETS",
    "SPLIT_SEEDS",
    "SPLITS",
    "SUM_SIZES",
    "TOY_SIZES",
    "TOY_TASKS",
    "VERSION",
    "cache_dir",
    "cache_path",
    "cache_root",
    "generate_toy_split",
    "split_bucket",
    "mt_lexicon",
    "sum_lexicon",
    "ALL_TASKS",
    "task_metric",
    "metric_options",
    "load_task",
    "provenance",
]

ALL_TASKS = TOY_TASKS + PAPER_TASKS

_METRICS = {
    "toy-mt": "bleu",
    "toy-sum": "rougeL",
    "iwslt2017-de-en": "bleu",
    "wmt14-de-en": "bleu",
    "xsum": "rougeL",
    "cnn_dailymail": "rougeL",
}


def task_metric(name):
    """Return the metric of task ``name``: "bleu" or "rougeL"."""
    _check_name(name)
    return _METRICS[name]


def metric_options(name):
    """Keyword options of ``metrics.score`` for task ``name``: the paper's summarization tasks score
    ROUGE-Lsum without a stemmer (the setting of the public reproduction that matched the paper's
    numbers); the toy task keeps rouge-score's Porter stemmer."""
    _check_name(name)
    return {"stemmer": False} if name in ("xsum", "cnn_dailymail") else {}


def load_task(name, split, limit=None, data_files=None, **source):
    """Return the examples of task ``name`` / ``split`` as a list of dicts.

    Each dict is {"source": str, "target": str}. ``split`` is one of "train",
    "validation", "test"; ``limit`` (a positive int, or None for all) keeps the
    first ``limit`` examples. Toy tasks are generated once and then read from
    the cache. The rest is for paper tasks only (see `paper`): ``data_files``,
    local .parquet, .jsonl, .json or .csv file(s) in the task's raw column
    layout holding the whole split, read instead of the hub repo; ``source``
    overrides, any of repo, revision, data_dir (the folder of the split's
    files in the repo), rows (the expected row count of the whole split) and
    mirror (a local mirror folder; default $BILDLAB_MIRROR).
    """
    _check_args(name, split, data_files, source)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit must be a positive int or None; got {type(limit).__name__}")
        if limit < 1:
            raise ValueError(f"limit must be a positive int or None; got {limit}")
    if name in PAPER_TASKS:
        return paper.load(name, split, limit, data_files=data_files, **source)
    examples = _cached_toy_split(name, split)
    return examples if limit is None else examples[:limit]


def provenance(name, split="validation", data_files=None, **source):
    """What a task's examples are a function of, for keying results. Toy tasks: {"task", "version"}
    (the generators' VERSION). Paper tasks: {"task", "split", "origin" (hub, mirror or files),
    "repo", "revision" (requested), "resolved" (the commit: from the hub cache, or a mirror's
    download records; None if unknown), "data_dir", "files", "sha256" (of the files' bytes), "rows"
    (the expected count, None if unchecked), "preprocessing"}. Takes the same ``data_files`` /
    ``source`` overrides as `load_task`; fetches the split's files if needed."""
    _check_args(name, split, data_files, source)
    if name not in PAPER_TASKS:
        return {"task": name, "version": VERSION}
    info = paper.resolve(name, split, data_files=data_files, **source)
    info.pop("paths")  # machine-specific
    return info


def _check_args(name, split, data_files, source):
    _check_name(name)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    if name in PAPER_TASKS:
        paper.check_overrides(name, source)
    elif data_files is not None or source:
        given = ", ".join((["data_files"] if data_files is not None else []) + sorted(source))
        raise ValueError(
            f"{given}: only for the paper tasks ({', '.join(PAPER_TASKS)}); {name!r} is generated"
        )


def _check_name(name):
    if name not in ALL_TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(ALL_TASKS)}")
