"""Tasks: data sets as lists of {"source": str, "target": str} pairs.

Two synthetic tasks are generated on demand from fixed seeds, with no network:

- ``toy-mt``: translation from an invented source language into an invented
  target language (metric: BLEU; `toy_mt`);
- ``toy-sum``: summarization of invented news stories (metric: ROUGE-L; `toy_sum`).

Four paper tasks (IWSLT 2017 de-en, WMT14 de-en, XSum, CNN/DailyMail) are
thin wrappers around Hugging Face ``datasets`` (`paper`); they need the network, or a
local stand-in file passed as ``data_files``.

    >>> pairs = load_task("toy-mt", "validation", limit=2)
    >>> sorted(pairs[0])
    ['source', 'target']

Toy splits are cached as JSONL files under ``$BILDLAB_CACHE/tasks`` (default
``~/.cache/bildlab/tasks``; `toy`).
"""

from .paper import PAPER_TASKS, _load_paper_task
from .toy import (MT_SIZES, SPLIT_BUCKETS, SPLIT_SEEDS, SPLITS, SUM_SIZES, TOY_SIZES, TOY_TASKS, VERSION,
                  _cached_toy_split, cache_dir, cache_path, cache_root, generate_toy_split, split_bucket)
from .toy_mt import mt_lexicon
from .toy_sum import sum_lexicon

ALL_TASKS = TOY_TASKS + PAPER_TASKS

_METRICS = {"toy-mt": "bleu", "toy-sum": "rougeL", "iwslt2017-de-en": "bleu",
            "wmt14-de-en": "bleu", "xsum": "rougeL", "cnn_dailymail": "rougeL"}


def task_metric(name):
    """Return the metric of task ``name``: "bleu" or "rougeL"."""
    _check_name(name)
    return _METRICS[name]


def load_task(name, split, limit=None, data_files=None):
    """Return the examples of task ``name`` / ``split`` as a list of dicts.

    Each dict is {"source": str, "target": str}. ``split`` is one of "train",
    "validation", "test"; ``limit`` (a positive int, or None for all) keeps the
    first ``limit`` examples. Toy tasks are generated once and then read from
    the cache. ``data_files`` is for paper tasks only: a local .jsonl, .json or
    .csv file in the task's raw column layout, loaded instead of the hub data
    set (the file is the whole split).
    """
    _check_name(name)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit must be a positive int or None; got {type(limit).__name__}")
        if limit < 1:
            raise ValueError(f"limit must be a positive int or None; got {limit}")
    if name in PAPER_TASKS:
        return _load_paper_task(name, split, limit, data_files)
    if data_files is not None:
        raise ValueError(f"data_files is only for the paper tasks ({', '.join(PAPER_TASKS)}); "
                         f"{name!r} is generated")
    examples = _cached_toy_split(name, split)
    return examples if limit is None else examples[:limit]


def _check_name(name):
    if name not in ALL_TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(ALL_TASKS)}")

