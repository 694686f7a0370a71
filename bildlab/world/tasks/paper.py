"""The paper's tasks: IWSLT 2017 de-en, WMT14 de-en, XSum and CNN/DailyMail, read from the hub
repos' parquet files.

datasets >= 4 refuses loading scripts and ids without a namespace, so the tasks are read straight
from parquet:

    task             repo, revision                              folder (data_dir)   validation rows
    iwslt2017-de-en  IWSLT/iwslt2017, refs/convert/parquet       iwslt2017-de-en     888 (dev2010)
    wmt14-de-en      wmt/wmt14, main                             de-en               3000 (newstest2013)
    xsum             EdinburghNLP/xsum, refs/convert/parquet     default             11332 (11327 examples)
    cnn_dailymail    abisee/cnn_dailymail, main                  3.0.0               13368

Only the files of the requested split are fetched (`huggingface_hub.snapshot_download` with
`allow_patterns`; a WMT14 load would otherwise fetch the 4.5M-row training set), or read from a
local mirror ($BILDLAB_MIRROR, `bildlab.world.mirror`). The IWSLT export holds every language pair,
each in its own folder: the folder (`data_dir`) picks de-en, and the row count (888, not 888 x the
number of pairs) is checked. Rows with an empty source or target are dropped (XSum has 5 empty
documents in validation) after the count check; `SOURCES[...].rows` are the examples the loader
yields from each full split (what the plan counts), `empty` the rows it drops where they were
counted. Every part is overridable: `repo`, `revision`, `data_dir`, `data_files` (local files
holding the whole split), `rows` (the expected row count, e.g. of a partial mirror)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import mirror as _mirror

PAPER_TASKS = ("iwslt2017-de-en", "wmt14-de-en", "xsum", "cnn_dailymail")
# the version of the rows -> examples mapping (columns, dropped rows): bump when it changes
PREPROCESSING = 1

# File layouts of a split inside `data_dir`, tried in order (the first that matches any file wins):
# the parquet converter's under refs/convert/parquet, {split}/0000.parquet since 2023
# (partial-{split}/0000.parquet for a split it converted only the first part of: the row count check
# then says so) and {dataset}-{split}.parquet before (some IWSLT language pairs still have it), and
# push_to_hub's {split}-00000-of-00001.parquet.
CONVERTED = (
    "{split}/*.parquet",
    "partial-{split}/*.parquet",
    "*-{split}.parquet",
    "*-{split}-*-of-*.parquet",
)
PUSHED = ("{split}-*.parquet",)


@dataclass(frozen=True)
class Source:
    repo: str
    revision: str
    data_dir: str
    layouts: tuple[str, ...]
    source: tuple[str, ...]  # the column (and key) holding the source text
    target: tuple[str, ...]
    # the examples of each full split: its published row count less the empty rows dropped (`empty`)
    rows: dict
    # rows with an empty source or target, where counted (else none known)
    empty: dict = field(default_factory=dict)


_DE_EN = (("translation", "de"), ("translation", "en"))
SOURCES = {
    "iwslt2017-de-en": Source(
        "IWSLT/iwslt2017",
        "refs/convert/parquet",
        "iwslt2017-de-en",
        CONVERTED,
        *_DE_EN,
        {"train": 206112, "validation": 888, "test": 8079},
    ),
    # the validation split of wmt14 de-en is newstest2013, its test split newstest2014
    "wmt14-de-en": Source(
        "wmt/wmt14",
        "main",
        "de-en",
        PUSHED,
        *_DE_EN,
        {"train": 4508785, "validation": 3000, "test": 3003},
    ),
    # validation: 11,332 rows, 5 of them with an empty document; the empty rows of train and test
    # are not counted here
    "xsum": Source(
        "EdinburghNLP/xsum",
        "refs/convert/parquet",
        "default",
        CONVERTED,
        ("document",),
        ("summary",),
        {"train": 204045, "validation": 11327, "test": 11334},
        {"validation": 5},
    ),
    "cnn_dailymail": Source(
        "abisee/cnn_dailymail",
        "main",
        "3.0.0",
        PUSHED,
        ("article",),
        ("highlights",),
        {"train": 287113, "validation": 13368, "test": 11490},
    ),
}
OVERRIDES = ("repo", "revision", "data_dir", "data_files", "rows", "mirror")
_READERS = (".parquet", ".jsonl", ".json", ".csv")


def check_overrides(name: str, overrides: dict) -> None:
    """Fail fast on an override of a paper task's source that `load` would not understand."""
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise ValueError(
            f"unknown source override(s) {', '.join(unknown)} for {name!r}; "
            f"allowed: {', '.join(OVERRIDES)}"
        )
    for key in ("repo", "revision", "data_dir"):
        value = overrides.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise TypeError(f"{key} must be a non-empty str or None; got {value!r}")
    rows = overrides.get("rows")
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise ValueError(f"rows must be a positive int or None; got {rows!r}")


