"""Shared drawing helpers: figure style, saving PNG/SVG, "not available" panels, labels.

Figures are built on :class:`matplotlib.figure.Figure` directly (never ``pyplot``), so no GUI
backend is ever touched and the Agg renderer does the PNG; the output is the same on a
headless CI machine as on a laptop.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.text import Text

from specnsys.errors import UsageError
from specnsys.render.output import write_files
from specnsys.render.palette import phase_color

if TYPE_CHECKING:
    from matplotlib.typing import LegendLocType, RcKeyType

__all__ = [
    "FORMATS",
    "STYLE",
    "LEGEND_MAX",
    "LabelBar",
    "fit_labels",
    "legend_phases",
    "new_figure",
    "not_available_panel",
    "phase_legend",
    "figure_bytes",
    "save_figure",
    "style",
    "suptitle",
    "svg_text",
]

FORMATS = ("png", "svg")
"""File formats a figure can be written as (chosen by the output file's suffix)."""

STYLE: dict[RcKeyType, str | float | bool] = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "legend.frameon": False,
    "legend.fontsize": 9,
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.15,
    # Glyphs as paths: the SVG looks the same in every browser, with or without the font.
    "svg.fonttype": "path",
}
"""rcParams every figure is drawn and saved with."""

# Deterministic files: no creation date or tool version written into the PNG/SVG.
_SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
_PNG_METADATA = {"Software": None}


@contextmanager
def style(salt: str = "specnsys") -> Iterator[None]:
    """The figure style; *salt* makes SVG element ids unique per figure and reproducible."""
    with mpl.rc_context({**STYLE, "svg.hashsalt": salt}):
        yield


def new_figure(width: float, height: float) -> Figure:
    """A white figure of *width* x *height* inches with the constrained layout engine.

    Call it, and draw everything, inside :func:`style` (artists read rcParams when created).
    """
    fig = Figure(figsize=(width, height), layout="constrained", facecolor="white")
    FigureCanvasAgg(fig)  # the Agg canvas measures text for fit_labels and renders PNGs
    return fig


def save_figure(fig: Figure, path: str | Path, *, salt: str | None = None) -> Path:
    """Write *fig* as PNG or SVG, chosen by the suffix of *path*; return the path. The figure
    is rendered whole before the file is replaced (see :mod:`specnsys.render.output`)."""
    path = Path(path)
    write_files({path: figure_bytes(fig, path, salt=salt)})
    return path


def figure_bytes(fig: Figure, path: str | Path, *, salt: str | None = None) -> bytes:
    """*fig* rendered as the PNG or SVG that *path*'s suffix asks for."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise UsageError(f"{path}: the output must end in .png or .svg, not {path.suffix!r}")
    if not path.parent.is_dir():
        raise UsageError(f"{path}: the folder {path.parent} does not exist")
    buf = io.BytesIO()
    with style(salt or path.stem):
        meta = _SVG_METADATA if fmt == "svg" else _PNG_METADATA
        fig.savefig(buf, format=fmt, metadata=meta)
    return buf.getvalue()


def svg_text(fig: Figure, *, salt: str) -> str:
    """*fig* as SVG markup (for inlining into HTML)."""
    buf = io.StringIO()
    with style(salt):
        fig.savefig(buf, format="svg", metadata=_SVG_METADATA)
    return buf.getvalue()


def suptitle(fig: Figure, text: str) -> None:
    """The figure's bold title (its finding), broken onto two lines (at the "; " nearest the
    middle, else between words) when one line would run past the figure's edges."""
    title = fig.suptitle(text, fontweight="bold", fontsize=12)
    # the canvas is new_figure's Agg canvas; the stubs type it as the base class
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    if title.get_window_extent(renderer).width <= fig.bbox.width - 16:
        return
    cuts = [i for i in range(len(text)) if text.startswith("; ", i)]
    if cuts:
        i = min(cuts, key=lambda i: abs(i - len(text) / 2))
        title.set_text(f"{text[: i + 1]}\n{text[i + 2 :]}")
    else:
        title.set_text(_wrap(text, len(text) // 2 + 1))


def not_available_panel(ax: Axes, what: str, reason: str) -> None:
    """Replace *ax*'s content by a centred "not available: reason" message."""
    ax.set_axis_off()
    ax.text(
        0.5,
        0.5,
        f"{what}: not available\n{_wrap(reason, 60)}",
        ha="center",
        va="center",
        transform=ax.transAxes,
        color="#555555",
        fontsize=10,
        wrap=True,
    )


def _wrap(text: str, width: int) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    if line:
        lines.append(line)
    return "\n".join(lines)


LEGEND_MAX = 14
"""Most phases a legend lists; traces mapped with ``--rules nvtx`` can have hundreds."""


def legend_phases(
    phases: Sequence[str], weights: Mapping[str, float], limit: int = LEGEND_MAX
) -> tuple[list[str], int]:
    """The phases a legend shows and how many it leaves out.

    Up to *limit* phases are all shown in the given (palette) order; beyond that, the
    ``limit - 1`` heaviest by *weights* (time drawn), still in palette order, and a count.
    """
    if len(phases) <= limit:
        return list(phases), 0
    heaviest = set(sorted(phases, key=lambda p: (-weights.get(p, 0.0), p))[: limit - 1])
    return [p for p in phases if p in heaviest], len(phases) - len(heaviest)


def phase_legend(
    fig: Figure,
    phases: Sequence[str],
    *,
    more: int = 0,
    ncol: int | None = None,
    loc: LegendLocType = "outside lower center",
) -> None:
    """One legend entry per phase, in the given order, with the palette's colours; *more*
    phases left out are counted in a last entry."""
    if not phases:
        return
    handles = [Patch(facecolor=phase_color(p), edgecolor="#333333", linewidth=0.4) for p in phases]
    labels = [_clip(p, 40) for p in phases]
    if more:
        handles.append(Patch(facecolor="none", edgecolor="none"))
        labels.append(f"+{more} more phases")
    fig.legend(
        handles,
        labels,
        loc=loc,
        ncol=ncol or min(len(labels), 7 if max(map(len, labels)) < 16 else 3),
        handlelength=1.2,
        columnspacing=1.2,
    )


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


LabelBar: TypeAlias = Patch | tuple[float, float, float, float]
"""What a bar label must fit in: a patch, or a data-space ``(left, width, bottom, height)``."""


def fit_labels(fig: Figure, labels: Mapping[Text, tuple[Axes, LabelBar]]) -> None:
    """Hide each text in *labels* that does not fit in its bar.

    *labels* maps a text to ``(axes, bar)``, the bar being a patch or a data-space rectangle
    ``(left, width, bottom, height)``. Labels are measured after layout with the real
    renderer, so what stays visible never overflows its bar (and so never overlaps the label
    of a neighbouring bar).
    """
    if not labels:
        return
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # (see suptitle)
    fig.draw_without_rendering()
    for text, (ax, bar) in labels.items():
        t_box = text.get_window_extent(renderer)
        if isinstance(bar, tuple):
            left, width, bottom, height = bar
            (x0, y0), (x1, y1) = ax.transData.transform(
                [(left, bottom), (left + width, bottom + height)]
            )
            bar_w, bar_h = abs(x1 - x0), abs(y1 - y0)
        else:
            p_box = bar.get_window_extent(renderer)
            bar_w, bar_h = p_box.width, p_box.height
        if t_box.width > bar_w - 4 or t_box.height > bar_h - 2:
            text.set_visible(False)
