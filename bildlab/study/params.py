"""The notebooks' parameters, checked before anything loads: a papermill `-p` value or a YAML file
with an unknown name, an unknown pair, split or device, a device this machine does not have, or an
out-of-range threshold fails with a message naming the parameter (a ParameterError, a ValueError).
"""

from __future__ import annotations

# the numbers of examples a notebook takes: each None, an integer >= 1 or a dict of them per pair
SIZES = (
    "limit",
    "val_limit",
    "timing_limit",
    "val_timing_limit",
    "lookup_val_limit",
    "lookup_val_timing_limit",
)


class ParameterError(ValueError):
    """A bad parameter, or one this machine cannot serve, found before anything runs: `bildlab
    study` prints its message as one line (exit status 2), without a traceback."""


def check_params(params: dict, allowed: set | None = None) -> None:
    """Validate notebook parameters (a papermill -p value or a YAML file): unknown names, unknown
    pairs / splits / devices and out-of-range thresholds fail with a message naming the parameter.
    """
    from ..engine.policy import Policy
    from ..world.models import PAIRS
    from ..world.tasks import SPLITS

    if allowed is not None:
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ParameterError(
                f"unknown parameter(s) {', '.join(unknown)}; this notebook takes: "
                f"{', '.join(sorted(allowed))}"
            )

    def as_list(name):
        value = params[name]
        return list(value) if isinstance(value, (list, tuple)) else [value]

    for name in params:
        if name in ("pair", "pairs", "reference_pairs", "compiled_pairs"):
            for p in as_list(name):
                if p is None and name == "reference_pairs":
                    continue
                if p not in PAIRS:
                    raise ParameterError(
                        f"{name}: unknown pair {p!r}; known pairs: {', '.join(PAIRS)}"
                    )
        elif name in ("fallback", "fallbacks", "bild_fallback"):
            for f in as_list(name):
                try:
                    Policy("bild", fallback=f)
                except (ValueError, TypeError) as e:
                    raise ParameterError(f"{name}: {e}") from None
        elif name in ("rollback", "rollbacks", "bild_rollback"):
            for r in as_list(name):
                try:
                    Policy("bild", rollback=float(r) if isinstance(r, str) else r)
                except (ValueError, TypeError) as e:
                    raise ParameterError(f"{name}: {e}") from None
        elif name in ("lookup_ngrams", "lookup_passes") and params[name] is not None:
            for n in as_list(name):
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise ParameterError(
                        f"{name}: n-gram sizes and passes must be integers >= 1; got {n!r}"
                    )
        elif name in ("k", "ks", "lookup_ks"):
            for k in as_list(name):
                if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                    raise ParameterError(f"{name}: draft lengths must be integers >= 1; got {k!r}")
        elif name in SIZES:
            v = params[name]
            for pair, n in v.items() if isinstance(v, dict) else [(None, v)]:
                if pair is not None and pair not in PAIRS:
                    raise ParameterError(
                        f"{name}: unknown pair {pair!r}; known pairs: {', '.join(PAIRS)}"
                    )
                if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                    raise ParameterError(
                        f"{name} must be None, an integer >= 1 or a dict of them per pair; got {v!r}"
                    )
        elif name == "rollback_rule":
            try:
                Policy("bild", rollback_rule=params[name])
            except (ValueError, TypeError) as e:
                raise ParameterError(f"rollback_rule: {e}") from None
        elif name in ("executor", "shard_size", "chunk_size"):
            from ..harness.distributed import check

            try:
                check(
                    params.get("executor", "local"),
                    params.get("shard_size"),
                    params.get("chunk_size"),
                )
            except (ValueError, ImportError) as e:  # ImportError: the Ray extra is not installed
                raise ParameterError(str(e)) from None
        elif name == "memory":
            from ..engine.memory import parse

            try:
                parse(params[name])
            except ValueError as e:
                raise ParameterError(str(e)) from None
        elif name == "other_calibration" and params[name] is not None:
            from pathlib import Path

            if not isinstance(params[name], str) or not Path(params[name]).is_file():
                raise ParameterError(
                    f"other_calibration must be None or the path of a calibration file (bildlab "
                    f"calibrate on that machine: its registry's .calibrations/); got {params[name]!r}"
                )
        elif name == "compile" and not isinstance(params[name], bool):
            raise ParameterError(f"compile must be True or False; got {params[name]!r}")
        elif name == "recompute" and not isinstance(params[name], bool):
            raise ParameterError(f"recompute must be True or False; got {params[name]!r}")
        elif name == "max_new_tokens":
            v = params[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ParameterError(f"max_new_tokens must be an integer >= 1; got {v!r}")
        elif name in ("passes", "threads", "repeats", "batch_size"):
            v = params[name]
            if (isinstance(v, bool) or not isinstance(v, int) or v < 1) and not (
                name == "threads" and v is None
            ):
                raise ParameterError(f"{name} must be an integer >= 1; got {v!r}")
        elif name in ("split", "val_split") and params[name] not in SPLITS:
            raise ParameterError(f"{name} must be one of {', '.join(SPLITS)}; got {params[name]!r}")
        elif name in ("tolerance", "degraded_tolerance"):
            v = params[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ParameterError(f"{name} must be a number >= 0; got {v!r}")
        elif name == "temperature":
            v = params[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ParameterError(f"temperature must be a number > 0; got {v!r}")
        elif name == "device":
            check_device(params[name], here=params.get("executor", "local") == "local")

    named = {
        p for name in ("pair", "pairs", "reference_pairs") if name in params for p in as_list(name)
    } - {None}
    for name in SIZES:  # a size per pair must cover every pair the notebook runs
        missing = sorted(named - set(params[name])) if isinstance(params.get(name), dict) else []
        if missing:
            raise ParameterError(
                f"{name} gives no size for pair(s) {', '.join(missing)}; give one per pair or one "
                f"for all"
            )


def check_device(device, here: bool = True) -> None:
    """A device the study can run on: 'cpu' or 'cuda[:n]' as torch parses it, and with `here` (the
    local executor: this machine decodes) one this machine has. With a Ray executor the cluster's
    GPUs are checked when it is reached (`distributed.run_shards`): the driver may have none."""
    import torch

    try:
        parsed = torch.device(device) if isinstance(device, str) else None
    except RuntimeError:
        parsed = None
    if parsed is None:
        raise ParameterError(
            f"device must be 'cpu' or 'cuda[:n]'; got {device!r}, which torch does not parse as a "
            f"device string"
        )
    if parsed.type not in ("cpu", "cuda"):
        raise ParameterError(f"device must be 'cpu' or 'cuda[:n]'; got {device!r}")
    if parsed.type == "cpu" or not here:
        return
    if not torch.cuda.is_available():
        raise ParameterError(
            f"device: {device!r} was asked but this machine has no CUDA device (torch "
            f"{torch.__version__} sees none); run on a GPU box or pass -p device cpu"
        )
    count = torch.cuda.device_count()
    if parsed.index is not None and parsed.index >= count:
        raise ParameterError(
            f"device: {device!r} was asked but this machine has {count} CUDA device(s), cuda:0 to "
            f"cuda:{count - 1}; pass -p device cuda:0 (or another of them)"
        )
