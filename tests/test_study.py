"""The study layer: parameter checks before anything runs, the speculative-decoding formulas, figure
files."""

import hashlib
import json
import re
import sys

import pytest

from bildlab import study
from bildlab.harness.registry import Registry
from bildlab.measure import summary
from bildlab.study import plots, runner
from bildlab.study.common import versus_text
from bildlab.study.params import check_params


@pytest.mark.parametrize(
    "params, words",
    [
        ({"pair": "toy-xx"}, ["pair", "toy-xx", "toy-mt"]),
        ({"pairs": ["toy-mt", "nope"]}, ["pairs", "nope"]),
        ({"fallback": 1.5}, ["fallback", "[0, 1]"]),
        ({"fallbacks": [0.2, -0.1]}, ["fallbacks", "[0, 1]"]),
        ({"rollbacks": [2.0, -3.0]}, ["rollbacks", ">= 0"]),
        ({"ks": [1, 0]}, ["ks", ">= 1"]),
        ({"limit": 0}, ["limit"]),
        ({"limit": {"toy-mt": 300, "toy-xx": 5}}, ["limit", "toy-xx"]),
        ({"val_limit": {"toy-sum": 0.5}}, ["val_limit", "per pair"]),
        (
            {"pairs": ["toy-mt", "toy-sum"], "limit": {"toy-mt": 3}},
            ["limit", "no size for pair(s) toy-sum"],
        ),
        (
            {"pair": "toy-mt-llama", "reference_pairs": "toy-mt", "limit": {"toy-mt-llama": 3}},
            ["limit", "toy-mt"],
        ),
        ({"reference_pairs": ["toy-mt", "toy-xx"]}, ["reference_pairs", "toy-xx"]),
        ({"split": "dev"}, ["split", "validation"]),
        ({"tolerance": -1}, ["tolerance"]),
        ({"temperature": 0}, ["temperature"]),
        ({"device": "tpu"}, ["device"]),
    ],
)
def test_bad_parameters_are_named(params, words):
    with pytest.raises(ValueError) as info:
        check_params(params)
    for w in words:
        assert w in str(info.value)


@pytest.mark.parametrize("device", ["tpu", "gpu", "CUDA", "cuda:x", "cuda:-1", "cuda:0:1", 0, None])
def test_a_device_torch_does_not_parse_is_named(device):
    with pytest.raises(
        ValueError, match=rf"^device must be 'cpu' or 'cuda\[:n\]'; got {re.escape(repr(device))}"
    ):
        check_params({"device": device})


