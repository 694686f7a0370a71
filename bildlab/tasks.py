"""Tasks: data sets as lists of {"source": str, "target": str} pairs.

Two synthetic tasks are generated on demand from fixed seeds, with no network:

- ``toy-mt``: translation from an invented source language into an invented
  target language (metric: BLEU);
- ``toy-sum``: summarization of invented news stories (metric: ROUGE-L).

Four paper tasks (IWSLT 2017 de-en, WMT14 de-en, XSum, CNN/DailyMail) are
thin wrappers around Hugging Face ``datasets``; they need the network, or a
local stand-in file passed as ``data_files``.

    >>> pairs = load_task("toy-mt", "validation", limit=2)
    >>> sorted(pairs[0])
    ['source', 'target']

Toy splits are cached as JSONL files under ``$BILDLAB_CACHE/tasks`` (default
``~/.cache/bildlab/tasks``). Every split is a pure function of (task, split,
VERSION): bump VERSION whenever the generators change.
"""

import bisect
import json
import os
import random
import string
import zlib

from .atomic import atomic_path

VERSION = 3
SPLITS = ("train", "validation", "test")
TOY_TASKS = ("toy-mt", "toy-sum")
PAPER_TASKS = ("iwslt2017-de-en", "wmt14-de-en", "xsum", "cnn_dailymail")
ALL_TASKS = TOY_TASKS + PAPER_TASKS

MT_SIZES = {"train": 60000, "validation": 1000, "test": 1000}
SUM_SIZES = {"train": 40000, "validation": 1000, "test": 1000}
TOY_SIZES = {"toy-mt": MT_SIZES, "toy-sum": SUM_SIZES}

# integer seeds: one for each lexicon, one for each (task, split)
MT_LEXICON_SEED = 1234
SUM_LEXICON_SEED = 4321
SPLIT_SEEDS = {
    "toy-mt": {"train": 1101, "validation": 1102, "test": 1103},
    "toy-sum": {"train": 2101, "validation": 2102, "test": 2103},
}

# Splits never share a source: every source falls into one of 10 buckets by a
# stable checksum (crc32, not Python's salted hash()) and each split keeps only
# the sources of its own buckets.
SPLIT_BUCKETS = {"train": range(2, 10), "validation": (0,), "test": (1,)}

_METRICS = {"toy-mt": "bleu", "toy-sum": "rougeL", "iwslt2017-de-en": "bleu",
            "wmt14-de-en": "bleu", "xsum": "rougeL", "cnn_dailymail": "rougeL"}


def task_metric(name):
    """Return the metric of task ``name``: "bleu" or "rougeL"."""
    _check_name(name)
    return _METRICS[name]


def load_task(name, split, limit=None, data_files=None):
    """Return the examples of task ``name`` / ``split`` as a list of dicts.

    Each dict is {"source": str, "target": str}. ``split`` is one of "train",
    "validation", "test"; ``limit`` (a positive int, or None for all) keeps the
    first ``limit`` examples. Toy tasks are generated once and then read from
    the cache. ``data_files`` is for paper tasks only: a local .jsonl, .json or
    .csv file in the task's raw column layout, loaded instead of the hub data
    set (the file is the whole split).
    """
    _check_name(name)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit must be a positive int or None; got {type(limit).__name__}")
        if limit < 1:
            raise ValueError(f"limit must be a positive int or None; got {limit}")
    if name in PAPER_TASKS:
        return _load_paper_task(name, split, limit, data_files)
    if data_files is not None:
        raise ValueError(f"data_files is only for the paper tasks ({', '.join(PAPER_TASKS)}); "
                         f"{name!r} is generated")
    examples = _cached_toy_split(name, split)
    return examples if limit is None else examples[:limit]


def _check_name(name):
    if name not in ALL_TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(ALL_TASKS)}")


# ---------------------------------------------------------------------------
# cache


