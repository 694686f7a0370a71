"""Model pairs by name: the shipped toy zoo (offline) and the paper's checkpoints (hub, on a machine
with network).

    pair = load_pair("toy-mt")                    # .large, .small, .tokenizer; .encode(source), .decode(tokens)
    pair = load_pair("toy-mt", aligned=True)      # the prediction-aligned small model
    pair = load_pair("toy-mt", early_exit=True)   # the large model's early exit as the small (draft) model: a view
                                                  # of the large model (early_exit.py), not a copy
    pair = load_pair("toy-mt-llama")              # decoder-only pair (speculative decoding pipeline)
    pair = load_pair("xsum")                      # kssteven/T5-{large,small}-xsum from the hub
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from ..engine.early_exit import exit_draft

ZOO_ENV = "BILDLAB_ZOO"
REBUILD = "bildlab zoo"  # the command that rebuilds the toy zoo

# toy pairs: name -> (large, small, aligned small, task prefix, task)
TOY_PAIRS = {
    "toy-mt": ("t5-large", "t5-small", "t5-small-aligned", "<mt> ", "toy-mt"),
    "toy-sum": ("t5-large", "t5-small", "t5-small-aligned", "<sum> ", "toy-sum"),
    "toy-mt-llama": ("llama-large", "llama-small", None, "<mt> ", "toy-mt"),
}
# the toy large models' early exit: after this many decoder layers (the T5 was trained for it with
# an
EXIT_LAYER = 2
# early-exit loss, the Llama was not)

# paper pairs (names from the public BiLD README; availability on the hub unverified): name ->
# (large, small, aligned)
PAPER_PAIRS = {
    "iwslt2017-de-en": (
        "kssteven/mT5-large-iwslt2017-de-en",
        "kssteven/mT5-small-iwslt2017-de-en",
        "kssteven/mT5-small-iwslt2017-de-en-bild-aligned",
    ),
    "wmt14-de-en": (
        "kssteven/mT5-large-wmt2014-de-en",
        "kssteven/mT5-small-wmt2014-de-en",
        "kssteven/mT5-small-wmt2014-de-en-bild-aligned",
    ),
    "xsum": (
        "kssteven/T5-large-xsum",
        "kssteven/T5-small-xsum",
        "kssteven/T5-small-xsum-bild-aligned",
    ),
    "cnn_dailymail": (
        "kssteven/T5-large-cnndm",
        "kssteven/T5-small-cnndm",
        "kssteven/T5-small-cnndm-bild-aligned",
    ),
}
PAIRS = tuple(TOY_PAIRS) + tuple(PAPER_PAIRS)
DRAFTS = ("small", "aligned", "early-exit")  # the draft models of a pair (evaluate's `draft`)
# the paper's preprocessing (the authors' scripts): the tokenizer of the pretrained model, not of
# the fine-tuned checkpoint; a task prefix for summarization only; sources truncated to 1024 tokens
# (EOS included)
PAPER_TOKENIZERS = {
    "iwslt2017-de-en": "google/mt5-small",
    "wmt14-de-en": "google/mt5-small",
    "xsum": "google-t5/t5-small",
    "cnn_dailymail": "google-t5/t5-small",
}
PAPER_PREFIX = {
    "iwslt2017-de-en": "",
    "wmt14-de-en": "",
    "xsum": "summarize: ",
    "cnn_dailymail": "summarize: ",
}
MAX_SOURCE_TOKENS = 1024
# the paper's max_length=128 in transformers 4.x terms (the decoder start token counted)
PAPER_MAX_NEW_TOKENS = 127
# the public configs of the pretrained checkpoints the paper fine-tuned (google-t5/t5-{large,small},
# google/mt5-{large,small}); T5 ties its output layer to the input embeddings, mT5 has its own. Used
# where the checkpoints cannot be read: random-weight models at the paper's sizes
# (benchmarks/paper_size.py), the plan's batch memory (memory.py)
PAPER_CONFIG_COMMON = dict(
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    decoder_start_token_id=0,
    eos_token_id=1,
    pad_token_id=0,
)
PAPER_CONFIGS = {
    "t5-large": dict(
        d_model=1024,
        num_layers=24,
        num_heads=16,
        d_kv=64,
        d_ff=4096,
        feed_forward_proj="relu",
        vocab_size=32128,
    ),
    "t5-small": dict(
        d_model=512,
        num_layers=6,
        num_heads=8,
        d_kv=64,
        d_ff=2048,
        feed_forward_proj="relu",
        vocab_size=32128,
    ),
    "mt5-large": dict(
        d_model=1024,
        num_layers=24,
        num_heads=16,
        d_kv=64,
        d_ff=2816,
        feed_forward_proj="gated-gelu",
        vocab_size=250112,
    ),
    "mt5-small": dict(
        d_model=512,
        num_layers=8,
        num_heads=6,
        d_kv=64,
        d_ff=1024,
        feed_forward_proj="gated-gelu",
        vocab_size=250112,
    ),
}
# paper pair -> (the large and small checkpoints' configs, the output rows after cutting them to the
# tokenizer)
PAPER_GEOMETRY = {
    "iwslt2017-de-en": ("mt5-large", "mt5-small", 250100),
    "wmt14-de-en": ("mt5-large", "mt5-small", 250100),
    "xsum": ("t5-large", "t5-small", 32100),
    "cnn_dailymail": ("t5-large", "t5-small", 32100),
}


def task_of(pair: str) -> str:
    """The task a pair is evaluated on: a toy pair's own task, else the paper task of the same name."""
    return TOY_PAIRS[pair][4] if pair in TOY_PAIRS else pair


