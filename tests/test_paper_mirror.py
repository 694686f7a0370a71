"""The paper profile offline, on a local mirror built here: tiny random T5/mT5-shaped models under
the real kssteven repo ids, tiny tokenizers under the real tokenizer ids (google/mt5-small: a
sentencepiece model only, as on the hub; google-t5/t5-small: tokenizer.json), and a few rows per
dataset in each repo's real parquet layout, including an IWSLT export with several language pairs in
both of the parquet converter's layouts."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import transformers as tf

from bildlab.harness.registry import Registry
from bildlab.world import mirror, models, tasks
from bildlab.world.tasks import load_task, provenance

ROOT = Path(__file__).resolve().parent.parent
LONG = " ".join(f"Word{i} is here." for i in range(700))  # far more than 1024 tokens
COMMIT = "0123456789abcdef0123456789abcdef01234567"

# the validation splits have the published row counts (short rows: the data stays small), other
# splits a few rows
FULL = {"iwslt2017-de-en": 888, "wmt14-de-en": 3000, "xsum": 11332, "cnn_dailymail": 13368}
# the XSum rows with an empty document (5, as in the real validation split)
EMPTY = (1, 7, 100, 5000, 11331)


def write_parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def translation(pair: str, n: int, tag: str) -> list[dict]:
    src, tgt = pair.split("-")
    return [
        {"translation": {src: f"{tag} {src} satz {i} .", tgt: f"{tag} {tgt} sentence {i} ."}}
        for i in range(n)
    ]


def build_datasets(root: Path) -> None:
    # IWSLT/iwslt2017 at refs/convert/parquet: one folder per language pair; de-en and en-de in the
    # current layout ({config}/{split}/0000.parquet), nl-ro still in the old one
    # ({config}/{dataset}-{split}.parquet)
    iwslt = root / "IWSLT" / "iwslt2017"
    write_parquet(
        iwslt / "iwslt2017-de-en" / "validation" / "0000.parquet", translation("de-en", 888, "deen")
    )
    write_parquet(
        iwslt / "iwslt2017-de-en" / "test" / "0000.parquet", translation("de-en", 2, "deen-test")
    )
    write_parquet(
        iwslt / "iwslt2017-en-de" / "validation" / "0000.parquet", translation("en-de", 888, "ende")
    )
    write_parquet(
        iwslt / "iwslt2017-nl-ro" / "iwslt2017-validation.parquet", translation("nl-ro", 3, "nlro")
    )
    # a large split that the converter converted in part only: {config}/partial-{split}/0000.parquet
    write_parquet(
        iwslt / "iwslt2017-de-en" / "partial-train" / "0000.parquet",
        translation("de-en", 4, "deen-train"),
    )
    # wmt/wmt14 (main): {config}/{split}-00000-of-00001.parquet, other configs beside it
    wmt = root / "wmt" / "wmt14"
    write_parquet(
        wmt / "de-en" / "validation-00000-of-00001.parquet", translation("de-en", 3000, "wmt")
    )
    write_parquet(
        wmt / "de-en" / "train-00000-of-00003.parquet", translation("de-en", 5, "wmt-train")
    )
    write_parquet(
        wmt / "fr-en" / "validation-00000-of-00001.parquet", translation("fr-en", 3, "wmt-fr")
    )
    # EdinburghNLP/xsum at refs/convert/parquet, old converter layout; one empty document; a
    # download record
    xsum = root / "EdinburghNLP" / "xsum"
    docs = [
        {"document": f"Story {i}. Rain fell all day.", "summary": f"Rain {i}.", "id": str(i)}
        for i in range(11332)
    ]
    docs[0] = {"document": LONG, "summary": "Many words.", "id": "0"}
    for i in EMPTY:
        docs[i]["document"] = ""
    write_parquet(xsum / "default" / "xsum-validation.parquet", docs)
    record = (
        xsum
        / ".cache"
        / "huggingface"
        / "download"
        / "default"
        / "xsum-validation.parquet.metadata"
    )
    record.parent.mkdir(parents=True)
    record.write_text(f"{COMMIT}\netag\n1700000000.0\n")
    # abisee/cnn_dailymail (main): {config}/{split}-00000-of-00001.parquet; 1.0.0 beside it
    cnn = root / "abisee" / "cnn_dailymail"
    rows = [
        {
            "article": f"Article {i} text. More text.",
            "highlights": f"Point {i} .\nSecond point {i} .",
            "id": str(i),
        }
        for i in range(13368)
    ]
    write_parquet(cnn / "3.0.0" / "validation-00000-of-00001.parquet", rows)
    write_parquet(cnn / "1.0.0" / "validation-00000-of-00001.parquet", rows[:1])


def train_spm(path: Path, text: list[str], vocab: int) -> None:
    import sentencepiece as spm

    corpus = path.parent / "corpus.txt"
    corpus.write_text("\n".join(text) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(path.with_suffix("")),
        vocab_size=vocab,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    corpus.unlink()
    path.with_suffix(".vocab").unlink()


def build_tokenizers(root: Path) -> dict:
    import random

    rng = random.Random(0)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8)))
        for _ in range(400)
    ]
    text = (
        [
            f"deen de satz {i} . deen en sentence {i} . summarize: Article {i} text. Word{i} is here."
            for i in range(50)
        ]
        + ["The U.S. team won. Fans cheered. Rain fell all day in the city. Point Second More"]
        + [" ".join(words[i : i + 10]) for i in range(0, 400, 10)]
    )
    # google/mt5-small: the hub repo holds a sentencepiece model and configs only (no
    # tokenizer.json)
    mt5 = root / "google" / "mt5-small"
    mt5.mkdir(parents=True)
    train_spm(mt5 / "spiece.model", text, 120)
    (mt5 / "config.json").write_text(json.dumps({"model_type": "mt5", "vocab_size": 250112}))
    (mt5 / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "T5Tokenizer", "extra_ids": 0})
    )
    # google-t5/t5-small: a tokenizers-json tokenizer, saved with save_pretrained
    t5 = root / "google-t5" / "t5-small"
    tmp = root / "spm-t5"
    tmp.mkdir()
    train_spm(tmp / "spiece.model", text, 100)
    (tmp / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "T5Tokenizer", "extra_ids": 10})
    )
    tf.AutoTokenizer.from_pretrained(str(tmp)).save_pretrained(t5)
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    assert (t5 / "tokenizer.json").is_file()
    return {"google/mt5-small": 120, "google-t5/t5-small": 110}


# how each pair's checkpoints are stored, as on the hub: mT5 has its own output layer (`lm_head`,
# config tie_word_embeddings false), T5 ties it to the input embeddings; older repos hold a
# pytorch_model.bin (every tied name saved, sharing storage) and no generation_config.json, newer
# ones a model.safetensors
UNTIED = {"iwslt2017-de-en": True, "wmt14-de-en": True, "xsum": False, "cnn_dailymail": False}
FORMAT = {
    "iwslt2017-de-en": "safetensors",
    "wmt14-de-en": "bin",
    "xsum": "bin",
    "cnn_dailymail": "safetensors",
}


def build_models(root: Path, sizes: dict) -> None:
    for pair, repos in models.PAPER_PAIRS.items():
        # padded like the real checkpoints (32,128 vs 32,100)
        vocab = sizes[models.PAPER_TOKENIZERS[pair]] + 12
        for i, repo_id in enumerate(repos):
            torch.manual_seed(i)
            common = dict(
                vocab_size=vocab,
                d_model=16,
                d_ff=32,
                num_heads=2,
                d_kv=8,
                num_layers=2 if i == 0 else 1,
                num_decoder_layers=2 if i == 0 else 1,
                decoder_start_token_id=0,
                eos_token_id=1,
                pad_token_id=0,
            )
            folder = root / repo_id
            if UNTIED[pair]:
                model = tf.MT5ForConditionalGeneration(tf.MT5Config(**common))
                # its own, unlike the embeddings
                model.lm_head.weight = torch.nn.Parameter(torch.randn(vocab, 16))
            else:
                model = tf.T5ForConditionalGeneration(tf.T5Config(**common))
            model.save_pretrained(folder)
            if UNTIED[pair]:  # what the real mT5 repos' config.json says
                config = json.loads((folder / "config.json").read_text())
                (folder / "config.json").write_text(
                    json.dumps({**config, "tie_word_embeddings": False})
                )
            if FORMAT[pair] == "bin":
                (folder / "model.safetensors").unlink()
                (folder / "generation_config.json").unlink()
                torch.save(model.state_dict(), folder / "pytorch_model.bin")
    record = (
        root
        / models.PAPER_PAIRS["xsum"][0]
        / ".cache"
        / "huggingface"
        / "download"
        / "config.json.metadata"
    )
    record.parent.mkdir(parents=True)
    record.write_text(f"{COMMIT}\netag\n1700000000.0\n")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("mirror")
    build_datasets(root)
    build_models(root, build_tokenizers(root))
    return root


@pytest.fixture
def mirrored(hub, monkeypatch):
    monkeypatch.setenv(mirror.MIRROR_ENV, str(hub))
    return hub


# ---------------------------------------------------------------------------------------------------------------------
# datasets


def test_iwslt_loads_de_en_only(mirrored):
    # the row count checked is the published 888
    examples = load_task("iwslt2017-de-en", "validation")
    assert examples == [
        {"source": f"deen de satz {i} .", "target": f"deen en sentence {i} ."} for i in range(888)
    ]
    assert load_task("iwslt2017-de-en", "test", rows=2, limit=1) == [
        {"source": "deen-test de satz 0 .", "target": "deen-test en sentence 0 ."}
    ]
    # the language pair's folder keeps en-de (and the other pairs) out
    with pytest.raises(FileNotFoundError, match="no file matches"):
        load_task("iwslt2017-de-en", "validation", data_dir="iwslt2017-xx-yy")


def test_row_counts_are_checked(mirrored):
    with pytest.raises(
        ValueError,
        match=r"iwslt2017-de-en test: 2 rows in iwslt2017-de-en/test/0000.parquet, "
        r"expected 8079 \(the full split\)",
    ):
        # the count is of the whole split, whatever the limit
        load_task("iwslt2017-de-en", "test", limit=1)
    with pytest.raises(ValueError, match="wmt14-de-en validation: 3000 rows .* expected 5"):
        # a declared count (e.g. of a partial mirror)
        load_task("wmt14-de-en", "validation", rows=5)
    # both pairs' files read together (data_dir "" matches every folder's split with the glob) would
    # be caught
    with pytest.raises(ValueError, match="1776 rows .* expected 888"):
        load_task("iwslt2017-de-en", "validation", data_dir="*", rows=888)
    # the counts the plan reads are the examples the loader yields from the full splits (XSum: 5
    # empty rows dropped)
    assert {t: len(load_task(t, "validation")) for t in FULL} == {
        t: tasks.SOURCES[t].rows["validation"] for t in FULL
    }
    assert tasks.SOURCES["xsum"].rows["validation"] == 11327


def test_a_partly_converted_split_is_found_and_its_size_checked(mirrored):
    assert load_task("iwslt2017-de-en", "train", rows=4, limit=1) == [
        {"source": "deen-train de satz 0 .", "target": "deen-train en sentence 0 ."}
    ]
    assert provenance("iwslt2017-de-en", "train", rows=4)["files"] == [
        "iwslt2017-de-en/partial-train/0000.parquet"
    ]
    with pytest.raises(
        ValueError,
        match=r"4 rows in iwslt2017-de-en/partial-train/0000.parquet, expected 206112 "
        r"\(the full split\); another revision or a partial copy",
    ):
        load_task("iwslt2017-de-en", "train")


def test_xsum_with_another_count_of_empty_documents_is_caught(tmp_path):
    docs = [
        {"document": "" if i < 4 else f"Story {i}.", "summary": f"Rain {i}.", "id": str(i)}
        for i in range(11332)
    ]
    write_parquet(
        tmp_path / "EdinburghNLP" / "xsum" / "default" / "validation" / "0000.parquet", docs
    )
    with pytest.raises(
        ValueError, match="xsum validation: 4 rows with an empty source or target, expected 5"
    ):
        load_task("xsum", "validation", mirror=tmp_path)


def test_wmt_reads_only_its_config_and_split(mirrored):
    examples = load_task("wmt14-de-en", "validation", limit=3)
    assert [e["source"] for e in examples] == [f"wmt de satz {i} ." for i in range(3)]
    info = provenance("wmt14-de-en", "validation")
    assert info["files"] == ["de-en/validation-00000-of-00001.parquet"]
    assert (info["origin"], info["repo"], info["revision"], info["resolved"]) == (
        "mirror",
        "wmt/wmt14",
        "main",
        None,
    )
    assert info["rows"] == 3000


def test_xsum_drops_empty_documents_and_records_the_commit(mirrored):
    examples = load_task("xsum", "validation")
    assert len(examples) == 11327  # 11332 rows, 5 empty documents dropped (as in the real split)
    kept = [i for i in range(11332) if i not in EMPTY]
    assert [e["target"] for e in examples[1:]] == [f"Rain {i}." for i in kept[1:]]
    info = provenance("xsum", "validation")
    assert info["files"] == ["default/xsum-validation.parquet"]
    assert info["revision"] == "refs/convert/parquet" and info["resolved"] == COMMIT
    assert (
        info["rows"] == 11332
        and info["preprocessing"] == tasks.PREPROCESSING
        and len(info["sha256"]) == 64
    )


def test_cnn_dailymail_config_and_highlights(mirrored):
    examples = load_task("cnn_dailymail", "validation", limit=2)
    assert examples[0] == {
        "source": "Article 0 text. More text.",
        "target": "Point 0 .\nSecond point 0 .",
    }
    assert len(load_task("cnn_dailymail", "validation", data_dir="1.0.0", rows=1)) == 1


def test_mirror_argument_and_missing_repo(hub, tmp_path, monkeypatch):
    monkeypatch.delenv(mirror.MIRROR_ENV, raising=False)
    assert len(load_task("wmt14-de-en", "validation", mirror=hub)) == 3000
    with pytest.raises(FileNotFoundError, match="'wmt/wmt14' is not in the mirror"):
        load_task("wmt14-de-en", "validation", mirror=tmp_path)
    with pytest.raises(FileNotFoundError, match="mirror: no such folder"):
        load_task("wmt14-de-en", "validation", mirror=tmp_path / "nope")
    monkeypatch.setenv(mirror.MIRROR_ENV, str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match=r"\$BILDLAB_MIRROR: no such folder"):
        load_task("xsum", "validation")


def test_bad_overrides():
    with pytest.raises(ValueError, match="unknown source override"):
        load_task("xsum", "validation", config="default")
    with pytest.raises(ValueError, match="rows must be a positive int or None; got 0"):
        load_task("xsum", "validation", rows=0)
    with pytest.raises(ValueError, match=r"mirror: only for the paper tasks"):
        load_task("toy-mt", "validation", mirror="x")
    assert provenance("toy-mt") == {"task": "toy-mt", "version": tasks.VERSION}


def test_hub_route_fetches_only_the_split(monkeypatch, tmp_path):
    # without a mirror the split's files come from huggingface_hub.snapshot_download, restricted to
    # the split
    import huggingface_hub

    monkeypatch.delenv(mirror.MIRROR_ENV, raising=False)
    calls = []

    def fake_snapshot_download(repo_id, repo_type=None, revision=None, allow_patterns=None):
        calls.append((repo_id, repo_type, revision, allow_patterns))
        folder = tmp_path / "snapshots" / COMMIT
        write_parquet(
            folder / "iwslt2017-de-en" / "validation" / "0000.parquet",
            translation("de-en", 2, "hub"),
        )
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    assert len(load_task("iwslt2017-de-en", "validation", rows=2)) == 2
    assert calls == [
        (
            "IWSLT/iwslt2017",
            "dataset",
            "refs/convert/parquet",
            [
                "iwslt2017-de-en/validation/*.parquet",
                "iwslt2017-de-en/partial-validation/*.parquet",
                "iwslt2017-de-en/*-validation.parquet",
                "iwslt2017-de-en/*-validation-*-of-*.parquet",
            ],
        )
    ]
    assert provenance("iwslt2017-de-en", "validation", rows=2)["resolved"] == COMMIT


# ---------------------------------------------------------------------------------------------------------------------
# models and tokenizers


@pytest.mark.parametrize("pair, rows", [("iwslt2017-de-en", 120), ("xsum", 110)])
def test_paper_pair_from_the_mirror(mirrored, pair, rows):
    p = models.load_pair(pair)
    tokenizer_id = models.PAPER_TOKENIZERS[pair]
    assert len(p.tokenizer) == rows
    # embeddings and output layer cut to the tokenizer (the paper's code)
    for model in (p.large, p.small):
        assert model.get_input_embeddings().num_embeddings == rows
        assert model.get_output_embeddings().out_features == rows
    unresized = models.load_pair(pair, resize_embeddings=False)
    assert unresized.large.get_input_embeddings().num_embeddings == rows + 12
    x = p.encode("deen de satz 1 .")
    assert x[0, -1].item() == p.tokenizer.eos_token_id
    assert p.prefix == ("summarize: " if pair == "xsum" else "")
    ids = p.tokenizer(p.prefix + "deen de satz 1 .", add_special_tokens=False)["input_ids"]
    assert x[0].tolist() == ids + [p.tokenizer.eos_token_id]
    long = p.encode(LONG)  # truncated to 1024 tokens, EOS last, prefix first
    assert (
        long.shape == (1, models.MAX_SOURCE_TOKENS)
        and long[0, -1].item() == p.tokenizer.eos_token_id
    )
    assert (
        long[0, : len(ids) - 6].tolist()
        == p.tokenizer(p.prefix + LONG, add_special_tokens=False)["input_ids"][: len(ids) - 6]
    )
    assert tokenizer_id in (("google/mt5-small",) if pair != "xsum" else ("google-t5/t5-small",))
    out = models.provenance(pair, "aligned")
    assert out["draft"]["repo"] == models.PAPER_PAIRS[pair][2]
    assert out["tokenizer"]["repo"] == tokenizer_id
    assert out["large"]["revision"] == (COMMIT if pair == "xsum" else None)
    assert (out["prefix"], out["max_source_tokens"], out["resize_embeddings"]) == (
        p.prefix,
        1024,
        True,
    )
    assert models.provenance("toy-mt", "early-exit") == {}


def raw_checkpoint(folder: Path):
    """A repo's model exactly as its files hold it, without from_pretrained's loading: the weights
    file read as it is, the output layer its own wherever the file has one that differs from the
    input embeddings."""
    config = tf.AutoConfig.from_pretrained(folder)
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file

        state = load_file(folder / "model.safetensors")
    else:
        state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    cls = (
        tf.MT5ForConditionalGeneration
        if config.model_type == "mt5"
        else tf.T5ForConditionalGeneration
    )
    model = cls(config).eval()
    untied = "lm_head.weight" in state and not torch.equal(
        state["lm_head.weight"], state["shared.weight"]
    )
    if untied:
        model.lm_head = torch.nn.Linear(config.d_model, config.vocab_size, bias=False)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("embed_tokens" in k or k == "lm_head.weight" for k in missing), (
        missing,
        unexpected,
    )
    if not untied:
        assert model.lm_head.weight is model.shared.weight
    return model, untied


def logits(model) -> torch.Tensor:
    x, y = torch.tensor([[5, 9, 3, 7, 1]]), torch.tensor([[0, 4, 8, 2]])
    with torch.no_grad():
        return model(input_ids=x, decoder_input_ids=y).logits


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied weight counted once


@pytest.mark.parametrize("pair", list(models.PAPER_PAIRS))
def test_load_pair_keeps_each_checkpoints_output_layer(mirrored, pair):
    """mT5 keeps its own output layer, T5 its tied one, through load_pair's cut to the tokenizer's
    vocabulary (from .safetensors and .bin, with and without generation_config.json): the logits on
    the kept rows and the parameter counts are the raw checkpoint's."""
    resized, whole = models.load_pair(pair), models.load_pair(pair, resize_embeddings=False)
    rows = len(resized.tokenizer)
    for role, repo_id in (
        ("large", models.PAPER_PAIRS[pair][0]),
        ("small", models.PAPER_PAIRS[pair][1]),
    ):
        raw, untied = raw_checkpoint(mirrored / repo_id)
        assert untied == UNTIED[pair]  # the fixture is built like the real repos
        # rows dropped
        cut = (raw.config.vocab_size - rows) * raw.config.d_model * (2 if untied else 1)
        expected = logits(raw)
        for model, n, count in (
            (getattr(resized, role), rows, n_params(raw) - cut),
            (getattr(whole, role), raw.config.vocab_size, n_params(raw)),
        ):
            head, embed = model.get_output_embeddings(), model.get_input_embeddings()
            assert (head.weight is embed.weight) == (not untied), (repo_id, n)
            assert (
                head.weight.shape[0] == embed.weight.shape[0] == n and model.config.vocab_size == n
            )
            assert n_params(model) == count, repo_id
            out = logits(model)
            assert out.shape[-1] == n
            torch.testing.assert_close(out, expected[..., :n], atol=1e-5, rtol=0)
            if untied:  # the encoder and decoder still read the shared input embeddings
                assert (
                    model.encoder.embed_tokens.weight
                    is embed.weight
                    is model.decoder.embed_tokens.weight
                )


