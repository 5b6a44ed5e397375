"""Figure 5, timeline: one decode step (or any window) as lanes.

Top to bottom: the phase ranges open on the driver thread (one lane per nesting level), the
CUDA API calls it made, one lane per GPU stream with each kernel/copy coloured by the phase
that launched it, and the GPU's idle gaps labelled with what the CPU was doing meanwhile. The
data comes from :func:`specnsys.attribution.lanes.timeline_lanes` (``.to_dict()``); this
module only lays it out.

Short ranges stay visible: a bar narrower than ``_MIN_SHARE`` of the window (about two pixels
of the drawn axis) is drawn that wide, without the white edge that would cover it, and a note
under the title says how many bars were widened. Without it, a whole-window view of thousands
of sub-pixel ranges showed a phase taking a sixth of the window as blank lane. The data keeps
every bar's true width; only the drawing widens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text

from specnsys.render.documents import LanesDoc, Span, lanes_doc
from specnsys.render.palette import ordered_phases, phase_color, text_color_on
from specnsys.render.plots.common import (
    LabelBar,
    fit_labels,
    legend_phases,
    new_figure,
    not_available_panel,
    phase_legend,
    style,
    suptitle,
)

__all__ = ["TimelineFigure", "timeline_data", "timeline_figure"]


class Bar(TypedDict):
    phase: str | None
    start_ms: float
    width_ms: float
    text: str


class Row(TypedDict):
    """One lane: its name, kind (``cpu``, ``api``, ``gpu``, ``gap``) and bars."""

    name: str
    kind: str
    bars: list[Bar]


class Gap(TypedDict):
    start_ms: float
    width_ms: float
    cpu_phase: str | None


class TimelineFigure(TypedDict):
    kind: str
    title: str
    not_available: str | None
    rows: list[Row]
    subtitle: NotRequired[str]
    window_ms: NotRequired[float]
    phases: NotRequired[list[str]]
    legend: NotRequired[list[str]]
    legend_more: NotRequired[int]
    notes: NotRequired[list[str]]
    min_width_ms: NotRequired[float]

_LABEL_MIN = 0.02  # bars narrower than this share of the window never get a text label
_MIN_SHARE = 0.002  # bars narrower than this share of the window are drawn this wide
_GAP_COLOR = "#F3F3F3"


def _bar(row: Span, window: int, text: str | None = None) -> Bar:
    start, end = int(row["start_ns"]), int(row["end_ns"])
    wide = window > 0 and (end - start) / window >= _LABEL_MIN
    return {
        "phase": row.get("phase"),
        "start_ms": start / 1e6,
        "width_ms": (end - start) / 1e6,
        "text": (text if text is not None else str(row.get("phase") or "")) if wide else "",
    }


def timeline_data(doc: Mapping[str, object]) -> TimelineFigure:
    """What figure 5 draws, from :meth:`TimelineLanes.to_dict`."""
    lanes = lanes_doc(doc)
    window = int(lanes["window_ns"])
    rows: list[Row] = []
    levels = sorted({int(r["level"]) for r in lanes["cpu"]})
    for level in levels:
        name = "CPU: driver thread" if level == 0 else f"CPU: nested {level}"
        bars = [_bar(r, window) for r in lanes["cpu"] if int(r["level"]) == level]
        rows.append({"name": name, "kind": "cpu", "bars": bars})
    na = lanes.get("not_available") or {}
    if lanes["api"]:
        rows.append(
            {
                "name": "CUDA API (driver thread)",
                "kind": "api",
                "bars": [_bar(r, window, str(r["name"])) for r in lanes["api"]],
            }
        )
    gpu_lanes = sorted({str(r["lane"]) for r in lanes["gpu"]})
    for lane in gpu_lanes:
        bars = [_bar(r, window, str(r["name"])) for r in lanes["gpu"] if r["lane"] == lane]
        rows.append({"name": lane, "kind": "gpu", "bars": bars})
    gaps: list[Gap] = [
        {
            "start_ms": int(g["start_ns"]) / 1e6,
            "width_ms": (int(g["end_ns"]) - int(g["start_ns"])) / 1e6,
            "cpu_phase": g.get("cpu_phase"),
        }
        for g in lanes.get("gpu_gaps") or []
    ]
    if "gpu" not in na:
        rows.append(
            {
                "name": "GPU idle" if gaps else "GPU idle: never",
                "kind": "gap",
                "bars": [
                    {"phase": None, "start_ms": g["start_ms"], "width_ms": g["width_ms"],
                     "text": (f"idle: {g['cpu_phase']}" if g["cpu_phase"] else "idle")
                     if window and g["width_ms"] * 1e6 / window >= _LABEL_MIN else ""}
                    for g in gaps
                ],
            }
        )  # fmt: skip
    window_ms = window / 1e6
    title = _title(lanes, gaps, "gpu" not in na)
    lane_names = {"api": "CUDA API lane", "gpu": "GPU lanes"}
    notes = [f"no {lane_names.get(k, k)}: {why}" for k, why in sorted(na.items())]
    min_width_ms = window_ms * _MIN_SHARE
    widened = sum(b["width_ms"] < min_width_ms for row in rows for b in row["bars"])
    if widened:
        notes.append(
            f"{widened:,} bar{'s' if widened > 1 else ''} shorter than {_ms(min_width_ms)} "
            f"({_MIN_SHARE:.1%} of the window) drawn {_ms(min_width_ms)} wide to stay visible"
        )
    phases = ordered_phases(
        b["phase"] for row in rows for b in row["bars"] if b["phase"] is not None
    )
    weights: dict[str, float] = {}
    for row in rows:
        for b in row["bars"]:
            if b["phase"] is not None:
                weights[b["phase"]] = weights.get(b["phase"], 0.0) + b["width_ms"]
    legend, more = legend_phases(phases, weights)
    return {
        "kind": "timeline",
        "title": title,
        "subtitle": f"{lanes['label']}; process {lanes['pid']}, thread {lanes['driver_tid']}",
        "window_ms": window_ms,
        "rows": rows,
        "phases": phases,
        "legend": legend,
        "legend_more": more,
        "notes": notes,
        "min_width_ms": min_width_ms,
        "not_available": None if any(row["bars"] for row in rows) else _EMPTY,
    }


def _title(lanes: LanesDoc, gaps: list[Gap], gpu: bool) -> str:
    """The finding: how busy the GPU was and its longest idle gap, or, without GPU work, the
    two largest phases of the driver thread."""
    window = int(lanes["window_ns"])
    window_ms = window / 1e6
    busy = lanes.get("gpu_busy_ns")
    if busy is not None and gpu:
        title = f"GPU busy {busy / window:.0%} of the {window_ms:.2f} ms window" if window else ""
        if gaps:
            longest = max(gaps, key=lambda g: g["width_ms"])
            during = f", during {longest['cpu_phase']}" if longest["cpu_phase"] else ""
            title += f"; longest idle gap {longest['width_ms']:.2f} ms{during}"
        return title
    cpu_ex = lanes.get("cpu_exclusive_ns") or {}
    top = sorted(
        ((p, ns) for p, ns in cpu_ex.items() if p != "unannotated" and ns > 0),
        key=lambda t: -t[1],
    )[:2]
    parts = ", ".join(f"{p} {ns / window:.0%}" for p, ns in top) if window else ""
    return f"{parts} of the {window_ms:.2f} ms window on the driver thread; no GPU work captured"


_EMPTY = "nothing ran in the window: no phase range, CUDA API call or GPU work"


def _phase_color(phase: str | None) -> str:
    """The colour of a bar outside the GPU idle lane: only a gap has no phase."""
    if phase is None:
        raise ValueError("a timeline bar outside the GPU idle lane has no phase")
    return phase_color(phase)


def _ms(value: float) -> str:
    """A duration for a note: three significant digits, in ms or us."""
    return f"{value:.3g} ms" if value >= 0.1 else f"{value * 1e3:.3g} us"


def timeline_figure(data: TimelineFigure) -> Figure:
    """Draw figure 5 from :func:`timeline_data`."""
    with style("timeline"):
        rows = data["rows"]
        fig = new_figure(10, 1.9 + 0.55 * max(len(rows), 1))
        ax = fig.add_subplot()
        suptitle(fig, data["title"])
        reason = data.get("not_available")
        if reason:
            not_available_panel(ax, "timeline", reason)
            return fig
        min_width = data.get("min_width_ms", 0.0)
        subtitle = "\n".join([data["subtitle"], *data["notes"]])
        ax.set_title(subtitle, fontsize=9, color="#555555", fontweight="normal")
        labels: dict[Text, tuple[Axes, LabelBar]] = {}
        n = len(rows)
        for i, row in enumerate(rows):
            y = n - 1 - i
            # One collection per lane and colour: thousands of kernels draw in one call.
            # Narrow bars apart: widened, and without an edge (it would paint them over).
            groups: dict[tuple[str | None, bool], list[tuple[float, float]]] = {}
            for bar in row["bars"]:
                narrow = bar["width_ms"] < min_width
                span = (bar["start_ms"], max(bar["width_ms"], min_width))
                groups.setdefault((bar["phase"], narrow), []).append(span)
            for (phase, narrow), spans in groups.items():
                edge = 0.0 if narrow else 0.5
                if row["kind"] == "gap":
                    ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=_GAP_COLOR,
                                   edgecolors="#AAAAAA", linewidth=edge, hatch="////")  # fmt: skip
                else:
                    ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=_phase_color(phase),
                                   edgecolors="white", linewidth=edge)  # fmt: skip
            for bar in row["bars"]:
                if bar["text"]:
                    color = _GAP_COLOR if row["kind"] == "gap" else _phase_color(bar["phase"])
                    t = ax.text(
                        bar["start_ms"] + bar["width_ms"] / 2, y, bar["text"], ha="center",
                        va="center", fontsize=8, color=text_color_on(color), clip_on=True,
                    )  # fmt: skip
                    labels[t] = (ax, (bar["start_ms"], bar["width_ms"], y - 0.35, 0.7))
        ax.set_yticks(range(n), [r["name"] for r in reversed(rows)])
        ax.tick_params(axis="y", length=0)
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_xlim(0, data["window_ms"] or 1.0)
        ax.set_xlabel("ms from the window start")
        ax.grid(True, axis="x", color="#EEEEEE")
        ax.set_axisbelow(True)
        phase_legend(fig, data["legend"], more=data["legend_more"])
        fit_labels(fig, labels)
        return fig
