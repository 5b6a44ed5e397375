"""The Chrome trace-event JSON of a timeline export (``specnsys export --format perfetto``):
what Perfetto UI (ui.perfetto.dev) and other trace-event viewers open.

A renderer: every event is one row of :class:`~specnsys.metrics.timeline_export.
TimelineExport`, nothing is attributed here. The document (JSON object format):

* ``traceEvents``: metadata (``M``: ``process_name``, ``process_sort_index``, ``thread_name``,
  ``thread_sort_index``), then per track its slices as begin/end pairs (``B``/``E``) in time order,
  the decode-step markers (``i``, process scope) and the counters (``C``);
* ``displayTimeUnit`` ``"ns"``; ``otherData``: what was exported (trace, process, window,
  rules, the breakdown's ``phase_wall_ns``, the rounding rule, what a ``--max-events`` cut
  dropped).

**Time.** ``ts`` is in microseconds (a float, as the format requires) from the start of the
analysis window (``otherData.window_start_ns`` on the session clock): every event lies in
``[0, window]``, and ``round(ts * 1000)`` is the event's exact ns offset. Slices are ``B``/``E``
pairs, not ``X`` events: each boundary is one timestamp, so slices that meet (a range ending
where its parent ends, a kernel starting where the one before it ended) meet exactly in every
viewer, whatever float arithmetic it does (an ``X`` event's end is ``ts + dur``, which a viewer
that shifts its times first rounds differently from the next slice's ``ts``). On each track
the events are in time order, an end before a begin at the same instant, and every ``E``
repeats its ``B``'s name and args.

**Tracks.** In the analyzed process (its pid): one track per phase (``phase: NAME``, sorted
above the threads, in the breakdown's order), then the driver thread with its NVTX push/pop
ranges (further ``NVTX lane`` tracks only for ranges of one domain that cross ranges of
another), the step markers and counters ``accepted drafts``, ``output tokens`` and ``GPU busy``
(per step: the fraction of the step some GPU op ran; without steps: 1 while any op runs, else
0). One process per GPU (``GPU N``) with one track per stream (``stream S``), each op coloured
by the phase that launched it (``cat`` and ``args.phase``, and a ``cname`` from the trace
viewer's palette). Phase slices carry ``args.sharing`` = *n*: the slice's time is shared
evenly by *n* phases whose GPU work ran at once, so a phase's exact total is
``sum(dur / sharing)``; rounded by largest remainder (ties in the breakdown's order) it is
``phases``'s ``wall_ns`` (:func:`~specnsys.metrics.timeline_export.phase_totals`).
"""

from __future__ import annotations

import gzip
import io
import json
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, TYPE_CHECKING, Protocol, TypeAlias, TypedDict

from specnsys.metrics.timeline_export import TimelineExport

if TYPE_CHECKING:
    from specnsys.render.renderer import RenderOptions

__all__ = [
    "PHASE_CNAMES", "Event", "ExportSource", "OtherData", "TraceDocument", "metadata_events", "render", "write", "other_data", "render_events", "trace_document",
    "write_trace_json",
]  # fmt: skip

#: Synthetic ids far above any real one (Linux pids and tids stay below 2^22).
PHASE_TID_BASE = 1 << 30
LANE_TID_BASE = (1 << 30) + (1 << 20)
GPU_PID_BASE = 1 << 30
STREAM_LANE = 1 << 24

#: Phase -> a colour name of the trace viewer's reserved palette (``cname``).
PHASE_CNAMES = {
    "request": "grey",
    "prefill": "rail_load",
    "draft_prefill": "startup",
    "decode": "generic_work",
    "forward": "good",
    "draft": "rail_animation",
    "verify": "terrible",
    "sample": "yellow",
    "kv": "olive",
    "sync": "bad",
    "schedule": "rail_idle",
    "unannotated": "white",
    "unattributed_gpu": "black",
}

ROUNDING = (
    "a phase slice's time is shared evenly by args.sharing phases; a phase's total is "
    "sum((end - begin) in ns / sharing) over its slices, rounded to integer ns by largest remainder (ties "
    "in the order of phase_wall_ns), which equals phase_wall_ns when nothing was cut"
)


