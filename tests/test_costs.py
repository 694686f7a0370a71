"""The cost model (bildlab.measure.costs): decodes timed on a virtual clock with known per-call
costs are predicted exactly from their counts alone; errors name their parameter."""

import pytest
import torch

from bildlab.engine.decoding import generate
from bildlab.measure import costs

# seconds per call / per extra token
ENC, STEP, SLOPE, SMALL, ENC_SMALL = 0.010, 0.004, 0.0005, 0.001, 0.002


def calibration(prefixes=(1, 64)) -> dict:
    """A calibration whose costs are the virtual clock's: pass(m) = STEP + (m - 1) SLOPE at every
    prefix."""
    ms = list(range(1, 9))
    return {
        "costs": {
            "encoder": {
                "large": {"lengths": [4, 32], "seconds": [ENC, ENC]},
                "small": {"lengths": [4, 32], "seconds": [ENC_SMALL, ENC_SMALL]},
            },
            "large_pass": {
                "m": ms,
                "prefix": list(prefixes),
                "seconds": [[STEP + (m - 1) * SLOPE for m in ms]] * 2,
            },
            "small_step": {"prefix": list(prefixes), "seconds": [SMALL, SMALL]},
        }
    }


class Clock:
    """Virtual seconds from forward hooks: a decoder call costs STEP + (fed - 1) SLOPE (the large
    model) or SMALL, an encoder call ENC or ENC_SMALL; a decoder-only model's first call (its
    prefill) costs the encoder's, plus SLOPE per drafted token the large model verifies in it."""

    def __init__(self, large, small):
        self.t, self.handles, self.started, self.prompt = 0.0, [], set(), 0
        for model, step, enc in ((large, None, ENC), (small, SMALL, ENC_SMALL)):
            self.handles.append(
                model.register_forward_pre_hook(self.decoder(model, step, enc), with_kwargs=True)
            )
            if model.config.is_encoder_decoder:
                self.handles.append(
                    model.get_encoder().register_forward_pre_hook(self.add(enc), with_kwargs=True)
                )

    def add(self, seconds):
        def hook(module, args, kwargs):
            self.t += seconds

        return hook

    def decoder(self, model, step, enc):
        def hook(module, args, kwargs):
            ids = (
                kwargs.get("decoder_input_ids")
                if model.config.is_encoder_decoder
                else kwargs.get("input_ids")
            )
            first = id(model) not in self.started  # a decode's first call of this model
            self.started.add(id(model))
            # the prefill, and the large model's draft after it
            if not model.config.is_encoder_decoder and first:
                self.t += enc + (ids.shape[1] - self.prompt) * (SLOPE if step is None else 0.0)
            else:
                self.t += step if step is not None else STEP + (ids.shape[1] - 1) * SLOPE

        return hook

    def read(self) -> float:
        """The seconds since the last read; the next decode starts."""
        t, self.t, self.started = self.t, 0.0, set()
        return t

    def close(self):
        for h in self.handles:
            h.remove()


@pytest.mark.parametrize("arch", ["t5", "llama"])
@pytest.mark.parametrize(
    "policy", [dict(method="bild", fallback=0.6, rollback=2.0), dict(method="speculative", k=3)]
)
def test_predicted_equals_a_constructed_clock(models, arch, policy):
    large, drafts = models[arch]
    small = drafts["perturbed"]
    rows, sources, total_drafted = [], [], 0
    for seed in range(6):
        x = torch.randint(3, 40, (1, 5 + seed), generator=torch.Generator().manual_seed(seed))
        clock = Clock(large, small)
        clock.prompt = x.shape[1]
        out = generate(large, x, small=small, max_new_tokens=12, **policy)
        t = clock.read()
        base = generate(large, x, max_new_tokens=12)
        tb = clock.read()
        clock.close()
        total_drafted += out.stats["drafted"]
        rows.append(
            {
                "seconds": t,
                "baseline_seconds": tb,
                "stats": out.stats,
                "tokens": len(out.tokens),
                "baseline_tokens": len(base.tokens),
            }
        )
        sources.append(x.shape[1])
    assert total_drafted > 0  # the draft was used: the slope and the small model's steps are priced
    record = {"key": {"method": policy["method"], "draft": "small"}, "examples": rows}
    p = costs.predict(
        record, calibration(), sources, encoder_decoder=large.config.is_encoder_decoder
    )
    measured = sum(r["baseline_seconds"] for r in rows) / sum(r["seconds"] for r in rows)
    assert p["predicted_speedup"] == pytest.approx(measured, abs=1e-4)
    assert p["measured_over_predicted"] == pytest.approx(1.0, abs=1e-4)
    lo, hi = p["measured_over_predicted_ci"]
    assert lo == pytest.approx(1.0, abs=1e-4) and hi == pytest.approx(1.0, abs=1e-4)
    assert p["predicted_speedup_ci"][0] <= p["predicted_speedup"] <= p["predicted_speedup_ci"][1]
    assert costs.explained({"summary": p}) is True


