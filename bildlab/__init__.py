"""bildlab: the Big Little Decoder and speculative decoding over unmodified Hugging Face models."""

import importlib

__version__ = "0.2.0"
# the public names, imported on first use: the command line starts (and fails on a bad parameter) without loading
# transformers' modeling code
_HOME = {"METHODS": "decoding", "Output": "decoding", "generate": "decoding", "generate_batch": "batch",
         "warm_up": "static", "exit_draft": "early_exit", "Unsupported": "capabilities",
         "load_pair": "models", "load_task": "tasks", "task_metric": "tasks", "TOY_TASKS": "tasks",
         "PAPER_TASKS": "tasks", "bleu": "metrics", "rouge_l": "metrics", "score": "metrics"}
__all__ = [*_HOME, "__version__"]


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'bildlab' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