Event: TypeAlias = dict[str, object]
"""One trace event: a JSON object this module writes and never reads back (its fields per
``ph`` are the trace-event format's)."""


class OtherData(TypedDict):
    """``otherData``: what the export holds and how to read it."""

    generator: str
    trace: str
    pid: int | None
    driver_tid: int | None
    time_origin: str
    window_start_ns: int
    window_end_ns: int
    export_end_ns: int
    window_rule: str
    window_dropped: Mapping[str, object] | None
    rules: str
    phase_wall_ns: dict[str, int]
    rounding: str
    dropped: Mapping[str, object] | None


class TraceDocument(TypedDict):
    """The whole Chrome trace-event document (JSON object format)."""

    displayTimeUnit: str
    otherData: OtherData
    traceEvents: list[Event]


def _us(t: int, origin: int) -> float:
    return (t - origin) / 1000


def _slices(rows: Iterable[tuple[int, int, Key]], origin: int) -> Iterator[tuple[str, float, Key]]:
    """``(ph, ts, key)`` of the ``B``/``E`` events of one track's slices (*rows*: ``start, end,
    key`` of each slice's fields, sorted by start then end descending, and nesting): each
    slice's end comes when the next slice starts at or after it, or at the end."""
    stack: list[tuple[int, Key]] = []
    for s, e, key in rows:
        while stack and stack[-1][0] <= s:
            end, top = stack.pop()
            yield "E", _us(end, origin), top
        yield "B", _us(s, origin), key
        stack.append((e, key))
    while stack:
        end, top = stack.pop()
        yield "E", _us(end, origin), top


def _pid(data: TimelineExport) -> int:
    return data.breakdown.pid if data.breakdown.pid is not None else 0


def _gpu_pid(device: int) -> int:
    return GPU_PID_BASE + max(device, 0) + (1 << 16 if device < 0 else 0)


def _stream_tid(stream: int, lane: int) -> int:
    return max(stream, 0) + lane * STREAM_LANE


def _phase_order(data: TimelineExport) -> list[str]:
    """The phases with slices, in the breakdown's order, then the others by name."""
    order = data.breakdown.frame["phase"].to_list()
    present = set(data.phases["phase"].unique().to_list())
    return [p for p in order + sorted(present - set(order)) if p in present]


def _driver_name(data: TimelineExport) -> str:
    return data.driver_name or f"thread {data.driver_tid}"


def metadata_events(data: TimelineExport) -> list[Event]:
    """Names and sort indices of every process and track the rows draw."""
    pid = _pid(data)
    name = data.process_name or "process"

    def meta(kind: str, p: int, args: dict[str, object], tid: int = 0) -> Event:
        return {"ph": "M", "name": kind, "pid": p, "tid": tid, "args": args}

    events = [
        meta("process_name", pid, {"name": f"{name} (pid {pid})"}),
        meta("process_sort_index", pid, {"sort_index": 0}),
    ]
    for i, phase in enumerate(_phase_order(data)):
        tid = PHASE_TID_BASE + i
        events.append(meta("thread_name", pid, {"name": f"phase: {phase}"}, tid))
        events.append(meta("thread_sort_index", pid, {"sort_index": -1000 + i}, tid))
    if data.driver_tid is not None:
        lanes = sorted(set(data.ranges["lane"].to_list()) | {0})
        for lane in lanes:
            tid = data.driver_tid if lane == 0 else LANE_TID_BASE + lane
            label = _driver_name(data) + ("" if lane == 0 else f" (NVTX lane {lane})")
            events.append(meta("thread_name", pid, {"name": label}, tid))
            events.append(meta("thread_sort_index", pid, {"sort_index": lane}, tid))
    tracks = data.ops.select("device", "stream", "lane").unique().sort("device", "stream", "lane")
    for device in tracks["device"].unique().sort().to_list():
        gpu = _gpu_pid(device)
        label = f"GPU {device}" if device >= 0 else "GPU (device unknown)"
        events.append(meta("process_name", gpu, {"name": label}))
        events.append(meta("process_sort_index", gpu, {"sort_index": 1 + max(device, 0)}))
    for device, stream, lane in tracks.iter_rows():
        label = f"stream {stream}" if stream >= 0 else "stream (unknown)"
        label += "" if lane == 0 else f" (overlap lane {lane})"
        tid = _stream_tid(stream, lane)
        events.append(meta("thread_name", _gpu_pid(device), {"name": label}, tid))
        events.append(meta("thread_sort_index", _gpu_pid(device), {"sort_index": tid}, tid))
    return events


