import collections
import hashlib
import json
import os
import random
import re
import statistics

import pytest

from bildlab.measure.metrics import split_sentences
from bildlab.world import tasks
from bildlab.world.tasks import (
    PAPER_TASKS,
    SPLITS,
    TOY_SIZES,
    TOY_TASKS,
    load_task,
    task_metric,
    toy_mt,
    toy_sum,
)

# sha256 of json.dumps(load_task(name, "validation")): changes here need a VERSION bump
VALIDATION_DIGESTS = {
    "toy-mt": "b6bf512fed654bc91a1318b372d3b19a849b24cf9bd29373bdd5b103d74ee454",
    "toy-sum": "00236dd04d39a2a5cb32c0dc8aa3a8962a55dbab3792a733fbc7ac22cc2c8e76",
}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh, empty cache folder for one test."""
    monkeypatch.setenv("BILDLAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def small(cache, monkeypatch):
    """A fresh cache and a 60-example toy-mt validation split, for fast cache tests."""
    monkeypatch.setitem(tasks.MT_SIZES, "validation", 60)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """load_task(name, split) for the toy tasks, each split generated once per module."""
    loaded, folder = {}, str(tmp_path_factory.mktemp("shared-cache"))

    def get(name, split):
        if (name, split) not in loaded:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("BILDLAB_CACHE", folder)
                loaded[name, split] = load_task(name, split)
        return loaded[name, split]

    return get


def digest(examples):
    return hashlib.sha256(json.dumps(examples).encode()).hexdigest()


# ---------------------------------------------------------------------------
# API, sizes, determinism, splits


@pytest.mark.parametrize("name", TOY_TASKS)
@pytest.mark.parametrize("split", SPLITS)
def test_split_sizes_and_types(data, name, split):
    examples = data(name, split)
    assert len(examples) == TOY_SIZES[name][split]
    assert all(set(e) == {"source", "target"} for e in examples)
    assert all(isinstance(e["source"], str) and isinstance(e["target"], str) for e in examples)
    assert len({e["source"] for e in examples}) == len(examples)  # no duplicate sources


@pytest.mark.parametrize("name", TOY_TASKS)
def test_splits_do_not_overlap(data, name):
    train = {e["source"] for e in data(name, "train")}
    validation = {e["source"] for e in data(name, "validation")}
    test = {e["source"] for e in data(name, "test")}
    assert not train & validation
    assert not train & test
    assert not validation & test
    assert all(tasks.split_bucket(s) in tasks.SPLIT_BUCKETS["train"] for s in train)


@pytest.mark.parametrize("name", TOY_TASKS)
def test_pinned_validation_digest(data, name):
    # the same call gives the same data on every machine and run
    assert digest(data(name, "validation")) == VALIDATION_DIGESTS[name]


def test_deterministic_across_calls_and_cleared_cache(small, cache, monkeypatch):
    first = load_task("toy-mt", "validation")
    path = tasks.cache_path("toy-mt", "validation")
    assert path == os.path.join(str(cache), "tasks", f"toy-mt-validation-v{tasks.VERSION}.jsonl")
    assert os.path.isfile(path)
    assert load_task("toy-mt", "validation") == first  # from the cache
    os.remove(path)
    assert load_task("toy-mt", "validation") == first  # regenerated
    assert first == tasks.generate_toy_split("toy-mt", "validation")
    assert first != tasks.generate_toy_split("toy-mt", "test")[:60]
    # generation is sequential: a smaller split is a prefix of a larger one
    monkeypatch.setitem(tasks.MT_SIZES, "validation", 30)
    assert tasks.generate_toy_split("toy-mt", "validation") == first[:30]


def test_limit(small):
    examples = load_task("toy-mt", "validation")
    assert load_task("toy-mt", "validation", limit=7) == examples[:7]
    assert load_task("toy-mt", "validation", limit=10**6) == examples


def test_cache_file_is_read(small):
    examples = load_task("toy-mt", "validation")
    path = tasks.cache_path("toy-mt", "validation")
    edited = [{"source": "x .", "target": "y ."}] + examples[1:]
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(e) + "\n" for e in edited)
    assert load_task("toy-mt", "validation") == edited


@pytest.mark.parametrize(
    "garbage",
    [
        '{"source": "a", "targ',
        "not json at all\n",
        "",
        '{"source": 1}\n',
        b"\xff\xfe\x00".decode("latin-1"),
    ],
)
def test_corrupt_cache_is_regenerated(small, garbage):
    expected = load_task("toy-mt", "validation")
    path = tasks.cache_path("toy-mt", "validation")
    with open(path, "w", encoding="utf-8") as f:
        f.write(garbage)
    assert load_task("toy-mt", "validation") == expected
    with open(path, encoding="utf-8") as f:  # and the file is whole again
        assert [json.loads(line) for line in f] == expected
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # no temp files left


def test_truncated_cache_is_regenerated(small):
    expected = load_task("toy-mt", "validation")
    assert len(expected) == 60
    path = tasks.cache_path("toy-mt", "validation")
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines[:30])
    assert load_task("toy-mt", "validation") == expected


def test_default_cache_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("BILDLAB_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert tasks.cache_dir() == os.path.join(str(tmp_path), ".cache", "bildlab", "tasks")


def test_task_lists_and_metrics():
    assert TOY_TASKS == ("toy-mt", "toy-sum")
    assert PAPER_TASKS == ("iwslt2017-de-en", "wmt14-de-en", "xsum", "cnn_dailymail")
    assert [task_metric(n) for n in TOY_TASKS + PAPER_TASKS] == [
        "bleu",
        "rougeL",
        "bleu",
        "bleu",
        "rougeL",
        "rougeL",
    ]


def test_bad_arguments(cache):
    with pytest.raises(
        ValueError,
        match="unknown task 'toy-xx'; known tasks: toy-mt, toy-sum, "
        "iwslt2017-de-en, wmt14-de-en, xsum, cnn_dailymail",
    ):
        load_task("toy-xx", "train")
    with pytest.raises(ValueError, match="unknown task 'nope'.*toy-mt"):
        task_metric("nope")
    with pytest.raises(ValueError, match="split must be one of train, validation, test; got 'dev'"):
        load_task("toy-mt", "dev")
    with pytest.raises(ValueError, match="split must be one of train, validation, test"):
        load_task("xsum", "valid")
    for limit in (0, -3):
        with pytest.raises(ValueError, match=f"limit must be a positive int or None; got {limit}"):
            load_task("toy-mt", "validation", limit=limit)
    for limit in ("10", 2.0, True):
        with pytest.raises(TypeError, match="limit must be a positive int or None; got"):
            load_task("toy-mt", "validation", limit=limit)
    with pytest.raises(ValueError, match="data_files: only for the paper tasks"):
        load_task("toy-mt", "validation", data_files="x.jsonl")
    with pytest.raises(ValueError, match="name must be one of toy-mt, toy-sum"):
        tasks.generate_toy_split("xsum", "train")


# ---------------------------------------------------------------------------
# toy-mt


def mt_forms():
    """Lookup tables from word forms to lexicon entries."""
    lex = tasks.mt_lexicon()
    src_verb, tgt_verb = {}, {}
    for i, v in enumerate(lex["verbs"]):
        for tense, endings in toy_mt.SRC_VERB_ENDINGS.items():
            for p, ending in enumerate(endings):
                src_verb[v["src"] + ending] = (i, tense, toy_mt.PERSONS[p])
        for forms in v["senses"].values():
            for slot, form in enumerate(forms):
                tgt_verb[form] = slot
    for idiom in lex["verb_idioms"]:
        for slot, form in enumerate(idiom["tgt"]):
            tgt_verb[form] = slot
    src_adj = {
        a["src"] + s: i for i, a in enumerate(lex["adjs"]) for s in toy_mt.SRC_SUFFIX.values()
    }
    tgt_adj = {form: i for i, a in enumerate(lex["adjs"]) for form in a["tgt"]}
    src_noun = {
        n["src"] + toy_mt.SRC_SUFFIX[n["gender"], num]: i
        for i, n in enumerate(lex["nouns"])
        for num in ("sg", "pl")
    }
    tgt_noun = {form: i for i, n in enumerate(lex["nouns"]) for form in n["tgt"]}
    return dict(
        src_verb=src_verb,
        tgt_verb=tgt_verb,
        src_adj=src_adj,
        tgt_adj=tgt_adj,
        src_noun=src_noun,
        tgt_noun=tgt_noun,
    )


def test_mt_lexicon_is_deterministic_and_unambiguous():
    lex = toy_mt._build_mt_lexicon()
    assert lex == toy_mt._build_mt_lexicon()
    assert len(lex["nouns"]) == toy_mt.N_NOUNS
    assert (
        len(lex["verbs"])
        == toy_mt.N_INTRANSITIVE + toy_mt.N_CLAUSAL + toy_mt.N_TRANSITIVE + toy_mt.N_POLYSEMOUS
    )
    n_lexemes = sum(
        len(lex[k]) for k in ("nouns", "adjs", "advs", "verbs", "verb_idioms", "compounds")
    )
    # v2: about 330 lemmas + 70 multi-word expressions (learnable by the toy zoo in an hour)
    assert n_lexemes > 350
    # every target form belongs to exactly one lexeme
    lexemes = [n["tgt"] for n in lex["nouns"]] + [a["tgt"] for a in lex["adjs"]]
    lexemes += [(a["tgt"],) for a in lex["advs"]] + [c["tgt"] for c in lex["compounds"]]
    lexemes += [f for v in lex["verbs"] for f in set(v["senses"].values())]
    lexemes += [i["tgt"] for i in lex["verb_idioms"]]
    forms = [f for lexeme in lexemes for f in lexeme]
    assert len(forms) == len(set(forms))
    assert all(re.fullmatch("[a-z]+", f) for f in forms)


def test_mt_format_and_lengths(data):
    targets = [e["target"].split() for e in data("toy-mt", "train")]
    for e in data("toy-mt", "train")[:2000]:
        for text in (e["source"], e["target"]):
            assert re.fullmatch(r"[a-z,]+( [a-z,]+)* \.", text), text
    lengths = [len(t) for t in targets]
    assert min(lengths) >= 4 and max(lengths) <= 40
    assert max(lengths) >= 35  # a real spread of lengths
    assert sum(n <= 8 for n in lengths) > 0.1 * len(lengths)
    assert sum(n >= 20 for n in lengths) > 0.05 * len(lengths)
    assert 10 <= statistics.median(lengths) <= 16


def test_mt_target_vocabulary_size(data):
    source = {w for e in data("toy-mt", "train") for w in e["source"].split()}
    vocab = collections.Counter(w for e in data("toy-mt", "train") for w in e["target"].split())
    assert 800 <= len(vocab) <= 1500
    # a few thousand word forms in the two languages
    assert 2500 <= len(source | set(vocab)) <= 4000
    assert sum(c >= 5 for c in vocab.values()) > 0.9 * len(vocab)  # most forms are learnable


def test_mt_polysemous_verbs_depend_on_object_class(data):
    lex, forms = tasks.mt_lexicon(), mt_forms()
    poly = {i for i, v in enumerate(lex["verbs"]) if v["poly"]}
    assert len(poly) == toy_mt.N_POLYSEMOUS
    assert all(len(set(lex["verbs"][i]["senses"].values())) >= 2 for i in poly)
    seen = collections.defaultdict(set)  # source verb -> target verbs in sentences using it
    for e in data("toy-mt", "train"):
        verbs = {forms["src_verb"][w][0] for w in e["source"].split() if w in forms["src_verb"]}
        for i in verbs & poly:
            for sense in lex["verbs"][i]["senses"].values():
                if set(sense) & set(e["target"].split()):
                    seen[i].add(sense[0])
    assert sum(len(translations) >= 2 for translations in seen.values()) >= toy_mt.N_POLYSEMOUS - 1


def test_mt_postposition_depends_on_noun_class(data):
    seen = collections.Counter()
    for e in data("toy-mt", "validation") + data("toy-mt", "test"):
        if " ka " in e["source"] + " ":
            seen.update(w for w in e["target"].split() if w in ("inne", "unner", "hos"))
    assert set(seen) == {"inne", "unner", "hos"}


def test_mt_adjectives_follow_the_noun_in_source_and_precede_it_in_target():
    forms = mt_forms()
    gen = toy_mt.MTGenerator(tasks.mt_lexicon(), random.Random(0))
    checked = 0
    for _ in range(2000):
        src, tgt, number = gen.noun_phrase(random.Random(_).choice(toy_mt.NOUN_CLASSES))
        if src[1] not in forms["src_noun"] or len(src) < 3 or src[2] not in forms["src_adj"]:
            continue  # no adjective, or a compound
        src_adjs = [forms["src_adj"][w] for w in src[2:]]
        tgt_adjs = [forms["tgt_adj"][w] for w in tgt[1:-1]]
        assert tgt_adjs == src_adjs[::-1]
        assert forms["tgt_noun"][tgt[-1]] == forms["src_noun"][src[1]]
        assert number in ("sg", "pl")
        checked += len(src_adjs) == 2
    assert checked > 50


def test_mt_subordinate_clauses_are_verb_final_in_source_only(data):
    forms = mt_forms()
    subordinators = {s for s, _ in toy_mt.SUBORDINATORS}
    final, target_final, fronted = 0, 0, 0
    for e in data("toy-mt", "validation") + data("toy-mt", "test"):
        src, tgt = e["source"].split(), e["target"].split()
        if src[0] in subordinators:  # fronted clause: verb-final, then a verb-first main clause
            comma = src.index(",")
            assert src[comma - 1] in forms["src_verb"]
            assert src[comma + 1] in forms["src_verb"]
            t_comma = tgt.index(",")
            assert tgt[t_comma + 1] not in forms["tgt_verb"]  # the target keeps subject first
            fronted += 1
        elif any(src[i] == "," and src[i + 1] in subordinators for i in range(len(src) - 1)):
            assert src[-2] in forms["src_verb"]
            final += 1
            target_final += tgt[-2] in forms["tgt_verb"]
    assert fronted > 50 and final > 100
    assert target_final < 0.5 * final  # target verbs are followed by their objects


def test_mt_subject_verb_agreement_and_pro_drop(data):
    forms = mt_forms()
    third = {f for v in tasks.mt_lexicon()["verbs"] for s in v["senses"].values() for f in s[1:2]}
    third |= {i["tgt"][1] for i in tasks.mt_lexicon()["verb_idioms"]}
    dropped = 0
    for e in data("toy-mt", "train")[:20000]:
        src, tgt = e["source"].split(), e["target"].split()
        if tgt[0] in ("han", "hun", "hit"):  # 3sg pronoun: 3sg or past verb, or an auxiliary
            assert tgt[1] in ("nie", "wil") or forms["tgt_verb"].get(tgt[1]) in (1, 2)
        if tgt[0] in ("ik", "du", "wie", "jie", "thei"):
            assert tgt[1] not in third
        if tgt[0] == "ik" and src[0] != "mi":  # the dropped 1sg subject is in the verb ending
            dropped += 1
            persons = {forms["src_verb"][w][2] for w in src if w in forms["src_verb"]}
            assert (1, "sg") in persons
    assert dropped > 100


def test_mt_multiword_expressions(data):
    lex = tasks.mt_lexicon()
    src_verb, src_noun = mt_forms()["src_verb"], mt_forms()["src_noun"]
    idioms = {
        (lex["verbs"][i["verb"]]["src"], lex["nouns"][i["noun"]]["src"]): i["tgt"]
        for i in lex["verb_idioms"]
    }
    compounds = {(c["head"], lex["nouns"][c["mod"]]["src"]): c["tgt"] for c in lex["compounds"]}
    adverbials = {
        (lex["nouns"][i["noun"]]["src"], toy_mt.POSTPOSITIONS[i["post"]][0]): " ".join(i["tgt"])
        for i in lex["adv_idioms"]
    }
    found = collections.Counter()
    for e in data("toy-mt", "train")[:20000]:
        src, tgt = e["source"].split(), set(e["target"].split())
        for a, b in zip(src, src[1:]):
            if a in src_verb and (lex["verbs"][src_verb[a][0]]["src"], b) in idioms:
                # verb + bare noun idiom: one target verb
                assert tgt & set(idioms[lex["verbs"][src_verb[a][0]]["src"], b])
                found["verb"] += 1
            if (src_noun.get(a), b) in compounds:  # inflected noun + bare noun: one target noun
                assert tgt & set(compounds[src_noun[a], b])
                found["compound"] += 1
            if (a, b) in adverbials:  # bare noun + postposition: a one- or two-word phrase
                assert adverbials[a, b] in e["target"]
                found["adverbial"] += 1
    assert found["verb"] > 300 and found["compound"] > 300 and found["adverbial"] > 100


# ---------------------------------------------------------------------------
# toy-sum


def test_sum_lengths(data):
    examples = data("toy-sum", "train")
    summary_words = [len(e["target"].split()) for e in examples]
    assert max(summary_words) <= 60 and min(summary_words) >= 8
    assert 15 <= statistics.median(summary_words) <= 40
    assert max(summary_words) - min(summary_words) >= 15
    for e in examples[:3000]:
        assert 3 <= len(split_sentences(e["source"])) <= 5
        assert 1 <= len(split_sentences(e["target"])) <= 2
        assert "\n" not in e["target"]
    two = sum(len(split_sentences(e["target"])) == 2 for e in examples) / len(examples)
    assert 0.2 < two < 0.8


def test_sum_summary_facts_come_from_the_document(data):
    def strip(w):
        return re.sub(r"('s)?[.,;:\"']*$", "", w.strip("\"'"))

    for e in data("toy-sum", "validation") + data("toy-sum", "test"):
        doc = {strip(w) for w in e["source"].split()}
        for sentence in split_sentences(e["target"]):
            words = [strip(w) for w in sentence.split()]
            for i, w in enumerate(words):
                if any(ch.isdigit() for ch in w) or (i > 0 and w[:1].isupper()):
                    assert w in doc, (w, e)


def test_sum_documents_have_distractors(data):
    examples = data("toy-sum", "validation")

    def numbers(text):
        return set(re.findall(r"\d[\d,]*\d|\d", text))

    # most documents (3-5 sentences) hold a number that the summary leaves out, many hold two
    distractors = [len(numbers(e["source"]) - numbers(e["target"])) for e in examples]
    assert sum(n >= 1 for n in distractors) > 0.75 * len(examples)
    assert sum(n >= 2 for n in distractors) > 0.4 * len(examples)
    # the salient sentence is not always first
    moved = sum(
        not set(e["target"].split()[:3]) & set(split_sentences(e["source"])[0].split())
        for e in examples
    )
    assert moved > 0.1 * len(examples)
    assert len({e["target"].split()[0] for e in examples}) > 50


def test_sum_templates_only_use_document_slots():
    gen = toy_sum.SumGenerator(tasks.sum_lexicon(), random.Random(0))
    for event in toy_sum.SUM_EVENTS:
        known = set(gen.facts(event))
        assert len(event["lead"]) == len(event["summary"])
        for lead, summary in zip(event["lead"], event["summary"]):
            assert toy_sum._slots(summary) <= toy_sum._slots(lead), event["name"]
        for doc, summary in event["extras"]:
            assert toy_sum._slots(summary) <= toy_sum._slots(doc), event["name"]
        texts = (
            list(event["lead"])
            + [t for pair in event["extras"] for t in pair]
            + list(event["other"])
        )
        assert set().union(*map(toy_sum._slots, texts)) <= known
    assert set().union(*map(toy_sum._slots, toy_sum.SUM_FILLERS + toy_sum.SUM_OPENINGS)) <= known


# ---------------------------------------------------------------------------
# paper tasks: plumbing only, against local stand-in files (never the network)


@pytest.fixture
def offline(cache, monkeypatch):
    monkeypatch.delenv("BILDLAB_MIRROR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return path


@pytest.mark.parametrize("name", ["iwslt2017-de-en", "wmt14-de-en"])
def test_translation_stand_in(offline, tmp_path, name):
    rows = [{"translation": {"de": f"Satz {i} .", "en": f"Sentence {i} ."}} for i in range(5)]
    path = write_jsonl(tmp_path / "raw.jsonl", rows)
    expected = [{"source": f"Satz {i} .", "target": f"Sentence {i} ."} for i in range(5)]
    assert load_task(name, "test", data_files=str(path)) == expected
    assert load_task(name, "validation", limit=2, data_files=path) == expected[:2]


def test_xsum_stand_in_json(offline, tmp_path):
    rows = [
        {"document": "A long story. More text.", "summary": "Short.", "id": "1"},
        {"document": "Another story.", "summary": "Brief.", "id": "2"},
    ]
    path = tmp_path / "xsum.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    assert load_task("xsum", "test", data_files=path) == [
        {"source": "A long story. More text.", "target": "Short."},
        {"source": "Another story.", "target": "Brief."},
    ]


def test_cnn_dailymail_stand_in_csv(offline, tmp_path):
    path = tmp_path / "cnn.csv"
    path.write_text(
        'id,article,highlights\n1,"An article, with a comma.",Highlight one.\n'
        "2,Second article.,Highlight two.\n",
        encoding="utf-8",
    )
    assert load_task("cnn_dailymail", "train", data_files=path) == [
        {"source": "An article, with a comma.", "target": "Highlight one."},
        {"source": "Second article.", "target": "Highlight two."},
    ]


def test_stand_in_files_are_the_whole_split(offline, tmp_path):
    # several files are read in order; empty rows dropped; the row count checked when declared
    a = write_jsonl(
        tmp_path / "a.jsonl",
        [{"document": "d1", "summary": "s1"}, {"document": " ", "summary": "s"}],
    )
    b = write_jsonl(tmp_path / "b.jsonl", [{"document": "d2", "summary": "s2"}])
    assert load_task("xsum", "validation", data_files=[a, b]) == [
        {"source": "d1", "target": "s1"},
        {"source": "d2", "target": "s2"},
    ]
    with pytest.raises(ValueError, match="xsum validation: 3 rows in a.jsonl, b.jsonl, expected 4"):
        load_task("xsum", "validation", data_files=[a, b], rows=4)
    with pytest.raises(ValueError, match=r"xsum: row 0 has no column document; it has \['text'\]"):
        load_task(
            "xsum", "validation", data_files=write_jsonl(tmp_path / "c.jsonl", [{"text": "x"}])
        )


def test_paper_task_bad_data_files(offline, tmp_path):
    with pytest.raises(
        ValueError, match=r"data_files must end in .parquet, .jsonl, .json, .csv; got '.*raw.txt'"
    ):
        load_task("xsum", "test", data_files=str(tmp_path / "raw.txt"))
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_task("xsum", "test", data_files=str(tmp_path / "missing.jsonl"))
