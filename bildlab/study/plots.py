"""Figures for the study, for reports: error bars (95% intervals), N in the title, labelled points,
legends outside the data, a 1x reference line; written as deterministic PNG + PDF files (no
timestamps in their metadata), atomically.

Importing this module never changes matplotlib's backend: in Jupyter the figures show inline, in a
script they are drawn by whatever backend is active (agg when there is no display). Every figure is
closed after it is drawn, so it appears once, where the notebook shows it."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from ..atomic import atomic_path
from .figcheck import FigureTextWarning, overlaps, texts  # noqa: F401

PNG_META = {"Software": None}
PDF_META = {"Creator": None, "Producer": None, "CreationDate": None}
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def _figure(width: float = 6.4, height: float = 4.0):
    fig, (ax,) = panels(1, width, height)
    return fig, ax


def panels(n: int, width: float = 6.4, height: float = 4.0):
    """A figure of `n` panels stacked vertically (one per task: each has its own metric) and its
    axes, as a list."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(n, 1, figsize=(width, height * n), squeeze=False)
    plt.close(fig)  # shown where the notebook displays it, not again at the end of the cell
    return fig, list(axes[:, 0])


def save(fig, name: str, folder: str | os.PathLike = "figures") -> list[Path]:
    """Write `fig` as folder/name.png and folder/name.pdf; each file appears whole or not at all. A
    figure whose texts overlap (`overlaps`) is written with a FigureTextWarning naming them."""
    clash = overlaps(fig)
    if clash:
        warnings.warn(f"figure {name}: overlapping text {clash[:5]}", FigureTextWarning, 2)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext, meta in (("png", PNG_META), ("pdf", PDF_META)):
        path = folder / f"{name}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, metadata=meta, dpi=150, bbox_inches="tight")
        paths.append(path)
    return paths


def save_data(data, name: str, folder: str | os.PathLike = "figures") -> Path:
    """Write `data` as folder/name.json beside the figure it was drawn from (what the README's lines
    and tables are made from, without running the question again); the file appears whole or not at
    all."""
    path = Path(folder) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=1) + "\n")
    return path


def _errors(values, cis):
    """Error bar lengths below and above each value (a percentile interval may, rarely, sit beside
    its value)."""
    return [
        [max(v - lo, 0) for v, (lo, hi) in zip(values, cis)],
        [max(hi - v, 0) for v, (lo, hi) in zip(values, cis)],
    ]


def _finish(ax, fig, title: str, legend: bool | str = True):
    """Title, grid and legend in the study's style: the legend outside the data, to the right
    (`legend=True`) or below the axes (`"below"`, for long labels)."""
    ax.set_title(title, fontsize=10, wrap=True)
    ax.grid(alpha=0.25)
    ax.tick_params(labelsize=8)
    ax.xaxis.label.set_size(9)
    ax.yaxis.label.set_size(9)
    labels = ax.get_legend_handles_labels()[1]
    if not labels:  # nothing labelled (e.g. no priced record to mark)
        legend = False
    if legend == "below":  # under the tick labels and the axis label, whatever the axes' height
        from matplotlib.transforms import ScaledTranslation

        ax.legend(
            fontsize=7,
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            bbox_transform=ax.transAxes + ScaledTranslation(0, -0.5, fig.dpi_scale_trans),
            borderaxespad=0,
            frameon=False,
            # two columns of long labels are wider than the figure: the layout would narrow the
            # axes to fit them
            ncol=2 if max(map(len, labels)) <= 45 else 1,
        )
    elif legend:
        ax.legend(
            fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, frameon=False
        )
    fig.tight_layout()
    return fig