def test_cut_vocabulary_never_adds_rows():
    model = tf.T5ForConditionalGeneration(
        tf.T5Config(vocab_size=20, d_model=8, d_ff=16, num_heads=1, d_kv=8, num_layers=1)
    )
    with pytest.raises(
        ValueError, match="the tokenizer has 21 ids but repo/x has 20 embedding rows"
    ):
        models.cut_vocabulary(model, 21, "repo/x")  # the rows it would add have no trained weights
    models.cut_vocabulary(model, 20)  # nothing to cut
    assert model.config.vocab_size == 20 and model.lm_head.weight is model.shared.weight


def test_bild_runs_on_a_mirrored_pair(mirrored):
    import bildlab

    p = models.load_pair("cnn_dailymail", aligned=True)
    x = p.encode(load_task("cnn_dailymail", "validation", limit=1)[0]["source"])
    ref = p.large.generate(x, max_new_tokens=12, do_sample=False, num_beams=1, min_length=0)[
        0, 1:
    ].tolist()
    out = bildlab.generate(
        p.large, x, small=p.small, method="bild", max_new_tokens=12, rollback=0.0, fallback=0.0
    )
    assert out.tokens == ref[: len(out.tokens)] and len(out.tokens) == min(12, len(ref))


# ---------------------------------------------------------------------------------------------------------------------
# the paper profile end to end on the mirror (every notebook, tiny limits, CPU)