def test_a_device_this_machine_lacks_stops_the_check(monkeypatch):
    import torch

    from bildlab.study.params import check_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "cuda:1"):
        with pytest.raises(ValueError) as info:
            check_params({"pairs": ["xsum"], "device": device, "limit": 5})
        assert str(info.value) == (
            f"device: {device!r} was asked but this machine has no CUDA device (torch "
            f"{torch.__version__} sees none); run on a GPU box or pass -p device cpu"
        )
    check_params({"device": "cpu"})
    # a Ray cluster's GPUs are checked where it is reached, not on the driver
    check_device("cuda", here=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for device in ("cuda", "cuda:0", "cuda:1"):
        check_params({"device": device})
    with pytest.raises(
        ValueError,
        match=r"^device: 'cuda:2' was asked but this machine has 2 CUDA device\(s\), "
        r"cuda:0 to cuda:1; pass -p device cuda:0",
    ):
        check_params({"device": "cuda:2"})


def test_the_paper_profile_stops_before_loading_on_a_machine_without_cuda(monkeypatch, tmp_path):
    import papermill
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(
        papermill, "execute_notebook", lambda *a, **k: pytest.fail("a notebook ran")
    )
    with pytest.raises(
        ValueError, match="^device: 'cuda' was asked but this machine has no CUDA device"
    ):
        runner.run_study(profile="paper", out=tmp_path, progress=False)
    assert not list(tmp_path.iterdir())


def test_unknown_parameter_names_are_rejected():
    with pytest.raises(ValueError, match="unknown parameter.*fallbak.*this notebook takes"):
        check_params({"fallbak": 0.5}, allowed={"fallback", "rollback"})
    check_params({"fallback": 0.5, "rollback": float("inf")}, allowed={"fallback", "rollback"})


def test_run_study_checks_every_notebook_before_running_any(monkeypatch, tmp_path):
    import papermill

    monkeypatch.setattr(
        papermill, "execute_notebook", lambda *a, **k: pytest.fail("a notebook ran")
    )
    with pytest.raises(ValueError, match="fallback"):
        runner.run_study(
            overrides={"fallback": 3.0},
            notebooks=["rq1_small_writes_most"],
            out=tmp_path,
            progress=False,
        )
    with pytest.raises(ValueError, match="unknown notebook 'rq9'"):
        runner.run_study(notebooks=["rq9"], out=tmp_path, progress=False)
    with pytest.raises(ValueError, match="pairs: unknown pair 'toy-zz'"):
        runner.run_study(
            overrides={"pairs": ["toy-zz"]},
            notebooks=["rq5_main_table"],
            out=tmp_path,
            progress=False,
        )
    # the defaults'
    with pytest.raises(ValueError, match="limit gives no size for pair.s. toy-mt-llama, toy-sum"):
        runner.run_study(
            overrides={"limit": {"toy-mt": 3}},
            notebooks=["rq1_small_writes_most"],
            out=tmp_path,
            progress=False,
        )
    assert not list(tmp_path.iterdir())


def test_run_study_stores_toy_notebooks_in_place_without_clock_readings(monkeypatch, tmp_path):
    import nbformat
    import papermill

    # what papermill writes: the notebook plus its clock readings
    def fake_execute(src, dst, **kwargs):
        nb = nbformat.read(src, as_version=4)
        nb.metadata["papermill"] = {
            "start_time": "t0",
            "end_time": "t1",
            "duration": 1.5,
            "parameters": {},
            "input_path": "/home/someone/nb.ipynb",
            "output_path": "/tmp/x.ipynb",
        }
        nb.metadata["kernelspec"]["display_name"] = "Python 3"
        seen.append(kwargs["parameters"])
        for cell in nb.cells:
            cell.metadata["papermill"] = {
                "start_time": "t0",
                "duration": 0.1,
                "status": "completed",
            }
            cell.metadata["execution"] = {"iopub.execute_input": "t0"}
        nbformat.write(nb, dst)

    seen = []
    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    monkeypatch.setattr(runner, "NOTEBOOKS", tmp_path)
    monkeypatch.setattr(runner, "update_readme", lambda: None)
    source = nbformat.read(runner.ROOT / "notebooks" / "rq1_small_writes_most.ipynb", as_version=4)
    nbformat.write(source, tmp_path / "rq1_small_writes_most.ipynb")
    written = runner.run_study(progress=False)
    # toy with stored parameters: back in place
    assert written == [tmp_path / "rq1_small_writes_most.ipynb"]
    nb = nbformat.read(written[0], as_version=4)
    assert nb.metadata["papermill"] == {"parameters": {}}  # no clock readings, no machine paths
    assert nb.metadata["kernelspec"]["display_name"] == "Python 3 (ipykernel)"
    assert all("execution" not in c.metadata and not c.metadata.get("papermill") for c in nb.cells)
    # no temporary left behind
    assert [f.name for f in tmp_path.iterdir()] == ["rq1_small_writes_most.ipynb"]
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    assert runner.run_study(overrides={"limit": 2}, progress=False) == [
        tmp_path / "runs" / "toy" / "rq1_small_writes_most.ipynb"
    ]
    # other parameters: records and figures go to the run folder, never over the committed study
    assert seen[-1] == {
        "limit": 2,
        "registry": "../runs/toy/results",
        "figures": "../runs/toy/figures",
    }


def test_an_interrupted_run_keeps_its_notebook_hidden_and_out_of_the_study(monkeypatch, tmp_path):
    import nbformat
    import papermill

    # papermill wrote part of the notebook, then the run was stopped
    def interrupted(src, dst, **kwargs):
        nbformat.write(nbformat.read(src, as_version=4), dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(papermill, "execute_notebook", interrupted)
    monkeypatch.setattr(runner, "NOTEBOOKS", tmp_path)
    source = nbformat.read(runner.ROOT / "notebooks" / "rq1_small_writes_most.ipynb", as_version=4)
    nbformat.write(source, tmp_path / "rq1_small_writes_most.ipynb")
    before = (tmp_path / "rq1_small_writes_most.ipynb").read_bytes()
    with pytest.raises(KeyboardInterrupt):
        runner.run_study(progress=False)
    assert sorted(f.name for f in tmp_path.iterdir()) == [
        ".rq1_small_writes_most.failed.ipynb",
        "rq1_small_writes_most.ipynb",
    ]
    # the stored notebook is untouched
    assert (tmp_path / "rq1_small_writes_most.ipynb").read_bytes() == before
    (tmp_path / ".rq2_policies.running.ipynb").write_bytes(before)  # another run in progress
    assert runner.notebook_names() == ["rq1_small_writes_most"]


def test_every_notebook_has_one_parameters_cell_and_paper_params_are_valid(monkeypatch):
    import nbformat
    import papermill
    import torch

    # valid on a GPU box (this machine is checked apart)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)

    for name in runner.notebook_names():
        book = nbformat.read(runner.NOTEBOOKS / f"{name}.ipynb", as_version=4)
        tagged = [c for c in book.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, name
        assert book.cells[0].cell_type == "markdown" and book.cells[0].source.startswith("# ")
        allowed = set(papermill.inspect_notebook(str(runner.NOTEBOOKS / f"{name}.ipynb")))
        allowed |= set(runner.notebook_defaults(name))  # and the run-settings cell's
        check_params(runner.profile_params("paper", name), allowed)


def test_expected_speedup_formula():
    assert summary.expected_speedup(0.0, 4, 0.1) == pytest.approx(1 / 1.4)
    assert summary.expected_speedup(1.0, 4, 0.0) == 5
    assert summary.expected_speedup(0.999999, 3, 0.2) == pytest.approx(4 / 1.6, rel=1e-4)
    a, k, c = 0.8, 4, 0.05
    assert summary.expected_speedup(a, k, c) == pytest.approx((1 - a**5) / ((1 - a) * (k * c + 1)))
    assert summary.expected_tokens_per_call(0.8, 4) == pytest.approx(
        1 + 0.8 + 0.64 + 0.512 + 0.4096
    )


def test_acceptance_estimate_recovers_a_geometric_rate():
    import random

    rng, a, k, rows = random.Random(0), 0.7, 4, []
    for _ in range(4000):
        n = 0
        while n < k and rng.random() < a:
            n += 1
        rows.append({"stats": {"accepted": n, "rollbacks": int(n < k)}})
    assert summary.acceptance({"examples": rows}) == pytest.approx(a, abs=0.02)


def _fake_record(pair, entry, speed, delta, identical, n=20):
    """A record as the harness writes it, with made-up numbers (no model runs)."""
    e = {"method": "bild", "draft": "small", "fallback": 0.6, "rollback": 5.0, **entry}
    policy = {"fallback": e["fallback"], "rollback": e["rollback"], "max_small_steps": 10}
    s = {
        "metric": "rougeL" if pair == "toy-sum" else "bleu",
        "examples": n,
        "score": 30.0 + delta,
        "score_ci": [29.0 + delta, 31.0 + delta],
        "baseline_score": 30.0,
        "baseline_score_ci": [29.0, 31.0],
        "delta": delta,
        "delta_ci": [0.0, 0.0] if identical == n else [delta - 0.5, min(delta + 0.5, 0)],
        "identical": identical / n,
        "identical_count": identical,
        "speedup": speed,
        "speedup_ci": [speed - 0.05, speed + 0.05],
        "speedup_hf": speed,
        "speedup_hf_ci": [speed - 0.05, speed + 0.05],
        "truncated": 0,
        "baseline_truncated": 0,
        "small_share": 0.8,
        "mean_accepted": 3.0,
        "tokens": 100,
    }
    rows = [
        {
            "stats": {"accepted": 3, "rollbacks": 1, "small_seconds": 0.01, "small_calls": 4},
            "baseline_seconds": 0.1,
            "baseline_tokens": 5,
            "seconds": 0.1 / speed,
            "output": "",
        }
    ] * n
    return {
        "key": {
            "pair": pair,
            "task": "toy-mt",
            "split": "validation",
            "limit": n,
            "method": e["method"],
            "draft": e["draft"],
            "policy": policy,
        },
        "summary": s,
        "examples": rows,
    }


def test_answers_follow_the_intervals_and_say_none_when_no_policy_qualifies(monkeypatch, tmp_path):
    # every policy loses 5 points, except the early exit's first one (lossless)
    def sweep(pair, grid, **run):
        return [
            _fake_record(
                pair,
                g,
                1.5 + i / 10,
                0.0 if g.get("draft") == "early-exit" and i == len(grid) // 2 else -5.0,
                20 if g.get("draft") == "early-exit" and i == len(grid) // 2 else 3,
            )
            for i, g in enumerate(grid)
        ]

    monkeypatch.setattr(study.ev, "sweep", sweep)
    grid = dict(fallbacks=[0.5, 0.9], rollbacks=[1.0], figures=str(tmp_path))
    rq4 = study.rq4("toy-mt", **grid).account
    # chosen on validation (1.70x there), reported with its test numbers (the fake test sweep gives
    # 1.50x)
    assert rq4 == (
        "On toy-mt, the fastest within 1 BLEU point of vanilla on validation (N = 20), reported on test "
        "(N = 20): early exit 1.50x [1.45, 1.55] (fb 0.5, rb 1; lossless), separate small none: "
        f"{NONE}. Cost ratio c (draft step / large step): early exit 0.125, separate small 0.125; "
        "acceptance 0.75 vs 0.75."
    )
    # no policy qualifies: each answer says so in its own words (and writes no nan)
    assert study.rq2("toy-mt", **grid).account == (
        "On toy-mt, the fastest policy of each kind within 1 BLEU point of vanilla on validation (N = 20), reported on "
        "test (N = 0): fallback + rollback: none; fallback only: none; rollback only: none. Fallback + rollback vs "
        f"fallback only: {NONE}; vs rollback only: {NONE}. On validation, 1 of 5 policies are not dominated by "
        "another's paired differences (with both thresholds: 0)."
    )
    assert study.rq3("toy-mt", **grid).account == (
        "On toy-mt: agreement with the large model's greedy tokens (zoo card, held-out test): unaligned 83.7%, "
        "aligned 85.7%. The fastest within 1 BLEU point of vanilla on validation (N = 20), reported on test (N = 0): "
        f"aligned none, unaligned none: {NONE}. No policy keeps every output identical to vanilla's for both on "
        "validation."
    )
    assert study.rq5(("toy-mt",), **grid).account == (
        "Policies chosen on validation, reported on test (speedups of 2 "
        "independent timing passes). On toy-mt no BiLD policy qualifies "
        "on validation."
    )
    with pytest.raises(TypeError, match="pairs"):
        study.rq2(["toy-mt", 3], **grid)


# The answers to the fake sweep below, written out from its numbers: on toy-mt every policy is 1.5x
# with the interval [1.45, 1.55] and 20 of 20 outputs identical (lossless; paired speed differences
# 0); on toy-sum every policy loses 5 ROUGE-L points, beyond the 1-point tolerance, so none
# qualifies and nothing is timed on test (N = 0). Agreements: the shipped zoo card's (unaligned
# 83.7% / 69.9%, aligned 85.7% / 70.8%).
SAME = "no detectable difference in speed ({} +0.000x [+0.000, +0.000], paired, N = 20)"
NONE = "not comparable (a side has no qualifying policy)"
ANSWERS = {
    "rq2": (
        "On toy-mt, the fastest policy of each kind within 1 BLEU point of vanilla on validation (N = 20), "
        "reported on test (N = 20): fallback + rollback: 1.50x [1.45, 1.55] (fb 0.5, rb 3; lossless); fallback "
        "only: 1.50x [1.45, 1.55] (fb 0.5, rb inf; lossless); rollback only: 1.50x [1.45, 1.55] (fb 0, rb 3; "
        f"lossless). Fallback + rollback vs fallback only: {SAME.format('fallback + rollback - fallback only')}; "
        f"vs rollback only: {SAME.format('fallback + rollback - rollback only')}. On validation, 3 of 3 policies "
        "are not dominated by another's paired differences (with both thresholds: 1).",
        "On toy-sum, the fastest policy of each kind within 1 ROUGE-L point of vanilla on validation (N = 20), "
        "reported on test (N = 0): fallback + rollback: none; fallback only: none; rollback only: none. Fallback "
        f"+ rollback vs fallback only: {NONE}; vs rollback only: {NONE}. On validation, 3 of 3 policies are not "
        "dominated by another's paired differences (with both thresholds: 1).",
    ),
    "rq3": (
        "On toy-mt: agreement with the large model's greedy tokens (zoo card, held-out test): unaligned 83.7%, "
        "aligned 85.7%. The fastest within 1 BLEU point of vanilla on validation (N = 20), reported on test "
        "(N = 20): aligned 1.50x [1.45, 1.55] (fb 0.5, rb 3; lossless), unaligned 1.50x [1.45, 1.55] (fb 0.5, "
        f"rb 3; lossless): {SAME.format('the aligned - the unaligned')}. At the same policy, where both are "
        "lossless on validation (1 policy, N = 20), the aligned is detectably faster at none of them, the "
        "unaligned at none (paired speed differences, aligned − unaligned, from +0.000x to +0.000x).",
        "On toy-sum: agreement with the large model's greedy tokens (zoo card, held-out test): unaligned 69.9%, "
        "aligned 70.8%. The fastest within 1 ROUGE-L point of vanilla on validation (N = 20), reported on test "
        f"(N = 0): aligned none, unaligned none: {NONE}. No policy keeps every output identical to vanilla's for "
        "both on validation.",
    ),
    "rq4": (
        "On toy-mt, the fastest within 1 BLEU point of vanilla on validation (N = 20), reported on test (N = 20): "
        "early exit 1.50x [1.45, 1.55] (fb 0.5, rb 3; lossless), separate small 1.50x [1.45, 1.55] (fb 0.5, "
        f"rb 3; lossless): {SAME.format('the early exit - the small')}. Cost ratio c (draft step / large step): "
        "early exit 0.125, separate small 0.125; acceptance 0.75 vs 0.75.",
        "On toy-sum, the fastest within 1 ROUGE-L point of vanilla on validation (N = 20), reported on test "
        f"(N = 0): early exit none, separate small none: {NONE}. Cost ratio c (draft step / large step): early "
        "exit 0.125, separate small 0.125; acceptance 0.75 vs 0.75.",
    ),
}


@pytest.mark.parametrize("name", ["rq2", "rq3", "rq4"])
def test_rq2_to_rq4_answer_for_every_pair_with_its_metric(monkeypatch, tmp_path, name):
    def sweep(pair, grid, **run):  # toy-sum's policies all lose 5 points; toy-mt's are lossless
        return [
            _fake_record(
                pair, g, 1.5, -5.0 if pair == "toy-sum" else 0.0, 3 if pair == "toy-sum" else 20
            )
            for g in grid
        ]

    monkeypatch.setattr(study.ev, "sweep", sweep)
    result = getattr(study, name)(
        ["toy-mt", "toy-sum"], fallbacks=[0.5], rollbacks=[3.0], figures=str(tmp_path)
    )
    assert result.account == " ".join(ANSWERS[name])
    assert list(result.headline) == ["toy-mt", "toy-sum"]
    assert sorted(set(result.table["pair"])) == ["toy-mt", "toy-sum"]
    assert "ROUGE-L" in set(result.table.columns) and "BLEU" in set(result.table.columns)
    # one panel per pair
    assert [ax.get_ylabel() for ax in result.figure.axes] == ["BLEU", "ROUGE-L"]


def test_two_rows_are_compared_by_their_paired_difference_not_by_overlap():
    a = _fake_record("toy-mt", {}, 1.50, 0.0, 20)
    # its own interval [1.53, 1.63] overlaps a's [1.45, 1.55]
    b = _fake_record("toy-mt", {}, 1.58, 0.0, 20)
    assert versus_text(b, a) == (
        "the first is detectably faster (the first - the second +0.080x [+0.080, +0.080], paired, "
        "N = 20)"
    )
    assert versus_text(a, b, ("a", "b")).startswith("b is detectably faster (a - b -0.080x")
    assert versus_text(a, a).startswith("no detectable difference in speed")
    assert versus_text(a, None) == "not comparable (a side has no qualifying policy)"


def test_rq5_chooses_on_validation_and_reports_on_test_in_two_passes(monkeypatch, tmp_path):
    seen = []

    def sweep(pair, grid, **run):
        seen.append((run.get("split"), run.get("limit"), run.get("timing_pass", 1), len(grid)))
        # fb 0.9 is lossless and slow, fb 0.5 loses 0.6 [-1.1, -0.1] and is fast
        if run.get("split") == "validation":
            return [
                _fake_record(
                    pair,
                    g,
                    2.0 if g["fallback"] == 0.5 else 1.4,
                    -0.6 if g["fallback"] == 0.5 else 0.0,
                    5 if g["fallback"] == 0.5 else 20,
                )
                for g in grid
            ]
        return [_fake_record(pair, g, 1.9, -0.8, 6, n=300) for g in grid]

    monkeypatch.setattr(study.ev, "sweep", sweep)
    result = study.rq5(
        ("toy-mt",),
        fallbacks=[0.5, 0.9],
        rollbacks=[3.0],
        val_limit=40,
        limit=300,
        split="test",
        figures=str(tmp_path),
    )
    assert seen[0] == ("validation", 40, 1, 4)  # 2 thresholds x 2 drafts, on validation
    # the chosen policies on test, in two passes, each one sweep of every row and a record of its
    # own (timing_pass 1 is the other notebooks')
    assert seen[1:] == [("test", 300, 2, 4), ("test", 300, 3, 4)]
    head = result.headline["toy-mt"]
    assert head["unaligned lossless"]["policy"] == (3.0, 0.9) and head["unaligned degraded"][
        "policy"
    ] == (3.0, 0.5)
    # its interval reaches beyond the 0.2 tolerance
    assert head["unaligned"]["policy"] == (3.0, 0.9)
    assert (
        head["aligned degraded"]["examples"] == 300
        and len(head["aligned degraded"]["speedups"]) == 2
    )


def test_rq5_answers_for_every_pair(monkeypatch, tmp_path):
    def sweep(pair, grid, **run):  # on toy-mt fb 0.9 is lossless, on toy-sum no policy is
        lossless, n = pair == "toy-mt", study.ev.per_pair(run["limit"], pair, "limit")
        return [
            _fake_record(
                pair,
                g,
                1.4 if g["fallback"] == 0.9 else 2.0,
                0.0 if g["fallback"] == 0.9 else -0.6,
                n if lossless and g["fallback"] == 0.9 else 5,
                n=n,
            )
            for g in grid
        ]

    monkeypatch.setattr(study.ev, "sweep", sweep)
    result = study.rq5(
        ("toy-mt", "toy-sum"),
        fallbacks=[0.5, 0.9],
        rollbacks=[3.0],
        val_limit=20,
        limit={"toy-mt": 20, "toy-sum": 30},
        figures=str(tmp_path),
    )
    # each task's own N
    mt, summ = result.account.split("On toy-mt (N = 20): ")[1].split(" On toy-sum (N = 30): ")
    legend = [t.get_text() for t in result.figure.axes[0].get_legend().get_texts()]
    assert (
        "toy-mt, timing pass 1 (N = 20)" in legend and "toy-sum, timing pass 2 (N = 30)" in legend
    )
    # shown: the rows that chose one policy collapsed into one, named together; quality in one column
    shown = result.summary.frame
    assert len(shown.columns) <= 10 and "quality" in shown.columns
    assert "unaligned: lossless = no loss at (rb, fb) = (3.0, 0.9)" in set(shown["rows"])
    assert (
        shown["quality"].str.endswith("BLEU").sum()
        and shown["quality"].str.endswith("ROUGE-L").sum()
    )
    # rows of one small model that chose the same policy are named together, once
    assert (
        "unaligned lossless = unaligned no loss (rb, fb) = (3.0, 0.9): 1.40x [1.35, 1.45] and 1.40x"
        in mt
    )
    assert (
        mt.count("(3.0, 0.9)") == 2
        and "aligned lossless = aligned no loss (rb, fb) = (3.0, 0.9)" in mt
    )
    assert "lossless" not in summ and "degraded (rb, fb) = (3.0, 0.5)" in summ
    assert "-0.60 [-1.10, -0.10] ROUGE-L" in summ and "BLEU" in mt and "ROUGE-L" not in mt


def test_figures_are_deterministic_and_written_whole(tmp_path):
    def draw():
        pts = [
            {
                "speedup": 1.0,
                "speedup_ci": [0.9, 1.1],
                "score": 30.0,
                "score_ci": [29, 31],
                "label": "a",
            },
            {
                "speedup": 1.5,
                "speedup_ci": [1.4, 1.6],
                "score": 29.0,
                "score_ci": [28, 30],
                "label": "b",
            },
        ]
        return plots.speed_quality({"a": pts}, metric="BLEU", baseline=30.0, front=pts, title="t")

    first = plots.save(draw(), "fig", tmp_path)
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in first]
    second = plots.save(draw(), "fig", tmp_path)
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in second] == digests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.pdf", "fig.png"]
    assert b"CreationDate" not in (tmp_path / "fig.pdf").read_bytes()


def test_importing_the_package_leaves_matplotlibs_backend_alone():
    import subprocess
    import sys

    code = (
        "import matplotlib; before = matplotlib.get_backend(); import bildlab, bildlab.study.plots, bildlab.study; "
        "fig = bildlab.study.plots.bars(['a'], {'s': [1.0]}, ylabel='y'); print(before == matplotlib.get_backend())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "MPLBACKEND": "svg"},
    )
    assert out.stdout.strip() == "True"


@pytest.mark.slow
def test_plan_of_every_toy_notebook_runs_nothing(monkeypatch, tmp_path):
    from bildlab.harness import shard
    from bildlab.study import plan

    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("planning loaded a model"))
    # an empty registry: everything is to run
    rows = plan.plan("toy", overrides={"registry": str(tmp_path)})
    assert [r["notebook"] for r in rows] == runner.notebook_names()
    for r in rows:
        assert (
            r["decodes"] == sum(s["decodes"] for s in r["sweeps_detail"]) > 0
            and r["hours"]["cpu"] > 0
        )
    # a record that two notebooks share is counted once: 8 of RQ3's small-draft policies (rb 2, 3)
    # are RQ2's; RQ4's separate-small half of its validation grid and all of RQ5's BiLD grid are
    # RQ3's; RQ5's prompt-lookup grid (4 policies, 200 timed x 6 runners) is the speculative
    # notebook's on toy-mt and toy-sum, counted in RQ5 only
    val = {
        r["notebook"]: [s for s in r["sweeps_detail"] if s["split"] == "validation"] for r in rows
    }
    assert [(s["policies"], s["to_run"]) for s in val["rq3_alignment"]] == [(32, 24), (32, 24)]
    assert [(s["policies"], s["to_run"]) for s in val["rq4_early_exit"]] == [(32, 16), (32, 16)]
    assert [(s["policies"], s["to_run"], s["decodes"]) for s in val["rq5_main_table"]] == [
        (36, 4, 1200)
    ] * 2
    # ... and the section against a compiled baseline reads RQ5's choice on toy-mt (RQ5's validation
    # sweep)
    assert [(s["pair"], s["to_run"]) for s in val["speculative_pipeline"]] == [
        ("toy-mt-llama", 4),
        ("toy-mt", 0),
        ("toy-sum", 0),
        ("toy-mt", 0),
    ]
    text = plan.format_plan(rows, "toy")
    lines = text.splitlines()
    assert (
        "CPU hours" in text
        and "COST_RATIO" in lines[-1]
        and any(line.startswith("total") for line in lines)
    )
    devices = lines.index(
        "CPU h on 1, 4, 8 devices (Ray: a sweep's output chunks, then its timing shards, spread over "
        "the devices; threads cores a task):"
    )
    assert [line.split()[0] for line in lines[devices + 1 : -1]] == runner.notebook_names() + [
        "total"
    ]


