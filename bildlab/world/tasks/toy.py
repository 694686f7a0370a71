"""The toy tasks' splits: sizes, seeds, split buckets, generation and the JSONL cache.

Every split is a pure function of (task, split, VERSION): bump VERSION whenever the generators
change. Splits are cached as JSONL files under ``$BILDLAB_CACHE/tasks`` (default
``~/.cache/bildlab/tasks``)."""

import json
import os
import random
import zlib

from ...atomic import atomic_path
from .toy_mt import MTGenerator, mt_lexicon
from .toy_sum import SumGenerator, sum_lexicon

VERSION = 3
SPLITS = ("train", "validation", "test")
TOY_TASKS = ("toy-mt", "toy-sum")

MT_SIZES = {"train": 60000, "validation": 1000, "test": 1000}
SUM_SIZES = {"train": 40000, "validation": 1000, "test": 1000}
TOY_SIZES = {"toy-mt": MT_SIZES, "toy-sum": SUM_SIZES}

# integer seeds: one for each (task, split); the lexicon seeds are in toy_mt and toy_sum
SPLIT_SEEDS = {
    "toy-mt": {"train": 1101, "validation": 1102, "test": 1103},
    "toy-sum": {"train": 2101, "validation": 2102, "test": 2103},
}

# Splits never share a source: every source falls into one of 10 buckets by a
# stable checksum (crc32, not Python's salted hash()) and each split keeps only
# the sources of its own buckets.
SPLIT_BUCKETS = {"train": range(2, 10), "validation": (0,), "test": (1,)}


def cache_root():
    """bildlab's cache folder: $BILDLAB_CACHE, or ~/.cache/bildlab."""
    return os.environ.get("BILDLAB_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "bildlab"
    )


def cache_dir():
    """The folder holding cached toy splits: $BILDLAB_CACHE/tasks or ~/.cache/bildlab/tasks."""
    return os.path.join(cache_root(), "tasks")


def cache_path(name, split):
    """The JSONL cache file of a toy split."""
    return os.path.join(cache_dir(), f"{name}-{split}-v{VERSION}.jsonl")


def _cached_toy_split(name, split):
    path = cache_path(name, split)
    examples = _read_jsonl(path, TOY_SIZES[name][split])
    if examples is None:  # missing or corrupt: (re)generate
        examples = generate_toy_split(name, split)
        _write_jsonl_atomic(path, examples)
    return examples


def _read_jsonl(path, expected_len):
    """Examples from a cache file, or None if it is missing, corrupt or incomplete."""
    try:
        with open(path, encoding="utf-8") as f:
            examples = [json.loads(line) for line in f]
    except (OSError, ValueError):  # ValueError covers bad JSON and bad UTF-8
        return None
    ok = len(examples) == expected_len and all(
        isinstance(e, dict)
        and set(e) == {"source", "target"}
        and isinstance(e["source"], str)
        and isinstance(e["target"], str)
        for e in examples
    )
    return examples if ok else None


def _write_jsonl_atomic(path, examples):
    """Write examples as JSONL, whole or not at all."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for e in examples:
                f.write(json.dumps(e, ensure_ascii=False) + "\n")


def generate_toy_split(name, split):
    """Generate a toy split from scratch (no cache): deterministic for (name, split)."""
    if name not in TOY_TASKS:
        raise ValueError(f"name must be one of {', '.join(TOY_TASKS)}; got {name!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    rng = random.Random(SPLIT_SEEDS[name][split])
    make = MTGenerator(mt_lexicon(), rng) if name == "toy-mt" else SumGenerator(sum_lexicon(), rng)
    buckets = SPLIT_BUCKETS[split]
    size = TOY_SIZES[name][split]
    examples, seen = [], set()
    while len(examples) < size:
        source, target = make.example()
        if source in seen or split_bucket(source) not in buckets:
            continue
        seen.add(source)
        examples.append({"source": source, "target": target})
    return examples


def split_bucket(source):
    """The bucket (0-9) that decides which split may hold ``source``."""
    return zlib.crc32(source.encode("utf-8")) % 10