Key: TypeAlias = tuple[object, ...]
"""What tells one slice's fields from another's on a track (:data:`Track`)."""

Track: TypeAlias = tuple[Iterator[tuple[int, int, Key]], Callable[[Key], Event]]
"""One track's slices: ``start, end, key`` rows in :func:`_slices`'s order, and the event
fields (all but ``ph`` and ``ts``) of a key. Slices of one key share their fields, so the
writer encodes them once a key (kernel names, phases and ranges repeat)."""


#: Encoded slice fields one track keeps (:func:`_encoded_events`): a few MiB at most.
_KEYS_KEPT = 16_384


def render_events(data: TimelineExport) -> Iterator[Event]:
    """Every event of the export: :func:`metadata_events`, then the rows (see the module
    docs), one event each, by track and time."""
    yield from metadata_events(data)
    for rows, fields in _tracks(data):
        for ph, ts, key in _slices(rows, data.start_ns):
            yield {**fields(key), "ph": ph, "ts": ts}
    yield from _marker_events(data)


def _encoded_events(data: TimelineExport) -> Iterator[str]:
    """:func:`render_events`, each event as ``_COMPACT.encode`` writes it, but a slice's fields
    encoded once per key: ``{**fields, "ph": ph, "ts": ts}`` encodes as the fields' object
    without its closing brace, then ``"ph"`` and ``"ts"`` (``json`` writes a float as its
    ``repr``). tests/test_perfetto_export.py holds the bytes equal to the events' encoding.
    The encoded keys kept are bounded (:data:`_KEYS_KEPT`): ranges whose every text differs
    (torch's ``, seq = N``) would otherwise keep one string a range."""
    for event in metadata_events(data):
        yield _COMPACT.encode(event)
    for rows, fields in _tracks(data):
        prefix: dict[Key, str] = {}
        for ph, ts, key in _slices(rows, data.start_ns):
            head = prefix.get(key)
            if head is None:
                if len(prefix) >= _KEYS_KEPT:
                    prefix.clear()
                head = prefix[key] = _COMPACT.encode(fields(key))[:-1] + ',"ph":"'
            yield f'{head}{ph}","ts":{ts!r}}}'
    for event in _marker_events(data):
        yield _COMPACT.encode(event)