def test_prefix_interpolation_and_a_miss_is_measured():
    cal = calibration()
    # pass(1) doubles from prefix 1 to 64
    cal["costs"]["large_pass"]["seconds"] = [[0.004] * 8, [0.008] * 8]
    assert costs.large_pass(cal, 1) == pytest.approx((0.004, 0.0))
    assert costs.large_pass(cal, 32.5) == pytest.approx((0.006, 0.0))
    # constant beyond the calibrated prefixes
    assert costs.large_pass(cal, 1000)[0] == pytest.approx(0.008)
    stats = dict(large_calls=5, drafted=0, small_calls=0)
    rows = [
        {
            "seconds": 0.02,
            "baseline_seconds": 0.03,
            "stats": stats,
            "tokens": 5,
            "baseline_tokens": 5,
        }
    ]
    p = costs.predict(
        {"key": {"method": "bild", "draft": "small"}, "examples": rows},
        calibration(),
        [4],
        encoder_decoder=True,
    )
    assert p["predicted_speedup"] == 1.0  # the same calls: nothing to gain
    assert p["measured_over_predicted"] == 1.5 and costs.explained({"summary": p}) is False
    compiled = costs.predict(
        {"key": {"method": "bild", "draft": "small", "compile": True}, "examples": rows},
        calibration(),
        [4],
        encoder_decoder=True,
    )
    # a calibration prices eager calls: compiled ones are not priced
    assert compiled == dict.fromkeys(costs.FIELDS)


def test_unpriced_methods_and_errors():
    rows = [
        {"seconds": 1.0, "baseline_seconds": 1.0, "stats": {}, "tokens": 3, "baseline_tokens": 3}
    ]
    p = costs.predict(
        {"key": {"method": "hf_assisted"}, "examples": rows},
        calibration(),
        [4],
        encoder_decoder=True,
    )
    assert p["predicted_speedup"] is None and costs.explained({"summary": p}) is None
    with pytest.raises(ValueError, match="method must be one of"):
        costs.decode_seconds(calibration(), "hf_greedy", "small", None, 3, 4, False)
    with pytest.raises(ValueError, match="draft must be 'small' or one the calibration measured"):
        costs.draft_step(calibration(), "aligned", 4)


def test_host_work_is_priced_per_call_and_per_draft_step_by_method():
    cal = calibration()
    cal["costs"]["overhead"] = {
        "large_call": 1e-4,
        "call": {"sample": 2e-4, "prompt-lookup": 3e-4},
        "draft_step": {"speculative": 4e-5, "speculative sampling": 5e-5},
    }
    plain = calibration()
    stats = dict(large_calls=4, drafted=8, small_calls=8)
    args = (stats, 12, 6, False)

    def more(method, sampled=False, st=stats):
        return costs.decode_seconds(
            cal, method, "small", st, 12, 6, False, sampled
        ) - costs.decode_seconds(plain, method, "small", st, 12, 6, False, sampled)

    assert more("speculative") == pytest.approx(4 * 1e-4 + 8 * 4e-5)
    # sampling's own draws per draft step
    assert more("speculative", True) == pytest.approx(4 * 1e-4 + 8 * 5e-5)
    assert more("prompt-lookup", st=dict(large_calls=4, drafted=8)) == pytest.approx(
        4 * (1e-4 + 3e-4)
    )
    # the vanilla model: one call per token
    assert more("greedy", st=None) == pytest.approx(12 * 1e-4)
    assert more("greedy", True, st=None) == pytest.approx(12 * (1e-4 + 2e-4))  # ... sampling
    # a method the calibration has no draft-step work for: none
    assert more("bild") == pytest.approx(4 * 1e-4)
    assert costs.decode_seconds(cal, "speculative", "small", *args) > 0


