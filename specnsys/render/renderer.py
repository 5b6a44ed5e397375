"""What a renderer is: the entry types of :mod:`specnsys.render.registry` and the one options
object every render call takes.

Kept apart from the registry itself because the renderers' modules read these types (a
figure's ``from_runs`` takes :class:`RenderOptions`) while the registry loads those modules:
with the types in the registry, the two would import each other (tests/test_layers.py).
This module imports nothing of specnsys at run time, so the command line can read every
entry (choices, suffixes, help) without loading matplotlib or Polars.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Generic, Literal, TypeAlias, TypeVar

from specnsys.render.documents import document

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from specnsys.render.runs import Run

__all__ = [
    "Command", "DrawFunction", "checked_drawing", "FigureData", "FigureRenderer", "FigureSource", "FromDoc",
    "FromRuns", "RenderOptions", "Renderer",
]  # fmt: skip

Command = Literal["plot", "report", "export"]
"""The commands that write rendered files."""

FigureSource = Literal["traces", "lanes", "dataset", "forecast"]
"""What a figure is drawn from: analyzed traces (:class:`~specnsys.render.runs.Run`), one
trace's timeline lanes, a dataset written by ``specnsys collect``, or a forecast."""

FigureData: TypeAlias = Mapping[str, object]
"""A figure's data (titles, bar lengths, points): the JSON-able dict ``plot --data`` writes;
its ``kind`` names the drawing."""

R = TypeVar("R")
D = TypeVar("D")


@dataclass(frozen=True)
class RenderOptions:
    """Everything a render call may be told, one object for every renderer; each reads the
    fields that concern it and ignores the rest."""

    path: Path | None = None
    """The output file: a figure's suffix picks PNG or SVG (and its stem salts SVG ids when
    no *salt* is given)."""
    salt: str | None = None
    """What makes a figure's SVG element ids unique and reproducible (the figure kind)."""
    compress: bool = False
    """Gzip the output (an export to ``.json.gz``)."""
    same_output: bool = False
    """The runs produced the same output (the figures that compare runs)."""
    progress: Callable[[str], None] | None = None
    """Moves a progress display on (the report says which stage it is in)."""


@dataclass(frozen=True)
class Renderer(Generic[R]):
    """One output format of one command: what users type for it, the file it writes, the
    result it renders and how to load the code that renders it.

    *load* and *stream* import the renderer's module when first called, never before, so
    reading the entries costs nothing.
    """

    command: Command
    kind: str
    """What users type: the plot KIND, ``export --format``'s value, ``report``'s format."""
    suffixes: tuple[str, ...]
    """The output file's suffixes, without the dot (``json.gz`` is one)."""
    binary: bool
    """Whether the output is bytes (else text)."""
    renders: str
    """The result it renders, in words (a class or a JSON document)."""
    help: str
    """One line for the command's help."""
    load: Callable[[], Callable[[R, RenderOptions], bytes | str]]
    """Loads ``render(result, options)``: the whole output in memory."""
    stream: Callable[[], Callable[[R, RenderOptions, IO[bytes]], int]] | None = None
    """Loads ``write(result, options, handle)``, for an output too large to hold whole: it
    writes to the binary handle and returns how many items (events) it wrote."""

    def render(self, result: R, options: RenderOptions) -> bytes | str:
        """*result* rendered whole."""
        return self.load()(result, options)


DrawFunction: TypeAlias = "Callable[[FigureData], Figure]"
FromRuns: TypeAlias = "Callable[[Sequence[Run], RenderOptions], FigureData]"
FromDoc: TypeAlias = Callable[[Mapping[str, object]], FigureData]


def checked_drawing(draw: Callable[[D], Figure], shape: type[D]) -> DrawFunction:
    """*draw*, which takes one figure's data (a TypedDict *shape*), as a drawing of any figure
    data: the data is checked to hold every key *shape* requires first."""
    return lambda data: draw(document(data, shape, f"{shape.__name__} data"))


@dataclass(frozen=True)
class FigureRenderer(Renderer[FigureData]):
    """A ``plot`` KIND: a :class:`Renderer` of figure data as PNG or SVG, with what the plot
    command needs to know to make that data."""

    sources: tuple[FigureSource, ...] = ("traces",)
    """What it is drawn from."""
    applies: str = ""
    """Which inputs it takes, when not traces (``a dataset``): the help says so."""
    in_report: bool = False
    """Whether the HTML report shows it."""
    per_token: bool = False
    """Whether it divides by output tokens (``--tokens`` applies)."""
    compares: bool = False
    """Whether it compares runs (``--same-output`` applies)."""
    draws: Callable[[], Mapping[str, DrawFunction]] | None = None
    """Loads the drawing of each figure data ``kind`` it makes (a dataset's sweep is drawn
    as ``sweep-grid``)."""
    from_runs: Callable[[], FromRuns] | None = None
    """Loads ``data(runs, options)``: the figure data of analyzed traces (``traces``)."""
    from_doc: Callable[[], FromDoc] | None = None
    """Loads ``data(document)``: the figure data of one result document (timeline lanes, a
    dataset's sweep or verify-cost points, a forecast)."""
