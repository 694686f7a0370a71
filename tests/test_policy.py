"""A decoding policy as one value (`engine.policy`), and the counts defined once (`engine.tally`)."""

import dataclasses

import pytest
import torch

import bildlab
from bildlab.engine import tally
from bildlab.engine.policy import DEFAULTS, Policy, fields
from bildlab.harness import shard


def test_the_defaults_are_the_engine_and_the_harness_defaults():
    assert Policy() == DEFAULTS and DEFAULTS.method == "greedy"
    assert (DEFAULTS.k, DEFAULTS.fallback, DEFAULTS.rollback, DEFAULTS.max_small_steps) == (
        4,
        0.6,
        5.0,
        10,
    )
    # a sweep entry leaves out what the grid does not name: the policy's own defaults fill it
    for name in shard.POLICY_ARGS[2:]:
        assert shard.DEFAULTS[name] == getattr(DEFAULTS, name), name
    assert fields()[0] == "method" and set(shard.POLICY_ARGS[2:]) <= set(fields())


def test_a_policy_is_a_value():
    p = Policy("bild", fallback=0.5, rollback=3.0)
    assert p == Policy("bild", fallback=0.5, rollback=3.0) and hash(p) == hash(
        Policy("bild", fallback=0.5, rollback=3.0)
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.k = 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(method="beam"), "method must be one of 'greedy', 'sample'"),
        (dict(k=0), r"k \(the maximum draft length\) must be an integer >= 1; got 0"),
        (dict(k=True), "k .* must be an integer >= 1; got True"),
        (dict(fallback=1.5), r"fallback \(alpha_FB\) must be a number in \[0, 1\]; got 1.5"),
        (dict(rollback=-1.0), r"rollback \(alpha_RB\) must be a number >= 0"),
        (dict(rollback=float("nan")), r"rollback \(alpha_RB\) must be a number >= 0"),
        (dict(max_small_steps=0), "max_small_steps must be an integer >= 1; got 0"),
        (dict(rollback_rule="paper"), "rollback_rule must be one of 'first-differing'"),
        (dict(ngram=0), "ngram .* must be an integer >= 1; got 0"),
        (dict(method="greedy", do_sample=True), "do_sample=True contradicts method='greedy'"),
        (dict(method="bild", do_sample=True), "method='bild' is greedy: do_sample must be False"),
        (dict(method="sample", temperature=0.0), "temperature must be a number > 0"),
        (dict(method="sample", top_k=0), "top_k must be None or an integer >= 1"),
        (dict(method="sample", top_p=1.5), r"top_p must be None or a number in \(0, 1\]"),
    ],
)
def test_a_bad_parameter_is_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Policy(**kwargs)


def test_do_sample_must_be_a_bool():
    with pytest.raises(TypeError, match="do_sample must be True or False; got 1"):
        Policy("speculative", do_sample=1)


def test_sampling_settings_are_checked_only_when_sampling():
    assert Policy("speculative", temperature=0.0).temperature == 0.0  # greedy: not read
    assert Policy("speculative", do_sample=True).sampling and Policy("sample").sampling
    assert not Policy("speculative").sampling


def test_the_registry_key_holds_what_changes_a_result():
    assert Policy("greedy", k=7).key() == {} == Policy("sample").key()
    assert Policy("speculative", k=3, fallback=0.1).key() == {"k": 3}
    assert Policy("speculative", k=3, do_sample=True, temperature=0.7).key() == {
        "k": 3,
        "do_sample": True,
        "temperature": 0.7,
    }
    assert Policy("prompt-lookup", k=3, ngram=1).key() == {"k": 3, "ngram": 1}
    assert Policy("bild", fallback=0.5, rollback=3, k=9).key() == {
        "fallback": 0.5,
        "rollback": 3.0,
        "max_small_steps": 10,
    }
    assert Policy("bild", rollback_rule="first-above").key()["rollback_rule"] == "first-above"


def test_draft_width_and_whether_a_draft_model_runs():
    assert Policy("speculative", k=3).width == 3 == Policy("prompt-lookup", k=3).width
    assert Policy("bild", max_small_steps=6).width == 6 and Policy("greedy").width == 0
    assert Policy("speculative").drafts and Policy("bild", fallback=0.9).drafts
    assert not Policy("bild", fallback=1.0).drafts and not Policy("prompt-lookup").drafts


