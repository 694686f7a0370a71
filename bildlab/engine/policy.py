"""A decoding policy as one value: the method and the parameters its rules read, with their defaults,
their checks and the part of them that names a result (`key`).

    Policy("bild", fallback=0.5, rollback=3.0)       # a ValueError names a bad parameter
    Policy("speculative", k=4).key()                 # {"k": 4}: what the registry keys a record by
    generate(large, x, small=small, policy=p)        # or generate(..., method="bild", fallback=0.5)

The engine (`decoding.generate`, `batch.generate_batch`), the harness (sweep entries), the benchmarks
and the command line all build this one value; `fields()` lists its parameters.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

METHODS = ("greedy", "sample", "speculative", "bild", "prompt-lookup")
ROLLBACK_RULES = ("first-differing", "first-above")


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True)
class Policy:
    """How `generate` decodes. `method`: "greedy" or "sample" (the large model alone),
    "speculative" (a draft model proposes `k` tokens, the large model verifies them), "bild" (the
    small model writes until its confidence falls below `fallback` or it wrote `max_small_steps`
    tokens; a drafted token whose -log p_L exceeds `rollback` is rolled back, by `rollback_rule`),
    "prompt-lookup" (up to `k` tokens copied after the last n-gram of the context, n <= `ngram`).
    `do_sample`, `temperature`, `top_k`, `top_p`: sampling ("sample", or speculative sampling)."""

    method: str = "greedy"
    k: int = 4
    fallback: float = 0.6
    rollback: float = 5.0
    max_small_steps: int = 10
    rollback_rule: str = "first-differing"
    ngram: int = 2
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(
                f"method must be one of {', '.join(map(repr, METHODS))}; got {self.method!r}"
            )
        if not is_int(self.k) or self.k < 1:
            raise ValueError(
                f"k (the maximum draft length) must be an integer >= 1; got {self.k!r}"
            )
        if not is_int(self.max_small_steps) or self.max_small_steps < 1:
            raise ValueError(
                f"max_small_steps must be an integer >= 1; got {self.max_small_steps!r}"
            )
        if not _is_number(self.fallback) or not 0.0 <= self.fallback <= 1.0:
            raise ValueError(
                f"fallback (alpha_FB) must be a number in [0, 1]; got {self.fallback!r}"
            )
        if not _is_number(self.rollback) or math.isnan(self.rollback) or self.rollback < 0:
            raise ValueError(
                f"rollback (alpha_RB) must be a number >= 0 (inf disables rollback); got {self.rollback!r}"
            )
        if self.rollback_rule not in ROLLBACK_RULES:
            raise ValueError(
                f"rollback_rule must be one of {', '.join(map(repr, ROLLBACK_RULES))}; "
                f"got {self.rollback_rule!r}"
            )
        if not is_int(self.ngram) or self.ngram < 1:
            raise ValueError(
                f"ngram (prompt lookup's longest n-gram matched) must be an integer >= 1; got {self.ngram!r}"
            )
        self._check_sampling()

    def _check_sampling(self) -> None:
        if not isinstance(self.do_sample, bool):
            raise TypeError(f"do_sample must be True or False; got {self.do_sample!r}")
        if self.method == "greedy" and self.do_sample:
            raise ValueError(
                "do_sample=True contradicts method='greedy'; use method='sample' for the large model alone"
            )
        if self.method in ("bild", "prompt-lookup") and self.do_sample:
            raise ValueError(
                f"method={self.method!r} is greedy: do_sample must be False; "
                "use method='speculative' for lossless sampling with a draft model"
            )
        if not self.sampling:
            return
        t, top_k, top_p = self.temperature, self.top_k, self.top_p
        if not _is_number(t) or not t > 0:
            raise ValueError(f"temperature must be a number > 0 when sampling; got {t!r}")
        if top_k is not None and (not is_int(top_k) or top_k < 1):
            raise ValueError(f"top_k must be None or an integer >= 1; got {top_k!r}")
        if top_p is not None and (not _is_number(top_p) or not 0.0 < top_p <= 1.0):
            raise ValueError(f"top_p must be None or a number in (0, 1]; got {top_p!r}")

    @property
    def sampling(self) -> bool:
        """Tokens are sampled ("sample", or speculative sampling)."""
        return self.do_sample or self.method == "sample"

    @property
    def drafts(self) -> bool:
        """A draft model runs: speculative decoding, or BiLD whose fallback lets the small model write."""
        return self.method == "speculative" or (self.method == "bild" and self.fallback < 1.0)

    @property
    def width(self) -> int:
        """The longest draft: a record's acceptance by draft position has this many entries."""
        return {"speculative": self.k, "prompt-lookup": self.k, "bild": self.max_small_steps}.get(
            self.method, 0
        )

    def key(self) -> dict:
        """The parameters that change this method's outputs or counts, as a registry key holds them
        (BiLD's rollback rule only where it is not the default, sampling settings only when
        sampling, so that records keep their keys)."""
        if self.method == "prompt-lookup":
            return {"k": self.k, "ngram": self.ngram}
        if self.method == "speculative":
            if not self.do_sample:
                return {"k": self.k}
            tops = {
                n: v for n, v in (("top_k", self.top_k), ("top_p", self.top_p)) if v is not None
            }
            return {"k": self.k, "do_sample": True, "temperature": float(self.temperature), **tops}
        if self.method == "bild":
            rule = (
                {}
                if self.rollback_rule == ROLLBACK_RULES[0]
                else {"rollback_rule": self.rollback_rule}
            )
            return {
                "fallback": float(self.fallback),
                "rollback": float(self.rollback),
                "max_small_steps": self.max_small_steps,
                **rule,
            }
        return {}


def fields() -> tuple[str, ...]:
    """The policy's parameters, in order."""
    return tuple(f.name for f in dataclasses.fields(Policy))


DEFAULTS = Policy()


def of(policy: Policy | None, keywords: dict, caller: str) -> Policy:
    """The policy of a call that takes either `policy=` or its parameters as keywords."""
    unknown = sorted(set(keywords) - set(fields()))
    if unknown:
        raise TypeError(
            f"{caller}() got unexpected keyword argument(s) {', '.join(unknown)}; "
            f"a policy takes {', '.join(fields())}"
        )
    if policy is None:
        return Policy(**keywords)
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be a bildlab Policy; got {type(policy).__name__}")
    if keywords:
        raise ValueError(
            f"{caller}(): pass the policy either as policy=... or as keywords, not both "
            f"(got policy and {', '.join(sorted(keywords))})"
        )
    return policy
