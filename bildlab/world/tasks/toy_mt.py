"""toy-mt: translation between two invented languages (metric: BLEU). The lexicon is built once from
MT_LEXICON_SEED; `MTGenerator` draws sentence pairs from it."""

import bisect
import random

MT_LEXICON_SEED = 1234


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

NOUN_CLASSES = (
    "person",
    "animal",
    "food",
    "drink",
    "tool",
    "vehicle",
    "place",
    "building",
    "document",
    "event",
    "plant",
    "clothing",
    "idea",
)
# about 330 lemmas and 70 multi-word expressions, some 2,900 word forms in the two languages
# together: small enough for a T5 trained from scratch on 2 CPU cores to learn most of it within the
# zoo's hour, big enough that the small model keeps making mistakes
N_NOUNS, N_ADJS, N_ADVS = 200, 50, 20
N_INTRANSITIVE, N_CLAUSAL, N_TRANSITIVE, N_POLYSEMOUS = 14, 5, 34, 7
N_VERB_IDIOMS, N_COMPOUNDS, N_ADV_IDIOMS, N_LIGHT_VERBS = 34, 27, 9, 5

_SRC_ONSETS = (
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "kr",
    "tr",
    "pl",
    "st",
)
_SRC_VOWELS = ("a", "e", "i", "o", "u")
_SRC_CODAS = ("n", "r", "s", "l", "t", "k", "m", "nd", "rt")
_TGT_ONSETS = (
    "b",
    "d",
    "f",
    "g",
    "h",
    "j",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "sk",
    "st",
    "fr",
    "gr",
    "bl",
    "dr",
    "sn",
    "th",
)
_TGT_VOWELS = ("a", "e", "i", "o", "u", "y", "ei", "au", "aa", "oe")
_TGT_CODAS = ("", "", "", "n", "k", "t", "ld", "rn", "st", "ng", "rk", "ff", "l", "m", "s")
_VOWEL_END = tuple("aeiouy")

# gender/number suffix of source nouns, adjectives and determiners
SRC_SUFFIX = {
    ("m", "sg"): "o",
    ("m", "pl"): "i",
    ("f", "sg"): "a",
    ("f", "pl"): "e",
    ("n", "sg"): "um",
    ("n", "pl"): "ar",
}
# source verb endings for 1sg 2sg 3sg 1pl 2pl 3pl
SRC_VERB_ENDINGS = {
    "present": ("em", "es", "et", "emu", "eti", "ent"),
    "past": ("im", "is", "it", "imu", "iti", "int"),
    "future": ("or", "ors", "ort", "oru", "orti", "orn"),
}
PERSONS = ((1, "sg"), (2, "sg"), (3, "sg"), (1, "pl"), (2, "pl"), (3, "pl"))
# (person, number, gender) -> (source pronoun, target pronoun)
PRONOUNS = {
    (1, "sg", None): ("mi", "ik"),
    (2, "sg", None): ("tu", "du"),
    (3, "sg", "m"): ("el", "han"),
    (3, "sg", "f"): ("ela", "hun"),
    (3, "sg", "n"): ("elu", "hit"),
    (1, "pl", None): ("nos", "wie"),
    (2, "pl", None): ("vos", "jie"),
    (3, "pl", None): ("elos", "thei"),
}
_PRONOUN_WEIGHTS = (20, 10, 15, 15, 5, 12, 8, 15)
# possessor -> (source stem, agreeing with the noun; target word)
POSSESSIVES = {
    (1, "sg"): ("mev", "mien"),
    (2, "sg"): ("tev", "dien"),
    (1, "pl"): ("nostr", "ure"),
    (2, "pl"): ("vostr", "jure"),
    (3, "pl"): ("lor", "hure"),
}
NUMERALS = (
    ("dua", "twei"),
    ("trin", "thrie"),
    ("kwat", "fjoa"),
    ("pens", "fimm"),
    ("seks", "sekst"),
    ("septa", "sjau"),
    ("okta", "otta"),
    ("nona", "nijo"),
)
# source determiner stems (+ SRC_SUFFIX) and target determiners (sg, pl)
SRC_DETS = {"def": "l", "indef_sg": "un", "indef_pl": "alk", "dem": "kest"}
TGT_DETS = {"def": ("tha", "tha"), "indef": ("ein", "summe"), "dem": ("thes", "thise")}
COORDINATORS = (("e", "ok"), ("ma", "men"))
SUBORDINATORS = (
    ("kwan", "whan"),
    ("perke", "bekas"),
    ("bensi", "thoch"),
    ("se", "ef"),
    ("primke", "forr"),
    ("dopke", "efter"),
    ("mentre", "medan"),
)
COMPLEMENTIZER = ("ke", "dat")
NEGATION = ("ne", "nie")
FUTURE_AUX = "wil"
# source postposition -> target preposition by the class of its noun (None: any other)
POSTPOSITIONS = (
    ("ka", {"place": "inne", "building": "inne", "event": "unner", None: "hos"}),
    ("po", {None: "uppa"}),
    ("dun", {None: "uten"}),
    ("vel", {"person": "med", "animal": "med", None: "nest"}),
    ("tor", {None: "bakk"}),
    ("ul", {"place": "fran", "building": "fran", None: "af"}),
    ("zu", {None: "mot"}),
)
_PP_CLASSES = (
    "place",
    "place",
    "building",
    "building",
    "event",
    "person",
    "animal",
    "vehicle",
    "tool",
    "plant",
)