def cache_root():
    """bildlab's cache folder: $BILDLAB_CACHE, or ~/.cache/bildlab."""
    return os.environ.get("BILDLAB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "bildlab")


def cache_dir():
    """The folder holding cached toy splits: $BILDLAB_CACHE/tasks or ~/.cache/bildlab/tasks."""
    return os.path.join(cache_root(), "tasks")


def cache_path(name, split):
    """The JSONL cache file of a toy split."""
    return os.path.join(cache_dir(), f"{name}-{split}-v{VERSION}.jsonl")


def _cached_toy_split(name, split):
    path = cache_path(name, split)
    examples = _read_jsonl(path, TOY_SIZES[name][split])
    if examples is None:  # missing or corrupt: (re)generate
        examples = generate_toy_split(name, split)
        _write_jsonl_atomic(path, examples)
    return examples


def _read_jsonl(path, expected_len):
    """Examples from a cache file, or None if it is missing, corrupt or incomplete."""
    try:
        with open(path, encoding="utf-8") as f:
            examples = [json.loads(line) for line in f]
    except (OSError, ValueError):  # ValueError covers bad JSON and bad UTF-8
        return None
    ok = len(examples) == expected_len and all(
        isinstance(e, dict) and set(e) == {"source", "target"}
        and isinstance(e["source"], str) and isinstance(e["target"], str) for e in examples)
    return examples if ok else None


def _write_jsonl_atomic(path, examples):
    """Write examples as JSONL, whole or not at all."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for e in examples:
                f.write(json.dumps(e, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------
# toy split generation (shared)


def generate_toy_split(name, split):
    """Generate a toy split from scratch (no cache): deterministic for (name, split)."""
    if name not in TOY_TASKS:
        raise ValueError(f"name must be one of {', '.join(TOY_TASKS)}; got {name!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    rng = random.Random(SPLIT_SEEDS[name][split])
    make = _MTGenerator(mt_lexicon(), rng) if name == "toy-mt" else _SumGenerator(sum_lexicon(), rng)
    buckets = SPLIT_BUCKETS[split]
    size = TOY_SIZES[name][split]
    examples, seen = [], set()
    while len(examples) < size:
        source, target = make.example()
        if source in seen or split_bucket(source) not in buckets:
            continue
        seen.add(source)
        examples.append({"source": source, "target": target})
    return examples


def split_bucket(source):
    """The bucket (0-9) that decides which split may hold ``source``."""
    return zlib.crc32(source.encode("utf-8")) % 10


def _zipf_table(items, exponent=1.0):
    """(items, cumulative weights) for Zipf-distributed sampling by list position."""
    cum, total = [], 0.0
    for rank in range(len(items)):
        total += 1.0 / (rank + 1) ** exponent
        cum.append(total)
    return list(items), cum


def _pick(rng, table):
    items, cum = table
    return items[min(bisect.bisect_right(cum, rng.random() * cum[-1]), len(items) - 1)]


# ---------------------------------------------------------------------------
# toy-mt: an invented language pair
#
# Source language ("src"):
#   - nouns have a gender (m/f/n) and a number (sg/pl) suffix; determiners and
#     adjectives agree with the noun in gender and number;
#   - noun phrase: determiner noun adjective* (adjectives follow the noun);
#   - verbs carry person/number/tense endings (present, past, future);
#     1st/2nd person subject pronouns may be dropped (pro-drop);
#   - main clauses are SVO with the adverb before the verb and the negation
#     "ne" after it; subordinate clauses are verb-final; a main clause that
#     follows a fronted subordinate clause puts the verb first (V2);
#   - postpositions ("the house in"), some with class-dependent meaning.
# Target language ("tgt"):
#   - no gender; nouns and adjectives inflect for number only; the verb has a
#     3rd-person-singular present form, a past form and "wil" + base future;
#   - noun phrase: determiner adjective* noun (adjectives mirrored);
#   - SVO everywhere: subject [wil] [nie] verb object pp adverb;
#   - prepositions, subject pronouns always present.
# Multi-word expressions: verb + bare noun idioms -> one target verb; noun +
#   bare noun compounds -> one target noun; bare noun + postposition adverbial
#   idioms -> a one- or two-word target phrase. Context: polysemous verbs are
#   translated by the semantic class of their object, some postpositions by the
#   class of their noun.

NOUN_CLASSES = ("person", "animal", "food", "drink", "tool", "vehicle", "place",
                "building", "document", "event", "plant", "clothing", "idea")
# about 330 lemmas and 70 multi-word expressions, some 2,900 word forms in the two languages together: small enough
# for a T5 trained from scratch on 2 CPU cores to learn most of it within the zoo's hour, big enough that the small
# model keeps making mistakes
N_NOUNS, N_ADJS, N_ADVS = 200, 50, 20
N_INTRANSITIVE, N_CLAUSAL, N_TRANSITIVE, N_POLYSEMOUS = 14, 5, 34, 7
N_VERB_IDIOMS, N_COMPOUNDS, N_ADV_IDIOMS, N_LIGHT_VERBS = 34, 27, 9, 5

_SRC_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
               "br", "kr", "tr", "pl", "st")
_SRC_VOWELS = ("a", "e", "i", "o", "u")
_SRC_CODAS = ("n", "r", "s", "l", "t", "k", "m", "nd", "rt")
_TGT_ONSETS = ("b", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
               "sk", "st", "fr", "gr", "bl", "dr", "sn", "th")
_TGT_VOWELS = ("a", "e", "i", "o", "u", "y", "ei", "au", "aa", "oe")
_TGT_CODAS = ("", "", "", "n", "k", "t", "ld", "rn", "st", "ng", "rk", "ff", "l", "m", "s")
_VOWEL_END = tuple("aeiouy")

# gender/number suffix of source nouns, adjectives and determiners
SRC_SUFFIX = {("m", "sg"): "o", ("m", "pl"): "i", ("f", "sg"): "a",
              ("f", "pl"): "e", ("n", "sg"): "um", ("n", "pl"): "ar"}
# source verb endings for 1sg 2sg 3sg 1pl 2pl 3pl
SRC_VERB_ENDINGS = {"present": ("em", "es", "et", "emu", "eti", "ent"),
                    "past": ("im", "is", "it", "imu", "iti", "int"),
                    "future": ("or", "ors", "ort", "oru", "orti", "orn")}
PERSONS = ((1, "sg"), (2, "sg"), (3, "sg"), (1, "pl"), (2, "pl"), (3, "pl"))
# (person, number, gender) -> (source pronoun, target pronoun)
PRONOUNS = {(1, "sg", None): ("mi", "ik"), (2, "sg", None): ("tu", "du"),
            (3, "sg", "m"): ("el", "han"), (3, "sg", "f"): ("ela", "hun"),
            (3, "sg", "n"): ("elu", "hit"), (1, "pl", None): ("nos", "wie"),
            (2, "pl", None): ("vos", "jie"), (3, "pl", None): ("elos", "thei")}
_PRONOUN_WEIGHTS = (20, 10, 15, 15, 5, 12, 8, 15)
# possessor -> (source stem, agreeing with the noun; target word)
POSSESSIVES = {(1, "sg"): ("mev", "mien"), (2, "sg"): ("tev", "dien"), (1, "pl"): ("nostr", "ure"),
               (2, "pl"): ("vostr", "jure"), (3, "pl"): ("lor", "hure")}
NUMERALS = (("dua", "twei"), ("trin", "thrie"), ("kwat", "fjoa"), ("pens", "fimm"),
            ("seks", "sekst"), ("septa", "sjau"), ("okta", "otta"), ("nona", "nijo"))
# source determiner stems (+ SRC_SUFFIX) and target determiners (sg, pl)
SRC_DETS = {"def": "l", "indef_sg": "un", "indef_pl": "alk", "dem": "kest"}
TGT_DETS = {"def": ("tha", "tha"), "indef": ("ein", "summe"), "dem": ("thes", "thise")}
COORDINATORS = (("e", "ok"), ("ma", "men"))
SUBORDINATORS = (("kwan", "whan"), ("perke", "bekas"), ("bensi", "thoch"), ("se", "ef"),
                 ("primke", "forr"), ("dopke", "efter"), ("mentre", "medan"))
COMPLEMENTIZER = ("ke", "dat")
NEGATION = ("ne", "nie")
FUTURE_AUX = "wil"
# source postposition -> target preposition by the class of its noun (None: any other)
POSTPOSITIONS = (("ka", {"place": "inne", "building": "inne", "event": "unner", None: "hos"}),
                 ("po", {None: "uppa"}),
                 ("dun", {None: "uten"}),
                 ("vel", {"person": "med", "animal": "med", None: "nest"}),
                 ("tor", {None: "bakk"}),
                 ("ul", {"place": "fran", "building": "fran", None: "af"}),
                 ("zu", {None: "mot"}))
_PP_CLASSES = ("place", "place", "building", "building", "event", "person", "animal",
               "vehicle", "tool", "plant")


def _mt_function_words():
    src = {p[0] for p in PRONOUNS.values()} | {n[0] for n in NUMERALS}
    src |= {s + x for s in list(SRC_DETS.values()) + [p[0] for p in POSSESSIVES.values()]
            for x in SRC_SUFFIX.values()}
    src |= {w[0] for w in COORDINATORS + SUBORDINATORS} | {COMPLEMENTIZER[0], NEGATION[0]}
    src |= {p[0] for p in POSTPOSITIONS} | {","}
    tgt = {p[1] for p in PRONOUNS.values()} | {n[1] for n in NUMERALS}
    tgt |= {w for pair in TGT_DETS.values() for w in pair} | {p[1] for p in POSSESSIVES.values()}
    tgt |= {w[1] for w in COORDINATORS + SUBORDINATORS} | {COMPLEMENTIZER[1], NEGATION[1], FUTURE_AUX}
    tgt |= {w for p in POSTPOSITIONS for w in p[1].values()} | {","}
    return src, tgt


def _tgt_noun(w):
    return (w, w + ("n" if w.endswith(_VOWEL_END) else "en"))


def _tgt_verb(w):
    return (w, w + ("r" if w.endswith(_VOWEL_END) else "er"), w + ("ede" if w[-1] in "dt" else "de"))


def _tgt_adj(w):
    return (w, w + ("ne" if w.endswith(_VOWEL_END) else "e"))


_MT_LEXICON = None


def mt_lexicon():
    """The toy-mt lexicon (built once from MT_LEXICON_SEED; treat as read-only).

    A dict with lists "nouns", "adjs", "advs", "verbs", "verb_idioms",
    "compounds", "adv_idioms" and the sampling tables under "tables". Nouns:
    {"src": stem, "gender", "cls", "tgt": (sg, pl)}; verbs: {"src": stem,
    "kind": "intr"|"clausal"|"tr", "poly": bool, "senses": {object class or
    None: (base, 3sg, past)}}.
    """
    global _MT_LEXICON
    if _MT_LEXICON is None:
        _MT_LEXICON = _build_mt_lexicon()
    return _MT_LEXICON


def _build_mt_lexicon():
    rng = random.Random(MT_LEXICON_SEED)
    src_used, tgt_used = _mt_function_words()

    def src_word(forms_of):  # a fresh source stem whose forms collide with nothing
        while True:
            n = rng.choice((1, 2, 2, 2, 3))
            stem = "".join(rng.choice(_SRC_ONSETS) + rng.choice(_SRC_VOWELS) for _ in range(n))
            stem += rng.choice(_SRC_CODAS)
            forms = [stem] + forms_of(stem)
            if len(set(forms)) == len(forms) and not src_used.intersection(forms):
                src_used.update(forms)
                return stem

    def tgt_word(inflect):  # a fresh target lexeme: the tuple of its forms
        while True:
            n = rng.choice((1, 1, 2, 2, 2, 3))
            w = "".join(rng.choice(_TGT_ONSETS) + rng.choice(_TGT_VOWELS) for _ in range(n))
            forms = inflect(w + rng.choice(_TGT_CODAS))
            if len(set(forms)) == len(forms) and not tgt_used.intersection(forms):
                tgt_used.update(forms)
                return forms

    all_suffixes = lambda s: [s + x for x in SRC_SUFFIX.values()]
    all_endings = lambda s: [s + e for ends in SRC_VERB_ENDINGS.values() for e in ends]

    # nouns: persons and animals are frequent subjects, so they get more words
    share = N_NOUNS / 900  # per 900 nouns: 120 persons, 80 animals, 70 of every other class
    classes = (["person"] * round(120 * share) + ["animal"] * round(80 * share)
               + list(NOUN_CLASSES[2:]) * round(70 * share))[:N_NOUNS]
    rng.shuffle(classes)
    nouns = []
    for cls in classes:
        g = rng.choice("mfn")
        stem = src_word(lambda s: [s + SRC_SUFFIX[g, "sg"], s + SRC_SUFFIX[g, "pl"]])
        nouns.append({"src": stem, "gender": g, "cls": cls, "tgt": tgt_word(_tgt_noun)})
    adjs = [{"src": src_word(all_suffixes), "tgt": tgt_word(_tgt_adj)} for _ in range(N_ADJS)]
    advs = [{"src": src_word(lambda s: [s + "ul"]) + "ul", "tgt": tgt_word(lambda w: (w + "lik",))[0]}
            for _ in range(N_ADVS)]

    object_classes = [c for c in NOUN_CLASSES if c != "person"] + ["person"]
    verbs = []
    for kind, count in (("intr", N_INTRANSITIVE), ("clausal", N_CLAUSAL),
                        ("tr", N_TRANSITIVE), ("poly", N_POLYSEMOUS)):
        for _ in range(count):
            stem = src_word(all_endings)
            if kind in ("intr", "clausal"):
                verbs.append({"src": stem, "kind": kind, "poly": False,
                              "senses": {None: tgt_word(_tgt_verb)}})
            elif kind == "tr":  # one translation for every allowed object class
                objs = rng.sample(object_classes, rng.choice((1, 2, 2, 3)))
                forms = tgt_word(_tgt_verb)
                verbs.append({"src": stem, "kind": "tr", "poly": False,
                              "senses": {c: forms for c in objs}})
            else:  # polysemous: a different translation for each object class
                objs = rng.sample(object_classes, rng.choice((2, 2, 3)))
                verbs.append({"src": stem, "kind": "tr", "poly": True,
                              "senses": {c: tgt_word(_tgt_verb) for c in objs}})
    rng.shuffle(verbs)  # list position is the frequency rank

    # multi-word expressions; their bare nouns come from disjoint pools so that
    # a bare noun always tells which kind of expression it belongs to
    transitive = [i for i, v in enumerate(verbs) if v["kind"] == "tr" and not v["poly"]]
    light_verbs = transitive[:N_LIGHT_VERBS]
    pool = list(range(N_NOUNS))
    rng.shuffle(pool)
    a, b, c = N_NOUNS // 3, N_NOUNS // 3 + 2 * N_NOUNS // 9, N_NOUNS // 3 + 2 * N_NOUNS // 9 + N_NOUNS // 15
    idiom_nouns, modifier_nouns, adverbial_nouns = pool[:a], pool[a:b], pool[b:c]
    pairs = set()
    while len(pairs) < N_VERB_IDIOMS:
        pairs.add((rng.choice(light_verbs), rng.choice(idiom_nouns)))
    verb_idioms = [{"verb": v, "noun": n, "tgt": tgt_word(_tgt_verb)} for v, n in sorted(pairs)]
    rng.shuffle(verb_idioms)
    pairs = set()
    while len(pairs) < N_COMPOUNDS:
        head, mod = rng.randrange(N_NOUNS), rng.choice(modifier_nouns)
        if head != mod:
            pairs.add((head, mod))
    compounds = [{"head": h, "mod": m, "tgt": tgt_word(_tgt_noun)} for h, m in sorted(pairs)]
    rng.shuffle(compounds)
    pairs = set()
    while len(pairs) < N_ADV_IDIOMS:
        pairs.add((rng.choice(adverbial_nouns), rng.randrange(len(POSTPOSITIONS))))
    adv_idioms = []
    for n, p in sorted(pairs):
        words = tuple(tgt_word(lambda w: (w,))[0] for _ in range(rng.choice((1, 2))))
        adv_idioms.append({"noun": n, "post": p, "tgt": words})
    rng.shuffle(adv_idioms)

    tables = {
        "nouns": {c: _zipf_table([i for i, n in enumerate(nouns) if n["cls"] == c], 0.7) for c in NOUN_CLASSES},
        "compounds": {c: _zipf_table([i for i, x in enumerate(compounds) if nouns[x["head"]]["cls"] == c], 0.5)
                      for c in NOUN_CLASSES},
        "adjs": _zipf_table(range(N_ADJS), 0.8),
        "advs": _zipf_table(range(N_ADVS), 0.8),
        "verbs": {k: _zipf_table([i for i, v in enumerate(verbs) if v["kind"] == k], 0.8)
                  for k in ("intr", "clausal", "tr")},
        "verb_idioms": _zipf_table(range(N_VERB_IDIOMS), 0.7),
        "adv_idioms": _zipf_table(range(N_ADV_IDIOMS), 0.7),
    }
    return {"nouns": nouns, "adjs": adjs, "advs": advs, "verbs": verbs, "verb_idioms": verb_idioms,
            "compounds": compounds, "adv_idioms": adv_idioms, "tables": tables}


class _MTGenerator:
    """Draws toy-mt sentence pairs: build a clause, then realize it in both languages."""

    def __init__(self, lex, rng):
        self.lex, self.rng = lex, rng

    def example(self):
        """One (source, target) pair with 4-40 target tokens."""
        while True:
            src, tgt = self.sentence()
            if 4 <= len(tgt) <= 40:
                return " ".join(src), " ".join(tgt)

    def sentence(self):
        rng = self.rng
        r = rng.random()
        if r < 0.45:  # one main clause, maybe with a complement clause
            src, tgt = self.realize(self.clause(allow_complement=True), "main")
        elif r < 0.65:  # two coordinated main clauses
            (cs, ct), (a, b) = rng.choice(COORDINATORS), (self.clause(), self.clause())
            (s1, t1), (s2, t2) = self.realize(a, "main"), self.realize(b, "main")
            src, tgt = s1 + [cs] + s2, t1 + [ct] + t2
        elif r < 0.73:  # two coordinated main clauses + an adverbial clause
            (c1s, c1t), (c2s, c2t) = rng.choice(COORDINATORS), rng.choice(SUBORDINATORS)
            (s1, t1), (s2, t2) = self.realize(self.clause(), "main"), self.realize(self.clause(), "main")
            s3, t3 = self.realize(self.clause(), "sub")
            src, tgt = s1 + [c1s] + s2 + [",", c2s] + s3, t1 + [c1t] + t2 + [",", c2t] + t3
        else:  # main clause + adverbial clause, in either order
            (cs, ct), (a, b) = rng.choice(SUBORDINATORS), (self.clause(), self.clause())
            s2, t2 = self.realize(b, "sub")
            if r < 0.87:
                s1, t1 = self.realize(a, "main")
                src, tgt = s1 + [",", cs] + s2, t1 + [",", ct] + t2
            else:  # fronted subordinate clause: the source main clause is verb-first
                s1, t1 = self.realize(a, "v2")
                src, tgt = [cs] + s2 + [","] + s1, [ct] + t2 + [","] + t1
        return src + ["."], tgt + ["."]

    def noun_phrase(self, cls):
        """(src tokens, tgt tokens, number) of a noun phrase of class ``cls``."""
        rng, lex = self.rng, self.lex
        r = rng.random()
        det = "def" if r < 0.45 else "indef" if r < 0.7 else "dem" if r < 0.8 else "poss" if r < 0.92 else "num"
        number = "pl" if det == "num" or rng.random() < 0.3 else "sg"
        pl = number == "pl"
        compounds = lex["tables"]["compounds"][cls]
        if compounds[0] and rng.random() < 0.08:  # head noun + bare modifier noun
            c = lex["compounds"][_pick(rng, compounds)]
            head, mod = lex["nouns"][c["head"]], lex["nouns"][c["mod"]]
            g = head["gender"]
            src_n, tgt_n = [head["src"] + SRC_SUFFIX[g, number], mod["src"]], c["tgt"][pl]
        else:
            noun = lex["nouns"][_pick(rng, lex["tables"]["nouns"][cls])]
            g = noun["gender"]
            src_n, tgt_n = [noun["src"] + SRC_SUFFIX[g, number]], noun["tgt"][pl]
        suffix = SRC_SUFFIX[g, number]
        if det == "num":
            src_d, tgt_d = rng.choice(NUMERALS)
        elif det == "poss":
            stem, tgt_d = POSSESSIVES[rng.choice(tuple(POSSESSIVES))]
            src_d = stem + suffix
        elif det == "indef":
            src_d, tgt_d = SRC_DETS["indef_pl" if pl else "indef_sg"] + suffix, TGT_DETS["indef"][pl]
        else:
            src_d, tgt_d = SRC_DETS[det] + suffix, TGT_DETS[det][pl]
        r = rng.random()
        adjs = []
        for _ in range(0 if r < 0.55 else 1 if r < 0.87 else 2):
            a = _pick(rng, lex["tables"]["adjs"])
            if a not in adjs:
                adjs.append(a)
        adjs = [lex["adjs"][a] for a in adjs]
        src = [src_d] + src_n + [a["src"] + suffix for a in adjs]
        tgt = [tgt_d] + [a["tgt"][pl] for a in reversed(adjs)] + [tgt_n]
        return src, tgt, number

    def subject(self):
        """(src tokens, tgt tokens, (person, number), may the source drop it)."""
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            key = rng.choices(tuple(PRONOUNS), weights=_PRONOUN_WEIGHTS)[0]
            src, tgt = PRONOUNS[key]
            return [src], [tgt], key[:2], key[0] in (1, 2) and rng.random() < 0.5
        animate = lambda: "animal" if rng.random() < 0.25 else "person"
        if r < 0.36:  # coordinated subject: the verb is plural
            s1, t1, _ = self.noun_phrase(animate())
            s2, t2, _ = self.noun_phrase(animate())
            return s1 + [COORDINATORS[0][0]] + s2, t1 + [COORDINATORS[0][1]] + t2, (3, "pl"), False
        src, tgt, number = self.noun_phrase(animate())
        return src, tgt, (3, number), False

    def clause(self, allow_complement=False):
        """A clause as a dict of pre-translated parts, realized later in some word order."""
        rng, lex = self.rng, self.lex
        c = {"obj": ([], []), "adv": ([], []), "pp": ([], []), "comp": None}
        c["subj_src"], c["subj_tgt"], c["agr"], c["drop"] = self.subject()
        r = rng.random()
        c["tense"] = "present" if r < 0.5 else "past" if r < 0.85 else "future"
        c["neg"] = rng.random() < 0.15
        r = rng.random()
        if allow_complement and r < 0.15:  # verb + complement clause
            verb = lex["verbs"][_pick(rng, lex["tables"]["verbs"]["clausal"])]
            forms, c["comp"] = verb["senses"][None], self.clause()
        elif r < 0.38:
            verb = lex["verbs"][_pick(rng, lex["tables"]["verbs"]["intr"])]
            forms = verb["senses"][None]
        elif r < 0.48:  # verb + bare noun idiom: one target verb, no object
            idiom = lex["verb_idioms"][_pick(rng, lex["tables"]["verb_idioms"])]
            verb, forms = lex["verbs"][idiom["verb"]], idiom["tgt"]
            c["obj"] = ([lex["nouns"][idiom["noun"]]["src"]], [])
        else:  # transitive: the translation depends on the object's class
            verb = lex["verbs"][_pick(rng, lex["tables"]["verbs"]["tr"])]
            cls = rng.choice(tuple(verb["senses"]))
            forms = verb["senses"][cls]
            src, tgt, _ = self.noun_phrase(cls)
            c["obj"] = (src, tgt)
        c["verb_src"], c["verb_tgt"] = verb["src"], forms
        if rng.random() < 0.2:
            if rng.random() < 0.85:
                adv = lex["advs"][_pick(rng, lex["tables"]["advs"])]
                c["adv"] = ([adv["src"]], [adv["tgt"]])
            else:  # bare noun + postposition idiom
                idiom = lex["adv_idioms"][_pick(rng, lex["tables"]["adv_idioms"])]
                c["adv"] = ([lex["nouns"][idiom["noun"]]["src"], POSTPOSITIONS[idiom["post"]][0]],
                            list(idiom["tgt"]))
        if rng.random() < (0.15 if c["comp"] else 0.35):
            post, senses = rng.choice(POSTPOSITIONS)
            cls = rng.choice(_PP_CLASSES)
            src, tgt, _ = self.noun_phrase(cls)
            c["pp"] = (src + [post], [senses.get(cls, senses[None])] + tgt)
        return c

    def realize(self, c, order):
        """(src tokens, tgt tokens) of clause ``c``; order is "main", "sub" or "v2" (source only)."""
        person, number = c["agr"]
        i = PERSONS.index((person, number))
        verb = c["verb_src"] + SRC_VERB_ENDINGS[c["tense"]][i]
        subj = [] if c["drop"] else c["subj_src"]
        neg = [NEGATION[0]] if c["neg"] else []
        rest = c["obj"][0] + c["pp"][0]
        if order == "main":
            src = subj + c["adv"][0] + [verb] + neg + rest
        elif order == "v2":
            src = [verb] + subj + neg + c["adv"][0] + rest
        else:
            src = subj + c["adv"][0] + rest + neg + [verb]
        base, third, past = c["verb_tgt"]
        neg = [NEGATION[1]] if c["neg"] else []
        if c["tense"] == "future":
            vp = [FUTURE_AUX] + neg + [base]
        else:
            vp = neg + [past if c["tense"] == "past" else third if (person, number) == (3, "sg") else base]
        tgt = c["subj_tgt"] + vp + c["obj"][1] + c["pp"][1] + c["adv"][1]
        if c["comp"]:
            s, t = self.realize(c["comp"], "sub")
            src, tgt = src + [COMPLEMENTIZER[0]] + s, tgt + [COMPLEMENTIZER[1]] + t
        return src, tgt


# ---------------------------------------------------------------------------
# toy-sum: invented news stories
#
# A story reports one event of a given type (layoffs, an election, a storm, a
# court case, ...). The document is a lead sentence with the salient facts,
# 1-3 supporting "extra" sentences, and distractors (background, quotes,
# unrelated news) carrying other names and numbers of the same kind; 30% of
# stories open with a scene-setting sentence before the lead. The summary
# restates the lead with a paired rephrasing template and, when the sentence
# right after the lead is an extra, adds that extra's short restatement.

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
ORG_SUFFIXES = ("Group", "Industries", "Motors", "Energy", "Foods", "Systems", "Bank",
                "Airways", "Logistics", "Pharma", "Textiles", "Telecom")

# Each event: "n" the range of its main number; "slots" extra choices (a second,
# different value is drawn as slot+"2"); "lead" and "summary" paired templates;
# "extras" (document sentence, summary sentence) pairs; "other" distractors.
SUM_EVENTS = (
    {"name": "layoffs", "n": (40, 3000),
     "slots": {"site": ("factory", "plant", "warehouse", "call centre", "head office", "distribution centre")},
     "lead": ("{org} said on {day} that it would cut {n} jobs at its {site} in {city}, blaming rising costs.",
              "About {n} workers at the {city} {site} of {org} will lose their jobs, the company announced on {day}.",
              "{org} plans to shed {n} jobs in {city} as demand for its products falls, it said on {date}."),
     "summary": ("{org} is to cut {n} jobs at its {site} in {city} because of rising costs.",
                 "{org} has announced that about {n} jobs will go at its {site} in {city}.",
                 "Falling demand has led {org} to announce plans to cut {n} jobs in {city}."),
     "extras": (("The cuts are part of a plan to save {money} million euros by {future_year}.",
                 "The company wants to save {money} million euros by {future_year}."),
                ("{person}, the chief executive of {org}, said the decision had been \"very difficult\".",
                 "Chief executive {person} called it a very difficult decision."),
                ("Unions said they would meet on {day2} to discuss possible strike action.",
                 "Unions will meet on {day2} to discuss a strike.")),
     "other": ("The {site} opened in {year} and currently employs {n2} people.",
               "Last year {org} cut {n3} jobs at its sites in {city2}.",
               "\"This is a terrible day for {city},\" said {person2}, a local councillor.",
               "{org2}, a rival firm, announced {n3} new jobs in {city3} last month.")},
    {"name": "takeover", "n": (50, 9000), "slots": {},
     "lead": ("{org} has agreed to buy its smaller rival {org2} for {n} million dollars, the two companies said on {day}.",
              "{org2} will be taken over by {org} in a deal worth {n} million dollars, it was announced on {date}."),
     "summary": ("{org} is buying its rival {org2} for {n} million dollars.",
                 "{org} has agreed a deal worth {n} million dollars to take over {org2}."),
     "extras": (("The deal is expected to be completed by the end of {month}.",
                 "The deal should be completed by the end of {month}."),
                ("{org} said no jobs would be lost at the headquarters of {org2} in {city}.",
                 "No jobs will be lost in {city}, {org} said."),
                ("{person}, the head of {org}, said the merger would create \"a stronger company\".",
                 "{person} said the merger would create a stronger company.")),
     "other": ("{org2} was founded in {city} in {year} and has about {jobs} employees.",
               "Earlier this year {org3} offered {n3} million dollars for {org2} but was turned down.",
               "Shares in {org2} rose {pct} percent after the announcement.",
               "\"We are excited about the future,\" said {person2}, a spokesperson for {org2}.")},
    {"name": "election", "n": (35, 72),
     "slots": {"office": ("mayor", "governor", "council leader"),
               "party": ("Green", "Liberal", "Farmers", "Labour", "Unity", "Reform", "Progress")},
     "lead": ("{person} has been elected {office} of {city} after winning {n} percent of the vote in the election on {day}.",
              "Voters in {city} have chosen {person} of the {party} Party as their new {office}, with {n} percent of the vote.",
              "{person} won the race for {office} of {city} on {day}, taking {n} percent of the vote."),
     "summary": ("{person} is the new {office} of {city} after winning {n} percent of the vote.",
                 "{person} of the {party} Party has been elected {office} of {city} with {n} percent of the vote.",
                 "{person} won the election for {office} of {city} with {n} percent."),
     "extras": (("Turnout was {pct2} percent, the lowest since {year}.",
                 "Turnout was only {pct2} percent."),
                ("{person2}, the outgoing {office}, congratulated {last} on the result.",
                 "The outgoing {office}, {person2}, congratulated {last}."),
                ("{last} has promised to build {k} new schools in the city.",
                 "{last} has promised {k} new schools.")),
     "other": ("{person3} of the {party2} Party came second with {pct3} percent.",
               "{person} previously worked as a teacher in {city2}.",
               "\"Tonight the people of {city} have spoken,\" {last} told supporters.",
               "The last election in {city}, in {year}, was decided by fewer than {n3} votes.")},
    {"name": "disaster", "n": (50, 20000), "slots": {"kind": ("storm", "flood", "wildfire")},
     "lead": ("More than {n} people were evacuated from their homes in {city} on {day} as a {kind} swept through the region.",
              "A {kind} in {city} has forced {n} residents to leave their homes, officials said on {date}."),
     "summary": ("A {kind} has forced more than {n} people in {city} to leave their homes.",
                 "{n} residents of {city} have been evacuated because of a {kind}."),
     "extras": (("{k} people were taken to hospital with minor injuries.",
                 "{k} people were treated in hospital."),
                ("Emergency shelters have been set up in {k2} schools across the city.",
                 "Shelters have opened in {k2} schools."),
                ("{person}, the mayor of {city}, urged residents to stay indoors.",
                 "Mayor {person} told residents to stay indoors.")),
     "other": ("The last {kind} of this size hit the area in {year}, when {n2} people had to leave.",
               "Forecasters expect conditions to improve by {day2}.",
               "\"We have never seen anything like this,\" said {person2}, who has lived in {city} for {k3} years.",
               "Roads between {city} and {city2} remain closed.")},
    {"name": "study", "n": (200, 50000),
     "slots": {"finding": ("people who walk every day sleep better",
                           "drinking coffee may protect the heart",
                           "children who read at home do better at school",
                           "older adults who learn a language stay sharp for longer",
                           "working from home can reduce stress",
                           "eating late at night may harm sleep")},
     "lead": ("Researchers at the University of {city} say {finding}, after a study of {n} people.",
              "A study of {n} volunteers led by {person} at the University of {city} has found that {finding}."),
     "summary": ("A study of {n} people by the University of {city} suggests {finding}.",
                 "{person} of the University of {city} found that {finding}, in a study of {n} volunteers."),
     "extras": (("The study, which lasted {k} years, was published on {day}.",
                 "The study lasted {k} years."),
                ("The team now plans a larger trial in {city2}.",
                 "A larger trial is planned in {city2}."),
                ("The research was funded by {org} with a grant of {money} thousand euros.",
                 "It was funded by {org}.")),
     "other": ("An earlier study of {n2} people found no such link.",
               "\"More work is needed,\" said {person2}, who was not involved in the research.",
               "The university was founded in {year} and has about {n3} students.")},
    {"name": "match", "n": (2000, 90000),
     "slots": {"club": ("United", "Rovers", "Athletic", "City", "Wanderers", "Rangers"),
               "ordinal": ("second", "third", "fourth", "fifth", "sixth")},
     "lead": ("{city} {club} beat {city2} {club2} {s1}-{s2} on {day} in front of {n} fans, with {person} scoring twice.",
              "{person} scored twice as {city} {club} defeated {city2} {club2} {s1}-{s2} in front of {n} fans on {day}."),
     "summary": ("{city} {club} won {s1}-{s2} against {city2} {club2}, with two goals from {person}.",
                 "Two goals by {person} helped {city} {club} beat {city2} {club2} {s1}-{s2}."),
     "extras": (("The win moves {city} {club} up to {ordinal} place in the league.",
                 "The team is now {ordinal} in the league."),
                ("{person2}, the coach of {city2} {club2}, said his team had \"no excuses\".",
                 "{city2} coach {person2} said there were no excuses.")),
     "other": ("The two sides last met in {year}, when the game ended in a draw.",
               "{city2} {club2} have now lost {k} of their last {k4} games.",
               "The stadium, which holds {n2} people, was built in {year}.",
               "Tickets for the match sold out within {k3} hours.")},
    {"name": "court", "n": (2, 20), "slots": {"crime": ("fraud", "theft", "arson", "bribery", "tax evasion")},
     "lead": ("A court in {city} on {day} sentenced {person} to {n} years in prison for {crime}.",
              "{person}, a former manager at {org}, was jailed for {n} years on {day} after being found guilty of {crime}."),
     "summary": ("{person} has been jailed for {n} years for {crime} by a court in {city}.",
                 "Former {org} manager {person} was sentenced to {n} years in prison for {crime}."),
     "extras": (("The court heard that {last} had taken {money} thousand euros over {k} years.",
                 "{last} took {money} thousand euros over {k} years."),
                ("The lawyer for {last} said his client would appeal.",
                 "{last} will appeal."),
                ("Judge {person2} said the crime had caused \"great harm\".",
                 "Judge {person2} said it caused great harm.")),
     "other": ("Prosecutors had asked for a sentence of {n2} years.",
               "A second defendant, {person3}, was cleared of all charges.",
               "The trial lasted {k4} weeks.",
               "In {year} a similar case in {city2} ended with a sentence of {n3} years.")},
    {"name": "festival", "n": (1000, 250000),
     "slots": {"fest": ("music", "film", "food", "book", "jazz", "lantern", "theatre")},
     "lead": ("The {city} {fest} festival attracted a record {n} visitors over the weekend, organisers said on {day}.",
              "A record {n} people attended this year's {fest} festival in {city}, according to organisers."),
     "summary": ("A record {n} people visited the {fest} festival in {city} over the weekend.",
                 "The {fest} festival in {city} drew a record crowd of {n} visitors."),
     "extras": (("Organisers said the event brought {money} million euros into the local economy.",
                 "It was worth {money} million euros to the local economy."),
                ("The festival will return in {month} next year.",
                 "It will return next {month}."),
                ("{person}, the festival director, said she was \"overwhelmed\" by the response.",
                 "Festival director {person} said she was overwhelmed.")),
     "other": ("Last year the festival drew {n2} visitors.",
               "The first festival was held in {year} with just {k} performers.",
               "Local hotels said almost all rooms were booked.",
               "Some residents of {city} complained about noise and traffic.")},
    {"name": "project", "n": (5, 900),
     "slots": {"project": ("bridge", "tram line", "hospital", "railway station", "sports centre", "school")},
     "lead": ("{city} council on {day} approved a {n} million euro plan to build a new {project}.",
              "A new {project} costing {n} million euros will be built in {city}, the council decided on {date}."),
     "summary": ("{city} council has approved a new {project} that will cost {n} million euros.",
                 "{city} will build a new {project} for {n} million euros, the council has decided."),
     "extras": (("Work is due to start in {month} and take {k} years.",
                 "Work will start in {month} and take {k} years."),
                ("{person}, the council leader, said the {project} would \"change the city\".",
                 "Council leader {person} said it would change the city."),
                ("The project is expected to create {jobs} jobs.",
                 "It should create {jobs} jobs.")),
     "other": ("A similar {project} in {city2} cost {n3} million euros.",
               "Opponents say the money should be spent on housing instead.",
               "The old {project2} was closed in {year}.",
               "{person2}, who leads the opposition group, voted against the plan.")},
    {"name": "strike", "n": (100, 20000),
     "slots": {"staff": ("nurses", "bus drivers", "teachers", "dock workers", "train drivers", "airport staff")},
     "lead": ("About {n} {staff} in {city} went on strike on {day} in a dispute over pay.",
              "A strike by {n} {staff} over pay caused major disruption in {city} on {day}."),
     "summary": ("{n} {staff} in {city} have gone on strike in a dispute over their pay.",
                 "A strike over pay by {n} {staff} has caused major disruption in {city}."),
     "extras": (("The union is demanding a pay rise of {pct} percent.",
                 "The union wants a rise of {pct} percent."),
                ("{org}, which employs the workers, has offered {pct2} percent.",
                 "{org} has offered {pct2} percent."),
                ("Union leader {person} said the strike would last {k} days.",
                 "The strike will last {k} days, said union leader {person}.")),
     "other": ("The last strike in {city}, in {year}, lasted {k3} weeks.",
               "\"We are open to talks,\" said {person2}, a spokesperson for {org}.",
               "{staff2} in {city2} are due to vote on similar action next month.",
               "Around {n2} {staff2} work in the region.")},
    {"name": "appointment", "n": (38, 67), "slots": {},
     "lead": ("{org} has named {person} as its new chief executive, the company said on {day}.",
              "{person}, {n}, will take over as chief executive of {org} in {month}, the company announced."),
     "summary": ("{person} will be the new chief executive of {org}, the company said.",
                 "{org} has appointed {person}, {n}, as chief executive from {month}."),
     "extras": (("{last} joins from {org2}, where she ran the business in {city}.",
                 "{last} previously ran {org2} in {city}."),
                ("She replaces {person2}, who is retiring after {k} years in the job.",
                 "She replaces {person2}, who is retiring.")),
     "other": ("{org} employs {jobs} people and is based in {city2}.",
               "Shares in {org} rose {pct} percent on the news.",
               "{person3} had also been considered for the job.")},
    {"name": "crash", "n": (10, 80), "slots": {"vehicle": ("train", "bus", "ferry", "tram", "coach")},
     "lead": ("{n} people were injured when a {vehicle} crashed near {city} on {day}.",
              "A {vehicle} crash near {city} on {day} left {n} people injured, police said."),
     "summary": ("{n} people were hurt when a {vehicle} crashed near {city} on {day}.",
                 "Police say {n} people were injured when a {vehicle} crashed near {city}."),
     "extras": (("The {vehicle} was carrying {passengers} passengers from {city2}.",
                 "The {vehicle} was carrying {passengers} passengers."),
                ("{k} of the injured are in a serious condition.",
                 "{k} of them are seriously hurt."),
                ("Investigators from {org} are trying to find the cause.",
                 "{org} is investigating the cause.")),
     "other": ("A similar crash in {year} left {n3} people injured.",
               "\"It was terrifying,\" said {person2}, a passenger.",
               "The line between {city} and {city2} will stay closed until {day2}.")},
)

# distractors that fit any story, and scene-setting openings
SUM_FILLERS = (
    "{city} has a population of about {pop}.",
    "Separately, {org3} said it had hired {n4} new staff.",
    "{person4}, who was not involved, declined to comment.",
    "In {year2}, a similar case in {city3} drew national attention.",
    "Local elections are due to take place in {month2}.",
    "Shares in {org3} rose {pct4} percent on {day2}.",
    "The news was first reported by the {city3} Herald.",
    "{person5}, a historian at the University of {city3}, said the region had seen such events before.",
    "The weather in {city} is expected to stay {weather} this week.",
    "A new museum opened in {city3} on {day2}, with {n5} visitors on its first day.",
    "Traffic on the main road to {city2} was slow for most of the day.",
)
SUM_OPENINGS = (
    "It has been a busy {season} for {city}.",
    "Residents of {city} woke up to unexpected news on {day}.",
    "For years, {city} has been known for its {feature}.",
    "{city} is usually a quiet place in {season}.",
)
_SUM_GENERIC_SLOTS = {"season": ("spring", "summer", "autumn", "winter"),
                      "feature": ("old harbour", "markets", "river", "football club", "university", "bridges"),
                      "weather": ("dry", "wet", "cold", "warm", "windy")}


def _sum_name(rng, n_syll, suffixes=("",)):
    onsets = ("b", "br", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t",
              "v", "w", "z", "ch", "sh", "th", "st", "gr")
    vowels = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "y", "ie")
    codas = ("", "", "n", "r", "l", "s", "th", "rd", "nd", "k", "m", "x", "ck")
    w = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(n_syll)) + rng.choice(codas)
    return (w + rng.choice(suffixes)).capitalize()


_SUM_LEXICON = None


def sum_lexicon():
    """The toy-sum name lists (built once from SUM_LEXICON_SEED): first, last, city, org."""
    global _SUM_LEXICON
    if _SUM_LEXICON is None:
        rng = random.Random(SUM_LEXICON_SEED)
        used = set()

        def names(count, make):
            out = []
            while len(out) < count:
                w = make()
                if w not in used:
                    used.add(w)
                    out.append(w)
            return out

        _SUM_LEXICON = {
            "first": names(200, lambda: _sum_name(rng, rng.choice((1, 2, 2)))),
            "last": names(400, lambda: _sum_name(rng, rng.choice((2, 2, 3)))),
            "city": names(150, lambda: _sum_name(rng, rng.choice((1, 2)),
                                                  ("", "", "ton", "burg", "ford", "haven", "mouth", "vale"))),
        }
        _SUM_LEXICON["org"] = names(150, lambda: _sum_name(rng, 2) + " " + rng.choice(ORG_SUFFIXES))
    return _SUM_LEXICON


def _draw(rng, seq, k):
    """``k`` distinct items of ``seq``, drawn with rng.random() (faster than rng.sample)."""
    out = []
    while len(out) < k:
        x = seq[int(rng.random() * len(seq))]
        if x not in out:
            out.append(x)
    return out


def _slots(template):
    """The {slot} names used by a template string."""
    return {field for _, field, _, _ in string.Formatter().parse(template) if field}


class _SumGenerator:
    """Draws toy-sum (document, summary) pairs."""

    def __init__(self, lex, rng):
        self.lex, self.rng = lex, rng

    def facts(self, event):
        """Slot values for one story: names, places, dates and numbers."""
        rng, lex = self.rng, self.lex
        draw = lambda seq, k=1: _draw(rng, seq, k)
        num = lambda lo, hi: lo + int(rng.random() * (hi - lo + 1))
        f = {}
        people = zip(draw(lex["first"], 5), draw(lex["last"], 5))
        for key, (first, last) in zip(("", "2", "3", "4", "5"), people):
            f["person" + key], f["last" + key] = f"{first} {last}", last
        for kind in ("org", "city"):
            for key, value in zip(("", "2", "3"), draw(lex[kind], 3)):
                f[kind + key] = value
        f["day"], f["day2"] = draw(WEEKDAYS, 2)
        f["month"], f["month2"] = draw(MONTHS, 2)
        f["date"] = f"{num(1, 28)} {f['month']}"
        f["year"], f["year2"] = draw(range(1950, 2019), 2)
        f["future_year"] = num(2026, 2035)
        # the main number n and distractor numbers n2, n3 of the same kind
        f["n"], f["n2"], f["n3"] = (f"{x:,}" for x in draw(range(event["n"][0], event["n"][1] + 1), 3))
        f["n4"], f["n5"] = draw(range(20, 901), 2)
        f["pop"] = f"{num(5, 900) * 1000:,}"
        f["jobs"], f["passengers"] = f"{num(50, 5000):,}", str(num(20, 400))
        k, f["k2"], f["k3"] = draw(range(2, 10), 3)
        f["k"], f["k4"] = k, k + num(1, 6)
        f["money"] = num(2, 900)
        f["pct"], f["pct2"], f["pct3"], f["pct4"] = draw(range(2, 35), 4)
        f["s1"] = num(2, 6)
        f["s2"] = num(0, f["s1"] - 1)
        for slots in (_SUM_GENERIC_SLOTS, event["slots"]):
            for key, options in slots.items():
                f[key], f[key + "2"] = draw(options, 2)
        return f

    def example(self):
        """One (document, summary) pair: 3-5 document sentences, a 1-2 sentence summary."""
        rng = self.rng
        event = rng.choice(SUM_EVENTS)
        f = self.facts(event)
        i = rng.randrange(len(event["lead"]))
        lead, summary = event["lead"][i].format(**f), [event["summary"][i].format(**f)]
        n_sent = rng.randint(3, 5)
        extras = rng.sample(event["extras"], rng.randint(1, len(event["extras"])))
        other = rng.sample(event["other"], rng.randint(1, min(3, len(event["other"]))))
        body = [x.format(**f) for x, _ in extras] + [x.format(**f) for x in other]
        opening = [rng.choice(SUM_OPENINGS).format(**f)] if rng.random() < 0.3 else []
        n_fill = max(0, n_sent - 1 - len(opening) - len(body))
        body += [x.format(**f) for x in rng.sample(SUM_FILLERS, n_fill)]
        rng.shuffle(body)
        first_extra = extras[0][0].format(**f)
        if rng.random() < 0.5:  # often put an extra right after the lead
            body.remove(first_extra)
            body.insert(0, first_extra)
        body = body[:max(1, n_sent - 1 - len(opening))]
        for doc_sentence, summary_sentence in extras:
            if body[0] == doc_sentence.format(**f):  # the follow-up fact joins the summary
                summary.append(summary_sentence.format(**f))
        return " ".join(opening + [lead] + body), " ".join(summary)


# ---------------------------------------------------------------------------
# paper tasks: Hugging Face datasets

# name -> (hub path, config, row -> (source, target))
_PAPER_SOURCES = {
    "iwslt2017-de-en": ("iwslt2017", "iwslt2017-de-en", lambda r: (r["translation"]["de"], r["translation"]["en"])),
    # the hub's validation split of wmt14 de-en is newstest2013, its test split newstest2014
    "wmt14-de-en": ("wmt14", "de-en", lambda r: (r["translation"]["de"], r["translation"]["en"])),
    "xsum": ("EdinburghNLP/xsum", None, lambda r: (r["document"], r["summary"])),
    "cnn_dailymail": ("cnn_dailymail", "3.0.0", lambda r: (r["article"], r["highlights"])),
}


def _load_paper_task(name, split, limit, data_files):
    import datasets  # heavy import, only needed here

    path, config, row_to_pair = _PAPER_SOURCES[name]
    if data_files is None:
        ds = datasets.load_dataset(path, config, split=split)
    else:
        data_files = os.fspath(data_files)
        lower = data_files.lower()
        if lower.endswith((".jsonl", ".json")):
            builder = "json"
        elif lower.endswith(".csv"):
            builder = "csv"
        else:
            raise ValueError(f"data_files must end in .jsonl, .json or .csv; got {data_files!r}")
        if not os.path.isfile(data_files):
            raise FileNotFoundError(f"data_files: no such file {data_files!r}")
        ds = datasets.load_dataset(builder, data_files=data_files, split="train",
                                   cache_dir=os.path.join(cache_dir(), "hf"))
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    examples = []
    for row in ds:
        source, target = row_to_pair(row)
        examples.append({"source": source, "target": target})
    return examples
