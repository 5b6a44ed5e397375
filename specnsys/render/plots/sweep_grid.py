"""The sweep of a dataset: measured speedup over k x concurrency (``plot sweep DATASET``).

One panel per group of the other ``--by`` labels (a workload, a model): a heatmap of the
median measured speedup with k down and concurrency across when the group has at least two of
each, else lines by concurrency (one per k). Cells print their value; a noisy cell (relative
MAD above the sweep's threshold) is marked ``~``, a missing one is left blank. The colour
scale is centred on 1 (blue: speculation pays, red: it does not).

The data comes from :meth:`specnsys.runset.sweep.SweepResult.to_dict` (plain dicts: this
layer does not read datasets).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from specnsys.render.documents import document
from specnsys.render.plots.common import new_figure, not_available_panel, style, suptitle

__all__ = ["SweepDoc", "SweepGridFigure", "sweep_grid_data", "sweep_grid_figure"]


class Median(TypedDict):
    median: float | None


class Cell(TypedDict):
    """One configuration of a sweep: its labels and its measured speedup."""

    role: str
    labels: dict[str, str]
    measured_speedup: Median | None
    noisy: NotRequired[bool | None]


class SweepDoc(TypedDict):
    """What :meth:`specnsys.runset.sweep.SweepResult.to_dict` holds (the keys read here)."""

    cells: list[Cell]


class Panel(TypedDict):
    labels: dict[str, str]
    k: list[str]
    concurrency: list[str]
    measured: list[list[float | None]]
    noisy: list[list[bool | None]]
    style: str


class SweepGridFigure(TypedDict):
    kind: str
    title: str
    not_available: str | None
    panels: NotRequired[list[Panel]]


def _order(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def _median(cell: Cell) -> float | None:
    speedup = cell.get("measured_speedup")
    return speedup.get("median") if speedup else None


def sweep_grid_data(doc: Mapping[str, object]) -> SweepGridFigure:
    """What the figure draws, from a sweep's JSON dict."""
    sweep = document(doc, SweepDoc, "a sweep document")
    cells = [
        (c, median)
        for c in sweep.get("cells", [])
        if c.get("role") == "spec"
        and (median := _median(c)) is not None
        and "k" in c["labels"]
        and "concurrency" in c["labels"]
    ]
    if not cells:
        return {
            "kind": "sweep-grid",
            "title": "sweep: not available",
            "not_available": "needs speculative cells with k and concurrency labels and a "
            "measured speedup (cells by --by k,concurrency; a baseline per configuration)",
        }
    groups: dict[tuple[tuple[str, str], ...], list[tuple[Cell, float]]] = {}
    for c, median in cells:
        rest = tuple(
            sorted((n, v) for n, v in c["labels"].items() if n not in ("k", "concurrency"))
        )
        groups.setdefault(rest, []).append((c, median))
    panels: list[Panel] = []
    for rest, own in sorted(groups.items()):
        ks = sorted({c["labels"]["k"] for c, _ in own}, key=_order)
        cs = sorted({c["labels"]["concurrency"] for c, _ in own}, key=_order)
        grid: list[list[float | None]] = [[None] * len(cs) for _ in ks]
        noisy: list[list[bool | None]] = [[None] * len(cs) for _ in ks]
        for c, median in own:
            i, j = ks.index(c["labels"]["k"]), cs.index(c["labels"]["concurrency"])
            grid[i][j] = float(median)
            noisy[i][j] = c.get("noisy")
        panels.append(
            {
                "labels": dict(rest),
                "k": ks,
                "concurrency": cs,
                "measured": grid,
                "noisy": noisy,
                "style": "heatmap" if len(ks) >= 2 and len(cs) >= 2 else "lines",
            }
        )
    best, top = max(cells, key=lambda cell: cell[1])
    where = f"k = {best['labels']['k']}, concurrency = {best['labels']['concurrency']}"
    title = (
        f"best measured speedup {top:.2f}x at {where}"
        if top > 1
        else f"speculation never pays here (best {top:.2f}x at {where})"
    )
    return {"kind": "sweep-grid", "title": title, "not_available": None, "panels": panels}


def sweep_grid_figure(data: SweepGridFigure) -> Figure:
    """Draw :func:`sweep_grid_data`."""
    with style("sweep-grid"):
        panels = data.get("panels") or []
        fig = new_figure(max(6.0, 4.6 * max(1, len(panels))), 4.8)
        suptitle(fig, data["title"])
        reason = data.get("not_available")
        if reason:
            not_available_panel(fig.add_subplot(), "sweep", reason)
            return fig
        values = [v for p in panels for row in p["measured"] for v in row if v is not None]
        lo, hi = min([*values, 0.99]), max([*values, 1.01])
        norm = TwoSlopeNorm(vcenter=1.0, vmin=min(lo, 0.999), vmax=max(hi, 1.001))
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        image = None
        for ax, panel in zip(axes, panels, strict=True):
            name = ", ".join(f"{k}={v}" for k, v in panel["labels"].items()) or "all runs"
            ax.set_title(name, fontsize=10)
            if panel["style"] == "heatmap":
                grid = [
                    [float("nan") if v is None else v for v in row] for row in panel["measured"]
                ]
                image = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto")
                ax.set_xticks(range(len(panel["concurrency"])), panel["concurrency"])
                ax.set_yticks(range(len(panel["k"])), panel["k"])
                ax.set_xlabel("concurrency")
                ax.set_ylabel("k")
                for i, row in enumerate(panel["measured"]):
                    for j, v in enumerate(row):
                        if v is None:
                            continue
                        mark = "~" if panel["noisy"][i][j] else ""
                        ax.text(j, i, f"{mark}{v:.2f}x", ha="center", va="center", fontsize=9,
                                color="white" if abs(norm(v) - 0.5) > 0.35 else "black")  # fmt: skip
            else:
                xs = list(range(len(panel["concurrency"])))
                for i, k in enumerate(panel["k"]):
                    pts = [(x, v) for x, v in zip(xs, panel["measured"][i], strict=True)
                           if v is not None]  # fmt: skip
                    ax.plot(
                        [x for x, _ in pts], [v for _, v in pts], "o-", lw=1.8, label=f"k = {k}"
                    )
                ax.axhline(1.0, color="#999999", lw=0.8)
                ax.set_xticks(xs, panel["concurrency"])
                ax.set_xlabel("concurrency")
                ax.set_ylabel("measured speedup (median)")
                ax.legend(fontsize=8.5)
                ax.grid(True, axis="y", color="#EEEEEE")
        if image is not None:
            fig.colorbar(image, ax=list(axes), label="measured speedup (1 = baseline)", shrink=0.85)
        return fig
