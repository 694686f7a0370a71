"""Text a reader could not read on a figure: every piece of text drawn (titles, axis labels, the
tick labels in view, legends, annotations) and the pairs that overlap. `plots.save` warns of a
figure with any (`FigureTextWarning`), and writes it: a long run's figure is kept, never lost to a
label; the tests turn the warning into an error, so no committed figure has one."""

from __future__ import annotations


class FigureTextWarning(UserWarning):
    """Texts on a saved figure overlap (which ones: the message)."""


def texts(fig) -> list:
    """Every piece of text a reader sees on `fig` (titles, axis labels, the tick labels in view,
    legends, annotations), drawn: [(text, window extent)]."""
    from matplotlib.text import Text

    renderer = fig._get_renderer()  # whatever the canvas (a closed figure's draws nowhere)
    fig.draw(renderer)
    found = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        found += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        for axis in (ax.xaxis, ax.yaxis):
            found += [t.label1 for t in axis._update_ticks()]
        found += list(ax.texts)
        legend = ax.get_legend()
        if legend is not None:
            found += list(legend.get_texts()) + [legend.get_title()]
    found += [t for t in fig.texts if isinstance(t, Text)]
    return [
        (t, t.get_window_extent(renderer))
        for t in found
        if t is not None and t.get_visible() and t.get_text().strip()
    ]


def overlaps(fig, slack: float = 1.0) -> list[tuple[str, str]]:
    """The pairs of texts on `fig` whose drawn extents overlap (by more than `slack` pixels each
    way): what a report must not show."""
    shown = texts(fig)
    out = []
    for i, (a, box_a) in enumerate(shown):
        for b, box_b in shown[i + 1 :]:
            w = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            h = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if w > slack and h > slack:
                out.append((a.get_text(), b.get_text()))
    return out
