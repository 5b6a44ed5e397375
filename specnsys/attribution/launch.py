"""Launch attribution (docs/design.md#attribution, rule 1): a GPU op gets the phase of its launch.

A GPU activity (kernel, memcpy, memset, graph replay) is joined to the CUDA runtime call that
launched it by ``(correlation_id, pid)``; its phase is the innermost phase range (under the
name-mapping rules) open on the launching thread when that call started, found by one as-of
lookup of the call's start in the thread's phase change points (:mod:`.phase_map`).

Everything runs in Polars over the model's columnar tables with filters pushed into the scans:
a join of ops to calls (for the timeline a merge of both sorted by key, a hash join where the
ops keep the model's order) and one sorted as-of join, never an interval join, so cost and
memory grow with the number of rows, not with ranges x ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, TypedDict

import polars as pl

from specnsys.attribution.graph_nodes import (
    NODE_OP_TABLES,
    covered_graph_rows,
    graph_node_phases,
    has_graph_work,
)
from specnsys.attribution.phase_map import (
    PhaseIndex,
    create_phase_index,
    drop_phase_index,
    lookup_phase,
    mapped_nvtx_sql,
    phase_lookup_sql,
    phase_ranges_sql,
)
from specnsys.attribution.rules import PhaseRules, default_rules, resolve_rules
from specnsys.ingest.keys import all_distinct, all_pack, packed_key
from specnsys.vocabulary import API_CALL_EVENT_CLASSES, DOMAIN, LAUNCH_NAME_PATTERN, PHASES

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = [
    "OP_KIND",
    "PhaseIndex",
    "UNANNOTATED",
    "UNATTRIBUTED_GPU",
    "attributed_gpu_ops",
    "attributed_runtime",
    "create_phase_index",
    "drop_phase_index",
    "gpu_ops_with_phase",
    "mapped_nvtx_sql",
    "phase_lookup_sql",
    "phase_ranges_sql",
    "rules_for",
]

UNANNOTATED = "unannotated"
"""Phase of time (or a launch) outside every phase range."""

UNATTRIBUTED_GPU = "unattributed_gpu"
"""Phase of a GPU op whose launching runtime call is not in the trace."""

_I64 = pl.Int64

#: Kinds of GPU op; an Enum column costs a byte or so per op instead of a string.
OP_KIND = pl.Enum(["kernel", "memcpy", "memset", "graph"])


def _ops(
    trace: Trace,
    pid: int | None,
    window: tuple[int, int] | None,
    details: bool,
    correlation_ids: pl.Series | None = None,
    graph: _GraphJoin | None = None,
    names: bool = False,
    devices: bool = False,
    streams: bool = False,
) -> pl.LazyFrame:
    """Every GPU op (kernels, memcpy, memset, whole-graph replays) of *pid* overlapping
    *window* (and with one of *correlation_ids*), with the filters pushed into the scans.
    Without *details* only what attribution needs is read (kind, times, ids; and the op's
    ``name`` with *names*, its ``device_id`` with *devices*, and ``stream_id`` too with
    *streams*). With *graph*
    (a trace with graph work) each op also gets ``node_phase`` (:mod:`.graph_nodes`), and
    whole-graph rows whose launch has node-level ops are left out."""

    def part(table: str, kind: str, name: pl.Expr) -> pl.LazyFrame:
        frame = trace.table(table)
        if pid is not None:
            frame = frame.filter(pl.col("pid") == pid)
        if window is not None:
            frame = frame.filter((pl.col("start") < window[1]) & (pl.col("end") > window[0]))
        if correlation_ids is not None:
            frame = frame.filter(pl.col("correlation_id").is_in(correlation_ids.implode()))
        cols = [
            pl.lit(kind, OP_KIND).alias("op_kind"),
            *(pl.col(c).cast(_I64) for c in ("start", "end", "correlation_id", "pid")),
        ]
        if details or streams:
            cols += [pl.col(c).cast(_I64) for c in ("device_id", "stream_id")]
        elif devices:
            cols.append(pl.col("device_id").cast(_I64))
        if details:
            cols.append(name.cast(pl.String).alias("name"))
        elif names:
            # a code per op, not a string: the per-kernel summary groups by it, and the sort
            # and join before it carry 4 bytes a row instead of a string view's 16 (at 20M
            # kernels 125 MiB less and 0.7 s less in the join, most of it page faults)
            cols.append(name.cast(pl.Categorical).alias("name"))
        if graph is not None:
            node = pl.col("graph_node_id") if table in NODE_OP_TABLES else pl.lit(None)
            cols.append(node.cast(_I64).alias("graph_node_id"))
        return frame.select(cols)

    graphs = part("graphs", "graph", pl.lit("graph ") + pl.col("graph_id").cast(pl.String))
    if graph is not None and graph.covered is not None:  # counted through their node ops
        graphs = graphs.join(
            graph.covered, on=["pid", "correlation_id"], how="anti", maintain_order="left"
        )
    ops = pl.concat(
        [
            part("kernels", "kernel", pl.col("short_name")),
            part("memcpy", "memcpy", pl.col("copy_kind_name").fill_null("memcpy")),
            part("memset", "memset", pl.lit("memset")),
            graphs,
        ]
    )
    if graph is None:
        return ops
    if graph.node_phases is None:
        return ops.drop("graph_node_id").with_columns(
            pl.lit(None, pl.Categorical).alias("node_phase")
        )
    return ops.join(
        graph.node_phases.lazy(), on=["pid", "graph_node_id"], how="left",
        maintain_order="left" if details else None,
    ).drop("graph_node_id")  # fmt: skip


class _GraphJoin(NamedTuple):
    """What :func:`_ops` joins in a trace with graph work: the phases of the resolved nodes
    (None without node events) and the launches whose whole-graph rows are left out (None
    when none are)."""

    node_phases: pl.DataFrame | None
    covered: pl.LazyFrame | None

    @classmethod
    def of(cls, trace: Trace, index: PhaseIndex, pid: int | None) -> _GraphJoin | None:
        """None for a trace without whole-graph rows and node events: nothing to join."""
        if not has_graph_work(trace):
            return None
        return cls(graph_node_phases(trace, index, pid), covered_graph_rows(trace, pid))


def attributed_runtime(
    trace: Trace, index: PhaseIndex, pid: int | None = None, *, details: bool = False
) -> pl.DataFrame:
    """CUDA runtime calls (``event_class`` 0/1, no backtrace rows) of *pid* (every process when
    None) with a correlation id or a name containing "launch", each with ``phase``: the
    innermost phase range open on its thread when it started (NULL outside every range).

    Columns: ``rt_pid, rt_corr, api_start, api_end, api_global_tid, is_launch, phase`` (plus
    ``api_tid`` and ``api_name`` with *details*), sorted by ``api_start``. Without *details*
    only ``rt_corr, api_start, is_launch, phase`` (and ``rt_pid`` when *pid* is None) are
    kept: on tens of millions of calls every column counts.
    """
    frame = trace.table("runtime").filter(
        pl.col("event_class").is_in(list(API_CALL_EVENT_CLASSES))
        & ~pl.col("is_backtrace").fill_null(False)
    )
    if pid is not None:
        frame = frame.filter(pl.col("pid") == pid)
    # A few distinct API names over millions of calls: the regex runs on each name once.
    names = trace.table("runtime").select(pl.col("name").unique()).collect()["name"]
    launches = names.filter(names.str.contains(LAUNCH_NAME_PATTERN))
    is_launch = pl.col("name").is_in(launches.implode()).fill_null(False)
    cols = [
        pl.col("pid").cast(_I64).alias("rt_pid"),
        pl.col("correlation_id").cast(_I64).alias("rt_corr"),
        pl.col("start").cast(_I64).alias("api_start"),
        pl.col("end").cast(_I64).alias("api_end"),
        pl.col("global_tid").cast(_I64).alias("api_global_tid"),
        is_launch.alias("is_launch"),
    ]
    if details:
        cols += [pl.col("tid").cast(_I64).alias("api_tid"), pl.col("name").alias("api_name")]
    calls = frame.select(cols).filter(pl.col("rt_corr").is_not_null() | pl.col("is_launch"))
    keep = [c.meta.output_name() for c in cols]
    if not details:
        dropped = {"api_end", "api_global_tid", *(["rt_pid"] if pid is not None else [])}
        keep = [c for c in keep if c not in dropped]
    return lookup_phase(calls, index.change_points, t="api_start", gtid="api_global_tid", keep=keep)


def attributed_gpu_ops(
    trace: Trace,
    index: PhaseIndex,
    *,
    pid: int | None = None,
    window: tuple[int, int] | None = None,
    details: bool = False,
    runtime: pl.DataFrame | None = None,
    launched_between: tuple[int, int] | None = None,
    names: bool = False,
    devices: bool = False,
    streams: bool = False,
) -> pl.DataFrame:
    """GPU ops of *pid* (every process when None) overlapping *window* ``(start, end)`` ns
    (all when None), each with its launching call and ``phase`` (see :func:`gpu_ops_with_phase`).

    Without *details* only ``op_kind, start, end, phase`` come back (what the timeline needs;
    and ``name`` with *names*: what a per-kernel summary needs, without the wide frame of
    *details*; ``device_id`` with *devices*: what the GPU-metrics bandwidth needs; and
    ``stream_id`` with *streams*: what a timeline export's op tracks need), in no
    particular order; with *details* the ops keep the model's order.
    *runtime* is :func:`attributed_runtime`'s frame for the same *pid* when the caller has it
    (it is reused, not recomputed). With *launched_between* ``(a, b)`` only ops whose launching
    call started in ``[a, b)`` are read. One launching call is taken per ``(pid,
    correlation_id)`` (the earliest), so every op appears exactly once.
    """
    if runtime is None:
        runtime = attributed_runtime(trace, index, pid, details=details)
    calls = _launching_calls(runtime, launched_between)
    wanted = None if launched_between is None else calls["rt_corr"].unique()
    # One process: its ids alone are the key (a one-column hash join is much cheaper). Every
    # process: (pid, id) packed into one integer when every call's pair packs.
    packed = pid is None and _packs(calls)
    keys: _JoinKeys
    if packed:
        calls = calls.with_columns(_packed_key("rt_pid", "rt_corr"))
        keys = {"on": _KEY}
    elif pid is not None:
        keys = {"left_on": ["correlation_id"], "right_on": ["rt_corr"]}
    else:
        keys = {"left_on": ["pid", "correlation_id"], "right_on": ["rt_pid", "rt_corr"]}
    call_keys = [_KEY] if packed else keys["right_on"]
    calls = _one_call_per_key(
        trace, index, pid, calls, call_keys, packed, launched_between, details
    )
    graph = _GraphJoin.of(trace, index, pid)
    ops = _ops(trace, pid, window, details, wanted, graph, names, devices, streams)
    lean = [
        "op_kind", "start", "end", "phase", *(["name"] if names else []),
        *(["device_id"] if devices or streams else []), *(["stream_id"] if streams else []),
    ]  # fmt: skip
    if packed:  # the same columns come out as from the two-column join
        ops = ops.with_columns(_packed_key("pid", "correlation_id"))
        calls = calls.drop("rt_pid", "rt_corr", strict=False)
    label = (
        pl.when(pl.col("api_start").is_null())
        .then(pl.lit(UNATTRIBUTED_GPU, pl.Categorical))
        .otherwise(pl.col("phase").fill_null(pl.lit(UNANNOTATED, pl.Categorical)))
    )
    if graph is not None:  # a node-level op: the phase its node was captured in, if any
        label = pl.coalesce(pl.col("node_phase"), label)
    label = label.alias("phase")
    if not details and (packed or pid is not None):  # one key column: merge sorted sides
        left, right = (_KEY, _KEY) if packed else ("correlation_id", "rt_corr")
        joined = _merge_launches(ops, calls, left, right)
        return joined.with_columns(label).select(lean)
    # With details the ops keep the model's order: they are scanned, joined and labelled in
    # one streaming plan, so the op table is never held whole beside its joined copy.
    return (
        ops.join(calls.lazy(), how="left", **keys, maintain_order="left" if details else None)
        .drop(_KEY, strict=False)
        .with_columns(label)
        .drop("node_phase", strict=False)
        .select(pl.all() if details else pl.col(lean))
        .collect(engine="streaming")
    )


def _one_call_per_key(
    trace: Trace,
    index: PhaseIndex,
    pid: int | None,
    calls: pl.DataFrame,
    call_keys: list[str],
    packed: bool,
    launched_between: tuple[int, int] | None,
    details: bool,
) -> pl.DataFrame:
    """*calls* with one launching call per key: where an id is shared by several calls, the
    earliest wins (ties by end, thread, then name: calls equal in all four are equal in every
    column kept, so the pick never depends on the unspecified row order)."""
    if len(call_keys) > 1:
        distinct = int(calls.select(pl.struct(call_keys).n_unique()).item()) == calls.height
    else:
        distinct = all_distinct(calls, call_keys[0])
    if distinct:
        return calls
    if not {"api_end", "api_name"} <= set(calls.columns):  # lean: the order needs them (rare)
        full = attributed_runtime(trace, index, pid, details=True)
        calls = _launching_calls(full, launched_between)
        if packed:
            calls = calls.with_columns(_packed_key("rt_pid", "rt_corr"))
    calls = calls.sort(["api_start", "api_end", "api_global_tid", "api_name"]).unique(
        subset=call_keys, keep="first", maintain_order=True
    )
    return calls if details else calls.select(*call_keys, "api_start", "phase")


class _JoinKeys(TypedDict, total=False):
    """The key arguments of a ``join``: one shared column, or a list on each side."""

    on: str
    left_on: list[str]
    right_on: list[str]


class _AsofKeys(TypedDict, total=False):
    """The key arguments of a ``join_asof``: one shared column, or one on each side."""

    on: str
    left_on: str
    right_on: str


def _merge_launches(ops: pl.LazyFrame, calls: pl.DataFrame, left: str, right: str) -> pl.DataFrame:
    """*ops* with the columns of the call whose key *right* equals their key *left* (NULL
    where none does; the calls' keys are unique), in no particular order.

    Both sides sorted by key, then an as-of join kept only where the keys are equal: a merge
    that reads memory in order. Correlation ids grow with time, so both sides come nearly
    sorted and their sorts are cheap; a hash join probes a table of every call at random and
    was slower on the large bench exports (docs/performance.md#attribution-and-metrics).
    """
    match = "__launch_key"
    # Tie-safe: the calls' keys are unique (attributed_gpu_ops keeps one call per key).
    table = calls.with_columns(pl.col(right).alias(match)).sort(right)
    on: _AsofKeys = {"on": left} if left == right else {"left_on": left, "right_on": right}
    found = pl.col(match) == pl.col(left)
    keyed = (
        ops.filter(pl.col(left).is_not_null())
        .sort(left)
        .join_asof(table.lazy(), strategy="backward", check_sortedness=False, **on)
        .with_columns(
            pl.when(found).then(pl.col(c)).alias(c)
            for c in table.columns
            if c not in (left, right, match)
        )
    )
    unkeyed = ops.filter(pl.col(left).is_null())
    return pl.concat([keyed, unkeyed], how="diagonal_relaxed").drop(
        match, right, _KEY, strict=False
    ).collect()


#: The packed (pid, correlation id) join key (:mod:`specnsys.ingest.keys`): one 64-bit column
#: joins faster than the two (docs/performance.md#attribution-and-metrics).
_KEY = "__pid_correlation"


def _packed_key(pid: str, correlation_id: str) -> pl.Expr:
    return packed_key(pid, correlation_id, _KEY)


def _packs(calls: pl.DataFrame) -> bool:
    """Whether every call's (pid, correlation id) has a packed key (no NULLs, in range)."""
    return all_pack(calls, "rt_pid", "rt_corr")


def _launching_calls(
    runtime: pl.DataFrame, launched_between: tuple[int, int] | None
) -> pl.DataFrame:
    """The calls of *runtime* that can own GPU work (a correlation id), started in
    ``[a, b)`` when *launched_between* is given."""
    calls = runtime.filter(pl.col("rt_corr").is_not_null()).drop("is_launch")
    if launched_between is not None:
        a, b = launched_between
        calls = calls.filter((pl.col("api_start") >= a) & (pl.col("api_start") < b))
    return calls


def gpu_ops_with_phase(
    trace: Trace,
    phases: Sequence[str] = PHASES,
    domain: str = DOMAIN,
    *,
    rules: PhaseRules | str | None = None,
    pid: int | None = None,
    window: tuple[int, int] | None = None,
    index: PhaseIndex | None = None,
    runtime: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Every kernel, memcpy and memset of *trace* with the phase it was launched in.

    Columns: ``op_kind`` (``kernel``/``memcpy``/``memset``/``graph``: a whole-graph execution
    row of ``--cuda-graph-trace=graph``; with ``=node`` its kernels are ordinary rows),
    ``start``, ``end``, ``device_id``, ``stream_id``, ``correlation_id``, ``pid``, ``name``, the
    launching call's ``api_start``, ``api_end``, ``api_name``, ``api_tid``, ``api_global_tid``
    (NULL when it is missing), and ``phase``: the innermost phase range open on the launching
    thread when the call started, ``unannotated`` when none was open, ``unattributed_gpu`` when
    the runtime row is missing. Runtime rows are restricted to ``event_class IN (0, 1)`` and
    not ``is_backtrace``, and one call is taken per ``(pid, correlation_id)``, so every op
    appears exactly once. *pid* and *window* ``(start_ns, end_ns)`` keep the ops of one process
    overlapping a window (pushed into the scans: use them on large traces).

    Phases are *rules* (a :class:`PhaseRules`, a built-in set's name or a TOML path) when
    given, else specnsys's own convention: ranges of *domain* named one of *phases*.
    *index* (the rules' phase index) and *runtime* (:func:`attributed_runtime` of *pid* with
    details) are reused when the caller has them, as an
    :class:`~specnsys.attribution.context.AttributionContext` does; else they are built here.
    """
    mapping = rules_for(phases, domain, rules)
    con = trace.connection
    own = index is None
    if index is None:
        index = create_phase_index(con, mapping)
    try:
        ops = attributed_gpu_ops(
            trace, index, pid=pid, window=window, details=True, runtime=runtime
        )
    finally:
        if own:
            drop_phase_index(con, index)
    return ops.with_columns(pl.col("op_kind", "phase").cast(pl.String)).select(
        "op_kind", "start", "end", "device_id", "stream_id", "correlation_id", "pid", "name",
        "api_start", "api_end", "api_name", "api_tid", "api_global_tid", "phase",
    ).sort(["start", "end", "op_kind", "correlation_id"], nulls_last=True)  # fmt: skip


def rules_for(phases: Sequence[str], domain: str, rules: PhaseRules | str | None) -> PhaseRules:
    """The rules in force: explicit *rules*, else the specnsys convention for *phases*/*domain*."""
    if rules is None:
        return default_rules(phases, domain)
    return resolve_rules(rules)
