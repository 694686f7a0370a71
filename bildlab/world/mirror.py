"""A local mirror of hub repos, for GPU clusters without internet: one folder per repo id, in the
repo's own layout.

    $BILDLAB_MIRROR/
        kssteven/T5-large-xsum/config.json, model.safetensors, ...        (a model repo)
        google-t5/t5-small/spiece.model, tokenizer.json, ...               (a tokenizer repo)
        EdinburghNLP/xsum/default/validation/0000.parquet                   (a dataset repo at the task's revision)

The mirror is the `mirror` argument of `load_pair` / `load_task`, or else the environment variable
BILDLAB_MIRROR; with neither, models and data come from the hub (or its local cache). A folder made
with `hf download REPO [--repo-type dataset] [--revision REV] [--include PATTERN] --local-dir
$BILDLAB_MIRROR/REPO` has this layout and records the commit it was downloaded at, which `revision`
reads back."""

from __future__ import annotations

import os
from pathlib import Path

MIRROR_ENV = "BILDLAB_MIRROR"


def root(mirror: str | os.PathLike | None = None) -> Path | None:
    """The mirror folder: `mirror`, else $BILDLAB_MIRROR, else None (no mirror: the hub)."""
    value = os.fspath(mirror) if mirror is not None else os.environ.get(MIRROR_ENV)
    if not value:
        return None
    path = Path(value)
    if not path.is_dir():
        source = "mirror" if mirror is not None else f"${MIRROR_ENV}"
        raise FileNotFoundError(f"{source}: no such folder {value!r}")
    return path


def repo_dir(repo_id: str, mirror: str | os.PathLike | None = None) -> Path | None:
    """The folder of `repo_id` in the mirror, or None when there is no mirror. A mirror without it
    is an error (the mirror is meant to be used offline: falling back to the hub would hide the
    missing repo)."""
    base = root(mirror)
    if base is None:
        return None
    path = base / repo_id
    if not path.is_dir():
        raise FileNotFoundError(
            f"{repo_id!r} is not in the mirror {base} (expected the folder {path}); download it "
            f"with `hf download {repo_id} --local-dir {path}` on a machine with network"
        )
    return path


def revision(path: Path, files: list[str]) -> str | None:
    """The commit a mirrored repo folder was downloaded at, read from the download records that `hf
    download --local-dir` leaves in .cache/huggingface/download/<file>.metadata (first line: the
    commit hash); None when the folder has no such record for `files`, or records of more than one
    commit."""
    commits = set()
    for name in files:
        record = path / ".cache" / "huggingface" / "download" / f"{name}.metadata"
        try:
            with open(record, encoding="utf-8") as f:
                commits.add(f.readline().strip())
        except OSError:
            return None
    return commits.pop() if len(commits) == 1 and "" not in commits else None
