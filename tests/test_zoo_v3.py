"""The zoo recipe (bildlab/toy/zoo.py): its geometry, the stages each large model is grown from,
the copy of an earlier zoo's model instead of its training, and the smoke build end to end. The
full zoo is never trained here."""

import hashlib
import json
import shutil
import time

import pytest
import torch

from bildlab.harness import shard
from bildlab.toy import train, zoo

FULL_COMMAND = "bildlab zoo --profile full --seed 0 --jobs 2"


def test_the_archs_have_the_chosen_depths():
    t5, llama = zoo.ARCHS["t5-large"], zoo.ARCHS["llama-large"]
    assert (t5["num_layers"], t5["num_decoder_layers"], t5["d_model"]) == (10, 32, 128)
    assert (llama["num_hidden_layers"], llama["hidden_size"]) == (32, 128)
    # the stages each is grown from: the same width and encoder, shallower decoders
    assert zoo.ARCHS["t5-large-v2"] == {**t5, "num_decoder_layers": 10}
    assert zoo.ARCHS["t5-large-v3"] == {**t5, "num_decoder_layers": 24}
    assert zoo.ARCHS["llama-large-v2"] == {**llama, "num_hidden_layers": 10}
    # the small models are kept
    assert zoo.ARCHS["t5-small"]["num_decoder_layers"] == 1
    assert zoo.ARCHS["llama-small"]["num_hidden_layers"] == 1
    # every stage has its own seed
    assert len(set(zoo.SEEDS.values())) == len(zoo.SEEDS)


@pytest.mark.parametrize(
    "name, grown_from",
    [
        ("t5-large-v3", "t5-large-v2"),
        ("t5-large", "t5-large-v3"),
        ("llama-large", "llama-large-v2"),
    ],
)
def test_grow_to_the_next_stage_computes_the_same_logits(name, grown_from):
    torch.manual_seed(0)
    before = zoo.new_model(grown_from, vocab=64).eval()
    torch.manual_seed(1)
    after = train.grow(before, zoo.new_model(name, vocab=64).config).eval()
    assert after.config.to_dict() == zoo.new_model(name, vocab=64).config.to_dict()
    x = torch.tensor([[5, 9, 12, 7, 1]])
    kw = {"decoder_input_ids": torch.tensor([[0, 7, 8, 21, 3, 30]])} if "t5" in name else {}
    with torch.no_grad():  # the new layers add zeros to the residual stream: equal bit for bit
        assert torch.equal(after(input_ids=x, **kw).logits, before(input_ids=x, **kw).logits)


def earlier_zoo(
    root, model, name="t5-large", seed=7, command=FULL_COMMAND, tokenizer=b'{"tok": 1}'
):
    """A zoo folder holding `model` as its `name`, trained with torch seed `seed`, as `bildlab zoo`
    writes it."""
    (root / "tokenizer").mkdir(parents=True, exist_ok=True)
    (root / "tokenizer" / "tokenizer.json").write_bytes(tokenizer)
    model.to(torch.float16).save_pretrained(root / name)
    log = {name: {"steps": 7, "seed": seed, "seconds": 3.0, "command": command}}
    (root / "train-log.json").write_text(json.dumps(log))
    return root


def test_copy_stage_copies_an_earlier_zoos_model_and_refuses_anything_else(tmp_path):
    torch.manual_seed(0)
    v2, v3 = zoo.new_model("t5-large-v2", vocab=64), zoo.new_model("t5-large-v3", vocab=64)
    ours = tmp_path / "build" / "tokenizer"
    ours.mkdir(parents=True)
    (ours / "tokenizer.json").write_bytes(b'{"tok": 1}')
    src = earlier_zoo(tmp_path / "v3", v3)  # zoo v3 shipped its 10 + 24 T5 as t5-large
    assert zoo.holds(src, "t5-large-v3")
    assert not zoo.holds(src, "t5-large") and not zoo.holds(src, "t5-large-v2")
    assert not zoo.holds(src, "t5-seed") and not zoo.holds(src, "llama-large")
    info = zoo.copy_stage(src, "t5-large-v3", tmp_path / "work" / "t5-large-v3", ours, "full", 0)
    for f in (src / "t5-large").iterdir():  # the files, bit for bit
        assert (tmp_path / "work" / "t5-large-v3" / f.name).read_bytes() == f.read_bytes()
    assert info["steps"] == 7 and FULL_COMMAND in info["copied"] and "command" not in info
    # the earlier build's training time and the model's content, not a path (its folder may hold
    # another model later)
    model = (src / "t5-large" / "model.safetensors").read_bytes()
    assert info["trained_seconds"] == 3.0 and "copied_from" not in info
    assert info["model_sha256"] == hashlib.sha256(model).hexdigest()
    dest = tmp_path / "work" / "again"
    with pytest.raises(
        ValueError, match=r"reuse: .* is not a model of stage t5-large-v2 .*num_deco"
    ):
        zoo.copy_stage(src, "t5-large-v2", dest, ours, "full", 0)
    with pytest.raises(ValueError, match="reuse: the tokenizer in .* differs"):
        other = earlier_zoo(tmp_path / "tok", v3, tokenizer=b"{}")
        zoo.copy_stage(other, "t5-large-v3", dest, ours, "full", 0)
    with pytest.raises(ValueError, match="does not record t5-large as stage t5-large-v3 of `bildl"):
        zoo.copy_stage(src, "t5-large-v3", dest, ours, "smoke", 0)
    with pytest.raises(ValueError, match=r"\(seed 7\); it records .*seed 1"):
        # zoo v2's seed for its 10 + 10 T5, on a model of v3's geometry
        zoo.copy_stage(
            earlier_zoo(tmp_path / "seed", v3, seed=1), "t5-large-v3", dest, ours, "full", 0
        )
    with pytest.raises(ValueError, match="reuse: .*llama-large is not a model of stage llama-lar"):
        zoo.copy_stage(src, "llama-large", dest, ours, "full", 0)
    with pytest.raises(ValueError, match="name must be one of t5-large-v2, .*; got 't5-small-al"):
        zoo.copy_stage(src, "t5-small-aligned", dest, ours, "full", 0)
    assert not dest.exists()
    # zoo v2's 10 + 10 T5, stage t5-large-v2
    assert zoo.holds(earlier_zoo(tmp_path / "v2", v2, seed=1), "t5-large-v2")
    zoo.copy_stage(tmp_path / "v2", "t5-large-v2", dest, ours, "full", 0)
    assert (dest / "model.safetensors").is_file()