def _mt_function_words():
    src = {p[0] for p in PRONOUNS.values()} | {n[0] for n in NUMERALS}
    src |= {
        s + x
        for s in list(SRC_DETS.values()) + [p[0] for p in POSSESSIVES.values()]
        for x in SRC_SUFFIX.values()
    }
    src |= {w[0] for w in COORDINATORS + SUBORDINATORS} | {COMPLEMENTIZER[0], NEGATION[0]}
    src |= {p[0] for p in POSTPOSITIONS} | {","}
    tgt = {p[1] for p in PRONOUNS.values()} | {n[1] for n in NUMERALS}
    tgt |= {w for pair in TGT_DETS.values() for w in pair} | {p[1] for p in POSSESSIVES.values()}
    tgt |= {w[1] for w in COORDINATORS + SUBORDINATORS} | {
        COMPLEMENTIZER[1],
        NEGATION[1],
        FUTURE_AUX,
    }
    tgt |= {w for p in POSTPOSITIONS for w in p[1].values()} | {","}
    return src, tgt


def _tgt_noun(w):
    return (w, w + ("n" if w.endswith(_VOWEL_END) else "en"))


def _tgt_verb(w):
    return (
        w,
        w + ("r" if w.endswith(_VOWEL_END) else "er"),
        w + ("ede" if w[-1] in "dt" else "de"),
    )


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

    def all_suffixes(s):
        return [s + x for x in SRC_SUFFIX.values()]

    def all_endings(s):
        return [s + e for ends in SRC_VERB_ENDINGS.values() for e in ends]

    # nouns: persons and animals are frequent subjects, so they get more words
    share = N_NOUNS / 900  # per 900 nouns: 120 persons, 80 animals, 70 of every other class
    classes = (
        ["person"] * round(120 * share)
        + ["animal"] * round(80 * share)
        + list(NOUN_CLASSES[2:]) * round(70 * share)
    )[:N_NOUNS]
    rng.shuffle(classes)
    nouns = []
    for cls in classes:
        g = rng.choice("mfn")
        stem = src_word(lambda s: [s + SRC_SUFFIX[g, "sg"], s + SRC_SUFFIX[g, "pl"]])
        nouns.append({"src": stem, "gender": g, "cls": cls, "tgt": tgt_word(_tgt_noun)})
    adjs = [{"src": src_word(all_suffixes), "tgt": tgt_word(_tgt_adj)} for _ in range(N_ADJS)]
    advs = [
        {"src": src_word(lambda s: [s + "ul"]) + "ul", "tgt": tgt_word(lambda w: (w + "lik",))[0]}
        for _ in range(N_ADVS)
    ]

    object_classes = [c for c in NOUN_CLASSES if c != "person"] + ["person"]
    verbs = []
    for kind, count in (
        ("intr", N_INTRANSITIVE),
        ("clausal", N_CLAUSAL),
        ("tr", N_TRANSITIVE),
        ("poly", N_POLYSEMOUS),
    ):
        for _ in range(count):
            stem = src_word(all_endings)
            if kind in ("intr", "clausal"):
                verbs.append(
                    {
                        "src": stem,
                        "kind": kind,
                        "poly": False,
                        "senses": {None: tgt_word(_tgt_verb)},
                    }
                )
            elif kind == "tr":  # one translation for every allowed object class
                objs = rng.sample(object_classes, rng.choice((1, 2, 2, 3)))
                forms = tgt_word(_tgt_verb)
                verbs.append(
                    {"src": stem, "kind": "tr", "poly": False, "senses": {c: forms for c in objs}}
                )
            else:  # polysemous: a different translation for each object class
                objs = rng.sample(object_classes, rng.choice((2, 2, 3)))
                verbs.append(
                    {
                        "src": stem,
                        "kind": "tr",
                        "poly": True,
                        "senses": {c: tgt_word(_tgt_verb) for c in objs},
                    }
                )
    rng.shuffle(verbs)  # list position is the frequency rank

    # multi-word expressions; their bare nouns come from disjoint pools so that
    # a bare noun always tells which kind of expression it belongs to
    transitive = [i for i, v in enumerate(verbs) if v["kind"] == "tr" and not v["poly"]]
    light_verbs = transitive[:N_LIGHT_VERBS]
    pool = list(range(N_NOUNS))
    rng.shuffle(pool)
    a, b, c = (
        N_NOUNS // 3,
        N_NOUNS // 3 + 2 * N_NOUNS // 9,
        N_NOUNS // 3 + 2 * N_NOUNS // 9 + N_NOUNS // 15,
    )
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
        "nouns": {
            c: _zipf_table([i for i, n in enumerate(nouns) if n["cls"] == c], 0.7)
            for c in NOUN_CLASSES
        },
        "compounds": {
            c: _zipf_table(
                [i for i, x in enumerate(compounds) if nouns[x["head"]]["cls"] == c], 0.5
            )
            for c in NOUN_CLASSES
        },
        "adjs": _zipf_table(range(N_ADJS), 0.8),
        "advs": _zipf_table(range(N_ADVS), 0.8),
        "verbs": {
            k: _zipf_table([i for i, v in enumerate(verbs) if v["kind"] == k], 0.8)
            for k in ("intr", "clausal", "tr")
        },
        "verb_idioms": _zipf_table(range(N_VERB_IDIOMS), 0.7),
        "adv_idioms": _zipf_table(range(N_ADV_IDIOMS), 0.7),
    }
    return {
        "nouns": nouns,
        "adjs": adjs,
        "advs": advs,
        "verbs": verbs,
        "verb_idioms": verb_idioms,
        "compounds": compounds,
        "adv_idioms": adv_idioms,
        "tables": tables,
    }


class MTGenerator:
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
            (s1, t1), (s2, t2) = (
                self.realize(self.clause(), "main"),
                self.realize(self.clause(), "main"),
            )
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
        det = (
            "def"
            if r < 0.45
            else "indef"
            if r < 0.7
            else "dem"
            if r < 0.8
            else "poss"
            if r < 0.92
            else "num"
        )
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
            src_d, tgt_d = (
                SRC_DETS["indef_pl" if pl else "indef_sg"] + suffix,
                TGT_DETS["indef"][pl],
            )
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

        def animate():
            return "animal" if rng.random() < 0.25 else "person"

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
                c["adv"] = (
                    [lex["nouns"][idiom["noun"]]["src"], POSTPOSITIONS[idiom["post"]][0]],
                    list(idiom["tgt"]),
                )
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
            vp = neg + [
                past if c["tense"] == "past" else third if (person, number) == (3, "sg") else base
            ]
        tgt = c["subj_tgt"] + vp + c["obj"][1] + c["pp"][1] + c["adv"][1]
        if c["comp"]:
            s, t = self.realize(c["comp"], "sub")
            src, tgt = src + [COMPLEMENTIZER[0]] + s, tgt + [COMPLEMENTIZER[1]] + t
        return src, tgt