@dataclass
class Pair:
    name: str
    large: torch.nn.Module
    small: torch.nn.Module
    tokenizer: object
    # prepended to every source (the toy zoo is multitask; the paper's summarization pairs)
    prefix: str = ""
    task: str | None = None
    # sources longer than this (EOS included) are truncated; None: never
    max_source_tokens: int | None = None

    def encode(self, source: str) -> torch.Tensor:
        """Model input ids [1, n] for a source text: prefix + source + EOS (encoder-decoder), and
        for decoder-only models the separator that starts the answer; at most `max_source_tokens`
        ids, the last one EOS/separator (as a tokenizer's truncation=True,
        max_length=max_source_tokens)."""
        end = (
            self.tokenizer.sep_token_id
            if not self.large.config.is_encoder_decoder
            else self.tokenizer.eos_token_id
        )
        ids = source_ids(self.tokenizer, self.prefix, source, self.max_source_tokens, end)
        return torch.tensor([ids], device=self.large.device)

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True).strip()

    def inputs(self, split: str = "test", limit: int | None = None) -> list[torch.Tensor]:
        """The encoded sources of this pair's own task (not the pair's name: `toy-mt-llama` runs on
        `toy-mt`)."""
        from .tasks import load_task

        return [self.encode(ex["source"]) for ex in load_task(self.task, split, limit=limit)]


def source_ids(
    tokenizer, prefix: str, source: str, max_source_tokens: int | None, end: int
) -> list[int]:
    """The model input of a source text (`Pair.encode`; the plan's longest source): prefix + source,
    at most `max_source_tokens` ids, the last one `end` (EOS or the separator)."""
    ids = tokenizer(prefix + source, add_special_tokens=False)["input_ids"]
    if max_source_tokens is not None:
        ids = ids[: max_source_tokens - 1]
    return ids + [end]


def zoo_dir() -> Path:
    """The shipped toy zoo: `_zoo` inside the package, package data of the wheel and the sdist, so a
    checkout, an editable and a plain install all find it (or $BILDLAB_ZOO)."""
    return Path(os.environ.get(ZOO_ENV) or Path(__file__).resolve().parent.parent / "toy" / "_zoo")


def fingerprint(pair: str, draft: str = "small") -> str:
    """Content hash of a toy pair's large and draft model files and tokenizer in the zoo
    (`zoo_dir`), which a record's or a calibration's key carries: what its numbers were made with
    (paper pairs: their name; `provenance` keys them)."""
    return _fingerprint(pair, draft, str(zoo_dir()))