@pytest.mark.parametrize(
    "params, words",
    [
        ({"executor": "spark"}, ["executor", "'local'"]),
        ({"shard_size": 0}, ["shard_size"]),
        ({"max_new_tokens": 0}, ["max_new_tokens", ">= 1"]),
        ({"val_limit": -1}, ["val_limit"]),
        ({"passes": 0}, ["passes"]),
        ({"rollback_rule": "last"}, ["rollback_rule", "first-above"]),
    ],
)
def test_new_parameters_are_checked(params, words):
    with pytest.raises(ValueError) as info:
        check_params(params)
    for w in words:
        assert w in str(info.value)


@pytest.mark.slow
def test_a_notebook_runs_cold_from_an_empty_registry(tmp_path, capfd, monkeypatch):
    """The computing path of a notebook (not only its replay): papermill, a real kernel, the shipped
    zoo, 2 examples; the kernel's own messages reach the terminal (captured here at the file
    descriptors), and it has none to give."""

    import nbformat

    # the kernel configurations the run used (each its own sockets: see the test below)
    kernels = []
    real = runner.kernel_config
    monkeypatch.setattr(runner, "kernel_config", lambda: kernels.append(1) or real())
    out = tmp_path / "runs"
    params = {
        "pairs": ["toy-mt"],
        "limit": 2,
        "fallbacks": [0.5],
        "registry": str(tmp_path / "registry"),
        "figures": str(tmp_path / "figures"),
    }
    (written,) = runner.run_study(
        notebooks=["rq1_small_writes_most"], overrides=params, out=out, progress=False
    )
    nb = nbformat.read(written, as_version=4)
    call = next(c for c in nb.cells if "result = study.rq1(" in c.source)
    answer = call.outputs[0]["data"]["text/markdown"]  # the answer first, as Markdown
    assert answer.startswith(("**Yes.**", "**No.**")) and "**toy-mt** (N = 2)" in answer
    assert nb.cells[-1].outputs[0]["text"].startswith("toy-mt: small model writes ")  # the pin
    records = Registry(tmp_path / "registry").records()
    assert sorted(r["key"]["method"] for r in records) == ["bild", "small"]
    assert all(r["summary"]["examples"] == 2 for r in records)
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == [
        "rq1_token_share.csv",  # the full table, linked from the notebook
        "rq1_token_share.pdf",
        "rq1_token_share.png",
    ]
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    # no bars
    assert not any(o.get("name") == "stderr" or runner.WIDGET in o.get("data", {}) for o in outputs)
    assert "widgets" not in nb.metadata  # tqdm's widget state, with random ids
    # e.g. ipykernel's "running over TCP without encryption"
    assert "WARNING" not in capfd.readouterr().err
    assert kernels == [1]


