"""The results registry: one JSON record per evaluated policy, named by a hash of its key.

A record's key is what defines the experiment (pair, task, split, examples, policy, generation
budget, timing protocol, model and data hashes); the library versions it was made with are
provenance, stored in the record (`versions`), not in the key: the committed study replays under
other releases, and `recompute` asks for new records. A record is written atomically and reused, so
a rerun is instant; anything in the registry that is not a well-formed record (truncated, not an
object, a key that is not its file's) is reported and recomputed. On disk a record's examples are
columns, the vanilla runs of its sweep are stored once for all its records (`.sweeps/`), an output
identical to vanilla's is not stored again, and a column of outputs is stored once by its content
(`.outputs/`: the vanilla outputs of a split are the same in every sweep over it); `get` gives back
the rows exactly as they were put. A sweep in progress keeps its finished examples in a checkpoint
next to the records (`.partial/`), so an interrupted sweep resumes from its last finished example.
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

from ..atomic import atomic_path
from . import columns as stored

DEFAULT_REGISTRY = "results"
# whose releases a record's outputs and timings may depend on
LIBRARIES = ("torch", "transformers", "tokenizers")
# versions that keys held before they became provenance
OLD_KEY_FIELDS = ("bildlab", "torch", "transformers")
# Per-example fields of a sweep's vanilla runs (the large model alone, transformers' generate): the
# same in every record of the sweep, so stored once, in <root>/.sweeps/<sweep>.json
# the machine's calibrations (`calibrate`), one file each, beside the records
CALIBRATIONS = ".calibrations"
SHARED = (
    "baseline_output",
    "baseline_tokens",
    "baseline_seconds",
    "baseline_truncated",
    "hf_seconds",
    "hf_identical",
)
# columns of outputs, each stored once by its content in <root>/.outputs/
OUTPUTS = ("output", "baseline_output")


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def versions() -> dict:
    """The versions of Python, bildlab and the libraries a record depends on, in this environment."""
    from .. import __version__

    out = {"python": platform.python_version(), "bildlab": __version__}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def differences(made: dict, now: dict | None = None) -> dict:
    """{name: (made with, here)} for every version a record states that differs from this
    environment's."""
    now = versions() if now is None else now
    return {
        k: (v, now.get(k))
        for k, v in sorted((made or {}).items())
        if v is not None and v != now.get(k)
    }


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

    @classmethod
    def of(cls, registry: Registry | str | os.PathLike) -> Registry:
        """`registry` itself when it is a Registry; else the registry at that path."""
        return registry if isinstance(registry, Registry) else cls(registry)

    def path(self, key: dict) -> Path:
        """Where the record of `key` lives: <root>/<pair>/<task>/<method>-<digest of the key>.json."""
        return self.root / key["pair"] / key["task"] / f"{key['method']}-{digest(key)}.json"

    def get(self, key: dict) -> dict | None:
        path = self.path(key)
        if not path.exists():
            return None
        try:
            record = self._read(path)
        except (OSError, ValueError, KeyError, TypeError) as e:
            problem = str(e)
        else:
            problem = _well_formed(record, key)
            if problem is None:
                return record
        warnings.warn(f"corrupt results record {path} ({problem}); recomputing it", stacklevel=3)
        return None

    def put(self, key: dict, record: dict) -> Path:
        """Write a record whole: its examples as columns, the sweep's vanilla columns in the sweep's
        file (written first, once; a record whose vanilla columns differ from its sweep file's keeps
        its own), and an output identical to the vanilla one not again."""
        path, rows = self.path(key), record["examples"]
        fields = list(rows[0]) if rows else []
        if not rows or any(list(r) != fields for r in rows):
            packed = rows  # rows of different shapes stay rows
        else:
            sweep = (record.get("protocol") or {}).get("sweep")
            shared = [f for f in SHARED if f in fields] if sweep else []
            if shared and not self._share(
                sweep, self._store(stored.columns(rows, shared)), len(rows)
            ):
                shared = []
            columns = stored.columns(rows, [f for f in fields if f not in shared])
            # an output identical to vanilla's: once
            if {"output", "identical", "baseline_output"} <= set(fields):
                columns["output"] = [
                    None if same else o for o, same in zip(columns["output"], columns["identical"])
                ]
            packed = {
                "n": len(rows),
                "fields": fields,
                "sweep_columns": sweep if shared else None,
                "columns": self._store(columns),
            }
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps({**record, "examples": packed}, separators=(",", ":")))
        return path

    def drop_sweep_columns(self, sweep: str) -> None:
        """Forget a sweep's shared vanilla columns (its records are written again with new ones)."""
        self._sweep_path(sweep).unlink(missing_ok=True)

    def _sweep_path(self, sweep: str) -> Path:
        return self.root / ".sweeps" / f"{sweep}.json"

    def _store(self, columns: dict) -> dict:
        """Columns as stored (`columns.pack`), each column of outputs as {"outputs": its digest}, the
        column in <root>/.outputs/<digest>.json, written first and once."""
        out = stored.pack(columns)
        for f in OUTPUTS:
            if isinstance(out.get(f), list) and any(v is not None for v in out[f]):
                text, name = json.dumps(out[f], separators=(",", ":")), digest(out[f])
                path = self._outputs_path(name)
                if not path.exists() or path.read_text() != text:
                    with atomic_path(path) as tmp:
                        tmp.write_text(text)
                out[f] = {"outputs": name}
        return out

    def _load(self, columns: dict) -> dict:
        """The inverse of `_store`: a file of outputs whose column is not the one its name stands
        for raises ValueError."""
        out = stored.unpack(columns)
        for f, c in out.items():
            if isinstance(c, dict) and "outputs" in c:
                out[f] = json.loads(self._outputs_path(c["outputs"]).read_text())
                if digest(out[f]) != c["outputs"]:
                    raise ValueError(f"its outputs' file {c['outputs']}.json holds other outputs")
        return out

    def _outputs_path(self, name: str) -> Path:
        return self.root / ".outputs" / f"{name}.json"

    def _share(self, sweep: str, columns: dict, n: int) -> bool:
        """Store a sweep's vanilla columns once; False where the sweep's file holds other ones."""
        path = self._sweep_path(sweep)
        if path.exists():
            try:
                return json.loads(path.read_text()) == {"n": n, "columns": columns}
            except (OSError, ValueError):
                pass
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps({"n": n, "columns": columns}, separators=(",", ":")))
        return True

    def _read(self, path: Path) -> dict:
        """A record as written, its examples back as rows (a record stored as rows is read as it
        is)."""
        record = json.loads(path.read_text())
        if isinstance(record, dict) and isinstance(record.get("examples"), dict):
            packed = record["examples"]
            columns = self._load(packed["columns"])
            if packed.get("sweep_columns"):
                shared = json.loads(self._sweep_path(packed["sweep_columns"]).read_text())
                if shared["n"] != packed["n"]:
                    raise ValueError("its sweep's file holds another number of examples")
                columns.update(self._load(shared["columns"]))
            if {"output", "identical", "baseline_output"} <= set(packed["fields"]):
                columns["output"] = [
                    b if same else o
                    for o, same, b in zip(
                        columns["output"], columns["identical"], columns["baseline_output"]
                    )
                ]
            record["examples"] = stored.rows(packed["n"], packed["fields"], columns)
        return record

    def files(self) -> list[Path]:
        """The record files (not the sweeps' shared columns, not the outputs' files, not
        checkpoints)."""
        return [
            p
            for p in sorted(self.root.rglob("*.json"))
            if not {".partial", ".sweeps", ".outputs", CALIBRATIONS} & set(p.parts)
        ]

    def sweep_files(self) -> list[Path]:
        return sorted((self.root / ".sweeps").glob("*.json"))

    def output_files(self) -> list[Path]:
        return sorted((self.root / ".outputs").glob("*.json"))

    def outputs_read(self, paths: list[Path]) -> set[str]:
        """The names of the outputs' files that the record and sweep files `paths` read."""
        names = set()
        for path in paths:
            try:
                data = json.loads(path.read_text())
                columns = data["columns"] if "columns" in data else data["examples"]["columns"]
                names |= {
                    c["outputs"] for c in columns.values() if isinstance(c, dict) and "outputs" in c
                }
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue
        return names

    def compact(self) -> int:
        """Rewrite every record in the current storage (rows of bildlab <= 0.2, or columns of an
        earlier packing): columns, the vanilla runs once per sweep, booleans and machine indices as
        strings, seconds as whole nanoseconds, each column of outputs once by its content (a sweep's
        file that no record reads, its records timed again, is made again from them). Returns how
        many record files changed (values unchanged, seconds to the nanosecond). Each file is
        replaced whole; the sweeps' files first, which records of either packing read."""
        for path in self.sweep_files():
            try:
                shared = json.loads(path.read_text())
                packed = {"n": shared["n"], "columns": self._store(self._load(shared["columns"]))}
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if packed != shared:
                with atomic_path(path) as tmp:
                    tmp.write_text(json.dumps(packed, separators=(",", ":")))
        # sweeps whose file a record reads; sweeps with records that keep their own
        referenced, kept = set(), set()
        for path in self.files():
            try:
                raw = json.loads(path.read_text())
                packed, own = raw.get("examples"), (raw.get("protocol") or {}).get("sweep")
                sweep = packed.get("sweep_columns") if isinstance(packed, dict) else None
            except (OSError, ValueError, AttributeError):
                continue
            if sweep:
                referenced.add(sweep)
            else:
                kept.add(own)
        # a file no record reads (its records retimed): made again below
        for sweep in kept - referenced - {None}:
            self.drop_sweep_columns(sweep)
        done = 0
        for path in self.files():
            try:
                before = path.read_bytes()
                record = self._read(path)
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if _well_formed(record) is None and self.path(record["key"]) == path:
                self.put(record["key"], record)
                done += path.read_bytes() != before
        return done

    def records(self) -> list[dict]:
        """Every well-formed record; the others are reported and skipped."""
        out = []
        for path in self.files():
            try:
                record = self._read(path)
                problem = _well_formed(record)
                if problem is None and self.path(record["key"]) != path:
                    problem = "its key is not the one its file name stands for"
            except (OSError, ValueError, KeyError, TypeError) as e:
                problem = str(e)
            if problem is None:
                out.append(record)
            else:
                warnings.warn(f"corrupt results record {path} ({problem}); skipped", stacklevel=2)
        return out

    def survey(self) -> dict:
        """What a replay from this registry would meet: {"records": n, "old_keys": records whose key
        still holds library versions (`migrate` them), "versions": Counter of the versions records
        were made with (JSON)}."""
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
        """Move records whose key holds library versions (bildlab <= 0.2) to their key without them:
        `rekey(key)` gives the new key; the versions go into the record's `versions`. Outputs and
        timings are kept as they are; each record is written whole before its old file goes. Returns
        the number of records moved."""
        moved = 0
        for path in self.files():
            try:
                record = self._read(path)
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if _well_formed(record) is not None or not any(
                f in record["key"] for f in OLD_KEY_FIELDS
            ):
                continue
            key = record["key"]
            made = {f: key[f] for f in OLD_KEY_FIELDS if f in key}
            record = {
                **record,
                "key": rekey({k: v for k, v in key.items() if k not in OLD_KEY_FIELDS}),
                "versions": {**made, **record.get("versions", {})},
            }
            if self.path(record["key"]) != path:
                self.put(record["key"], record)
                path.unlink()
            moved += 1
        return moved

    # -- checkpoints of sweeps in progress: {"index": row} of the finished examples

    def put_calibration(self, record: dict) -> Path:
        """Write a calibration record (`calibrate`) whole, under .calibrations/<pair>-<digest of its
        key>-<when made> .json: every calibration is kept, since records name the one that priced
        them (`for_machine` reads the newest)."""
        made = record["made"].replace("-", "").replace(":", "")
        path = (
            self.root
            / CALIBRATIONS
            / f"{record['key']['pair']}-{digest(record['key'])}-{made}.json"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
        return path

    def calibrations(self) -> list[dict]:
        """Every calibration record of this registry (a file that cannot be read is reported and
        skipped)."""
        out = []
        for path in sorted((self.root / CALIBRATIONS).glob("*.json")):
            try:
                record = json.loads(path.read_text())
                record["key"]["pair"], record["costs"]["large_pass"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                warnings.warn(f"corrupt calibration {path} ({e}); skipped", stacklevel=2)
                continue
            out.append(record)
        return out

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

    def checkpoints(self) -> list[tuple[Path, dict]]:
        """Every checkpoint file with the key it holds (its sweep's checkpoint key, or for a chunk
        of outputs {"outputs": that key, ...}; {} where the file is unreadable)."""

        def key(path):
            try:
                return dict(json.loads(path.read_text())["key"])
            except (OSError, ValueError, KeyError, TypeError):
                return {}

        return [(p, key(p)) for p in sorted((self.root / ".partial").glob("*.json"))]

    def save_partial(self, sweep_key: dict, rows: dict[int, dict]) -> None:
        path = self._partial(sweep_key)
        with atomic_path(path) as tmp:
            tmp.write_text(
                json.dumps({"key": sweep_key, "rows": {str(i): r for i, r in sorted(rows.items())}})
            )

    def drop_partial(self, sweep_key: dict) -> None:
        path = self._partial(sweep_key)
        path.unlink(missing_ok=True)
        try:
            path.parent.rmdir()  # only when empty
        except OSError:
            pass