@lru_cache(maxsize=8)
def _fingerprint(pair: str, draft: str, root: str) -> str:
    if pair not in TOY_PAIRS:
        return pair
    large, small, aligned = TOY_PAIRS[pair][:3]
    files = [
        Path(root) / m / "model.safetensors"
        for m in (large, aligned if draft == "aligned" else small)
        if m
    ]
    files.append(Path(root) / "tokenizer" / "tokenizer.json")
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes() if f.is_file() else b"missing")
    return h.hexdigest()[:16]


def load_pair(
    name: str,
    aligned: bool = False,
    *,
    early_exit: bool = False,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    mirror: str | os.PathLike | None = None,
    resize_embeddings: bool = True,
) -> Pair:
    """Load a (large, small) pair by name; toy pairs from the shipped zoo, paper pairs from the hub
    or a local mirror (`mirror`, default $BILDLAB_MIRROR; see `bildlab.world.mirror`). Paper pairs
    use the pretrained model's tokenizer (PAPER_TOKENIZERS), the summarization prefix, sources
    truncated to MAX_SOURCE_TOKENS, and with `resize_embeddings` (the paper's code) both models'
    embeddings and output layers cut to the tokenizer's size (mT5: 250,100 rows, T5: 32,100), so the
    softmax whose maximum BiLD's fallback reads spans the tokenizer's vocabulary only; each output
    layer stays its own (mT5) or tied (T5) as the checkpoint has it (`cut_vocabulary`)."""
    if name not in PAIRS:
        raise ValueError(f"unknown pair {name!r}; known pairs: {', '.join(PAIRS)}")
    if aligned and early_exit:
        raise ValueError(
            "aligned and early_exit are exclusive: the small model is either the aligned one or the "
            "large model's early exit"
        )
    if name in TOY_PAIRS:
        large_name, small_name, aligned_name, prefix, task = TOY_PAIRS[name]
        if aligned and aligned_name is None:
            raise ValueError(
                f"pair {name!r} has no aligned small model (aligned=True is for "
                f"{', '.join(n for n, v in TOY_PAIRS.items() if v[2])})"
            )
        root = zoo_dir()
        tokenizer = load_tokenizer(root / "tokenizer")
        large = load_model(root / large_name, dtype).to(device)
        if early_exit:
            small = exit_draft(large, EXIT_LAYER)
        else:
            small = load_model(root / (aligned_name if aligned else small_name), dtype).to(device)
        return Pair(name, large, small, tokenizer, prefix, task)
    if early_exit:
        raise ValueError("early_exit=True is only available for the toy pairs")
    if not isinstance(resize_embeddings, bool):
        raise TypeError(f"resize_embeddings must be True or False; got {resize_embeddings!r}")
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from . import mirror as _mirror

    def where(repo_id):  # the mirror's folder, else the hub id (or its local cache)
        folder = _mirror.repo_dir(repo_id, mirror)
        return str(folder) if folder is not None else repo_id

    large_id, small_id, aligned_id = PAPER_PAIRS[name]
    tokenizer = AutoTokenizer.from_pretrained(where(PAPER_TOKENIZERS[name]))
    models = []
    for repo_id in (large_id, aligned_id if aligned else small_id):
        with _quiet():
            model = AutoModelForSeq2SeqLM.from_pretrained(where(repo_id), dtype=dtype).eval()
        if resize_embeddings:
            cut_vocabulary(model, len(tokenizer), repo_id)
        models.append(model.to(device))
    return Pair(name, *models, tokenizer, PAPER_PREFIX[name], name, MAX_SOURCE_TOKENS)


