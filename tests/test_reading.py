"""What a reader of the study sees: the notebooks read top-down (the answer first, as Markdown),
shown tables fit a screen, figures have no overlapping text, and a replay on another machine draws
the same figure."""

import importlib
import json
import re
from pathlib import Path

import pytest

from bildlab.study import common, plots, runner

NOTEBOOKS = sorted(runner.NOTEBOOKS.glob("[!.]*.ipynb"))


def _cells(path):
    return json.loads(Path(path).read_text())["cells"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_answers_first_in_markdown_and_shows_compact_tables(path):
    cells = _cells(path)
    tags = [c["metadata"].get("tags", []) for c in cells]
    at = next(i for i, t in enumerate(tags) if "parameters" in t)
    # the run settings sit before the parameters, collapsed; the parameters cell is short
    settings = next(i for i, t in enumerate(tags) if runner.RUN_SETTINGS in t)
    assert settings < at and cells[settings]["metadata"]["jupyter"]["source_hidden"]
    assert len("".join(cells[at]["source"]).splitlines()) <= 20
    first = next(c for c in cells[at + 1 :] if c["cell_type"] == "code" and c["outputs"])
    assert "text/markdown" in first["outputs"][0]["data"], path.stem
    pngs = 0
    for c in cells:
        for o in c.get("outputs", []):
            assert not (o.get("output_type") == "stream" and o.get("name") == "stderr")
            data = o.get("data", {})
            text = "".join(o.get("text", "")) + "".join(
                "".join(v) for k, v in data.items() if k.startswith("text/")
            )
            assert not re.search(r"(/root|/work|/tmp|/home)/", text), path.stem
            pngs += "image/png" in data
            if "text/markdown" in data:  # an answer or a note, as the reader sees it
                shown = re.sub(r"\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", "".join(data["text/markdown"]))
                assert len(shown) <= 850, path.stem
            if o.get("output_type") == "stream":  # the pin: one short line per headline
                lines = "".join(o["text"]).splitlines()
                assert lines and max(len(line) for line in lines) <= 125, path.stem  # on one screen
            html = "".join(data.get("text/html", ""))
            if "<table" in html:
                head = html.split("</thead>")[0]
                assert head.count("<th>") <= common.MAX_COLUMNS, path.stem
                assert html.split("<tbody>")[1].count("<tr") <= common.MAX_ROWS, path.stem
                assert "<th>0</th>" not in html  # no index column
    assert pngs >= 1


def test_a_shown_table_is_refused_when_too_wide_or_too_long_and_keeps_intervals_on_a_line():
    with pytest.raises(ValueError, match="at most 10 columns"):
        common.Table([{f"c{i}": i for i in range(11)}])
    long = common.Table([{"a": i} for i in range(30)])
    assert len(long.frame) == 25 and "5 more rows" in long._repr_html_()
    html = common.Table(
        [{"speedup": "1.24x [1.21, 1.28]", "pair": "toy-mt", "policy": "prompt lookup, n=1, k=2"}]
    )._repr_html_()
    assert "1.24x\u00a0[1.21,\u00a01.28]" in html and "toy\u2011mt" in html
    assert "prompt lookup, n=1, k=2" in html  # a long text may wrap


def test_values_carry_the_digits_their_interval_supports():
    assert common.value(1.2442, [1.2144, 1.2761], "x") == "1.24x [1.21, 1.28]"
    assert common.value(96.16, [95.47, 96.81]) == "96.2 [95.5, 96.8]"
    assert common.value(-43.2, [-46.1, -40.0], signed=True) == "−43 [−46, −40]"
    assert common.value(1.0, [1.0, 1.0], "x") == "1.00x [1.00, 1.00]"  # no width: the default


def test_overlapping_text_is_found_and_a_figure_with_it_is_saved_with_a_warning(tmp_path):
    labels = [f"a rather long category label {i}" for i in range(6)]
    series = {"one": [1.1, 1.2, 1.3, 1.25, 1.15, 1.05]}
    crowded = plots.bars(labels, series, ylabel="speedup (x)")
    crowded.axes[0].tick_params(axis="x", labelrotation=0)
    assert plots.overlaps(crowded)
    with pytest.warns(plots.FigureTextWarning, match="figure crowded: overlapping text"):
        assert len(plots.save(crowded, "crowded", tmp_path)) == 2  # kept: a long run's figure
    with pytest.raises(plots.FigureTextWarning):  # in the tests, an error (pyproject.toml)
        plots.save(crowded, "crowded", tmp_path)
    clear = plots.dots(labels, series, xlabel="speedup (x)", reference=1.0, title="a title")
    assert plots.overlaps(clear) == []
    assert [p.name for p in plots.save(clear, "clear", tmp_path)] == ["clear.png", "clear.pdf"]
    lo, hi = clear.axes[0].get_xlim()
    assert 0.9 < lo < 1.0 and hi < 1.4  # the axis spans the values, not from 0


@pytest.mark.slow
def test_a_replay_on_another_machine_draws_the_committed_costs_figure(monkeypatch, tmp_path):
    """The costs figure marks where the registry says each record was timed, whatever machine
    replays it: this machine, named otherwise, draws the committed bytes (PNG and PDF)."""
    import platform

    from bildlab.harness import shard
    from bildlab.harness.registry import Registry, digest

    explained = importlib.import_module("bildlab.study.explained")

    monkeypatch.setattr(shard, "processor", lambda: "Another CPU (R) 9000")
    monkeypatch.setattr(platform, "node", lambda: "elsewhere")
    monkeypatch.setattr(platform, "processor", lambda: "Another CPU (R) 9000")
    committed = runner.ROOT / "figures"
    data = json.loads((committed / "rq2_costs.json").read_text())
    registry = runner.ROOT / "results" / "toy"
    by_digest = {digest(r["key"]): r for r in Registry(registry).records()}
    chosen = [by_digest[d] for d in data["chosen"]]
    result = explained.explained(registry, chosen, figures=tmp_path)
    assert "measured" in result.account  # the records timed where a calibration was made
    for name in ("rq2_costs.png", "rq2_costs.pdf", "rq2_costs.json"):
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name
