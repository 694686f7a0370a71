"""Model pairs by name: the shipped toy zoo (offline) and the paper's checkpoints (hub, on a machine with network).

    pair = load_pair("toy-mt")                    # .large, .small, .tokenizer; .encode(source), .decode(tokens)
    pair = load_pair("toy-mt", aligned=True)      # the prediction-aligned small model
    pair = load_pair("toy-mt", early_exit=True)   # the large model's early exit as the small (draft) model: a view
                                                  # of the large model (early_exit.py), not a copy
    pair = load_pair("toy-mt-llama")              # decoder-only pair (speculative decoding pipeline)
    pair = load_pair("xsum")                      # kssteven/T5-{large,small}-xsum from the hub
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .early_exit import exit_draft

ZOO_ENV = "BILDLAB_ZOO"
REBUILD = "bildlab zoo"  # the command that rebuilds the toy zoo

# toy pairs: name -> (large, small, aligned small, task prefix, task)
TOY_PAIRS = {
    "toy-mt": ("t5-large", "t5-small", "t5-small-aligned", "<mt> ", "toy-mt"),
    "toy-sum": ("t5-large", "t5-small", "t5-small-aligned", "<sum> ", "toy-sum"),
    "toy-mt-llama": ("llama-large", "llama-small", None, "<mt> ", "toy-mt"),
}
EXIT_LAYER = 2  # the toy large models' early exit: after this many decoder layers (the T5 was trained for it with an
                # early-exit loss, the Llama was not)

# paper pairs (names from the public BiLD README; availability on the hub unverified): name -> (large, small, aligned)
PAPER_PAIRS = {
    "iwslt2017-de-en": ("kssteven/mT5-large-iwslt2017-de-en", "kssteven/mT5-small-iwslt2017-de-en",
                        "kssteven/mT5-small-iwslt2017-de-en-bild-aligned"),
    "wmt14-de-en": ("kssteven/mT5-large-wmt2014-de-en", "kssteven/mT5-small-wmt2014-de-en",
                    "kssteven/mT5-small-wmt2014-de-en-bild-aligned"),
    "xsum": ("kssteven/T5-large-xsum", "kssteven/T5-small-xsum", "kssteven/T5-small-xsum-bild-aligned"),
    "cnn_dailymail": ("kssteven/T5-large-cnndm", "kssteven/T5-small-cnndm", "kssteven/T5-small-cnndm-bild-aligned"),
}
PAIRS = tuple(TOY_PAIRS) + tuple(PAPER_PAIRS)


def task_of(pair: str) -> str:
    """The task a pair is evaluated on: a toy pair's own task, else the paper task of the same name."""
    return TOY_PAIRS[pair][4] if pair in TOY_PAIRS else pair


@dataclass
class Pair:
    name: str
    large: torch.nn.Module
    small: torch.nn.Module
    tokenizer: object
    prefix: str = ""  # prepended to every source (the toy zoo is multitask)
    task: str | None = None

    def encode(self, source: str) -> torch.Tensor:
        """Model input ids [1, n] for a source text: prefix + source + EOS (encoder-decoder), and for decoder-only
        models the separator that starts the answer."""
        ids = self.tokenizer(self.prefix + source, add_special_tokens=False)["input_ids"]
        end = self.tokenizer.sep_token_id if not self.large.config.is_encoder_decoder else self.tokenizer.eos_token_id
        return torch.tensor([ids + [end]], device=self.large.device)

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True).strip()

    def inputs(self, split: str = "test", limit: int | None = None) -> list[torch.Tensor]:
        """The encoded sources of this pair's own task (not the pair's name: `toy-mt-llama` runs on `toy-mt`)."""
        from .tasks import load_task

        return [self.encode(ex["source"]) for ex in load_task(self.task, split, limit=limit)]


