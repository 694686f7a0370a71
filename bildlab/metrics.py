"""Corpus metrics: BLEU (sacrebleu) and ROUGE-L (rouge-score's rougeLsum).

    >>> bleu(["the cat sat on the mat"], ["the cat sat on the mat"])
    100.0
    >>> score("rougeL", ["A cat. A dog."], ["A cat. A dog."])
    100.0

Both return a float on a 0-100 scale. One reference per hypothesis.
"""

METRICS = ("bleu", "rougeL")

# Sentence splitting for ROUGE-Lsum, offline: nltk's Punkt algorithm (what the paper-era scripts ran, through
# nltk.sent_tokenize) without its trained English model, which cannot be downloaded here; instead a fixed list of
# abbreviations and single-letter initials that never end a sentence ("U.S.", "Mr.", "p.m.", "J. K."). Newlines
# always end a sentence (CNN/DailyMail highlights are one per line).
ABBREVIATIONS = frozenset(
    "u.s u.k u.n e.u u.s.a mr mrs ms dr prof st jr sr gen gov sen rep col lt sgt capt rev inc corp co ltd vs etc "
    "e.g i.e a.m p.m jan feb mar apr jun jul aug sep sept oct nov dec mt ft".split()) | frozenset(
    "abcdefghijklmnopqrstuvwxyz")
_SPLITTER = None


def split_sentences(text):
    """Split ``text`` into sentences: at newlines, then by Punkt with ABBREVIATIONS (offline, deterministic)."""
    global _SPLITTER
    if _SPLITTER is None:
        from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

        params = PunktParameters()
        params.abbrev_types = set(ABBREVIATIONS)
        _SPLITTER = PunktSentenceTokenizer(params)
    return [s.strip() for line in text.split("\n") for s in _SPLITTER.tokenize(line) if s.strip()]


def bleu(hypotheses, references):
    """Corpus BLEU of sacrebleu with default settings (13a tokenizer, exp smoothing)."""
    import sacrebleu

    _check_pairs(hypotheses, references)
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


_ROUGE_SCORERS = {}  # stemmer -> scorer


def rouge_l(hypotheses, references, *, stemmer=True):
    """Mean rougeLsum F-measure x 100, with rouge-score's Porter stemmer or without (``stemmer=False``: the paper's
    summarization tasks, see ``tasks.metric_options``).

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
    total = 0.0
    for hyp, ref in zip(hypotheses, references):
        scores = scorer.score("\n".join(split_sentences(ref)), "\n".join(split_sentences(hyp)))
        total += scores["rougeLsum"].fmeasure
    return 100.0 * total / len(hypotheses)


def score(metric, hypotheses, references, **options):
    """Score with ``metric``: "bleu" or "rougeL" (``options``: rouge_l's ``stemmer``; ``tasks.metric_options``)."""
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
        raise ValueError(f"hypotheses and references must have the same length; "
                         f"got {len(hypotheses)} hypotheses and {len(references)} references")
    if not hypotheses:
        raise ValueError("hypotheses and references must not be empty")