def resolve(
    name: str,
    split: str,
    *,
    repo=None,
    revision=None,
    data_dir=None,
    data_files=None,
    rows=None,
    mirror=None,
) -> dict:
    """Where a split comes from, without reading it: the files, and the provenance to key results by
    (repo, requested and resolved revision, data_dir, file names, a sha256 of their bytes, the
    expected row count, the preprocessing version). Fetches the split's files from the hub when they
    are neither local nor cached."""
    check_overrides(name, dict(repo=repo, revision=revision, data_dir=data_dir, rows=rows))
    src = SOURCES[name]
    default = repo is None and revision is None and data_dir is None and data_files is None
    info = {
        "task": name,
        "split": split,
        "repo": repo or src.repo,
        "revision": revision or src.revision,
        "data_dir": src.data_dir if data_dir is None else data_dir,
        "resolved": None,
        "rows": rows if rows is not None else (_published(src, split) if default else None),
        "preprocessing": PREPROCESSING,
    }
    if data_files is not None:
        files = _local_files(data_files)
        info.update(origin="files", repo=None, revision=None, data_dir=None)
    else:
        patterns = [
            f"{info['data_dir']}/{layout.format(split=split)}".lstrip("/") for layout in src.layouts
        ]
        folder = _mirror.repo_dir(info["repo"], mirror)
        if folder is not None:
            info["origin"] = "mirror"
        else:  # the hub (or its cache, offline)
            from huggingface_hub import snapshot_download

            folder = Path(
                snapshot_download(
                    info["repo"],
                    repo_type="dataset",
                    revision=info["revision"],
                    allow_patterns=patterns,
                )
            )
            info.update(origin="hub", resolved=folder.name)  # the cache's snapshots/<commit> folder
        files = next((found for found in (sorted(folder.glob(p)) for p in patterns) if found), [])
        if not files:
            raise FileNotFoundError(
                f"{name} {split}: no file matches {' or '.join(patterns)} in {folder} "
                f"(repo {info['repo']}, revision {info['revision']})"
            )
        if info["origin"] == "mirror":
            info["resolved"] = _mirror.revision(
                folder, [f.relative_to(folder).as_posix() for f in files]
            )
        info["files"] = [f.relative_to(folder).as_posix() for f in files]
    info.setdefault("files", [f.name for f in files])
    digest = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    info["sha256"] = digest.hexdigest()
    info["paths"] = [str(f) for f in files]
    return info


def _published(src: Source, split: str) -> int | None:
    """The published row count of a full split: the examples and the empty rows dropped."""
    return src.rows[split] + src.empty.get(split, 0) if split in src.rows else None


def load(name: str, split: str, limit: int | None = None, **overrides) -> list[dict]:
    """The examples of a paper task's split: every row read, the row count checked, empty rows
    dropped, then the first `limit`."""
    info = resolve(name, split, **overrides)
    src = SOURCES[name]
    default = all(overrides.get(k) is None for k in OVERRIDES if k != "mirror")
    columns = sorted({src.source[0], src.target[0]})
    table = [row for path in info["paths"] for row in _read(Path(path), columns)]
    if info["rows"] is not None and len(table) != info["rows"]:
        raise ValueError(
            f"{name} {split}: {len(table)} rows in {', '.join(info['files'])}, expected {info['rows']} "
            f"(the full split); another revision or a partial copy? declare its size with rows="
        )
    examples = []
    for i, row in enumerate(table):
        source, target = _field(row, src.source, name, i), _field(row, src.target, name, i)
        if source.strip() and target.strip():
            examples.append({"source": source, "target": target})
    if default and split in src.empty and len(examples) != src.rows[split]:
        raise ValueError(
            f"{name} {split}: {len(table) - len(examples)} rows with an empty source or target, expected "
            f"{src.empty[split]}; another revision?"
        )
    return examples if limit is None else examples[:limit]


def _field(row: dict, path: tuple[str, ...], name: str, i: int) -> str:
    value = row
    for key in path:
        if not isinstance(value, dict) or key not in value:
            raise ValueError(
                f"{name}: row {i} has no column {'.'.join(path)}; it has {sorted(row)}"
            )
        value = value[key]
    if not isinstance(value, str):
        raise TypeError(
            f"{name}: row {i}, column {'.'.join(path)} must be a str; got {type(value).__name__}"
        )
    return value


def _local_files(data_files) -> list[Path]:
    items = [data_files] if isinstance(data_files, (str, os.PathLike)) else list(data_files)
    if not items:
        raise ValueError("data_files must name at least one file")
    files = []
    for item in items:
        path = Path(os.fspath(item))
        if not path.name.lower().endswith(_READERS):
            raise ValueError(
                f"data_files must end in {', '.join(_READERS)}; got {os.fspath(item)!r}"
            )
        if not path.is_file():
            raise FileNotFoundError(f"data_files: no such file {os.fspath(item)!r}")
        files.append(path)
    return files


def _read(path: Path, columns: list[str]) -> list[dict]:
    """The rows of one file (whole; only `columns` from parquet)."""
    suffix = path.name.lower().rsplit(".", 1)[-1]
    if suffix == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path, columns=columns).to_pylist()
    with open(path, encoding="utf-8", newline="" if suffix == "csv" else None) as f:
        if suffix == "csv":
            return list(csv.DictReader(f))
        if suffix == "jsonl":
            return [json.loads(line) for line in f if line.strip()]
        rows = json.load(f)
    if not isinstance(rows, list):
        raise ValueError(f"{path}: a .json data file must hold a list of rows")
    return rows