def cut_vocabulary(model, rows: int, name: str = "the model") -> None:
    """Keep the first `rows` rows of a model's input embeddings and of its output layer (the paper's
    resize to the tokenizer's vocabulary: mT5 250,112 -> 250,100, T5 32,128 -> 32,100; the rows cut
    are padding no tokenizer id reaches), each layer its own or tied as the checkpoint has it: mT5
    checkpoints have an output layer of their own, T5 ties it to the input embeddings. Not
    transformers' `resize_token_embeddings`: it re-ties the output layer to the input embeddings
    whenever the config says so, and T5Config / MT5Config (transformers 5) always say so. The logits
    of the kept rows are unchanged. A tokenizer with more ids than the checkpoint has rows is an
    error (the rows it would add have no trained weights)."""
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    have = min(embed.num_embeddings, head.out_features)
    if rows > have:
        raise ValueError(
            f"the tokenizer has {rows} ids but {name} has {have} embedding rows: a tokenizer of another "
            f"model? (load_pair(..., resize_embeddings=False) keeps the checkpoint's rows)"
        )
    if rows == embed.num_embeddings == head.out_features:
        return
    tied = head.weight is embed.weight
    new_embed = torch.nn.Embedding.from_pretrained(
        embed.weight.detach()[:rows].clone(), freeze=False, padding_idx=embed.padding_idx
    )
    new_head = torch.nn.Linear(head.in_features, rows, bias=head.bias is not None, device="meta")
    new_head.weight = (
        new_embed.weight if tied else torch.nn.Parameter(head.weight.detach()[:rows].clone())
    )
    if head.bias is not None:
        new_head.bias = torch.nn.Parameter(head.bias.detach()[:rows].clone())
    # T5: the shared embeddings and the encoder's and decoder's
    model.set_input_embeddings(new_embed)
    model.set_output_embeddings(new_head)
    model.config.vocab_size = rows


def provenance(
    pair: str,
    draft: str = "small",
    *,
    mirror: str | os.PathLike | None = None,
    resize_embeddings: bool = True,
) -> dict:
    """What a paper pair's outputs are a function of, besides the decoding policy, for keying
    results: the repo ids of the large model, the draft and the tokenizer with the commit each was
    fetched at ("revision": the hub cache's snapshot, or a mirror folder's download record; None
    when unknown), and the preprocessing (prefix, source truncation, embedding resize). `draft`:
    "small", "aligned" or "early-exit". Toy pairs: {} (the zoo's files are hashed by the harness).
    """
    if pair not in PAIRS:
        raise ValueError(f"unknown pair {pair!r}; known pairs: {', '.join(PAIRS)}")
    if draft not in DRAFTS:
        raise ValueError(f"draft must be one of {', '.join(DRAFTS)}; got {draft!r}")
    if pair in TOY_PAIRS:
        return {}
    if draft == "early-exit":
        raise ValueError("early_exit=True is only available for the toy pairs")
    large_id, small_id, aligned_id = PAPER_PAIRS[pair]
    repos = {
        "large": large_id,
        "draft": aligned_id if draft == "aligned" else small_id,
        "tokenizer": PAPER_TOKENIZERS[pair],
    }
    out = {
        role: {"repo": repo_id, "revision": _revision(repo_id, mirror)}
        for role, repo_id in repos.items()
    }
    out.update(
        prefix=PAPER_PREFIX[pair],
        max_source_tokens=MAX_SOURCE_TOKENS,
        resize_embeddings=resize_embeddings,
    )
    return out


def _revision(repo_id: str, mirror) -> str | None:
    """The commit of a model or tokenizer repo: the mirror folder's download record, or the hub
    cache's snapshot holding its config (fetched if needed); None if neither can tell."""
    from . import mirror as _mirror

    folder = _mirror.repo_dir(repo_id, mirror)
    if folder is not None:
        names = [n for n in ("config.json", "tokenizer_config.json") if (folder / n).is_file()]
        return _mirror.revision(folder, names[:1]) if names else None
    from huggingface_hub import hf_hub_download

    for name in ("config.json", "tokenizer_config.json"):
        try:
            return Path(hf_hub_download(repo_id, name)).parent.name  # .../snapshots/<commit>/<name>
        except Exception:  # noqa: BLE001 - not in the repo, or neither network nor cache: try the next, else unknown
            continue
    return None


def load_tokenizer(path: Path):
    from transformers import PreTrainedTokenizerFast

    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"toy tokenizer missing at {path}; rebuild the zoo with `{REBUILD}`"
        )
    try:
        return PreTrainedTokenizerFast.from_pretrained(str(path))
    except Exception as e:  # a corrupt file: say which and how to rebuild
        raise RuntimeError(
            f"toy tokenizer at {path} could not be read ({e}); rebuild the zoo with `{REBUILD}`"
        ) from e