def test_generate_takes_the_policy_or_its_keywords(tiny_pair):
    large, small, x = tiny_pair
    p = Policy("bild", fallback=0.5, rollback=3.0, max_small_steps=4)
    a = bildlab.generate(large, x, small=small, policy=p, max_new_tokens=12)
    b = bildlab.generate(
        large, x, small=small, method="bild", fallback=0.5, rollback=3.0, max_small_steps=4,
        max_new_tokens=12,
    )  # fmt: skip
    assert a.tokens == b.tokens
    assert {k: v for k, v in a.stats.items() if "seconds" not in k} == {
        k: v for k, v in b.stats.items() if "seconds" not in k
    }
    with pytest.raises(ValueError, match="either as policy=... or as keywords, not both"):
        bildlab.generate(large, x, small=small, policy=p, k=3)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) fallbak"):
        bildlab.generate(large, x, small=small, method="bild", fallbak=0.5)
    with pytest.raises(TypeError, match="policy must be a bildlab Policy; got dict"):
        bildlab.generate(large, x, small=small, policy={"method": "bild"})
    batch = bildlab.generate_batch(large, [x], small=small, policy=p, max_new_tokens=12)
    assert batch[0].tokens == a.tokens


@pytest.fixture
def tiny_pair():
    import transformers as tf

    def t5(layers, seed):
        torch.manual_seed(seed)
        config = tf.T5Config(
            vocab_size=64, d_model=16, d_ff=32, num_heads=2, d_kv=8, num_layers=layers,
            num_decoder_layers=layers, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
        )  # fmt: skip
        return tf.T5ForConditionalGeneration(config).eval()

    return (
        t5(2, 0),
        t5(1, 1),
        torch.randint(3, 64, (1, 9), generator=torch.Generator().manual_seed(0)),
    )


def test_one_verification_counted():
    """Known answers: a draft of 4 with 2 kept, then the large model's token."""
    c = tally.counts(4)
    tally.verification(c, 4, 2, 3)
    assert {k: c[k] for k in tally.VERIFIED} == dict(
        small_tokens=2, large_tokens=1, large_calls=1, drafted=4, accepted=2, rollbacks=1, drafts=1
    )
    assert c["accepted_at"] == [1, 1, 0, 0]
    # an EOS among the kept tokens: only the tokens up to it are committed, none is the large model's
    tally.verification(c, 3, 3, 2)
    assert (c["small_tokens"], c["large_tokens"], c["rollbacks"], c["accepted_at"]) == (
        4,
        1,
        1,
        [2, 2, 0, 0],
    )
    # no draft: one token of the large model
    tally.verification(c, 0, 0, 1)
    assert (c["large_calls"], c["drafts"], c["large_tokens"]) == (3, 2, 2)


def test_verification_counts_rows_alike():
    """The batched form (tensors of rows, a mask of the rows that verified) counts each row as the
    plain form does."""
    calls = [(4, 2, 3), (3, 3, 2), (0, 0, 1), (2, 0, 1)]
    plain = [tally.counts(4) for _ in calls]
    for c, call in zip(plain, calls):
        tally.verification(c, *call)
    rows = tally.counts(4, torch.zeros(len(calls) + 1, dtype=torch.long))
    drafted, kept, new = (torch.tensor([*col, 0]) for col in zip(*calls))
    made = torch.tensor([1, 1, 1, 1, 0])
    tally.verification(rows, drafted, kept, new, made=made)
    for i, c in enumerate(plain):
        for name in tally.VERIFIED:
            assert rows[name][i].item() == c[name], name
        assert rows["accepted_at"][i].tolist() == c["accepted_at"]
    assert all(rows[name][-1].item() == 0 for name in tally.VERIFIED)


def test_draft_runs_one_before_each_large_call_but_the_first():
    assert tally.draft_runs(12, 5) == 4
    assert tally.draft_runs(2, 5) == 2  # never more runs than steps
    assert tally.draft_runs(3, 1) == 1