def test_build_refuses_a_reuse_folder_that_holds_no_stage(tmp_path):
    with pytest.raises(ValueError, match="reuse: .* holds no model of any stage"):
        zoo.build(tmp_path / "zoo", "smoke", reuse=tmp_path)


def test_build_refuses_the_shipped_zoo_as_a_smoke_output():
    with pytest.raises(ValueError, match="out: the smoke profile needs an output folder"):
        zoo.build(None, "smoke")


@pytest.mark.slow
def test_smoke_build_runs_end_to_end(tmp_path, monkeypatch):
    """The whole recipe in miniature: every stage of each large model (grown from the one before),
    the alignment on the last large T5, the card; the last stages rebuilt bit for bit; a build that
    reuses the first one's models gives the same files."""
    monkeypatch.setenv("BILDLAB_CACHE", str(tmp_path / "cache"))
    t0 = time.time()
    card = zoo.build(tmp_path / "zoo", "smoke", progress=False)
    log = json.loads((tmp_path / "zoo" / "train-log.json").read_text())
    assert set(log) == set(zoo.SEEDS)
    assert all(log[name]["seed"] == zoo.SEEDS[name] for name in log)
    assert log["t5-large"]["init"] == "t5-large-v3, grown to 10 + 32 layers (train.grow)"
    assert log["t5-large-v3"]["init"] == "t5-large-v2, grown to 10 + 24 layers (train.grow)"
    assert log["llama-large"]["init"] == "llama-large-v2, grown to 32 layers (train.grow)"
    work = zoo.work_dir("smoke", 0)
    for name in ("t5-seed", "t5-large-v2", "t5-large-v3", "llama-large-v2"):
        assert (work / name).is_dir() and not (tmp_path / "zoo" / name).exists()
    config = json.loads((tmp_path / "zoo" / "t5-large" / "config.json").read_text())
    assert (config["num_layers"], config["num_decoder_layers"]) == (10, 32)
    assert card["models"]["llama-large"]["config"]["num_hidden_layers"] == 32
    print(f"smoke build: {time.time() - t0:.0f} s")
    # the last stages again from the kept earlier ones: the same bits (one thread, fixed seeds)
    last = ("t5-large", "t5-small-aligned", "llama-large")
    files = {n: (tmp_path / "zoo" / n / "model.safetensors").read_bytes() for n in last}
    for name in last:
        shutil.rmtree(tmp_path / "zoo" / name)
    zoo.build(tmp_path / "zoo", "smoke", progress=False)
    for name in last:
        assert (tmp_path / "zoo" / name / "model.safetensors").read_bytes() == files[name], name
    # a build reusing that zoo copies every model it holds and trains the aligned small again
    again = tmp_path / "again"
    zoo.build(again, "smoke", progress=False, reuse=tmp_path / "zoo")
    log = json.loads((again / "train-log.json").read_text())
    copied = {name for name, entry in log.items() if "copied" in entry}
    assert copied == {"t5-large", "t5-small", "llama-small", "llama-large"}
    assert set(log) == copied | {"t5-small-aligned"}
    for name in zoo.SHIPPED:
        assert (again / name / "model.safetensors").read_bytes() == (
            tmp_path / "zoo" / name / "model.safetensors"
        ).read_bytes(), name
    first = json.loads((tmp_path / "zoo" / "train-log.json").read_text())
    for name in copied:  # copied again, the seconds are still the build's that trained it
        assert log[name]["trained_seconds"] == first[name]["seconds"], name
        # and so is the machine that trained it (a rebuild elsewhere need not give its bits)
        assert log[name]["trained_on"] == first[name]["trained_on"], name
    assert first["t5-large"]["trained_on"] == {
        "processor": shard.processor(),
        "torch": torch.__version__,
    }
    assert "trained_on" in log["t5-small-aligned"]
