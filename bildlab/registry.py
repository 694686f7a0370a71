"""The results registry: one JSON record per evaluated policy, named by a hash of everything that determines it.

A record is written atomically and reused, so a rerun is instant and an interrupted sweep resumes; a corrupt record
is reported and recomputed. A sweep in progress keeps its finished examples in a checkpoint next to the records
(`.partial/`), so an interrupted sweep resumes from its last finished example.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

from .atomic import atomic_path

DEFAULT_REGISTRY = "results"


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


class Registry:
    """One JSON file per run under `root`, named by a hash of its key."""

    def __init__(self, root: str | os.PathLike = DEFAULT_REGISTRY):
        self.root = Path(root)

    def path(self, key: dict) -> Path:
        return self.root / key["pair"] / key["task"] / f"{key['method']}-{digest(key)}.json"

    def get(self, key: dict) -> dict | None:
        path = self.path(key)
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
            if record.get("key") != key or "summary" not in record or "examples" not in record:
                raise ValueError("key or fields do not match")
            return record
        except (OSError, ValueError) as e:
            warnings.warn(f"corrupt results record {path} ({e}); recomputing it", stacklevel=3)
            return None

    def put(self, key: dict, record: dict) -> Path:
        path = self.path(key)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(record, separators=(",", ":")))  # compact: records hold every example
        return path

    def records(self) -> list[dict]:
        out = []
        for path in sorted(self.root.rglob("*.json")):
            if ".partial" in path.parts:
                continue
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                warnings.warn(f"corrupt results record {path}; skipped", stacklevel=2)
        return out

    # -- checkpoints of sweeps in progress: {"index": row} of the finished examples

    def _partial(self, sweep_key: dict) -> Path:
        return self.root / ".partial" / f"{digest(sweep_key)}.json"

    def load_partial(self, sweep_key: dict) -> dict[int, dict]:
        path = self._partial(sweep_key)
        try:
            data = json.loads(path.read_text())
            if data.get("key") != sweep_key:
                return {}
            return {int(i): row for i, row in data["rows"].items()}
        except (OSError, ValueError, KeyError):
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