def zoo_dir() -> Path:
    """The shipped toy zoo: data/zoo next to the package (or $BILDLAB_ZOO)."""
    return Path(os.environ.get(ZOO_ENV) or Path(__file__).resolve().parent.parent / "data" / "zoo")


def load_pair(name: str, aligned: bool = False, *, early_exit: bool = False, device: str | torch.device = "cpu",
              dtype: torch.dtype = torch.float32) -> Pair:
    """Load a (large, small) pair by name; toy pairs from the shipped zoo, paper pairs from the hub."""
    if name not in PAIRS:
        raise ValueError(f"unknown pair {name!r}; known pairs: {', '.join(PAIRS)}")
    if aligned and early_exit:
        raise ValueError("aligned and early_exit are exclusive: the small model is either the aligned one or the "
                         "large model's early exit")
    if name in TOY_PAIRS:
        large_name, small_name, aligned_name, prefix, task = TOY_PAIRS[name]
        if aligned and aligned_name is None:
            raise ValueError(f"pair {name!r} has no aligned small model (aligned=True is for "
                             f"{', '.join(n for n, v in TOY_PAIRS.items() if v[2])})")
        root = zoo_dir()
        tokenizer = _load_tokenizer(root / "tokenizer")
        large = _load_model(root / large_name, dtype).to(device)
        if early_exit:
            small = exit_draft(large, EXIT_LAYER)
        else:
            small = _load_model(root / (aligned_name if aligned else small_name), dtype).to(device)
        return Pair(name, large, small, tokenizer, prefix, task)
    if early_exit:
        raise ValueError("early_exit=True is only available for the toy pairs")
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    large_id, small_id, aligned_id = PAPER_PAIRS[name]
    tokenizer = AutoTokenizer.from_pretrained(large_id)
    large = AutoModelForSeq2SeqLM.from_pretrained(large_id, dtype=dtype).eval()
    small = AutoModelForSeq2SeqLM.from_pretrained(aligned_id if aligned else small_id, dtype=dtype).eval()
    return Pair(name, large.to(device), small.to(device), tokenizer, "", name)


def _load_tokenizer(path: Path):
    from transformers import PreTrainedTokenizerFast

    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"toy tokenizer missing at {path}; rebuild the zoo with `{REBUILD}`")
    try:
        return PreTrainedTokenizerFast.from_pretrained(str(path))
    except Exception as e:  # a corrupt file: say which and how to rebuild
        raise RuntimeError(f"toy tokenizer at {path} could not be read ({e}); rebuild the zoo with `{REBUILD}`") from e


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


def _load_model(path: Path, dtype: torch.dtype):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    weights = path / "model.safetensors"
    if not (path / "config.json").is_file() or not weights.is_file():
        raise FileNotFoundError(f"toy checkpoint missing at {path}; rebuild the zoo with `{REBUILD}`")
    try:
        config = AutoConfig.from_pretrained(str(path))
        auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        with _quiet():  # no per-load progress bar
            model, info = auto.from_pretrained(str(path), config=config, dtype=dtype, output_loading_info=True)
    except Exception as e:
        raise RuntimeError(f"toy checkpoint at {path} could not be read ({type(e).__name__}: {e}); "
                           f"rebuild the zoo with `{REBUILD}`") from e
    missing = [k for k in info["missing_keys"] if "embed_tokens" not in k and "lm_head" not in k]
    if missing or info.get("mismatched_keys"):  # never run half-random weights silently
        raise RuntimeError(f"toy checkpoint at {path} is incomplete (missing {missing[:3]}, mismatched "
                           f"{list(info.get('mismatched_keys') or [])[:3]}); rebuild the zoo with `{REBUILD}`")
    return model.eval()


def read_card() -> dict:
    """The zoo card (data/zoo/card.json): configs, sizes, training commands and measured metrics."""
    path = zoo_dir() / "card.json"
    if not path.is_file():
        raise FileNotFoundError(f"zoo card missing at {path}; rebuild the zoo with `{REBUILD}`")
    return json.loads(path.read_text())