@pytest.mark.slow
def test_two_study_runs_at_once_each_talk_to_their_own_kernel(tmp_path):
    """Two processes that start a kernel at the same moment from the same working directory (two
    `bildlab study` runs side by side, as the cold run does): with jupyter_client's default ipc
    names both took the same sockets, and one failed with "Invalid Signature" or "Kernel didn't
    respond in 60 seconds"."""
    import subprocess

    import nbformat

    nbformat.write(
        nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell("import os; print(os.getpid())")]
        ),
        str(tmp_path / "pid.ipynb"),
    )
    run = (
        "import sys, papermill as pm; from bildlab.study import runner\n"
        "with runner.kernel_config() as config:\n"
        "    pm.execute_notebook('pid.ipynb', sys.argv[1], kernel_name='python3', progress_bar=False, config=config)"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", run, f"out{i}.ipynb"],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert not any("Invalid Signature" in e for e in errors), errors
    pids = {
        nbformat.read(str(tmp_path / f"out{i}.ipynb"), as_version=4).cells[0].outputs[0]["text"]
        for i in range(2)
    }
    assert len(pids) == 2  # two kernels, one per run
    # no sockets left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out0.ipynb", "out1.ipynb", "pid.ipynb"]


def test_speculative_table_leaves_uncounted_calls_blank(monkeypatch, tmp_path):
    """transformers' generate does not count its large-model calls: its summary has no composition
    (None, see test_protocol) and its rows show blank cells, not numbers."""

    def sweep(pair, grid, **run):
        records = [_fake_record(pair, g, 1.4, 0.0, 20) for g in grid]
        for r, g in zip(records, grid):
            r["key"]["policy"]["k"] = g.get("k")
            if g["method"] == "hf_assisted":
                r["summary"].update(small_share=None, mean_accepted=None)
        return records

    monkeypatch.setattr(study.ev, "sweep", sweep)
    result = study.speculative(
        "toy-mt-llama", ks=[2, 4], reference_pairs=None, figures=tmp_path, progress=False
    )
    table = result.table
    assisted = table[table["mode"] == "transformers assisted generation"]
    assert len(assisted) == 2 and (assisted["tokens / large call"] == "").all()  # a blank cell
    assert (assisted["large-model share"] == "").all()
    greedy = table[table["mode"] == "greedy vs greedy"]
    assert (greedy["tokens / large call"] == 3.0).all()


def test_paper_table_is_the_papers_numbers_in_rq5s_rows():
    table = study.paper_table()
    assert list(table.index) == list(study.ROWS) and list(table.columns) == list(study.PAPER_TABLE)
    assert table.loc["aligned", "xsum"] == "35.05 / 1.50x at (2, 0.6)"
    assert table.loc["unaligned lossless", "wmt14-de-en"] == "–"  # the paper has no lossless rows


def test_speculative_reference_pairs_set_lossless_speculative_decoding_beside_bild(
    monkeypatch, tmp_path
):
    """On each T5 reference pair: fixed-k speculative decoding (k = 4, every output identical) next
    to BiLD on the same examples, each with its N, and the answer compares them by their intervals.
    """

    def sweep(pair, grid, **run):
        records = []
        for g in grid:
            spec = g["method"] != "bild"
            r = _fake_record(
                pair, g, 1.4 if spec else 1.6, 0.0 if spec else -0.8, 20 if spec else 12
            )
            if spec:
                r["key"]["policy"]["k"] = g["k"]
            records.append(r)
        return records

    monkeypatch.setattr(study.ev, "sweep", sweep)
    result = study.speculative(
        "toy-mt-llama",
        ks=[2],
        reference_pairs=["toy-mt", "toy-sum"],
        figures=tmp_path,
        progress=False,
    )
    refs = result.table[result.table["pair"] != "toy-mt-llama"]
    assert list(zip(refs["pair"], refs["mode"])) == [
        ("toy-mt", "speculative (k=4)"),
        ("toy-mt", "bild (fb 0.5, rb 3)"),
        ("toy-sum", "speculative (k=4)"),
        ("toy-sum", "bild (fb 0.5, rb 3)"),
    ]
    assert (
        "On toy-sum (N = 20), fixed-k speculative decoding 1.40x [1.35, 1.45] (k=4; lossless), 20 of 20 outputs "
        "identical, against BiLD 1.60x [1.55, 1.65] (fb 0.5, rb 3; -0.80 [-1.30, -0.30] ROUGE-L): BiLD is "
        "detectably faster (speculative decoding - BiLD -0.200x [-0.200, -0.200], paired, N = 20)."
    ) in result.account
    # k=2 greedy, sampled and assisted, BiLD; two per reference pair
    assert len(result.records) == 4 + 4
    one = study.speculative(
        "toy-mt-llama", ks=[2], reference_pairs="toy-mt", figures=tmp_path, progress=False
    )
    assert set(one.table["pair"]) == {"toy-mt-llama", "toy-mt"} and "toy-sum" not in one.account


def test_the_readme_table_is_regenerated_from_the_committed_registry(tmp_path, monkeypatch):
    """RQ5 replayed from results/toy (nothing computed) writes the rows the README's table is made
    of."""
    from bildlab.harness import shard

    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("the replay computed"))
    params = runner.notebook_defaults("rq5_main_table")
    pairs = params.pop("pairs")
    params.update(
        registry=str(runner.ROOT / "results" / "toy"), figures=str(tmp_path), progress=False
    )
    study.rq5(pairs, **params)
    table = runner.results_table(tmp_path / "rq5_main_table.json")
    assert f"{runner.START}\n{table}\n{runner.END}" in (runner.ROOT / "README.md").read_text()
    assert (tmp_path / "rq5_main_table.json").read_text() == (
        runner.ROOT / "figures" / "rq5_main_table.json"
    ).read_text()


