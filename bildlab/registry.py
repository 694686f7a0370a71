"""The results registry: one JSON record per evaluated policy, named by a hash of its key.

A record's key is what defines the experiment (pair, task, split, examples, policy, generation budget, timing
protocol, model and data hashes); the library versions it was made with are provenance, stored in the record
(`versions`), not in the key: the committed study replays under other releases, and `recompute` asks for new records.
A record is written atomically and reused, so a rerun is instant; anything in the registry that is not a well-formed
record (truncated, not an object, a key that is not its file's) is reported and recomputed. A sweep in progress keeps
its finished examples in a checkpoint next to the records (`.partial/`), so an interrupted sweep resumes from its last
finished example.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import warnings
from collections import Counter
from importlib import metadata
from pathlib import Path

from .atomic import atomic_path

DEFAULT_REGISTRY = "results"
LIBRARIES = ("torch", "transformers", "tokenizers")  # whose releases a record's outputs and timings may depend on
OLD_KEY_FIELDS = ("bildlab", "torch", "transformers")  # versions that keys held before they became provenance


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def versions() -> dict:
    """The versions of Python, bildlab and the libraries a record depends on, in this environment."""
    from . import __version__

    out = {"python": platform.python_version(), "bildlab": __version__}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def differences(made: dict, now: dict | None = None) -> dict:
    """{name: (made with, here)} for every version a record states that differs from this environment's."""
    now = versions() if now is None else now
    return {k: (v, now.get(k)) for k, v in sorted((made or {}).items()) if v is not None and v != now.get(k)}


def _well_formed(record, key: dict | None = None) -> str | None:
    """Why `record` is not a usable record (of `key`, when given); None when it is."""
    if not isinstance(record, dict):
        return f"not a record object but {type(record).__name__}"
    if not isinstance(record.get("key"), dict):
        return "no key"
    if key is not None and record["key"] != key:
        return "its key is not the one its file name stands for"
    if not isinstance(record.get("summary"), dict) or not isinstance(record.get("examples"), list):
        return "no summary or examples"
    return None


class Registry:
    """One JSON file per run under `root`, named by a hash of its key."""

    def __init__(self, root: str | os.PathLike = DEFAULT_REGISTRY):
        self.root = Path(root)

    def path(self, key: dict) -> Path:
        """Where the record of `key` lives: <root>/<pair>/<task>/<method>-<digest of the key>.json."""
        return self.root / key["pair"] / key["task"] / f"{key['method']}-{digest(key)}.json"

    def get(self, key: dict) -> dict | None:
        path = self.path(key)
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            problem = str(e)
        else:
            problem = _well_formed(record, key)
            if problem is None:
                return record
        warnings.warn(f"corrupt results record {path} ({problem}); recomputing it", stacklevel=3)
        return None

    def put(self, key: dict, record: dict) -> Path:
        path = self.path(key)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(record, separators=(",", ":")))  # compact: records hold every example
        return path

    def files(self) -> list[Path]:
        return [p for p in sorted(self.root.rglob("*.json")) if ".partial" not in p.parts]

    def records(self) -> list[dict]:
        """Every well-formed record; the others are reported and skipped."""
        out = []
        for path in self.files():
            try:
                record = json.loads(path.read_text())
                problem = _well_formed(record)
                if problem is None and self.path(record["key"]) != path:
                    problem = "its key is not the one its file name stands for"
            except (OSError, ValueError) as e:
                problem = str(e)
            if problem is None:
                out.append(record)
            else:
                warnings.warn(f"corrupt results record {path} ({problem}); skipped", stacklevel=2)
        return out

    def survey(self) -> dict:
        """What a replay from this registry would meet: {"records": n, "old_keys": records whose key still holds
        library versions (`migrate` them), "versions": Counter of the versions records were made with (JSON)}."""
        made: Counter = Counter()
        old = n = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a corrupt record is reported where it is read
            records = self.records()
        for record in records:
            n += 1
            old += any(f in record["key"] for f in OLD_KEY_FIELDS)
            made[json.dumps(record.get("versions") or {}, sort_keys=True)] += 1
        return {"records": n, "old_keys": old, "versions": made}

    def migrate(self, rekey) -> int:
        """Move records whose key holds library versions (bildlab <= 0.2) to their key without them: `rekey(key)`
        gives the new key; the versions go into the record's `versions`. Outputs and timings are kept as they are;
        each record is written whole before its old file goes. Returns the number of records moved."""
        moved = 0
        for path in self.files():
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if _well_formed(record) is not None or not any(f in record["key"] for f in OLD_KEY_FIELDS):
                continue
            key = record["key"]
            made = {f: key[f] for f in OLD_KEY_FIELDS if f in key}
            record = {**record, "key": rekey({k: v for k, v in key.items() if k not in OLD_KEY_FIELDS}),
                      "versions": {**made, **record.get("versions", {})}}
            if self.path(record["key"]) != path:
                self.put(record["key"], record)
                path.unlink()
            moved += 1
        return moved

    # -- checkpoints of sweeps in progress: {"index": row} of the finished examples

    def _partial(self, sweep_key: dict) -> Path:
        return self.root / ".partial" / f"{digest(sweep_key)}.json"

    def load_partial(self, sweep_key: dict) -> dict[int, dict]:
        path = self._partial(sweep_key)
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or data.get("key") != sweep_key:
                raise ValueError("not this sweep's checkpoint")
            rows = {int(i): row for i, row in data["rows"].items()}
            if not all(isinstance(row, dict) for row in rows.values()):
                raise ValueError("a row is not an object")
            return rows
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            warnings.warn(f"unusable checkpoint {path} ({e}); the sweep starts over", stacklevel=3)
            return {}

    def save_partial(self, sweep_key: dict, rows: dict[int, dict]) -> None:
        path = self._partial(sweep_key)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps({"key": sweep_key, "rows": {str(i): r for i, r in sorted(rows.items())}}))

    def drop_partial(self, sweep_key: dict) -> None:
        path = self._partial(sweep_key)
        path.unlink(missing_ok=True)
        try:
            path.parent.rmdir()  # only when empty
        except OSError:
            pass
