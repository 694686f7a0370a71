"""The zoo v3 recipe (bildlab/toy/zoo.py): its geometry, the v2 stage each large model is grown
from, the copy of a v2 model instead of its training, and the smoke build end to end. The full zoo
is never trained here."""

import json
import shutil
import time

import pytest
import torch

from bildlab.toy import train, zoo

FULL_COMMAND = "bildlab zoo --profile full --seed 0 --jobs 2"


def test_v3_archs_have_the_chosen_depths():
    t5, llama = zoo.ARCHS["t5-large"], zoo.ARCHS["llama-large"]
    assert (t5["num_layers"], t5["num_decoder_layers"], t5["d_model"]) == (10, 24, 128)
    assert (llama["num_hidden_layers"], llama["hidden_size"]) == (32, 128)
    # the v2 stage each is grown from: today's shipped geometry, the same width and encoder
    assert zoo.ARCHS["t5-large-v2"] == {**t5, "num_decoder_layers": 10}
    assert zoo.ARCHS["llama-large-v2"] == {**llama, "num_hidden_layers": 10}
    # the small models are kept
    assert zoo.ARCHS["t5-small"]["num_decoder_layers"] == 1
    assert zoo.ARCHS["llama-small"]["num_hidden_layers"] == 1


@pytest.mark.parametrize("name", ["t5-large", "llama-large"])
def test_grow_from_v2_to_v3_computes_the_same_logits(name):
    torch.manual_seed(0)
    v2 = zoo.new_model(zoo.V2[name], vocab=64).eval()
    torch.manual_seed(1)
    v3 = train.grow(v2, zoo.new_model(name, vocab=64).config).eval()
    assert v3.config.to_dict() == zoo.new_model(name, vocab=64).config.to_dict()
    x = torch.tensor([[5, 9, 12, 7, 1]])
    kw = {"decoder_input_ids": torch.tensor([[0, 7, 8, 21, 3, 30]])} if "t5" in name else {}
    with torch.no_grad():  # the new layers add zeros to the residual stream: equal bit for bit
        assert torch.equal(v3(input_ids=x, **kw).logits, v2(input_ids=x, **kw).logits)


def fake_v2(root, model, command=FULL_COMMAND, tokenizer=b'{"tok": 1}'):
    """A zoo folder holding `model` as its t5-large, as `bildlab zoo` writes it."""
    (root / "tokenizer").mkdir(parents=True)
    (root / "tokenizer" / "tokenizer.json").write_bytes(tokenizer)
    model.to(torch.float16).save_pretrained(root / "t5-large")
    log = {"t5-large": {"steps": 7, "seed": 1, "seconds": 3.0, "command": command}}
    (root / "train-log.json").write_text(json.dumps(log))
    return root


def test_copy_v2_copies_the_v2_stage_output_and_refuses_anything_else(tmp_path):
    torch.manual_seed(0)
    v2, v3 = zoo.new_model("t5-large-v2", vocab=64), zoo.new_model("t5-large", vocab=64)
    ours = tmp_path / "build" / "tokenizer"
    ours.mkdir(parents=True)
    (ours / "tokenizer.json").write_bytes(b'{"tok": 1}')
    src = fake_v2(tmp_path / "v2", v2)
    info = zoo.copy_v2(src, "t5-large", tmp_path / "work" / "t5-large-v2", ours, "full", 0)
    for f in (src / "t5-large").iterdir():  # the files, bit for bit
        assert (tmp_path / "work" / "t5-large-v2" / f.name).read_bytes() == f.read_bytes()
    assert info["steps"] == 7 and FULL_COMMAND in info["copied"] and "command" not in info
    dest = tmp_path / "work" / "again"
    with pytest.raises(
        ValueError, match=r"v2_from: .* is not zoo v2's t5-large: .*num_decoder_lay"
    ):
        zoo.copy_v2(fake_v2(tmp_path / "v3", v3), "t5-large", dest, ours, "full", 0)
    with pytest.raises(ValueError, match="v2_from: the tokenizer in .* differs"):
        zoo.copy_v2(
            fake_v2(tmp_path / "tok", v2, tokenizer=b"{}"), "t5-large", dest, ours, "full", 0
        )
    with pytest.raises(ValueError, match="does not record t5-large as built by `bildlab zoo --pro"):
        zoo.copy_v2(src, "t5-large", dest, ours, "smoke", 0)
    with pytest.raises(ValueError, match="v2_from: no model llama-large in"):
        zoo.copy_v2(src, "llama-large", dest, ours, "full", 0)
    with pytest.raises(ValueError, match="name must be one of t5-large, llama-large; got 't5-sm"):
        zoo.copy_v2(src, "t5-small", dest, ours, "full", 0)
    assert not dest.exists()


def test_build_refuses_the_shipped_zoo_as_a_smoke_output():
    with pytest.raises(ValueError, match="out: the smoke profile needs an output folder"):
        zoo.build(None, "smoke")


@pytest.mark.slow
def test_smoke_build_runs_end_to_end(tmp_path, monkeypatch):
    """The whole recipe in miniature: both stages of each large model (v2 trained, then grown to
    v3), the alignment on the v3 large model, the card; the v3 stages rebuilt bit for bit (about
    2.5 minutes on one thread)."""
    monkeypatch.setenv("BILDLAB_CACHE", str(tmp_path / "cache"))
    t0 = time.time()
    card = zoo.build(tmp_path / "zoo", "smoke", progress=False)
    log = json.loads((tmp_path / "zoo" / "train-log.json").read_text())
    assert set(log) == {
        "t5-seed",
        "t5-large-v2",
        "t5-large",
        "t5-small",
        "t5-small-aligned",
        "llama-small",
        "llama-large-v2",
        "llama-large",
    }
    assert log["t5-large"]["init"] == "t5-large-v2, grown to 10 + 24 layers (train.grow)"
    assert log["llama-large"]["init"] == "llama-large-v2, grown to 32 layers (train.grow)"
    work = zoo.work_dir("smoke", 0)
    assert (work / "t5-large-v2").is_dir() and (work / "llama-large-v2").is_dir()
    config = json.loads((tmp_path / "zoo" / "t5-large" / "config.json").read_text())
    assert (config["num_layers"], config["num_decoder_layers"]) == (10, 24)
    assert card["models"]["llama-large"]["config"]["num_hidden_layers"] == 32
    print(f"smoke build: {time.time() - t0:.0f} s")
    # the v3 stages again from the kept v2 stages: the same bits (one thread, fixed seeds)
    files = {n: (tmp_path / "zoo" / n / "model.safetensors").read_bytes() for n in zoo.V2}
    for name in zoo.V2:
        shutil.rmtree(tmp_path / "zoo" / name)
    zoo.build(tmp_path / "zoo", "smoke", progress=False)
    for name in zoo.V2:
        assert (tmp_path / "zoo" / name / "model.safetensors").read_bytes() == files[name], name
