"""Corpus metrics: BLEU (sacrebleu) and ROUGE-L (rouge-score's rougeLsum).

    >>> bleu(["the cat sat on the mat"], ["the cat sat on the mat"])
    100.0
    >>> score("rougeL", ["A cat. A dog."], ["A cat. A dog."])
    100.0

Both return a float on a 0-100 scale. One reference per hypothesis.
"""

METRICS = ("bleu", "rougeL")

# Sentence splitting for ROUGE-Lsum, offline: nltk's Punkt algorithm (what the paper-era scripts
# ran, through nltk.sent_tokenize) without its trained English model, which cannot be downloaded
# here; instead a fixed list of abbreviations and single-letter initials that never end a sentence
# ("U.S.", "Mr.", "p.m.", "J. K."). Newlines always end a sentence (CNN/DailyMail highlights are one
# per line).
ABBREVIATIONS = frozenset(
    "u.s u.k u.n e.u u.s.a mr mrs ms dr prof st jr sr gen gov sen rep col lt sgt capt rev inc corp co ltd vs etc "
    "e.g i.e a.m p.m jan feb mar apr jun jul aug sep sept oct nov dec mt ft".split()
) | frozenset("abcdefghijklmnopqrstuvwxyz")
_SPLITTER = None


def split_sentences(text):
    """Split ``text`` into sentences: at newlines, then by Punkt with ABBREVIATIONS (offline,
    deterministic)."""
    global _SPLITTER
    if _SPLITTER is None:
        from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

        params = PunktParameters()
        params.abbrev_types = set(ABBREVIATIONS)
        _SPLITTER = PunktSentenceTokenizer(params)
    return [s.strip() for line in text.split("\n") for s in _SPLITTER.tokenize(line) if s.strip()]


METRIC_NAMES = {"bleu": "BLEU", "rougeL": "ROUGE-L"}  # as the field writes them


def bleu(hypotheses, references):
    """Corpus BLEU of sacrebleu with default settings (13a tokenizer, exp smoothing)."""
    import sacrebleu

    _check_pairs(hypotheses, references)
    # force=True: no 'tokenized period' warning (the toy tasks write ' .'); the score is the same
    # either way
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)], force=True).score)


_ROUGE_SCORERS = {}  # stemmer -> scorer


def rouge_l(hypotheses, references, *, stemmer=True):
    """Mean rougeLsum F-measure x 100 (see `rouge_l_each`)."""
    scores = rouge_l_each(hypotheses, references, stemmer=stemmer)
    return sum(scores) / len(scores)


def rouge_l_each(hypotheses, references, *, stemmer=True):
    """rougeLsum F-measure x 100 of every hypothesis, with rouge-score's Porter stemmer or without
    (``stemmer=False``: the paper's summarization tasks, see ``tasks.metric_options``).

    rougeLsum treats lines as sentences, so each text is first split into
    sentences with ``split_sentences`` and re-joined with newlines.
    """
    if not isinstance(stemmer, bool):
        raise TypeError(f"stemmer must be True or False; got {stemmer!r}")
    _check_pairs(hypotheses, references)
    if stemmer not in _ROUGE_SCORERS:
        from rouge_score import rouge_scorer  # slow import (nltk), only when needed

        _ROUGE_SCORERS[stemmer] = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=stemmer)
    scorer = _ROUGE_SCORERS[stemmer]

    def each(hyps, refs):
        return [
            100.0
            * scorer.score("\n".join(split_sentences(ref)), "\n".join(split_sentences(hyp)))[
                "rougeLsum"
            ].fmeasure
            for hyp, ref in zip(hyps, refs)
        ]

    return _once(("rougeL", stemmer), hypotheses, references, each)


# an example's score or statistics by (metric and options, hypothesis, reference): a function of
# the two texts, so each distinct pair is scored once per process (a replay scores the same outputs
# for many policies and resamples: rouge-score's stemmer took 100 of RQ2's 170 seconds); cleared
# when full
_ONCE: dict = {}
ONCE_MAX = 1_000_000


def _once(how, hypotheses, references, compute) -> list:
    """`compute(hypotheses, references)`'s per-example rows, each distinct (hypothesis,
    reference) computed once under `how` (the metric and its options)."""
    keys = [(how, h, r) for h, r in zip(hypotheses, references)]
    rows = {k: _ONCE[k] for k in keys if k in _ONCE}
    todo = [k for k in dict.fromkeys(keys) if k not in rows]
    if todo:
        rows.update(zip(todo, compute([k[1] for k in todo], [k[2] for k in todo])))
        if len(_ONCE) + len(todo) > ONCE_MAX:
            _ONCE.clear()
        _ONCE.update((k, rows[k]) for k in todo)
    return [rows[k] for k in keys]


def score(metric, hypotheses, references, **options):
    """Score with ``metric``: "bleu" or "rougeL" (``options``: rouge_l's ``stemmer``;
    ``tasks.metric_options``)."""
    if metric == "bleu":
        if options:
            raise ValueError(f"bleu takes no options; got {', '.join(sorted(options))}")
        return bleu(hypotheses, references)
    if metric == "rougeL":
        unknown = sorted(set(options) - {"stemmer"})
        if unknown:
            raise ValueError(f"rougeL takes the option stemmer only; got {', '.join(unknown)}")
        return rouge_l(hypotheses, references, **options)
    raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")


def _check_pairs(hypotheses, references):
    for name, texts in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
            raise TypeError(f"{name} must be a list of str; got {type(texts).__name__}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{name}[{i}] must be a str; got {type(text).__name__}")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have the same length; "
            f"got {len(hypotheses)} hypotheses and {len(references)} references"
        )
    if not hypotheses:
        raise ValueError("hypotheses and references must not be empty")


# ---------------------------------------------------------------------------------------------------------------------
# Per-example data, from which the corpus score of any resample of examples is computed (bootstrap
# intervals)


def sentence_data(metric, hypotheses, references, **options):
    """What the corpus score is made of, one row per example: sacrebleu's sufficient statistics for
    BLEU (sys_len, ref_len, correct[4], total[4]), the rougeLsum F-measure x 100 for ROUGE-L."""
    import numpy as np

    _check_pairs(hypotheses, references)
    if metric == "bleu":
        from sacrebleu.metrics import BLEU

        def each(hyps, refs):
            return [tuple(x) for x in BLEU(force=True)._extract_corpus_statistics(hyps, [refs])]

        return np.asarray(_once(("bleu",), hypotheses, references, each), dtype=np.int64)
    if metric == "rougeL":
        return np.asarray(rouge_l_each(hypotheses, references, **options), dtype=float)
    raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")


def corpus(metric, data, idx):
    """The corpus score of each resample: `idx` is an [r, n] array of example indices into
    `sentence_data` rows; BLEU sums the statistics and lets sacrebleu score them, ROUGE-L averages.
    Equals `score` on idx = arange(n)."""
    import numpy as np

    idx = np.atleast_2d(idx)
    if metric == "bleu":
        from sacrebleu.metrics import BLEU

        bleu = BLEU(force=True)
        return np.array(
            [
                bleu._compute_score_from_stats(row.tolist()).score
                for row in np.asarray(data)[idx].sum(-2)
            ]
        )
    if metric == "rougeL":
        return np.asarray(data, dtype=float)[idx].mean(-1)
    raise ValueError(f"metric must be one of {', '.join(METRICS)}; got {metric!r}")