def speed_quality(
    series: dict[str, list[dict]],
    *,
    metric: str,
    baseline: float | None = None,
    front: list[dict] | None = None,
    title: str = "",
    annotate: bool | str = True,
    xlabel: str = "speedup over the vanilla large model (x)",
    reference: float | None = 1.0,
    xlim: tuple[float, float] | None = None,
    focus: list[str] | None = None,
    ax=None,
):
    """Speedup (x) against quality (y), both with 95% intervals. Each point is a dict with speedup,
    speedup_ci, score, score_ci and an optional label (written to the point's right, or left with
    label_side="left"); the points not dominated are ringed. Drawn into `ax` (a panel of
    `panels`) when given, else into a figure of its own; returns the figure."""
    fig, ax = _figure() if ax is None else (ax.figure, ax)
    chosen_label = False
    for color, (name, pts) in zip(COLORS, series.items()):
        if not pts:
            continue
        xs, ys = [p["speedup"] for p in pts], [p["score"] for p in pts]
        ax.errorbar(
            xs,
            ys,
            xerr=_errors(xs, [p["speedup_ci"] for p in pts]),
            yerr=_errors(ys, [p["score_ci"] for p in pts]),
            fmt="o",
            ms=4,
            color=color,
            ecolor=color,
            elinewidth=0.8,
            capsize=2,
            alpha=0.9,
            label=name,
        )
        if annotate == "mark":  # the labelled points ringed by a star, named in the table
            marked = [p for p in pts if p.get("label")]
            ax.scatter(
                [p["speedup"] for p in marked],
                [p["score"] for p in marked],
                marker="*",
                s=160,
                facecolors="none",
                edgecolors=color,
                linewidths=1.0,
                zorder=4,
                label="chosen (see the table)" if marked and not chosen_label else None,
            )
            chosen_label = chosen_label or bool(marked)
        elif annotate:
            for p in pts:
                if p.get("label"):
                    left = p.get("label_side") == "left"  # e.g. a point at the axis' right end
                    ax.annotate(
                        p["label"],
                        (p["speedup"], p["score"]),
                        textcoords="offset points",
                        xytext=(-4 if left else 4, 3),
                        ha="right" if left else "left",
                        fontsize=6,
                        color=color,
                    )
    # not dominated by paired differences: ringed (such a set need not be a monotone line)
    if front:
        ax.scatter(
            [p["speedup"] for p in front],
            [p["score"] for p in front],
            s=70,
            facecolors="none",
            edgecolors="black",
            linewidths=0.8,
            label="not dominated (paired differences)",
            zorder=3,
        )
    if baseline is not None:
        ax.axhline(baseline, color="grey", lw=0.8, ls=":", label="vanilla large model")
    if reference is not None:
        ax.axvline(reference, color="black", lw=0.6, label=f"{reference:g}x (vanilla speed)")
    if xlim is not None:
        ax.set_xlim(*xlim)
    if focus:  # the y axis fits these series and the baseline; points far below sit on its edge
        ys = [
            y
            for name in focus
            for p in series.get(name, ())
            for y in (p["score_ci"][0], p["score_ci"][1])
        ] + ([baseline] if baseline is not None else [])
        if ys:
            lo, hi = min(ys), max(ys)
            pad = max((hi - lo) * 0.1, 0.05)
            ax.set_ylim(lo - pad, hi + pad)
            below = [
                (p["speedup"], color, name)
                for color, (name, pts) in zip(COLORS, series.items())
                for p in pts
                if p["score"] < lo - pad
            ]
            for x, color, _ in below:
                ax.scatter([x], [lo - pad], marker="v", s=30, color=color, clip_on=False, zorder=3)
            if below:
                ax.scatter(
                    [],
                    [],
                    marker="v",
                    s=30,
                    color="grey",
                    label=f"{len(below)} point(s) below the axis",
                )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    return _finish(ax, fig, title)


def bars(
    labels: list[str],
    series: dict[str, list[float]],
    *,
    ylabel: str,
    title: str = "",
    cis: dict[str, list] | None = None,
    reference: float | None = None,
):
    """Grouped bars with optional 95% intervals: one group per label, one bar per series; NaN bars
    are left out."""
    fig, ax = _figure(6.4, 3.8)
    width = 0.8 / max(len(series), 1)
    for i, (color, (name, values)) in enumerate(zip(COLORS, series.items())):
        xs = [j + i * width for j in range(len(labels))]
        err = None
        if cis and cis.get(name):
            err = _errors(values, [ci if ci else (v, v) for v, ci in zip(values, cis[name])])
        ax.bar(
            xs,
            values,
            width,
            label=name,
            color=color,
            yerr=err,
            capsize=3,
            error_kw={"elinewidth": 0.8},
        )
    ax.set_xticks(
        [j + width * (len(series) - 1) / 2 for j in range(len(labels))],
        labels,
        fontsize=8,
        rotation=15,
        ha="right",
    )
    if reference is not None:
        ax.axhline(reference, color="black", lw=0.6)
    ax.set_ylabel(ylabel)
    return _finish(ax, fig, title, legend=len(series) > 1)


