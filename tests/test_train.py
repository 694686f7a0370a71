"""Training code (used for the toy zoo and on real checkpoints): loss falls, early exit, calibration
data, resume, and model loading with its errors. Tiny configs only: the zoo itself is never
retrained here."""

import json

import pytest
import torch
from conftest import tiny, tiny_tokenizer

import bildlab
from bildlab.engine.early_exit import decoder_layers, exit_draft
from bildlab.toy import train
from bildlab.world import models


def toy_pairs(n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        src = torch.randint(
            6, 40, (int(torch.randint(4, 9, (1,), generator=g)),), generator=g
        ).tolist()
        # reverse and shift: a learnable map
        pairs.append((src + [1], [t + 2 for t in src[::-1]][:6] + [1]))
    return pairs


def exit_loss(model, pairs, layer=1):
    """The early exit's own loss: cross-entropy of the draft `exit_draft(model, layer)` on `pairs`,
    teacher-forced (transformers' loss of that model; not the training loop's sum)."""
    src = train.pad_rows([s for s, _ in pairs], 0)
    tgt = train.pad_rows([t for _, t in pairs], -100)
    with torch.no_grad():
        return (
            exit_draft(model, layer)
            .eval()(input_ids=src, attention_mask=src.ne(0), labels=tgt)
            .loss.item()
        )


def test_seq2seq_training_loss_falls_with_early_exit():
    pairs = toy_pairs()
    kwargs = dict(pad_id=0, epochs=20, batch_tokens=200, lr=1e-2, warmup=5, progress=False)
    model = tiny("t5", seed=0, layers=3, vocab=48, scale=0.2).train()
    before = exit_loss(model, pairs)
    losses = train.train_seq2seq(model, pairs, exit_layer=1, **kwargs)
    assert len(losses) >= 30
    assert sum(losses[-5:]) / 5 < 0.75 * sum(losses[:5]) / 5
    # the exit head's own loss falls (3.92 -> 2.21 here), and by clearly more than it does when the
    # same model is trained on the final layer's loss alone (-> 2.55: the exit shares the final norm
    # and LM head)
    after = exit_loss(model, pairs)
    plain = tiny("t5", seed=0, layers=3, vocab=48, scale=0.2).train()
    train.train_seq2seq(plain, pairs, **kwargs)
    assert after < 0.65 * before and after < 0.93 * exit_loss(plain, pairs), (
        before,
        after,
        exit_loss(plain, pairs),
    )


def test_short_first_plan_puts_short_targets_first():
    pairs = toy_pairs(n=60)
    plain = train.batches(pairs, 120, seed=3)
    plan = train.short_first_plan(pairs, 120, seed=3, short_first=25, short_len=5)
    assert plan[25:] == plain  # the regular epoch follows unchanged
    head = [i for batch in plan[:25] for i in batch]
    assert all(len(pairs[i][1]) <= 5 for i in head)
    # every short pair, repeated to fill 25
    assert len(set(head)) == sum(len(t) <= 5 for _, t in pairs) < len(head)
    with pytest.raises(ValueError, match="short_len=1"):
        train.short_first_plan(pairs, 120, seed=3, short_first=5, short_len=1)


@pytest.mark.parametrize("arch", ["t5", "llama"])
def test_grow_keeps_the_function_and_the_new_layers_learn(arch):
    small = tiny(arch, seed=4, layers=1)
    config = small.config.to_dict()
    config.update(num_layers=6, num_decoder_layers=5) if arch == "t5" else config.update(
        num_hidden_layers=5
    )
    large = train.grow(small, type(small.config).from_dict(config)).eval()
    assert sum(p.numel() for p in large.parameters()) > 2 * sum(
        p.numel() for p in small.parameters()
    )
    # the same function: the logits at every position (not only their argmax), to float32 rounding
    x = torch.tensor([[5, 9, 12, 7, 1]])
    kw = {"decoder_input_ids": torch.tensor([[0, 7, 8, 21, 3, 30]])} if arch == "t5" else {}
    with torch.no_grad():
        torch.testing.assert_close(
            large(input_ids=x, **kw).logits, small(input_ids=x, **kw).logits, rtol=1e-5, atol=1e-5
        )
    # the new layers: every layer at or above the small model's depth in its stack
    depth = {}
    for key in small.state_dict():
        if m := train._LAYER.match(key):
            depth[m.group(1)] = max(depth.get(m.group(1), 0), int(m.group(2)) + 1)
    new = {
        k: v.clone()
        for k, v in large.state_dict().items()
        if (m := train._LAYER.match(k)) and int(m.group(2)) >= depth[m.group(1)] and v.dim() > 1
    }
    assert len(new) >= 4 * 6  # 4 new layers of at least 6 matrices each (T5: 5 in the encoder too)
    pairs = [(s[:-1] + [3], t) for s, t in toy_pairs()] if arch == "llama" else toy_pairs()
    fn = train.train_causal_lm if arch == "llama" else train.train_seq2seq
    fn(large, pairs, pad_id=0, epochs=2, batch_tokens=200, lr=3e-3, warmup=2, progress=False)
    after = large.state_dict()
    # every weight matrix of every new layer moved, by far more than AdamW's weight decay alone
    # moves a weight that gets no gradient (lr * 0.01 per step: about 2.4e-4 of its norm over these
    # 8 steps); the zeroed output projections left zero
    moved = {k: ((after[k] - v).norm() / max(v.norm(), 1.0)).item() for k, v in new.items()}
    assert min(moved.values()) > 5e-3, sorted(moved.items(), key=lambda kv: kv[1])[:3]
    wider = tiny(arch, seed=5, layers=1).config.to_dict()
    wider.update(d_model=48) if arch == "t5" else wider.update(hidden_size=48)
    with pytest.raises(ValueError, match="same width"):
        train.grow(small, type(small.config).from_dict(wider))


def test_causal_lm_training_loss_falls():
    model = tiny("llama", seed=0, layers=2, vocab=48, scale=0.1).train()
    pairs = [(s[:-1] + [3], t) for s, t in toy_pairs()]
    losses = train.train_causal_lm(
        model, pairs, pad_id=0, epochs=12, batch_tokens=200, lr=3e-3, warmup=5, progress=False
    )
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5


def test_exit_draft_computes_the_exit_logits_of_the_training_loss():
    large = tiny("t5", seed=1, layers=3)
    src = torch.tensor([[5, 9, 13, 1]])
    dec = torch.tensor([[0, 7, 8, 21]])
    with torch.no_grad():
        hidden = large(
            input_ids=src, decoder_input_ids=dec, output_hidden_states=True
        ).decoder_hidden_states
        for layer in (1, 2):
            draft = exit_draft(large, layer)
            assert draft.config.num_decoder_layers == layer
            torch.testing.assert_close(
                draft(input_ids=src, decoder_input_ids=dec).logits,
                train.exit_logits(large, hidden[layer]),
                rtol=0,
                atol=0,
            )


def test_calibration_data_is_the_large_models_complete_greedy_output():
    large = tiny("t5", seed=2, layers=2)
    pairs = toy_pairs(12, seed=3)
    unended = [
        bildlab.generate(large, torch.tensor([s]), max_new_tokens=10, eos_token_id=[]).tokens
        for s, _ in pairs
    ]
    # as EOS, a token that this random model emits within 10 steps for some sources but not for
    # others
    eos = min(
        set(sum(unended, [])) - {0},
        key=lambda t: abs(sum(t in out for out in unended) - len(pairs) / 2),
    )
    large.generation_config.eos_token_id = eos
    calib = train.calibration_data(
        large, pairs, pad_id=0, max_new_tokens=10, batch_size=4, progress=False
    )
    greedy = [
        bildlab.generate(large, torch.tensor([s]), max_new_tokens=10, eos_token_id=eos).tokens
        for s, _ in pairs
    ]
    complete = [(s, out) for (s, _), out in zip(pairs, greedy) if out[-1] == eos]
    # some outputs end, others run into the length limit and are left out
    assert 0 < len(complete) < len(pairs)
    assert calib == complete


def test_training_resumes_where_it_stopped(tmp_path):
    def fresh():
        return tiny("t5", seed=4, layers=2, scale=0.2).train()

    pairs = toy_pairs(40)
    kwargs = dict(pad_id=0, epochs=3, batch_tokens=120, lr=2e-3, warmup=3, progress=False)
    reference = fresh()
    ref_losses = train.train_seq2seq(reference, pairs, **kwargs)

    interrupted = fresh()
    ckpt = str(tmp_path / "run.pt")
    calls = {"n": 0}
    original = interrupted.forward

    def flaky(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return original(*a, **kw)

    interrupted.forward = flaky
    with pytest.raises(KeyboardInterrupt):
        train.train_seq2seq(interrupted, pairs, checkpoint=ckpt, save_every=5, **kwargs)
    interrupted.forward = original
    assert (tmp_path / "run.pt").exists() and not list(tmp_path.glob("*.tmp-*"))
    # a new process would start from scratch weights: the checkpoint restores them
    resumed = fresh()
    losses = train.train_seq2seq(resumed, pairs, checkpoint=ckpt, save_every=5, **kwargs)
    assert len(losses) == len(ref_losses)
    torch.testing.assert_close(losses, ref_losses)
    for (k, a), (_, b) in zip(reference.state_dict().items(), resumed.state_dict().items()):
        torch.testing.assert_close(a, b, msg=k)
    assert not (tmp_path / "run.pt").exists()  # a finished run leaves no checkpoint behind


# ---------------------------------------------------------------------------------------------------------------------
# load_pair


def test_zoo_work_folder_changes_with_the_recipe(tmp_path, monkeypatch):
    from bildlab.toy import zoo
    from bildlab.world import tasks

    monkeypatch.setenv("BILDLAB_CACHE", str(tmp_path))
    full = zoo.work_dir("full", 0)
    assert full.parent == tmp_path / "zoo-work" and full.name.startswith("full-")
    assert zoo.work_dir("full", 0) == full  # a rerun of the same recipe resumes
    assert zoo.work_dir("full", 1) != full
    assert zoo.work_dir("smoke", 0) != full
    seed_sum = zoo.PROFILES["full"]["seed_sum"]
    monkeypatch.setitem(zoo.PROFILES["full"], "seed_sum", seed_sum + 1)
    # a changed stage never reuses a stale seed model or calibration data
    assert zoo.work_dir("full", 0) != full
    monkeypatch.setitem(zoo.PROFILES["full"], "seed_sum", seed_sum)
    assert zoo.work_dir("full", 0) == full
    monkeypatch.setattr(tasks, "VERSION", tasks.VERSION + 1)
    assert zoo.work_dir("full", 0) != full


def test_zoo_build_rejects_bad_jobs_and_stages(tmp_path):
    from bildlab.toy import zoo

    with pytest.raises(ValueError, match="jobs must be 1 or 2; got 3"):
        zoo.build(tmp_path, "smoke", jobs=3)
    with pytest.raises(
        ValueError, match="stages must be among llama-small, llama-large-v2, llama-large, t5-small"
    ):
        zoo.build(tmp_path, "smoke", stages=["t5-large"])


def test_zoo_build_log_keeps_the_entries_of_both_processes(tmp_path):
    """With --jobs 2 two processes finish stages; each entry is merged into the log on disk, none
    overwritten."""
    from bildlab.toy import zoo

    log, lock = tmp_path / "train-log.json", tmp_path / "train-log.lock"
    zoo._log_stage(log, lock, "t5-large", {"steps": 2})
    zoo._log_stage(log, lock, "llama-small", {"steps": 1})
    zoo._log_stage(log, lock, "t5-large", {"steps": 3})
    assert zoo._load_json(log) == {"t5-large": {"steps": 3}, "llama-small": {"steps": 1}}


def test_load_pair_rejects_unknown_names_and_bad_combinations():
    with pytest.raises(ValueError, match="unknown pair 'toy-xx'; known pairs: toy-mt, toy-sum"):
        models.load_pair("toy-xx")
    with pytest.raises(ValueError, match="no aligned small model"):
        models.load_pair("toy-mt-llama", aligned=True)
    with pytest.raises(ValueError, match="exclusive"):
        models.load_pair("toy-mt", aligned=True, early_exit=True)


def test_load_pair_reads_a_zoo_folder(fake_zoo, monkeypatch):
    root, large = fake_zoo
    monkeypatch.setattr(models, "EXIT_LAYER", 2)
    pair = models.load_pair("toy-mt")
    x = pair.encode("w3 w4 w5")
    assert x.tolist() == [[4, 9, 10, 11, 1]]  # "<mt> " prefix, the words, EOS
    ref = bildlab.generate(large, x, max_new_tokens=6).tokens
    assert (
        bildlab.generate(
            pair.large, x, small=pair.small, method="speculative", max_new_tokens=6
        ).tokens
        == ref
    )
    exit_pair = models.load_pair("toy-sum", early_exit=True)
    assert exit_pair.small.config.num_decoder_layers == 2 and exit_pair.prefix == "<sum> "
    # a view
    assert all(
        a is b for a, b in zip(decoder_layers(exit_pair.small), decoder_layers(exit_pair.large))
    )
    torch.testing.assert_close(
        exit_pair.small.decoder.block[1].layer[0].SelfAttention.q.weight,
        large.decoder.block[1].layer[0].SelfAttention.q.weight,
    )
    assert models.load_pair("toy-mt", aligned=True).small is not None


def test_missing_or_corrupt_checkpoints_say_how_to_rebuild(fake_zoo):
    root, _ = fake_zoo
    (root / "t5-small-aligned" / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(RuntimeError) as info:
        models.load_pair("toy-mt", aligned=True)
    assert str(root / "t5-small-aligned") in str(info.value) and "bildlab zoo" in str(info.value)
    (root / "t5-small" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError) as info:
        models.load_pair("toy-mt")
    assert str(root / "t5-small") in str(info.value) and "bildlab zoo" in str(info.value)
    (root / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer missing"):
        models.load_pair("toy-sum")


def test_incomplete_checkpoint_is_an_error_not_random_weights(fake_zoo):
    root, _ = fake_zoo
    from safetensors.torch import load_file, save_file

    path = root / "t5-small" / "model.safetensors"
    state = load_file(path)
    state.pop(next(k for k in state if "decoder.block.0" in k))
    save_file(state, path)
    with pytest.raises(RuntimeError, match="incomplete"):
        models.load_pair("toy-mt")


def test_paper_pairs_load_through_the_hub_api(tmp_path, monkeypatch):
    """The paper loader against local stand-ins (the hub is not reachable here)."""
    tiny_tokenizer(tmp_path / "large")
    tiny("t5", seed=1, layers=2).save_pretrained(tmp_path / "large")
    tiny("t5", seed=2, layers=1).save_pretrained(tmp_path / "small")
    tiny("t5", seed=3, layers=1).save_pretrained(tmp_path / "aligned")
    monkeypatch.setitem(
        models.PAPER_PAIRS, "xsum", tuple(str(tmp_path / n) for n in ("large", "small", "aligned"))
    )
    monkeypatch.setitem(models.PAPER_TOKENIZERS, "xsum", str(tmp_path / "large"))
    monkeypatch.delenv("BILDLAB_MIRROR", raising=False)
    pair = models.load_pair("xsum", aligned=True)
    assert pair.task == "xsum" and pair.prefix == "summarize: " and pair.max_source_tokens == 1024
    assert pair.small.config.num_decoder_layers == 1
    assert json.loads((tmp_path / "aligned" / "config.json").read_text())["num_decoder_layers"] == 1
    with pytest.raises(ValueError, match="only available for the toy pairs"):
        models.load_pair("xsum", early_exit=True)