def test_steps_are_priced_by_their_position_in_a_run():
    cal, flat = calibration(), calibration()
    # a draft's first step after the large model's pass, and the next ones
    first, later = 3e-3, 1e-3
    cal["costs"]["small_step"]["by_position"] = [[first, later, later]] * 2
    # three drafts (before every call but the first) of 2 steps
    stats = dict(large_calls=4, drafted=6, small_calls=6)
    extra = costs.decode_seconds(cal, "bild", "small", stats, 8, 6, False) - costs.decode_seconds(
        flat, "bild", "small", stats, 8, 6, False
    )
    assert extra == pytest.approx(3 * (first + later) - 6 * SMALL)
    s = cal["costs"]["small_step"]
    # past the measured positions: the last's
    assert costs.run_seconds(s, 4, 5) == pytest.approx(first + 4 * later)
    # a fraction of the next step
    assert costs.run_seconds(s, 4, 1.5) == pytest.approx(first + 0.5 * later)
    # none measured: the mean
    assert costs.run_seconds(flat["costs"]["small_step"], 4, 5) == pytest.approx(5 * SMALL)
    # the greedy loop's run: the small model alone, its steps after the first cheaper
    cal["costs"]["greedy_step"] = {
        "small": {"prefix": [1, 64], "seconds": [2e-3] * 2, "by_position": [[4e-3, 1e-3]] * 2},
        "large": {"prefix": [1, 64], "seconds": [STEP] * 2},
    }
    alone = costs.decode_seconds(cal, "small", "small", dict(large_calls=10), 10, 6, False)
    assert alone == pytest.approx(ENC_SMALL + 4e-3 + 9 * 1e-3)
    # with another c, each position scales as the mean does
    c = costs.with_cost_ratio(cal, 0.5)["costs"]["small_step"]
    assert c["by_position"][0] == pytest.approx(
        [v * 0.5 * STEP / SMALL for v in (first, later, later)]
    )


def test_a_predictions_interval_widens_with_the_calibrations_uncertainty():
    """The calibration's relative uncertainty u widens the predicted speedup's interval (and the
    measured one's over it) around the same point estimates; u = 0, or a calibration made before it
    stated u, gives the intervals it gave."""
    rows = [
        {
            "seconds": 0.02 + 0.002 * i,
            "baseline_seconds": 0.05,
            "stats": dict(large_calls=4 + i % 3, drafted=6 + i, small_calls=6 + i),
            "tokens": 12,
            "baseline_tokens": 12,
        }
        for i in range(8)
    ]
    record = {"key": {"method": "speculative", "draft": "small"}, "examples": rows}

    def predicted(u):
        cal = calibration()
        if u is not None:
            cal["uncertainty"] = {"relative": u}
        return costs.predict(record, cal, [6] * 8, encoder_decoder=True)

    before, zero, some, more = predicted(None), predicted(0.0), predicted(0.02), predicted(0.1)
    assert zero == before and before["predicted_speedup_ci"][0] < before["predicted_speedup_ci"][1]
    for name in ("predicted_speedup", "measured_over_predicted"):
        assert some[name] == more[name] == before[name]
        inner, mid, outer = before[f"{name}_ci"], some[f"{name}_ci"], more[f"{name}_ci"]
        assert outer[0] < mid[0] < inner[0] <= before[name] <= inner[1] < mid[1] < outer[1]
    lo, hi = before["predicted_speedup_ci"]
    assert some["predicted_speedup_ci"] == pytest.approx([lo * 0.98, hi * 1.02], abs=1e-4)
    with pytest.raises(ValueError, match="relative uncertainty must be in"):
        costs.widened([1.0, 2.0], 1.5)
    # a calibration less sure than that predicts nothing, rather than an interval below zero
    assert predicted(1.0) == predicted(1.5) == dict.fromkeys(costs.FIELDS)
