import math

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from bildlab.measure.metrics import bleu, rouge_l, score, split_sentences


def test_bleu_identical_is_100_and_disjoint_is_0():
    refs = ["the cat sat on the mat .", "a dog ran in the park today ."]
    assert bleu(refs, refs) == pytest.approx(100.0)
    assert bleu(["zz yy xx ww vv", "qq pp oo nn mm ll"], refs) == pytest.approx(0.0, abs=1e-6)


def test_bleu_hand_computed():
    # precisions 5/6, 3/5, 2/4, 1/3; same lengths so no brevity penalty
    hyp, ref = ["the cat sat on the mat"], ["the cat sat on a mat"]
    expected = 100 * math.exp(
        (math.log(5 / 6) + math.log(3 / 5) + math.log(2 / 4) + math.log(1 / 3)) / 4
    )
    assert expected == pytest.approx(53.7285, abs=1e-3)
    assert bleu(hyp, ref) == pytest.approx(expected, abs=1e-4)
    assert bleu(hyp, ref) == pytest.approx(sacrebleu.corpus_bleu(hyp, [ref]).score)


def test_bleu_is_corpus_level_not_mean_of_sentences():
    hyps = ["the cat sat on the mat", "a b c d"]
    refs = ["the cat sat on a mat", "a b c d"]
    assert bleu(hyps, refs) == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert isinstance(bleu(hyps, refs), float)


def test_rouge_identical_and_disjoint():
    refs = ["Anna Berg won the vote. Turnout was low.", "A storm hit the town."]
    assert rouge_l(refs, refs) == pytest.approx(100.0)
    assert rouge_l(["zebra quartz", "yellow pumpkin"], refs) == pytest.approx(0.0)


def test_rouge_splits_sentences_for_rougelsum():
    ref = "the cat sat. the dog ran."
    hyp = "the dog ran. the cat sat."
    # on one line the LCS is 3 of 6 tokens (F = 0.5); split into sentences,
    # each reference sentence is matched in full by one hypothesis sentence
    unsplit = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True).score(ref, hyp)
    assert unsplit["rougeLsum"].fmeasure == pytest.approx(0.5)
    assert rouge_l([hyp], [ref]) == pytest.approx(100.0)


def test_rouge_averages_over_examples_and_stems():
    refs = ["the cat sat. the dog ran.", "storms hit the towns"]
    hyps = ["the dog ran. the cat sat.", "zebra quartz"]
    assert rouge_l(hyps, refs) == pytest.approx(50.0)
    assert rouge_l(["storm hitting town"], ["storms hit towns"]) == pytest.approx(100.0)


def test_split_sentences():
    assert split_sentences("One. Two! Three? Four") == ["One.", "Two!", "Three?", "Four"]
    assert split_sentences('He said "no." Then left.') == ['He said "no."', "Then left."]
    assert split_sentences("It cost 2.5 million. Done.") == ["It cost 2.5 million.", "Done."]
    assert split_sentences("  ") == []


def test_score_dispatch():
    hyps, refs = ["the cat sat on the mat"], ["the cat sat on a mat"]
    assert score("bleu", hyps, refs) == bleu(hyps, refs)
    assert score("rougeL", hyps, refs) == rouge_l(hyps, refs)


def test_score_unknown_metric():
    with pytest.raises(ValueError, match="bleu, rougeL.*'meteor'"):
        score("meteor", ["a"], ["a"])


@pytest.mark.parametrize("fn", [bleu, rouge_l])
def test_length_mismatch_names_both_lengths(fn):
    with pytest.raises(ValueError, match="3 hypotheses and 2 references"):
        fn(["a", "b", "c"], ["a", "b"])


@pytest.mark.parametrize("metric", ["bleu", "rougeL"])
def test_empty_lists(metric):
    with pytest.raises(ValueError, match="must not be empty"):
        score(metric, [], [])


def test_type_errors_name_the_parameter():
    with pytest.raises(TypeError, match="hypotheses must be a list of str; got str"):
        bleu("a cat", ["a cat"])
    with pytest.raises(TypeError, match=r"references\[1\] must be a str; got NoneType"):
        rouge_l(["a", "b"], ["a", None])


# ---------------------------------------------------------------------------------------------------------------------
# sentence splitting (offline Punkt with a fixed abbreviation list) and the paper's ROUGE settings