def test_the_readme_count_of_explained_speedups_is_regenerated_from_the_committed_registry(
    tmp_path,
):
    """RQ2's count of records within ±5% of their prediction, made again from results/toy, is the
    README's table."""
    study.explained(runner.ROOT / "results" / "toy", [], figures=tmp_path)
    made, committed = (
        json.loads(p.read_text())
        for p in (tmp_path / "rq2_costs.json", runner.ROOT / "figures" / "rq2_costs.json")
    )
    made.pop("chosen"), committed.pop("chosen")  # the count is of every record, whatever is chosen
    assert made == committed
    table = runner.explained_table(tmp_path / "rq2_costs.json")
    assert (
        f"{runner.EXPLAINED_START}\n{table}\n{runner.EXPLAINED_END}"
        in (runner.ROOT / "README.md").read_text()
    )
    # a group per pair, calibrated machine and where timed: toy-mt's records were priced by
    # calibrations of two CPU models, each group names its own
    groups = made["per_pair"]
    assert sum(n for _, n in groups.values()) == made["records"]
    toy_mt = [g for g in groups if g.startswith("toy-mt, ")]
    assert any(g.endswith("(AMD EPYC)") for g in toy_mt)
    assert any(g.endswith("(Intel(R) Xeon(R) Processor)") for g in toy_mt)


