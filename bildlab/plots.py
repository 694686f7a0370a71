"""Figures for the study: deterministic PNG + PDF files (no timestamps in their metadata), written atomically."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("agg")
import matplotlib.pyplot as plt  # noqa: E402

from .atomic import atomic_path  # noqa: E402

PNG_META = {"Software": None}
PDF_META = {"Creator": None, "Producer": None, "CreationDate": None}


def save(fig, name: str, folder: str | os.PathLike = "figures") -> list[Path]:
    """Write `fig` as folder/name.png and folder/name.pdf; each file appears whole or not at all."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext, meta in (("png", PNG_META), ("pdf", PDF_META)):
        path = folder / f"{name}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, metadata=meta, dpi=150, bbox_inches="tight")
        paths.append(path)
    return paths


def speed_quality(points: dict[str, list[tuple[float, float]]], *, metric: str, baseline: float | None = None,
                  front: list[tuple[float, float]] | None = None, title: str = ""):
    """Speedup (x) against quality (y), one marker style per series; the Pareto front as a line."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for label, pts in points.items():
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=label, s=28)
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], "k--", lw=1, label="Pareto front")
    if baseline is not None:
        ax.axhline(baseline, color="grey", lw=0.8, ls=":", label="vanilla large")
        ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("speedup over vanilla large (x)")
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def bars(labels: list[str], series: dict[str, list[float]], *, ylabel: str, title: str = ""):
    """Grouped bars: one group per label, one bar per series."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        ax.bar([j + i * width for j in range(len(labels))], values, width, label=name)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(labels))], labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def lines(x: list[float], series: dict[str, list[float]], *, xlabel: str, ylabel: str, title: str = ""):
    """One line per series over the same x values."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name, values in series.items():
        ax.plot(x, values, marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
