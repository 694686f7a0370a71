"""The shipped toy zoo (data/zoo): its card meets the targets, and a live re-measurement agrees with the card."""

import pytest
import torch

import bildlab
from bildlab import metrics, models, tasks, train, zoo

if not (models.zoo_dir() / "card.json").is_file():  # the zoo is built by `bildlab zoo` and committed (issue 4)
    pytest.skip("the toy zoo is not shipped yet (data/zoo/card.json missing)", allow_module_level=True)
CARD = models.read_card()
TEST = CARD["test"]


def test_zoo_is_small_and_complete():
    root = models.zoo_dir()
    files = [p for p in root.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 30 * 1024 * 1024
    for name in ("t5-large", "t5-small", "t5-small-aligned", "llama-large", "llama-small"):
        assert (root / name / "model.safetensors").is_file()
        entry = CARD["models"][name]
        for key in ("seed", "steps", "command", "examples"):
            assert entry["training"][key] is not None, (name, key)
        assert entry["parameters"] > 0 and entry["config"]
    assert not list(root.rglob("*.partial")) and not list(root.rglob("*.tmp-*"))


def test_large_is_clearly_better_than_small():
    mt, sm = TEST["toy-mt"], TEST["toy-sum"]
    assert mt["t5-large"]["bleu"] >= mt["t5-small"]["bleu"] + 5
    assert sm["t5-large"]["rougeL"] >= sm["t5-small"]["rougeL"] + 3
    llama = TEST["toy-mt-llama"]
    assert llama["llama-large"]["bleu"] > llama["llama-small"]["bleu"]


# The one target the shipped zoo misses, measured on its card; strict: a rebuild that meets it turns this into a
# failure that asks for the marker to go. Fine-tuned on the large model's outputs for 9,000 fresh training inputs, the
# small agrees with the large more often on both tasks but scores 1.3 BLEU lower on the card's 300 toy-mt sentences
# (lr 1e-4; 3e-4 lost 2.7, 5e-5 lost 2.8, adding 9,000 reference pairs lost 1.6). The gap is noise, not a loss:
# paired bootstrap (sacrebleu, 1000 resamples, small as baseline) gives -1.33 BLEU p=0.19 on these 300, -0.48 p=0.28
# on all 1000 test sentences, +0.91 p=0.17 on 1000 validation sentences; nor was it a gain. Tried without a gain on
# validation: 1 epoch, distillation on the large model's soft targets, a chrF>=80 filter on the calibration outputs.
MISSED_ALIGNED_SCORE = pytest.mark.xfail(strict=True, reason="toy-mt: the aligned small scores BLEU 74.88 vs 76.21")


@pytest.mark.parametrize("task", ["toy-mt", "toy-sum"])
def test_small_is_mostly_right(task):
    assert 0.75 <= TEST[task]["t5-small"]["agreement"] <= 0.98


@pytest.mark.parametrize("task", ["toy-mt", "toy-sum"])
def test_aligned_small_agrees_more_often(task):
    assert TEST[task]["t5-small-aligned"]["agreement"] > TEST[task]["t5-small"]["agreement"]


@pytest.mark.parametrize("task", [pytest.param("toy-mt", marks=MISSED_ALIGNED_SCORE), "toy-sum"])
def test_aligned_small_scores_at_least_as_well(task):
    metric = tasks.task_metric(task)
    assert TEST[task]["t5-small-aligned"][metric] >= TEST[task]["t5-small"][metric]


@pytest.mark.parametrize("ratio", ["t5-large / t5-small", "llama-large / llama-small"])
def test_latency_ratio_is_in_the_papers_regime(ratio):
    assert 4 <= CARD["latency_ratio"][ratio] <= 10


def test_early_exit_is_cheaper_and_mostly_agrees():
    assert CARD["latency_ratio"]["t5-large / t5-early-exit"] > 1.5
    for task in ("toy-mt", "toy-sum"):
        assert TEST[task]["t5-early-exit"]["agreement"] >= 0.5


def test_card_numbers_are_reproduced_live():
    """Re-measure toy-mt as the card did (the first test examples, batched greedy): the card was produced by the
    models that ship, and bildlab's batch-1 greedy decoding agrees with the batched decoding behind it."""
    pair = bildlab.load_pair("toy-mt")  # the documented entry point
    examples = bildlab.load_task("toy-mt", "test", limit=CARD["test_examples"])
    refs = [ex["target"] for ex in examples]
    sources = [pair.encode(ex["source"])[0].tolist() for ex in examples]
    outputs = {name: train.greedy_batch(m, sources, pad_id=0, max_new_tokens=zoo.MAX_NEW["toy-mt"], progress=False)
               for name, m in (("t5-large", pair.large), ("t5-small", pair.small))}
    for name, outs in outputs.items():
        assert metrics.bleu([pair.decode(o) for o in outs], refs) == pytest.approx(TEST["toy-mt"][name]["bleu"],
                                                                                   abs=0.3)
    agreement = zoo._agreement(pair.large, pair.small, sources, outputs["t5-large"])
    assert agreement == pytest.approx(TEST["toy-mt"]["t5-small"]["agreement"], abs=0.005)
    single = [bildlab.generate(pair.large, torch.tensor([s]), max_new_tokens=zoo.MAX_NEW["toy-mt"]).tokens
              for s in sources[:10]]
    assert sum(a == b for a, b in zip(single, outputs["t5-large"][:10])) >= 9
