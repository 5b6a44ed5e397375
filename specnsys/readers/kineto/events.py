"""Trace events -> raw columns: the one loop over events in Python, kept to field access.

Each event that the model uses is one tuple appended to the rows of its kind (CPU ranges,
CUDA API calls, GPU operations, process and thread names); every :data:`BATCH_ROWS` rows a
kind's tuples become an Arrow table, so memory holds the events as columns, not as Python
objects. Everything that is not field access -- which range is a phase or a mark, a
kernel's process, the nesting of ranges -- is done on the columns afterwards
(:mod:`specnsys.readers.kineto.tables`).

Times: ``ts`` and ``dur`` are microseconds with (Kineto) three decimals, converted exactly to
integer nanoseconds from the number's text (:func:`nanoseconds`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import TYPE_CHECKING

from specnsys.readers.kineto.stream import Number

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BATCH_ROWS",
    "CPU_RANGE_CATEGORIES",
    "GPU_CATEGORIES",
    "RUNTIME_CATEGORIES",
    "RawEvents",
    "nanoseconds",
]

#: Rows of one kind collected as tuples before they become an Arrow table.
BATCH_ROWS = 1 << 16

#: Categories of host-side ranges read into ``nvtx``: ``record_function`` scopes and the
#: operators the profiler records (as ``emit_nvtx`` would put them in an nsys trace).
CPU_RANGE_CATEGORIES = ("user_annotation", "cpu_op")
#: CUDA API calls, by their ``runtime.event_class`` (0 runtime, 1 driver, as nsys numbers).
RUNTIME_CATEGORIES = {"cuda_runtime": 0, "cuda_driver": 1}
#: GPU operations, by the model table they go to.
GPU_CATEGORIES = {
    "kernel": "kernels",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
}

_THOUSAND = Decimal(1000)
#: Times (ns) and durations beyond this are unusable: 146 years, and the sum of a start and a
#: duration stays within 64 bits.
_TIME_LIMIT = 1 << 62
#: Process and thread ids are the operating system's 32-bit ones.
_ID_LIMIT = 1 << 31
#: Other integers (correlation ids, byte counts) are 64-bit.
_INT_LIMIT = 1 << 63


def nanoseconds(value: object) -> int | None:
    """A JSON time in microseconds as integer nanoseconds, exactly (None when *value* is no
    number -- a string, null, NaN, missing -- or lies beyond 146 years).

    The fast path is Kineto's three decimals (``5444713137854.499``: drop the point); any
    other number text (more or fewer decimals, an exponent) is converted through
    :class:`~decimal.Decimal`, rounding half to even at the nanosecond."""
    if type(value) is Number:
        ns: int | None = None
        if len(value) > 4 and value[-4] == ".":
            # try/except, not contextlib.suppress: its object costs more than the whole
            # conversion, twice per event
            try:  # noqa: SIM105
                ns = int(value.replace(".", "", 1))
            except ValueError:
                pass  # an exponent: the exact path below
        if ns is None:
            try:
                exact = Decimal(value) * _THOUSAND
                ns = int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))
            except (InvalidOperation, OverflowError, ValueError):
                return None
    elif type(value) is int:
        ns = value * 1000
    else:
        return None
    return ns if -_TIME_LIMIT < ns < _TIME_LIMIT else None


def _integer(value: object) -> int | None:
    """A JSON integer that fits 64 bits (a stream id, a correlation id, a byte count), else
    None."""
    return value if type(value) is int and -_INT_LIMIT <= value < _INT_LIMIT else None


def _os_id(value: object) -> int | None:
    """A process or thread id (a 32-bit integer), else None (Kineto's ``"Spans"``, ``""``)."""
    return value if type(value) is int and -_ID_LIMIT <= value < _ID_LIMIT else None


def _triple(value: object) -> tuple[int | None, int | None, int | None]:
    """``[x, y, z]`` of a kernel's grid or block (Nones when absent or malformed)."""
    if type(value) is list and len(value) == 3:
        return _integer(value[0]), _integer(value[1]), _integer(value[2])
    return None, None, None


#: A trace event as JSON read it (an object; its values are checked where they are read).
_Event = dict[str, object]
#: One raw row: integers, texts and a flag, in its kind's :data:`RAW_COLUMNS` order.
_Row = tuple[int | str | bool | None, ...]

#: The raw columns of each kind of row (all integers unless named in :data:`_TEXT`).
RAW_COLUMNS: dict[str, tuple[str, ...]] = {
    "ranges": ("ts", "dur", "pid", "tid", "name", "cat", "finished", "order"),
    "runtime": ("ts", "dur", "pid", "tid", "name", "event_class", "correlation_id"),
    "kernels": (
        "ts", "dur", "name", "device_id", "context_id", "stream_id", "correlation_id",
        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    ),
    "memcpy": (
        "ts", "dur", "name", "device_id", "context_id", "stream_id", "correlation_id", "bytes",
    ),
    "memset": (
        "ts", "dur", "name", "device_id", "context_id", "stream_id", "correlation_id", "bytes",
    ),
    "sync": (
        "ts", "dur", "name", "device_id", "context_id", "stream_id", "correlation_id",
        "event_id",
    ),
    "processes": ("pid", "name"),
    "threads": ("pid", "tid", "name"),
}  # fmt: skip
_TEXT = {"name", "cat"}
_BOOL = {"finished"}


def _arrow_type(column: str) -> pa.DataType:
    import pyarrow as pa

    if column in _TEXT:
        return pa.string()
    return pa.bool_() if column in _BOOL else pa.int64()


@dataclass
class _Rows:
    """Tuples of one kind of row, turned into Arrow tables every :data:`BATCH_ROWS`."""

    columns: tuple[str, ...]
    pending: list[_Row] = field(default_factory=list)
    batches: list[pa.Table] = field(default_factory=list)

    def flush(self) -> None:
        import pyarrow as pa

        if not self.pending:
            return
        values = list(zip(*self.pending, strict=True))
        self.batches.append(
            pa.table(
                {
                    name: pa.array(column, type=_arrow_type(name))
                    for name, column in zip(self.columns, values, strict=True)
                }
            )
        )
        self.pending = []

    def table(self) -> pa.Table:
        """Every row so far as one Arrow table (no rows: the typed empty table)."""
        import pyarrow as pa

        self.flush()
        if not self.batches:
            return pa.table({n: pa.array([], type=_arrow_type(n)) for n in self.columns})
        return pa.concat_tables(self.batches)


@dataclass
class RawEvents:
    """The events of one trace, sorted into raw columns by kind, and what was left out."""

    rows: dict[str, _Rows] = field(
        default_factory=lambda: {kind: _Rows(cols) for kind, cols in RAW_COLUMNS.items()}
    )
    #: Events read other than complete (``X``) ones, by what they are (``M thread_name``,
    #: ``i``, ...; see :meth:`kinds` for all).
    seen: Counter[str] = field(default_factory=Counter)
    #: Events of a kind the model holds that lack a usable ``ts``, ``dur``, ``pid`` or
    #: ``tid`` (or are not JSON objects at all), by kind.
    unusable: Counter[str] = field(default_factory=Counter)
    #: Events kept whose duration is negative (their end lies before their start).
    negative: int = 0
    #: Entries of ``traceEvents`` seen (the position of the current one, from 1).
    events: int = 0
    _handlers: dict[str, Callable[[_Event, int, int, str], bool]] = field(
        default_factory=dict
    )
    _complete: Counter[str] = field(default_factory=Counter)
    _ranges: list[_Row] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._ranges = self.rows["ranges"].pending
        self._handlers = {
            **dict.fromkeys(CPU_RANGE_CATEGORIES, self._cpu_range),
            **dict.fromkeys(RUNTIME_CATEGORIES, self._runtime),
            "kernel": self._kernel,
            "gpu_memcpy": self._copy,
            "gpu_memset": self._copy,
            "cuda_sync": self._sync,
        }

    def add(self, event: object) -> None:
        """Sort one entry of ``traceEvents`` into its rows (or count why it is not used)."""
        self.events += 1
        if type(event) is not dict:
            self.unusable["not a JSON object"] += 1
            return
        phase = event.get("ph")
        if phase == "X":
            category = event.get("cat")
            if type(category) is not str:  # a list or object would not even hash
                category = "(no category)" if category is None else "(category not a string)"
            self._complete[category] += 1
            handler = self._handlers.get(category)
            if handler is None:
                return
            ts = nanoseconds(event.get("ts"))
            dur = nanoseconds(event.get("dur"))
            if ts is None or dur is None or not handler(event, ts, dur, category):
                self.unusable[f"X {category}"] += 1
            elif dur < 0:
                self.negative += 1
        elif phase == "M":
            self.seen[f"M {event.get('name')}"] += 1
            self._metadata(event)
        else:
            self.seen[str(phase)] += 1

    def kinds(self) -> Counter[str]:
        """Events read, by what they are: ``X <category>``, ``M <name>`` or the ``ph``."""
        return Counter({f"X {c}": n for c, n in self._complete.items()}) + self.seen

    def _append(self, kind: str, row: _Row) -> None:
        rows = self.rows[kind]
        rows.pending.append(row)
        if len(rows.pending) >= BATCH_ROWS:
            rows.flush()

    def _cpu_range(self, event: _Event, ts: int, dur: int, category: str) -> bool:
        pid, tid = _os_id(event.get("pid")), _os_id(event.get("tid"))
        if pid is None or tid is None:
            return False
        name = event.get("name")
        args = event.get("args")
        # an unfinished scope (still open when the profiler stopped) says so; it has no end
        finished = not (type(args) is dict and args.get("finished") is False)
        pending = self._ranges
        pending.append(
            (ts, dur, pid, tid, name if type(name) is str else None, category, finished,
             self.events)
        )  # fmt: skip
        if len(pending) >= BATCH_ROWS:
            self.rows["ranges"].flush()
            self._ranges = self.rows["ranges"].pending
        return True

    def _runtime(self, event: _Event, ts: int, dur: int, category: str) -> bool:
        pid, tid = _os_id(event.get("pid")), _os_id(event.get("tid"))
        if pid is None or tid is None:
            return False
        args = event.get("args")
        correlation = _integer(args.get("correlation")) if type(args) is dict else None
        name = event.get("name")
        self._append(
            "runtime",
            (ts, dur, pid, tid, name if type(name) is str else None,
             RUNTIME_CATEGORIES[category], correlation),
        )  # fmt: skip
        return True

    @staticmethod
    def _gpu_place(event: _Event, args: _Event) -> tuple[int | None, ...]:
        """Device, context, stream and correlation id of a GPU operation: from its args, the
        device and stream else from the event's ``pid``/``tid`` (where Kineto draws them)."""
        device = _integer(args.get("device"))
        if device is None:
            device = _integer(args.get("inDevice"))  # a peer-to-peer copy (CUPTI Memcpy2)
        if device is None:
            device = _integer(event.get("pid"))
        stream = _integer(args.get("stream"))
        if stream is None:
            stream = _integer(event.get("tid"))
        context = _integer(args.get("context"))
        if context is None:
            context = _integer(args.get("inContext"))
        return device, context, stream, _integer(args.get("correlation"))

    def _kernel(self, event: _Event, ts: int, dur: int, category: str) -> bool:
        args = event.get("args")
        args = args if type(args) is dict else {}
        name = event.get("name")
        self._append(
            "kernels",
            (ts, dur, name if type(name) is str else None, *self._gpu_place(event, args),
             *_triple(args.get("grid")), *_triple(args.get("block"))),
        )  # fmt: skip
        return True

    def _copy(self, event: _Event, ts: int, dur: int, category: str) -> bool:
        args = event.get("args")
        args = args if type(args) is dict else {}
        name = event.get("name")
        self._append(
            GPU_CATEGORIES[category],
            (ts, dur, name if type(name) is str else None, *self._gpu_place(event, args),
             _integer(args.get("bytes"))),
        )  # fmt: skip
        return True

    def _sync(self, event: _Event, ts: int, dur: int, category: str) -> bool:
        args = event.get("args")
        args = args if type(args) is dict else {}
        name = event.get("name")
        self._append(
            "sync",
            (ts, dur, name if type(name) is str else None, *self._gpu_place(event, args),
             _integer(args.get("wait_on_cuda_event_id"))),
        )  # fmt: skip
        return True

    def _metadata(self, event: _Event) -> None:
        """Process and thread names (``M`` events) of real processes (integer pids)."""
        what = event.get("name")
        if what not in ("process_name", "thread_name"):
            return
        args = event.get("args")
        name = args.get("name") if type(args) is dict else None
        pid = _os_id(event.get("pid"))
        if pid is None or type(name) is not str:
            return
        if what == "process_name":
            self._append("processes", (pid, name))
        else:
            tid = _os_id(event.get("tid"))
            if tid is not None:
                self._append("threads", (pid, tid, name))

    def tables(self) -> dict[str, pa.Table]:
        """Every kind's rows as one Arrow table."""
        return {kind: rows.table() for kind, rows in self.rows.items()}