TINY = {
    "rq1_small_writes_most": {"pairs": ["iwslt2017-de-en", "xsum"], "fallbacks": [0.5]},
    "rq2_policies": {"fallbacks": [0.5], "rollbacks": [2.0]},
    "rq3_alignment": {"fallbacks": [0.5], "rollbacks": [2.0]},
    "rq4_early_exit": {"fallbacks": [0.5], "rollbacks": [2.0]},
    "rq5_main_table": {
        "pairs": ["wmt14-de-en", "cnn_dailymail"],
        "fallbacks": [0.5],
        "rollbacks": [2.0],
        "val_limit": 1,
        "passes": 1,
    },
    "speculative_pipeline": {"ks": [1], "reference_pairs": None},
}


def test_paper_params_use_the_papers_generation_length():
    import yaml

    for path in (ROOT / "params" / "paper").glob("*.yaml"):
        p = yaml.safe_load(path.read_text())
        if path.stem != "rq4_early_exit":  # rq4 runs on the toy zoo
            assert p["max_new_tokens"] == models.PAPER_MAX_NEW_TOKENS == 127, path.name


@pytest.mark.slow
def test_paper_profile_end_to_end_on_the_mirror(hub, tmp_path):
    import yaml

    params = tmp_path / "params" / "paper"
    params.mkdir(parents=True)
    for name, tiny in TINY.items():
        p = yaml.safe_load((ROOT / "params" / "paper" / f"{name}.yaml").read_text())
        p.update(
            tiny,
            limit=1,
            device="cpu",
            registry=str(tmp_path / "registry"),
            figures=str(tmp_path / "figures"),
        )
        if "val_limit" in p:  # the policy sweeps on validation, tiny too
            p["val_limit"] = 1
        # a short budget here (random models never stop): it reaches the records' keys
        if name != "rq4_early_exit":
            p["max_new_tokens"] = 12
        (params / f"{name}.yaml").write_text(yaml.safe_dump(p))
    env = {
        **os.environ,
        mirror.MIRROR_ENV: str(hub),
        "PYTHONPATH": str(ROOT),
        "BILDLAB_CACHE": str(tmp_path / "c"),
    }
    code = (
        "import sys; from bildlab.study import runner; runner.PARAMS = __import__('pathlib').Path(sys.argv[1]); "
        "from bildlab.cli import main; sys.exit(main(['study', '--profile', 'paper', '--out', sys.argv[2]]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "params"), str(tmp_path / "runs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "runs").glob("*.ipynb")) == sorted(
        f"{n}.ipynb" for n in TINY
    )
    records = Registry(tmp_path / "registry").records()
    paper = [r for r in records if r["key"]["pair"] in models.PAPER_PAIRS]
    assert {r["key"]["pair"] for r in paper} == {
        "iwslt2017-de-en",
        "xsum",
        "wmt14-de-en",
        "cnn_dailymail",
    }
    # the generation budget, the checkpoints' and the data's provenance are in every key
    for r in paper:
        key = r["key"]
        assert key["max_new_tokens"] == 12 and key["data"]["preprocessing"] == tasks.PREPROCESSING
        assert key["data"]["origin"] == "mirror" and key["models"]["large"]["repo"].startswith(
            "kssteven/"
        )
        assert all(e["tokens"] <= 12 for e in r["examples"])
