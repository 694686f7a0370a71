"""Corpus metrics: BLEU (sacrebleu) and ROUGE-L (rouge-score's rougeLsum).

    >>> bleu(["the cat sat on the mat"], ["the cat sat on the mat"])
    100.0
    >>> score("rougeL", ["A cat. A dog."], ["A cat. A dog."])
    100.0

Both return a float on a 0-100 scale. One reference per hypothesis.
"""

import re

METRICS = ("bleu", "rougeL")

# a sentence ends at . ! or ? (maybe followed by a closing quote or bracket) and then whitespace
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")


def split_sentences(text):
    """Split ``text`` into sentences at sentence-ending punctuation followed by whitespace.

    A small regex splitter (no nltk data needed): "Dr. Smith" is split too.
    """
    return [s for s in _SENTENCE_BREAK.split(text.strip()) if s]


def bleu(hypotheses, references):
    """Corpus BLEU of sacrebleu with default settings (13a tokenizer, exp smoothing)."""
    import sacrebleu

    _check_pairs(hypotheses, references)
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


_ROUGE_SCORER = None


def rouge_l(hypotheses, references):
    """Mean rougeLsum F-measure x 100, with the Porter stemmer (see `rouge_l_each`)."""
    scores = rouge_l_each(hypotheses, references)
    return sum(scores) / len(scores)


def rouge_l_each(hypotheses, references):
    """rougeLsum F-measure x 100 of every hypothesis, with the Porter stemmer.

    rougeLsum treats lines as sentences, so each text is first split into
    sentences with ``split_sentences`` and re-joined with newlines.
    """
    global _ROUGE_SCORER
    _check_pairs(hypotheses, references)
    if _ROUGE_SCORER is None:
        from rouge_score import rouge_scorer  # slow import (nltk), only when needed

        _ROUGE_SCORER = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)
    return [100.0 * _ROUGE_SCORER.score("\n".join(split_sentences(ref)), "\n".join(split_sentences(hyp)))["rougeLsum"]
            .fmeasure for hyp, ref in zip(hypotheses, references)]


def score(metric, hypotheses, references):
    """Score with ``metric``: "bleu" or "rougeL"."""
    if metric == "bleu":
        return bleu(hypotheses, references)
    if metric == "rougeL":
        return rouge_l(hypotheses, references)
    raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")


def _check_pairs(hypotheses, references):
    for name, texts in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
            raise TypeError(f"{name} must be a list of str; got {type(texts).__name__}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{name}[{i}] must be a str; got {type(text).__name__}")
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses and references must have the same length; "
                         f"got {len(hypotheses)} hypotheses and {len(references)} references")
    if not hypotheses:
        raise ValueError("hypotheses and references must not be empty")


# ---------------------------------------------------------------------------------------------------------------------
# Per-example data, from which the corpus score of any resample of examples is computed (bootstrap intervals)


def sentence_data(metric, hypotheses, references):
    """What the corpus score is made of, one row per example: sacrebleu's sufficient statistics for BLEU
    (sys_len, ref_len, correct[4], total[4]), the rougeLsum F-measure x 100 for ROUGE-L."""
    import numpy as np

    _check_pairs(hypotheses, references)
    if metric == "bleu":
        from sacrebleu.metrics import BLEU

        return np.asarray(BLEU()._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype=np.int64)
    if metric == "rougeL":
        return np.asarray(rouge_l_each(hypotheses, references), dtype=float)
    raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")


def corpus(metric, data, idx):
    """The corpus score of each resample: `idx` is an [r, n] array of example indices into `sentence_data` rows;
    BLEU sums the statistics and lets sacrebleu score them, ROUGE-L averages. Equals `score` on idx = arange(n)."""
    import numpy as np

    idx = np.atleast_2d(idx)
    if metric == "bleu":
        from sacrebleu.metrics import BLEU

        bleu = BLEU()
        return np.array([bleu._compute_score_from_stats(row.tolist()).score for row in np.asarray(data)[idx].sum(-2)])
    if metric == "rougeL":
        return np.asarray(data, dtype=float)[idx].mean(-1)
    raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