def test_the_explained_table_says_what_its_count_holds(tmp_path):
    data = {
        "records": 10,
        "within": 9,
        "tolerance": 0.05,
        "per_method": {"bild": [6, 6], "small": [3, 4]},
        "per_pair": {"toy-mt, in the calibration's run": [9, 10]},
        "ratio": {"median": 1.004, "min": 0.93, "max": 1.03},
    }
    (tmp_path / "rq2_costs.json").write_text(json.dumps(data))
    assert runner.explained_table(tmp_path / "rq2_costs.json") == (
        "| method | records | within ±5% of prediction | measured / predicted |\n"
        "|---|---|---|---|\n"
        "| bild | 6 | 6 (100%) | |\n"
        "| small | 4 | 3 (75%) | |\n"
        "| all | 10 | 9 (90%) | median 1.004 [0.930, 1.030] |"
    )
    # a registry without a priced record: no spread to state
    study.explained(tmp_path / "empty", [], figures=tmp_path)
    assert json.loads((tmp_path / "rq2_costs.json").read_text())["ratio"] is None
    assert runner.explained_table(tmp_path / "rq2_costs.json").endswith("| all | 0 | 0 (0%) | – |")


@pytest.mark.slow
def test_the_paper_plan_fits_in_60_gpu_hours(monkeypatch):
    """The paper profile's defaults (quality on whole validation splits, the protocol on timed
    samples) plan at most 60 T4-hours under the costs bildlab/study/plan.py states, timing and
    outputs apart; nothing loads."""
    from bildlab.harness import shard
    from bildlab.study import plan
    from bildlab.world.tasks import PAPER_TASKS

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("planning loaded a model"))
    rows = plan.plan("paper")
    # the hours recomputed here from each sweep's counts: a timed decode at batch 1 costs one
    # vanilla decode of its task (plan.SECONDS_PER_DECODE), a batched output 1 / BATCH_GAIN of one
    # per output unit (vanilla 1, the small model c, a draft-and-verify policy 1 + c); the counts
    # themselves checked against the sweep's sizes
    spd, gain = plan.SECONDS_PER_DECODE, plan.BATCH_GAIN
    gpu = {part: 0.0 for part in plan.PARTS}
    for r in rows:
        mine = {part: 0.0 for part in plan.PARTS}
        for s in r["sweeps_detail"]:
            # vanilla and transformers' generate; the speculative notebook's sampled rows also time
            # the sampling baseline (its prompt-lookup sweep has none)
            baselines = (2, 3) if r["notebook"] == "speculative_pipeline" else (2,)
            assert s["decodes"] in (
                {s["timed"] * (s["to_run"] + b) for b in baselines} if s["to_run"] else {0}
            ), s
            assert 0 < s["timed"] <= s["examples"], s
            n, c = s["examples"], plan.COST_RATIO[s["task"]]
            assert s["outputs"] in (0, n * s["to_run"], n * (s["to_run"] + 1)), s
            assert (
                s["outputs"] * min(c, 1.0) - 1e-6
                <= s["output_units"]
                <= s["outputs"] * (1 + c) + 1e-6
            ), s
            if s["task"] in PAPER_TASKS:
                mine["timing"] += s["decodes"] * spd[s["task"]] / 3600
                mine["outputs"] += s["output_units"] / gain[s["task"]] * spd[s["task"]] / 3600
        for part in plan.PARTS:
            assert r["parts"]["gpu"][part] == pytest.approx(mine[part], abs=0.006), (
                r["notebook"],
                part,
            )
            gpu[part] += mine[part]
    assert 0 < gpu["timing"] and 0 < gpu["outputs"] and sum(gpu.values()) <= 60, gpu
    assert sum(r["hours"]["gpu"] for r in rows) == pytest.approx(sum(gpu.values()), abs=0.05)
    rq5 = next(r for r in rows if r["notebook"] == "rq5_main_table")
    tests = [s for s in rq5["sweeps_detail"] if s["to_run"] and s["outputs"] == 0]
    # the second timing pass of a row: its outputs are the first pass's (computed once)
    assert tests
    text = plan.format_plan(rows, "paper")
    assert "GPU h timing" in text and "GPU h output" in text and "BATCH_GAIN" in text


