"""The records a plan hands the questions where the registry has none: stand-ins shaped like
computed records (`_stand_in`), so that the questions run on them unchanged."""

from __future__ import annotations

from ..harness import evaluate as ev

# The stand-ins' trade-off (`_stand_in`): each further policy of a group 0.01x faster and 0.05 points
# worse than the one before it
STAND_IN_SPEED, STAND_IN_LOSS = 0.01, 0.05


def _stand_ins(found: ev.Lookup, metric: str) -> list[dict]:
    """The sweep's records: the registry's where it has them, a stand-in (`_stand_in`) for each of
    the others, ranked within its group of policies (same method and draft) in the sweep's order."""
    n, timed, ranks, out = found.examples(), set(found.timed()), {}, []
    for key, rec in zip(found.keys, found.found):
        group = (key["method"], key.get("draft"))
        rank = ranks[group] = ranks.get(group, -1) + 1
        out.append(rec if rec is not None else _stand_in(key, n, timed, metric, rank))
    return out


def _stand_in(key: dict, n: int, timed: set, metric: str, rank: int) -> dict:
    """A record shaped like a computed one, so that the questions run on it unchanged: its examples
    (timed where the protocol would time them), outputs all identical (so no comparison needs the
    task's references) and summary numbers on a trade-off: the `rank`-th policy of its group is
    STAND_IN_SPEED x faster and STAND_IN_LOSS points worse per rank, and only the first is lossless.
    Every rule that chooses by thresholds (RQ5's lossless, no-loss and degraded rows) then picks as
    many distinct policies as it can: a plan counts the most that could run. `placeholder` marks it
    for the harness's tests; the questions never read it."""
    loss = round(-STAND_IN_LOSS * rank, 6)
    s = {
        "metric": metric,
        "examples": n,
        "score": loss,
        "score_ci": [loss, loss],
        "baseline_score": 0.0,
        "baseline_score_ci": [0.0, 0.0],
        "delta": loss,
        "delta_ci": [loss, loss],
        "identical": 1.0 if rank == 0 else 0.0,
        "identical_count": n if rank == 0 else 0,
        "speedup": round(1.0 + STAND_IN_SPEED * rank, 6),
        "speedup_ci": [1.0, round(1.0 + 2 * STAND_IN_SPEED * rank, 6)],
        "speedup_hf": 1.0,
        "speedup_hf_ci": [1.0, 1.0],
        "truncated": 0,
        "baseline_truncated": 0,
        "small_share": 0.5,
        "mean_accepted": 1.0,
        "large_calls_per_token": 1.0,
        "tokens": n,
        **({"timed_examples": len(timed)} if len(timed) < n else {}),
    }

    def row(i):
        return {
            "stats": {"accepted": 0, "rollbacks": 0, "small_seconds": 0.0, "small_calls": 0},
            "seconds": 1.0 if i in timed else None,
            "baseline_seconds": 1.0 if i in timed else None,
            "baseline_tokens": 1,
            "output": "",
            "baseline_output": "",
        }

    return {
        "key": key,
        "summary": s,
        "examples": [row(i) for i in range(n)],
        "protocol": {},
        "machines": [],
        "placeholder": True,
    }
