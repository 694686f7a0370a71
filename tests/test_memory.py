"""Batches sized by memory: the budget's parsing, batches packed under it, an out-of-memory error
that splits a batch (tokens unchanged), and at the paper's T5-large geometry a measured peak within
the budget with batch-1 outputs."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bildlab.engine import batch, memory
from bildlab.engine.batch import generate_batch
from bildlab.engine.decoding import generate

GIB = 2**30


@pytest.mark.parametrize(
    "text, n",
    [
        ("12GiB", 12 * GIB),
        ("16GB", 16 * 10**9),
        ("512 MiB", 512 * 2**20),
        ("1.5gib", int(1.5 * GIB)),
        (4096, 4096),
    ],
)
def test_memory_sizes_parse(text, n):
    assert memory.parse(text) == n


@pytest.mark.parametrize("bad", ["12 GiBs", "-1GB", "0", 0, True, 1.5, "lots", [1]])
def test_a_bad_memory_size_names_the_parameter_and_the_forms(bad):
    with pytest.raises(ValueError, match=r"memory must be None .* '12GiB'"):
        memory.parse(bad)
    with pytest.raises(ValueError, match="memory must be"):
        generate_batch(torch.nn.Linear(1, 1), [], memory=bad)


def test_the_default_budget_on_a_cpu_is_the_stated_one():
    assert memory.budget(None, "cpu") == memory.CPU_MEMORY
    assert memory.budget("3GiB", "cpu") == 3 * GIB


T5_LARGE = memory.Geometry(
    encoder_decoder=True,
    layers=24,
    kv_heads=16,
    head_dim=64,
    d_model=1024,
    d_ff=4096,
    heads=16,
    vocab=32100,
    dtype_bytes=4,
)


def test_the_estimate_holds_the_cross_attention_cache_the_issue_measured():
    # 2 x batch x source x 1,024 floats per layer for the cross-attention keys and values: 48 GiB at
    # batch 256, 24 layers, 1,024-token sources; the estimate is an upper bound of what a batch
    # holds
    cross = 2 * 256 * 1024 * 1024 * 4 * 24
    assert cross == 48 * GIB
    assert memory.peak_bytes([T5_LARGE], 256, 1024, 0) >= cross


def test_batches_are_packed_greedily_under_the_budget():
    lengths = [700, 20, 1024, 300, 1024, 5, 900, 64]
    budget = memory.peak_bytes([T5_LARGE], 3, 1024, 16)
    batches = memory.pack(lengths, [T5_LARGE], 16, budget, batch_size=8)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [i for b in batches for i in b]
    assert [lengths[i] for i in flat] == sorted(lengths)  # sorted by length
    for n, b in enumerate(batches):  # each fits, and the next row would not have
        assert memory.peak_bytes([T5_LARGE], len(b), max(lengths[i] for i in b), 16) <= budget
        if n + 1 < len(batches):
            longer = max(lengths[i] for i in b + [batches[n + 1][0]])
            assert memory.peak_bytes([T5_LARGE], len(b) + 1, longer, 16) > budget
    assert memory.pack(lengths, [T5_LARGE], 16, budget, batch_size=2) == [
        flat[i : i + 2] for i in range(0, 8, 2)
    ]
    # alone when nothing fits
    assert memory.pack(lengths, [T5_LARGE], 16, 1, batch_size=8) == [[i] for i in flat]
    assert memory.rows_that_fit([T5_LARGE], 1024, 16, budget, 256) == 3


def test_the_geometry_is_read_from_the_model(models):
    large = models["t5"][0]
    g = memory.geometry(large)
    c = large.config
    assert (g.layers, g.kv_heads, g.head_dim, g.d_model, g.vocab) == (
        c.num_decoder_layers,
        c.num_heads,
        c.d_kv,
        c.d_model,
        large.lm_head.weight.shape[0],
    )
    lg = memory.geometry(models["llama"][0])
    lc = models["llama"][0].config
    assert (lg.encoder_decoder, lg.layers, lg.kv_heads) == (
        False,
        lc.num_hidden_layers,
        lc.num_key_value_heads,
    )


@pytest.mark.parametrize("arch", ["t5", "llama"])
def test_the_estimate_counts_the_bytes_a_real_decode_holds(models, arch):
    """The cache and encoder terms against the tensors a decode holds, counted from the tensors
    themselves: rows of two source lengths, `new` tokens fed one at a time; the cache's source part
    (cross-attention, or a decoder-only prompt) included."""
    from bildlab.engine import capabilities

    large = models[arch][0]
    g, rows, new = memory.geometry(large), 3, 4
    for source in (5, 17):
        x = torch.randint(3, 40, (rows, source), generator=torch.Generator().manual_seed(source))
        cache = capabilities.new_cache(large, record=False)
        kw = {capabilities.forward(large).cache_kw: cache, "use_cache": True}
        with torch.no_grad():
            if large.config.is_encoder_decoder:
                encoded = large.get_encoder()(input_ids=x)
                assert encoded.last_hidden_state.nbytes == memory.encoded_bytes(g, rows, source)
                kw["encoder_outputs"] = encoded
                ids = torch.zeros((rows, 1), dtype=torch.long)
                for _ in range(new):
                    logits = large(input_ids=x, decoder_input_ids=ids, **kw).logits
                    ids = logits[:, -1:].argmax(-1)
            else:
                assert memory.encoded_bytes(g, rows, source) == 0
                ids = x
                for _ in range(new + 1):  # the prompt, then new tokens
                    ids = large(input_ids=ids, **kw).logits[:, -1:].argmax(-1)
        parts = (
            [cache.self_attention_cache, cache.cross_attention_cache]
            if large.config.is_encoder_decoder
            else [cache]
        )
        held = sum(
            t.nbytes for c in parts for layer in c.layers for t in (layer.keys, layer.values)
        )
        assert held == memory.cache_bytes(g, rows, source, new), source


@pytest.mark.parametrize("engine, run", [("ragged", "ragged"), ("lockstep", "_lockstep")])
def test_an_out_of_memory_error_splits_the_batch_and_the_tokens_are_unchanged(
    models, monkeypatch, engine, run
):
    large, small = models["t5"][0], models["t5"][1]["perturbed"]
    torch.manual_seed(0)
    xs = [torch.randint(3, 48, (1, n)) for n in (5, 9, 7, 12, 6, 8)]
    kw = dict(
        small=small, method="bild", fallback=0.5, rollback=2.0, max_new_tokens=10, engine=engine
    )
    whole = generate_batch(large, xs, batch_size=6, **kw)
    real, seen = getattr(batch, run), []

    def small_device(large, small, rows, *a):  # a device on which only two rows fit
        seen.append(len(rows))
        if len(rows) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(large, small, rows, *a)

    monkeypatch.setattr(batch, run, small_device)
    report = {}
    split = generate_batch(large, xs, batch_size=6, report=report, **kw)
    assert [o.tokens for o in split] == [o.tokens for o in whole]
    assert [o.stats for o in split] == [o.stats for o in whole]
    assert (
        seen == [6, 3, 1, 2, 3, 1, 2]
        and report["splits"] == 3
        and report["batches"] == [1, 2, 1, 2]
    )
    assert report["engine"] == engine
    kw.pop("engine")
    for x, o in zip(xs, split):  # and each is the engine's
        assert o.tokens == generate(large, x, **kw).tokens
    monkeypatch.setattr(
        batch, run, lambda *a: (_ for _ in ()).throw(torch.OutOfMemoryError("one row"))
    )
    kw["engine"] = engine
    # a single row that does not fit is the user's to see
    with pytest.raises(torch.OutOfMemoryError):
        generate_batch(large, xs[:1], **kw)


BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "batch_memory.py"


@pytest.mark.slow
@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the resident memory from /proc"
)
def test_at_the_paper_t5_large_geometry_a_budget_holds_and_the_outputs_are_batch_one_outputs():
    import json

    # real T5-large and T5-small geometry, random weights; the budget admits two of the longest
    # sources, not three
    out = subprocess.run(
        [sys.executable, str(BENCH), "--sources", "1024,600,1024", "--rows", "2"],
        capture_output=True,
        text=True,
        timeout=1200,
        check=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    # 600 + 1024 together, then 1024
    assert r["report"]["batches"] == [2, 1] and r["report"]["splits"] == 0
    assert r["measured"] <= r["budget"], (memory.fmt(r["measured"]), memory.fmt(r["budget"]))
    # the measurement sees what must be there: two rows' cross-attention cache (2 x 24 x 16 x 64 x
    # 1024 floats each)
    assert (
        r["cross_cache_per_row"] == 2 * 24 * 16 * 64 * 1024 * 4
        and r["measured"] >= 2 * r["cross_cache_per_row"]
    )
    assert r["identical"] == r["n"] == 3  # every batched output is its batch-1 output