def test_split_sentences_keeps_abbreviations_and_initials():
    assert split_sentences("The U.S. Army said on Monday it would act. Officials agreed.") == [
        "The U.S. Army said on Monday it would act.",
        "Officials agreed.",
    ]
    assert split_sentences("Mr. Smith met Dr. Jones at 3 p.m. on Friday. They talked.") == [
        "Mr. Smith met Dr. Jones at 3 p.m. on Friday.",
        "They talked.",
    ]
    assert split_sentences("J. K. Rowling wrote it. The U.K. government disagreed.") == [
        "J. K. Rowling wrote it.",
        "The U.K. government disagreed.",
    ]
    # newlines always end a sentence (CNN/DailyMail highlights: one per line, often without a full
    # stop)
    assert split_sentences("Police say 3 were hurt\nThe road is closed .\n\n") == [
        "Police say 3 were hurt",
        "The road is closed .",
    ]


def test_split_sentences_equals_the_old_regex_on_the_toy_task(tmp_path, monkeypatch):
    # the toy metric is unchanged: on every toy-sum validation text the new splitter cuts where the
    # regex of bildlab <= 0.1 cut (sentence-final punctuation, maybe a closing quote, then
    # whitespace)
    import re

    from bildlab.world.tasks import load_task

    old = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")
    monkeypatch.setenv("BILDLAB_CACHE", str(tmp_path))
    texts = [t for e in load_task("toy-sum", "validation") for t in (e["source"], e["target"])]
    assert len(texts) == 2000
    assert all(split_sentences(t) == [s for s in old.split(t.strip()) if s] for t in texts)


def test_rouge_stemmer_option():
    hyp, ref = ["storm hitting town"], ["storms hit towns"]
    assert rouge_l(hyp, ref) == pytest.approx(100.0)  # Porter stemmer (toy task)
    assert rouge_l(hyp, ref, stemmer=False) == pytest.approx(0.0)  # no stemmer (the paper's tasks)
    assert score("rougeL", hyp, ref, stemmer=False) == pytest.approx(0.0)
    with pytest.raises(TypeError, match="stemmer must be True or False"):
        rouge_l(hyp, ref, stemmer="no")
    with pytest.raises(ValueError, match="rougeL takes the option stemmer only; got use_stemmer"):
        score("rougeL", hyp, ref, use_stemmer=False)
    with pytest.raises(ValueError, match="bleu takes no options; got stemmer"):
        score("bleu", hyp, ref, stemmer=False)


def test_metric_options_per_task():
    from bildlab.world.tasks import metric_options

    assert [
        metric_options(t)
        for t in ("toy-mt", "toy-sum", "iwslt2017-de-en", "wmt14-de-en", "xsum", "cnn_dailymail")
    ] == [{}, {}, {}, {}, {"stemmer": False}, {"stemmer": False}]


@pytest.mark.parametrize("metric", ["bleu", "rougeL"])
def test_each_example_is_scored_once_and_as_if_alone(metric, monkeypatch):
    """Per-example rows are a function of (hypothesis, reference): scored once per process
    (`metrics._once`), they equal the rows scored from an empty cache, one call per example, and
    a list of pairs already seen scores nothing again."""
    from bildlab.measure import metrics

    refs = [f"the cat number {i} sat on the mat. it was happy." for i in range(6)]
    hyps = [r if i % 2 else r.replace("cat", "dog") for i, r in enumerate(refs)]
    monkeypatch.setattr(metrics, "_ONCE", {})
    together = metrics.sentence_data(metric, hyps + hyps[:2], refs + refs[:2])
    alone = []
    for h, r in zip(hyps, refs):
        monkeypatch.setattr(metrics, "_ONCE", {})
        alone.append(metrics.sentence_data(metric, [h], [r])[0])
    assert together.tolist() == [*(a.tolist() for a in alone), *(a.tolist() for a in alone[:2])]
    scored = []
    real = metrics._once

    def counted(how, hypotheses, references, compute):
        def spy(h, r):
            scored.extend(h)
            return compute(h, r)

        return real(how, hypotheses, references, spy)

    monkeypatch.setattr(metrics, "_once", counted)
    monkeypatch.setattr(metrics, "_ONCE", {})
    metrics.sentence_data(metric, hyps + hyps, refs + refs)
    assert scored == hyps  # from an empty cache: each distinct pair once
    scored.clear()
    metrics.sentence_data(metric, hyps[::-1], refs[::-1])
    assert scored == []


def test_the_cache_of_scored_examples_is_bounded(monkeypatch):
    from bildlab.measure import metrics

    monkeypatch.setattr(metrics, "_ONCE", {})
    monkeypatch.setattr(metrics, "ONCE_MAX", 3)
    refs = [f"a b c {i}" for i in range(5)]
    first = metrics.sentence_data("bleu", refs[:2], refs[:2])
    assert len(metrics._ONCE) == 2
    both = metrics.sentence_data("bleu", refs, refs)  # 3 new: over the bound, the cache restarts
    assert len(metrics._ONCE) == 3 and both[:2].tolist() == first.tolist()