@contextlib.contextmanager
def _quiet():
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def load_model(path: Path, dtype: torch.dtype):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    weights = path / "model.safetensors"
    if not (path / "config.json").is_file() or not weights.is_file():
        raise FileNotFoundError(
            f"toy checkpoint missing at {path}; rebuild the zoo with `{REBUILD}`"
        )
    try:
        config = AutoConfig.from_pretrained(str(path))
        auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        with _quiet():  # no per-load progress bar
            model, info = auto.from_pretrained(
                str(path), config=config, dtype=dtype, output_loading_info=True
            )
    except Exception as e:
        raise RuntimeError(
            f"toy checkpoint at {path} could not be read ({type(e).__name__}: {e}); "
            f"rebuild the zoo with `{REBUILD}`"
        ) from e
    missing = [k for k in info["missing_keys"] if "embed_tokens" not in k and "lm_head" not in k]
    if missing or info.get("mismatched_keys"):  # never run half-random weights silently
        raise RuntimeError(
            f"toy checkpoint at {path} is incomplete (missing {missing[:3]}, mismatched "
            f"{list(info.get('mismatched_keys') or [])[:3]}); rebuild the zoo with `{REBUILD}`"
        )
    return model.eval()


def read_card() -> dict:
    """The zoo card (bildlab/toy/_zoo/card.json): configs, sizes, training commands and measured
    metrics."""
    path = zoo_dir() / "card.json"
    if not path.is_file():
        raise FileNotFoundError(f"zoo card missing at {path}; rebuild the zoo with `{REBUILD}`")
    return json.loads(path.read_text())


def random_model(
    name: str,
    device="cpu",
    *,
    rows: int | None = None,
    seed: int = 0,
    dtype=torch.float32,
    config_dir: Path | None = None,
    config: dict | None = None,
):
    """A random-weight model with a paper checkpoint's configuration (`PAPER_CONFIGS`: 't5-large',
    'mt5-small', ...; or the config.json in `config_dir`, e.g. a mirror's), in eval mode on
    `device`; mT5 with its own output layer as the checkpoint has it; the vocabulary cut to the
    tokenizer's `rows` as `load_pair` does (None: not cut). What costs and memory are measured on
    where the checkpoints cannot be read: a call's cost does not depend on weights. `config`: the
    configuration's fields in place of PAPER_CONFIGS[name]'s (e.g. shrunk for a test)."""
    import transformers as tf

    if name not in PAPER_CONFIGS:
        raise ValueError(f"name must be one of {', '.join(PAPER_CONFIGS)}; got {name!r}")
    torch.manual_seed(seed)
    untied = name.startswith("mt5")
    if config_dir is not None:
        config = tf.AutoConfig.from_pretrained(config_dir)
        untied = (
            json.loads((Path(config_dir) / "config.json").read_text()).get(
                "tie_word_embeddings", True
            )
            is False
        )
    else:
        config = (tf.MT5Config if untied else tf.T5Config)(
            **(config or PAPER_CONFIGS[name]), **PAPER_CONFIG_COMMON
        )
    cls = (
        tf.MT5ForConditionalGeneration
        if config.model_type == "mt5"
        else tf.T5ForConditionalGeneration
    )
    with torch.device(device):
        model = cls(config).to(dtype).eval()
        if untied:  # its own output layer
            model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight) * 0.05)
    if rows is not None:
        cut_vocabulary(model, rows, name)
    return model


def random_pair(pair: str, device="cpu"):
    """A paper pair's large and small model with random weights at the checkpoints' sizes
    (`random_model`)."""
    if pair not in PAPER_GEOMETRY:
        raise ValueError(f"pair must be a paper pair ({', '.join(PAPER_GEOMETRY)}); got {pair!r}")
    large, small, rows = PAPER_GEOMETRY[pair]
    return (
        random_model(large, device, rows=rows, seed=0),
        random_model(small, device, rows=rows, seed=1),
    )
