"""bildlab: the Big Little Decoder and speculative decoding over unmodified Hugging Face models."""

import importlib

__version__ = "0.2.0"
# the public names, imported on first use: the command line starts (and fails on a bad parameter)
# without loading transformers' modeling code
_HOME = {
    "METHODS": "engine.decoding",
    "Output": "engine.decoding",
    "Policy": "engine.policy",
    "generate": "engine.decoding",
    "generate_batch": "engine.batch",
    "warm_up": "engine.static",
    "exit_draft": "engine.early_exit",
    "Unsupported": "engine.capabilities",
    "load_pair": "world.models",
    "load_task": "world.tasks",
    "task_metric": "world.tasks",
    "TOY_TASKS": "world.tasks",
    "PAPER_TASKS": "world.tasks",
    "bleu": "measure.metrics",
    "rouge_l": "measure.metrics",
    "score": "measure.metrics",
}
__all__ = [*_HOME, "__version__"]


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'bildlab' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