def lines(
    x: list[float],
    series: dict[str, list[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    cis: dict[str, list] | None = None,
    reference: float | None = None,
):
    """One line per series over the same x; a series whose name ends in 'expected' is dashed in the
    colour of its 'measured' partner (same prefix before ':'); 95% intervals as bands where given.
    """
    fig, ax = _figure()
    colors: dict[str, str] = {}
    for name, values in series.items():
        group = name.split(":")[0]
        color = colors.setdefault(group, COLORS[len(colors) % len(COLORS)])
        dashed = name.endswith("expected")
        ax.plot(
            x,
            values,
            ls="--" if dashed else "-",
            marker=None if dashed else "o",
            ms=4,
            color=color,
            label=name,
        )
        if cis and cis.get(name):
            ax.fill_between(
                x,
                [c[0] for c in cis[name]],
                [c[1] for c in cis[name]],
                color=color,
                alpha=0.15,
                lw=0,
            )
    if reference is not None:
        ax.axhline(reference, color="black", lw=0.6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return _finish(ax, fig, title)


def measured_predicted(
    series: dict[str, list[tuple]], *, tolerance: float, title: str = "", ax=None
):
    """Measured speedup (y) against predicted (x), both with 95% intervals, one colour per series
    (e.g. a pair); each point is (predicted, predicted_ci, measured, measured_ci). The diagonal and
    a band of +-`tolerance`."""
    fig, ax = _figure() if ax is None else (ax.figure, ax)
    lo, hi = 1.0, 1.0
    for color, (name, pts) in zip(COLORS, series.items()):
        if not pts:
            continue
        xs, ys = [p[0] for p in pts], [p[2] for p in pts]
        ax.errorbar(
            xs,
            ys,
            xerr=_errors(xs, [p[1] for p in pts]),
            yerr=_errors(ys, [p[3] for p in pts]),
            fmt="o",
            ms=3,
            color=color,
            ecolor=color,
            elinewidth=0.5,
            capsize=0,
            alpha=0.6,
            label=f"{name} ({len(pts)})",
        )
        lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
    grid = [lo * 0.95, hi * 1.05]
    ax.plot(grid, grid, color="black", lw=0.6, label="measured = predicted")
    ax.fill_between(
        grid,
        [g * (1 - tolerance) for g in grid],
        [g * (1 + tolerance) for g in grid],
        color="grey",
        alpha=0.2,
        lw=0,
        label=f"within ±{tolerance:.0%}",
    )
    ax.set_xlabel("predicted speedup (exact counts x calibrated costs)")
    ax.set_ylabel("measured speedup (x)")
    return _finish(ax, fig, title, legend="below")


def against_cost_ratio(
    cs: list[float],
    curves: dict[str, list[float]],
    marks: dict[str, list[tuple]],
    *,
    title: str = "",
    ax=None,
):
    """Predicted speedup against the cost ratio c, one line per policy (its counts fixed); `marks`
    ({policy: [(c, predicted, measured or None, machine), ...]}) puts each calibrated machine at its
    c and the speedup its calibration predicts there (an open marker, one shape per machine), and
    the speedup measured there where the policy was timed on it (a diamond)."""
    fig, ax = _figure() if ax is None else (ax.figure, ax)
    shapes, labelled = {}, set()
    for color, (name, ys) in zip(COLORS, curves.items()):
        ax.plot(cs, ys, color=color, lw=1.2, label=name)
        for c, predicted, measured, machine in marks.get(name, ()):
            shape = shapes.setdefault(machine, "os^v<>"[len(shapes) % 6])
            ax.scatter(
                [c],
                [predicted],
                marker=shape,
                s=45,
                facecolors="none",
                edgecolors=color,
                linewidths=1.0,
                zorder=3,
                label=f"predicted on {machine}" if ("p", machine) not in labelled else None,
            )
            labelled.add(("p", machine))
            if measured is not None:
                ax.scatter(
                    [c],
                    [measured],
                    marker="D",
                    s=28,
                    color=color,
                    edgecolors="black",
                    linewidths=0.6,
                    zorder=3,
                    label=f"measured on {machine}" if ("m", machine) not in labelled else None,
                )
                labelled.add(("m", machine))
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set_xlabel("cost ratio c (draft step / large one-token pass)")
    ax.set_ylabel("speedup over the vanilla large model (x)")
    return _finish(ax, fig, title, legend="below")


def dots(
    labels: list[str],
    series: dict[str, list[float]],
    *,
    xlabel: str,
    title: str = "",
    cis: dict[str, list] | None = None,
    reference: float | None = None,
):
    """Values with their 95% intervals, one row per label (read top-down, labels never overlap),
    one marker per series; the axis spans the values and their intervals (not from 0), so the
    differences the intervals resolve show; NaN values are left out."""
    import math

    fig, ax = _figure(6.4, 0.9 + 0.32 * len(labels) * max(1, min(len(series), 3)) ** 0.5)
    n = max(len(series), 1)
    step = 0.7 / n
    lo, hi = math.inf, -math.inf
    for i, (color, (name, values)) in enumerate(zip(COLORS, series.items())):
        ys = [j + (i - (n - 1) / 2) * step for j in range(len(labels))]
        intervals = (cis or {}).get(name) or [None] * len(values)
        keep = [j for j, v in enumerate(values) if v == v]
        if not keep:
            continue
        xs = [values[j] for j in keep]
        bands = [intervals[j] or (values[j], values[j]) for j in keep]
        ax.errorbar(
            xs,
            [ys[j] for j in keep],
            xerr=_errors(xs, bands),
            fmt="o",
            ms=4,
            color=color,
            ecolor=color,
            elinewidth=1.0,
            capsize=2,
            label=name,
        )
        lo, hi = min(lo, *[b[0] for b in bands]), max(hi, *[b[1] for b in bands])
    if reference is not None and lo <= reference * 1.05:
        ax.axvline(reference, color="black", lw=0.6)
        lo = min(lo, reference)
    if lo < hi:
        pad = (hi - lo) * 0.08
        ax.set_xlim(lo - pad, hi + pad)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)  # the first label on top
    ax.set_xlabel(xlabel)
    return _finish(ax, fig, title, legend="below" if len(series) > 1 else False)


def batch_speedups(panels_: dict[str, dict[str, list[tuple]]]):
    """Speedup over batched greedy at the same batch size (y) against the batch size (x, log 2),
    one panel per title ({title: {method: [(batch size, speedup, ci, predicted, lockstep), ...]}}):
    each method measured (a line, its 95% interval a band; a hollow marker where the lockstep engine
    decoded it) and predicted by the calibrated costs (dashed, the same colour); parity at 1."""
    fig, axes = panels(len(panels_), height=3.4)
    for ax, (title, methods) in zip(axes, panels_.items()):
        sizes = sorted({p[0] for pts in methods.values() for p in pts})
        for color, (name, pts) in zip(COLORS, methods.items()):
            xs = [p[0] for p in pts]
            ax.plot(xs, [p[1] for p in pts], marker="o", ms=3.5, color=color, label=name)
            lock = [p for p in pts if p[4]]
            ax.plot(
                [p[0] for p in lock], [p[1] for p in lock], ls="none", marker="o", ms=6.5,
                mfc="white", mec=color,
            )  # fmt: skip
            ax.fill_between(
                xs, [p[2][0] for p in pts], [p[2][1] for p in pts], color=color, alpha=0.15, lw=0
            )
            ax.plot(xs, [p[3] for p in pts], ls="--", lw=1.0, color=color)
        ax.plot([], [], ls="--", lw=1.0, color="grey", label="predicted (calibrated costs)")
        if any(p[4] for pts in methods.values() for p in pts):
            ax.plot(
                [], [], ls="none", marker="o", ms=6.5, mfc="white", mec="grey",
                label='engine="auto" took the lockstep',
            )  # fmt: skip
        ax.axhline(1.0, color="black", lw=0.6)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(b) for b in sizes])
        ax.set_xlabel("batch size (rows decoded together)")
        ax.set_ylabel("speedup over batched greedy (x)")
        _finish(ax, fig, title)
    return fig
