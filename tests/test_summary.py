"""Formatting of the study's numbers."""

from bildlab.measure.summary import fmt_gap


def test_the_gap_closed_is_a_percentage_or_says_there_is_none():
    assert fmt_gap(0.99, (0.97, 1.01)) == "99% [97, 101]"
    assert (
        fmt_gap(float("nan"), (1.0, 1.0))
        == "no gap to close (the small model alone scores as the large)"
    )


def test_rq1_says_there_is_no_gap_when_the_small_model_is_the_large(tmp_path, monkeypatch):
    # a zoo whose small model is the large one: both anchors score the same, the share of the gap is
    # undefined
    from conftest import tiny, tiny_tokenizer

    from bildlab.study import rq1
    from bildlab.world import models

    tiny_tokenizer(tmp_path / "zoo" / "tokenizer")
    large = tiny("t5", seed=1, layers=2)
    for name in ("t5-large", "t5-small"):
        large.save_pretrained(tmp_path / "zoo" / name)
    monkeypatch.setenv(models.ZOO_ENV, str(tmp_path / "zoo"))
    result = rq1(
        "toy-mt",
        fallbacks=[0.5],
        limit=3,
        max_new_tokens=4,
        warmup=0,
        registry=tmp_path / "reg",
        figures=tmp_path / "figures",
        progress=False,
    )
    none = "no gap to close (the small model alone scores as the large)"
    assert "nan" not in result.account and f"with {none}" in result.account
    assert list(result.table["gap closed"]) == ["100%", "0%", none]