def _tracks(data: TimelineExport) -> Iterator[Track]:
    """Every slice track: the phases, the driver thread's NVTX lanes, the GPU streams."""
    pid = _pid(data)
    track = {p: PHASE_TID_BASE + i for i, p in enumerate(_phase_order(data))}
    for (phase,), rows in data.phases.sort("phase", "start").group_by("phase", maintain_order=True):
        base = {"name": phase, "cat": "phase", "pid": pid, "tid": track[phase],
                "cname": PHASE_CNAMES.get(phase, "generic_work")}  # fmt: skip

        def shared(key: Key, base: Event = base, phase: object = phase) -> Event:
            n = key[0]
            return {**base, "args": {"phase": phase, "sharing": n, "share": 1 / n}}  # type: ignore[operator]

        rows_of = rows.select("start", "end", "sharing").iter_rows()
        yield ((s, e, (n,)) for s, e, n in rows_of), shared
    driver = data.driver_tid
    if driver is not None:
        for (lane,), rows in data.ranges.sort("lane", "start", descending=[False, False]).group_by(
            "lane", maintain_order=True
        ):
            tid = driver if lane == 0 else LANE_TID_BASE + lane

            def ranged(key: Key, tid: int = tid) -> Event:
                text, domain = key
                return {"name": text, "cat": domain or "nvtx", "pid": pid, "tid": tid}

            ordered = rows.sort(["start", "end"], descending=[False, True])
            yield ((s, e, (text, domain)) for s, e, text, domain in ordered.select(
                "start", "end", "text", "domain").iter_rows()), ranged  # fmt: skip
    for (device, stream, lane), rows in data.ops.sort("device", "stream", "lane").group_by(
        "device", "stream", "lane", maintain_order=True
    ):
        where: Event = {"pid": _gpu_pid(device), "tid": _stream_tid(stream, lane)}

        def launched(key: Key, where: Event = where) -> Event:
            kind, name, phase = key
            return {"name": name or kind, "cat": phase, **where,
                    "cname": PHASE_CNAMES.get(phase, "generic_work"),  # type: ignore[call-overload]
                    "args": {"phase": phase, "kind": kind}}  # fmt: skip

        ordered = rows.sort(["start", "end"], descending=[False, True])
        yield ((s, e, (kind, name, phase)) for kind, name, s, e, phase in ordered.select(
            "kind", "name", "start", "end", "phase").iter_rows()), launched  # fmt: skip


def _marker_events(data: TimelineExport) -> Iterator[Event]:
    """The step markers and counters, then the GPU-busy counter."""
    pid = _pid(data)
    yield from _step_events(data, pid)
    origin = data.start_ns
    for t, value in data.gpu_busy.iter_rows():
        yield {"ph": "C", "name": "GPU busy", "pid": pid, "ts": (t - origin) / 1000,
               "args": {"busy": value}}  # fmt: skip


_COUNTER_NAMES = {"accepted": "accepted drafts", "tokens": "output tokens", "gpu_busy": "GPU busy"}
_COUNTER_KEYS = {"accepted": "accepted", "tokens": "tokens", "gpu_busy": "busy"}


def _step_events(data: TimelineExport, pid: int) -> Iterator[Event]:
    origin = data.start_ns
    counters = data.counters()
    steps = data.steps
    for row in steps.iter_rows(named=True):
        ts = (row["start"] - origin) / 1000
        yield {"ph": "i", "s": "p", "name": f"step {row['step']}", "cat": "step", "pid": pid,
               "tid": 0, "ts": ts, "args": {"step": row["step"]}}  # fmt: skip
        for c in counters:
            value = row[c]
            yield {"ph": "C", "name": _COUNTER_NAMES[c], "pid": pid, "ts": ts,
                   "args": {_COUNTER_KEYS[c]: 0 if value is None else value}}  # fmt: skip
    if steps.height:
        end = (int(steps["end"].max()) - origin) / 1000  # type: ignore[arg-type]
        for c in counters:
            yield {"ph": "C", "name": _COUNTER_NAMES[c], "pid": pid, "ts": end,
                   "args": {_COUNTER_KEYS[c]: 0}}  # fmt: skip


def other_data(data: TimelineExport, trace: str) -> OtherData:
    """``otherData``: what the export holds and how to read it."""
    b = data.breakdown
    walls = dict(zip(b.frame["phase"].to_list(), b.frame["wall_ns"].to_list(), strict=True))
    return {
        "generator": "specnsys export --format perfetto",
        "trace": trace,
        "pid": b.pid,
        "driver_tid": data.driver_tid,
        "time_origin": "the analysis window's start: ts = (t_ns - window_start_ns) / 1000",
        "window_start_ns": b.window_start_ns,
        "window_end_ns": b.window_end_ns,
        "export_end_ns": data.end_ns,
        "window_rule": b.window_rule,
        "window_dropped": b.window_dropped,
        "rules": b.rules,
        "phase_wall_ns": walls,
        "rounding": ROUNDING,
        "dropped": data.dropped,
    }