def test_the_paper_plan_sizes_batches_by_memory_and_divides_by_devices(monkeypatch):
    """Each sweep of batched outputs states its peak at its batch size and the rows that fit a 16,
    24 and 80 GB GPU (counted here by an independent rule: weights plus 2 x layers x rows x heads x
    d_kv x (source + new) float32 cache entries, and no more rows than that leaves room for); the
    hours on 4 and 8 GPUs are about a quarter and an eighth of one GPU's, never less."""
    from bildlab.engine import memory
    from bildlab.harness import shard
    from bildlab.study import plan

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(shard, "load", lambda *a: pytest.fail("planning loaded a model"))
    (row,) = plan.plan("paper", ["rq1_small_writes_most"])
    xsum = next(s for s in row["sweeps_detail"] if s["pair"] == "xsum")
    assert (xsum["batch_size"], xsum["source"]) == (256, 1024)
    # T5-large's self- and cross-attention cache, per row
    cache = 2 * 24 * 16 * 64 * (1024 + 127) * 4
    # 54 GiB: the 256-row batches of the stored defaults cannot run on a T4
    assert xsum["peak"] >= 256 * cache
    # t5-large and t5-small's float32 parameters (their published counts)
    weights = 4 * (737_668_096 + 60_506_624)
    for gb, rows in xsum["fits"].items():
        room = gb * 1e9 * (1 - memory.MARGIN) - weights
        assert 0 < rows <= room / cache  # what the cache alone allows bounds what fits
        # and the rest of the estimate is not more than twice the cache
        assert rows >= room / cache / 3
    assert xsum["fits"][16] < 48 < xsum["fits"][80]
    gpu = row["devices"]["gpu"]
    assert gpu[1] == pytest.approx(row["hours"]["gpu"], abs=0.02)
    for d in (4, 8):
        assert gpu[1] / d - 0.02 <= gpu[d] <= gpu[1] / d * 1.15
    text = plan.format_plan([row], "paper")
    assert "GPU h on 1, 4, 8 devices" in text and "rows that fit a GPU of 16 GB" in text
    # a budget the user names
    (named,) = plan.plan("paper", ["rq1_small_writes_most"], {"memory": "6GiB"})
    xsum = next(s for s in named["sweeps_detail"] if s["pair"] == "xsum")
    assert 0 < xsum["fits"]["memory=6GiB"] <= 6 * 2**30 / cache
    assert f"with memory=6GiB: {xsum['fits']['memory=6GiB']} rows" in plan.format_plan(
        [named], "paper"
    )
