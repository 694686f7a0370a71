"""bildlab: the Big Little Decoder and speculative decoding over unmodified Hugging Face models."""

from .decoding import METHODS, Output, generate
from .early_exit import exit_draft
from .metrics import bleu, rouge_l, score
from .models import load_pair
from .tasks import PAPER_TASKS, TOY_TASKS, load_task, task_metric

__version__ = "0.2.0"
__all__ = ["METHODS", "Output", "generate", "exit_draft", "load_pair", "load_task", "task_metric", "TOY_TASKS",
           "PAPER_TASKS", "bleu", "rouge_l", "score", "__version__"]