#: ``json.dumps(..., separators=(",", ":"))`` made once: dumps builds an encoder per event
#: (a fresh dict each, never a cycle: no check for one). 4-5 % of an export of 2M events.
_COMPACT = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def write_trace_json(
    data: TimelineExport, trace: str, handle: IO[bytes], *, compress: bool = False
) -> int:
    """Write the document to *handle* (gzip with *compress*), streaming: the events are
    rendered as they are written. Returns the number of events.

    With *compress* the deflate runs on a thread of its own (:class:`_BackgroundWriter`),
    beside the encoding of the next events: zlib releases the GIL while it compresses, which
    took 1.4 of an export's 7 s at 2M events, one core idle
    (docs/performance.md#issue-35-seventeenth-session-the-exports-phase-slices-and-its-gzip)."""
    if not compress:
        return _write_document(data, trace, handle)
    with gzip.GzipFile(fileobj=handle, mode="wb", mtime=0) as zipped:
        writer = _BackgroundWriter(zipped)
        try:
            count = _write_document(data, trace, writer)
        finally:
            writer.close()
    return count


def _write_document(data: TimelineExport, trace: str, out: IO[bytes] | _BackgroundWriter) -> int:
    out.write(b'{"displayTimeUnit":"ns","otherData":')
    out.write(_COMPACT.encode(other_data(data, trace)).encode())
    out.write(b',"traceEvents":[')
    count = 0
    chunk: list[str] = []
    for event in _encoded_events(data):
        chunk.append(event)
        count += 1
        if len(chunk) >= _CHUNK_EVENTS:
            out.write(("," if count > len(chunk) else "").encode() + ",".join(chunk).encode())
            chunk = []
    if chunk:
        out.write(("," if count > len(chunk) else "").encode() + ",".join(chunk).encode())
    out.write(b"]}\n")
    return count


class _BackgroundWriter:
    """Writes to *out* on a thread of its own, in the order given, at most
    :data:`_QUEUED` chunks behind. A failed write (a full disk) is raised by the next
    :meth:`write` or by :meth:`close`, which every caller reaches (it waits for the thread:
    the file is never closed or removed under a write)."""

    def __init__(self, out: IO[bytes] | gzip.GzipFile) -> None:
        self._out = out
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=_QUEUED)
        self._error: BaseException | None = None
        # a daemon: an interrupted export never keeps the process alive waiting for it
        self._thread = threading.Thread(
            target=self._run, name="specnsys-export-writer", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self._error is None:  # after a failure the rest is drained, not written
                try:
                    self._out.write(chunk)
                except BaseException as error:  # noqa: BLE001 - handed to the encoding thread
                    self._error = error

    def write(self, chunk: bytes) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(chunk)

    def close(self) -> None:
        """Wait for every chunk to be written; raise the first write's failure."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error


#: Events encoded before a write: about 1.4 MB.
_CHUNK_EVENTS = 10_000
#: Chunks the encoding may run ahead of the writer.
_QUEUED = 4


def trace_document(data: TimelineExport, trace: str) -> TraceDocument:
    """The whole document as one object (for a notebook or a test; the CLI streams)."""
    return {
        "displayTimeUnit": "ns",
        "otherData": other_data(data, trace),
        "traceEvents": list(render_events(data)),
    }


class ExportSource(Protocol):
    """What the export renderer reads of a result (:class:`specnsys.api.Export`): the timeline
    export and the path of the trace it came from."""

    @property
    def path(self) -> str: ...

    @property
    def data(self) -> TimelineExport: ...


def write(source: ExportSource, options: RenderOptions, handle: IO[bytes]) -> int:
    """The registry's streaming renderer (``export --format perfetto``): the document written
    to *handle*, gzip with ``options.compress``; the number of events."""
    return write_trace_json(source.data, source.path, handle, compress=options.compress)


def render(source: ExportSource, options: RenderOptions) -> bytes:
    """The registry's renderer: the whole document as bytes (gzip with ``options.compress``),
    the same bytes :func:`write` streams."""
    buffer = io.BytesIO()
    write(source, options, buffer)
    return buffer.getvalue()
