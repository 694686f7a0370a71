"""The study: one module per research question of the BiLD paper plus the speculative decoding
pipeline, each named like its notebook in notebooks/ (`rq1_small_writes_most` ...
`speculative_pipeline`), and `common` for what they share.

Each question is a function that returns a `Result`: a table (pandas), a figure (also written to
figures/ as PNG and PDF), headline numbers and a one-line answer. The notebooks are thin: a
parameters cell, one call, the table, the figure, the answer. Every measurement goes through the
harness it is given (`sweep`, default `evaluate.sweep`, so reruns come from the results registry);
`plan` gives one that records what would run instead."""

from ..harness import evaluate as ev  # noqa: F401  (the harness the questions call by default)
from .batching import batch_answer
from .common import Result, Table, run_settings
from .compiled import against_compiled
from .explained import elsewhere, explained
from .rq1_small_writes_most import rq1
from .rq2_policies import rq2
from .rq3_alignment import rq3
from .rq4_early_exit import rq4
from .rq5_main_table import PAPER_TABLE, ROWS, paper_table, rq5
from .speculative_pipeline import speculative

QUESTIONS = {
    "rq1_small_writes_most": rq1,
    "rq2_policies": rq2,
    "rq3_alignment": rq3,
    "rq4_early_exit": rq4,
    # notebook name -> its question
    "rq5_main_table": rq5,
    "speculative_pipeline": speculative,
}
__all__ = [
    "ev",
    "Result",
    "Table",
    "run_settings",
    "against_compiled",
    "batch_answer",
    "explained",
    "elsewhere",
    "rq1",
    "rq2",
    "rq3",
    "rq4",
    "rq5",
    "speculative",
    "paper_table",
    "PAPER_TABLE",
    "ROWS",
    "QUESTIONS",
]
