"""Innermost open phase range per thread, flattened once into change points (one as-of lookup).

Push/pop ranges of one thread nest properly (and so does any subset of them, here the
phase-named ones). Sweep each thread's range boundaries in time order, +1 at a start, -1 at an
end (ends before starts at equal times: ranges are half-open ``[start, end)``; an unclosed
range has no end event and stays open); the running sum is the *level*. For properly nested
ranges, the innermost range open at ``t`` is the **last range started at or before t whose
level right after its start equals the level at t**: every range started later and before
``t`` lies inside it and has closed again.

That answer only changes at a boundary, so it is computed once per boundary and stored as a
*change point* ``(gtid, t, lvl, s, e, phase)``: after the boundaries of thread ``gtid`` at time
``t`` the level is ``lvl`` and the innermost range is ``[s, e)`` named ``phase``. After a start
the innermost range is the one that started; after an end at level ``L`` (``L - 1`` after it)
it is the last start of that thread with level ``L - 1`` -- one as-of join over boundaries,
not over the points to look up. A point ``(gtid, t)`` then takes the last change point of its
thread at or before ``t``: a single as-of join, in Polars (:func:`lookup_phase`) or in DuckDB
(:func:`phase_lookup_sql` over the map registered by :func:`create_phase_index`).

The found range is checked to really contain ``t`` (a safety net for malformed, crossing
ranges; a miss gives no phase). Zero-length ranges contain no instant and are ignored.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.rules import REQUEST, PhaseRules
from specnsys.vocabulary import ACCELERABLE, DRAFT_ROLE, PREFILL_ROLES, ROLE_PHASES

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "PhaseIndex",
    "create_phase_index",
    "drop_phase_index",
    "lookup_phase",
    "mapped_nvtx_sql",
    "PHASE_RANGE_COLUMNS",
    "phase_change_points",
    "phase_lookup_sql",
    "phase_ranges",
    "phase_ranges_sql",
]

_I64 = pl.Int64
_OPEN = 9223372036854775807  # sort key of an unclosed range's end

CHANGE_POINT_SCHEMA = {
    "gtid": _I64,
    "t": _I64,
    "lvl": _I64,
    "s": _I64,
    "e": _I64,
    "phase": pl.Categorical,
}


def mapped_nvtx_sql(rules: PhaseRules, extra: Sequence[str] = ()) -> str:
    """SELECT of the NVTX ranges with their mapped ``phase`` (NULL when no rule matches), and
    the *extra* ``nvtx`` columns a caller needs besides (read in the same scan)."""
    more = "".join(f", {column}" for column in extra)
    return f"""
        SELECT id, global_tid AS gtid, pid, start AS s, "end" AS e, kind, depth,
               {rules.phase_sql()} AS phase{more}
        FROM nvtx
        WHERE kind IN ('push_pop', 'start_end') AND start IS NOT NULL
    """


def _sql_list(names: Sequence[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def phase_ranges_sql(rules: PhaseRules) -> str:
    """SELECT of the phase ranges under *rules* (:func:`phase_ranges` is the same as a frame,
    its last two flags computed in Polars): mapped push/pop ranges of known threads, each
    with the phase its nesting gives it (docs/design.md#nesting-by-role).

    Columns: ``id, gtid, pid, s, e, depth``; ``named`` (the phase the rules gave the range);
    ``role`` (the outermost enclosing ``prefill``/``draft_prefill``/``draft`` range of its
    thread, NULL outside them); ``phase`` (what its time counts as: ``draft`` inside a draft
    range, the prefill's phase for an accelerable range inside a prefill, else ``named``);
    ``counted`` (no range of the same ``phase`` holds it on the thread: the ranges that
    per-range counts and inclusive sums take, so nested ranges of one phase count once);
    ``srn``/``ern`` (the range's start and end in the thread's total order of boundaries, ends
    past every end when unclosed: the nesting test ``a.srn < b.srn AND b.ern < a.ern``); ``leaf``
    (no range of the same ``named`` phase lies inside it: a draft step hooked around hooked
    draft forwards has the forwards as leaves).

    Boundaries are ordered per thread as :func:`phase_change_points` orders them (ends before
    starts at one instant, outer starts first), so both see the same nesting.
    """
    return f"""
    SELECT *,
           -- no earlier range of the phase ends after it: none holds it (a crossing one,
           -- of a malformed trace, does not)
           coalesce(max(ern) OVER (
               PARTITION BY gtid, phase ORDER BY srn
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) < ern, true) AS counted,
           coalesce(lead(srn) OVER (PARTITION BY gtid, named ORDER BY srn) > ern, true) AS leaf
    FROM ({_effective_ranges_sql(rules)})
    """


#: :func:`phase_ranges_sql`'s two flags as Polars expressions, over the effective ranges
#: (``srn`` is unique per thread: the order within a group is total).
_COUNTED = (
    (pl.col("ern").shift(1).cum_max().over("gtid", "phase", order_by="srn") < pl.col("ern"))
    .fill_null(True)
    .alias("counted")
)
_LEAF = (
    (pl.col("srn").shift(-1).over("gtid", "named", order_by="srn") > pl.col("ern"))
    .fill_null(True)
    .alias("leaf")
)


def _phase_named_sql(rules: PhaseRules) -> str:
    """SELECT of the push/pop ranges the rules name a phase (``named``; not the request), on
    known threads, not empty: ``id, gtid, pid, s, e, depth, named``."""
    return f"""
        SELECT id, gtid, pid, s, e, depth, phase AS named
        FROM ({mapped_nvtx_sql(rules)})
        WHERE kind = 'push_pop' AND phase IS NOT NULL AND phase <> '{REQUEST}'
          AND gtid IS NOT NULL AND (e IS NULL OR e > s)
    """


def _effective_ranges_sql(rules: PhaseRules) -> str:
    """:func:`phase_ranges_sql` without its ``counted`` and ``leaf`` flags: every other column,
    each range with the phase its nesting gives it (:func:`_effective_ranges` is the same in
    Polars)."""
    return f"""
    WITH base AS ({_phase_named_sql(rules)}),
    bounds AS (
        SELECT id, gtid, 1 AS st, s AS t, -coalesce(e, {_OPEN}) AS k1, depth AS k2, id AS k3
        FROM base
        UNION ALL
        SELECT id, gtid, 0, e, -s, -depth, -id FROM base WHERE e IS NOT NULL
    ),
    ordered AS (
        SELECT id, st, row_number() OVER (
            PARTITION BY gtid ORDER BY t, st, k1 NULLS LAST, k2 NULLS LAST, k3) AS rn
        FROM bounds
    ),
    spans AS (
        SELECT id, max(rn) FILTER (WHERE st = 1) AS srn,
               -- unclosed ranges end after everything, the earliest started last (it holds
               -- the ranges started after it)
               coalesce(max(rn) FILTER (WHERE st = 0),
                        {_OPEN} - max(rn) FILTER (WHERE st = 1)) AS ern
        FROM ordered GROUP BY id
    ),
    r AS (SELECT base.*, srn, ern FROM base JOIN spans USING (id)),
    tops AS (
        SELECT gtid, srn, ern, named AS role FROM (
            SELECT gtid, srn, ern, named, max(ern) OVER (
                PARTITION BY gtid ORDER BY srn ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
            ) AS before
            FROM r WHERE named IN ({_sql_list(ROLE_PHASES)})
        ) WHERE before IS NULL OR before < srn
    ),
    roled AS (
        SELECT r.*, CASE WHEN t.ern > r.ern THEN t.role END AS role
        FROM r ASOF LEFT JOIN tops t ON r.gtid = t.gtid AND r.srn > t.srn
    ),
    eff AS (
        SELECT *, CASE
            WHEN role = '{DRAFT_ROLE}' THEN '{DRAFT_ROLE}'
            WHEN role IN ({_sql_list(PREFILL_ROLES)}) AND named IN ({_sql_list(ACCELERABLE)})
                THEN role
            ELSE named END AS phase
        FROM roled
    )
    SELECT id, gtid, pid, s, e, phase, depth, named, role, srn, ern FROM eff
    """


def _effective_ranges(con: duckdb.DuckDBPyConnection, rules: PhaseRules) -> pl.DataFrame:
    """:func:`_effective_ranges_sql` as a frame: the NVTX scan and the rules in DuckDB, the
    nesting in Polars (the SQL's boundary numbering and as-of join were 4.6 s of the 20M-kernel
    analysis, single-threaded per thread's partition). tests/test_phase_map.py holds the two
    equal."""
    base: pl.DataFrame = con.sql(_phase_named_sql(rules)).pl()
    ri = pl.int_range(pl.len(), dtype=pl.UInt32).alias("ri")
    # every boundary in its thread's total order (as the SQL's row_number orders them): the
    # keys are unique per thread (a start's id, an end's minus id), so the order is total
    bounds = (
        pl.concat(
            [
                base.select(
                    "gtid", ri, pl.lit(1, pl.Int32).alias("st"), pl.col("s").alias("t"),
                    (-pl.col("e").fill_null(_OPEN)).alias("k1"), pl.col("depth").alias("k2"),
                    pl.col("id").alias("k3"),
                ),
                base.select(
                    "gtid", ri, pl.lit(0, pl.Int32).alias("st"), pl.col("e").alias("t"),
                    (-pl.col("s")).alias("k1"), (-pl.col("depth")).alias("k2"),
                    (-pl.col("id")).alias("k3"),
                ).filter(pl.col("t").is_not_null()),
            ]
        )  # fmt: skip
        .sort(["gtid", "t", "st", "k1", "k2", "k3"], nulls_last=True)
        .select("ri", "st", (pl.int_range(1, pl.len() + 1, dtype=_I64).over("gtid")).alias("rn"))
    )
    starts = bounds.filter(pl.col("st") == 1)
    ends = bounds.filter(pl.col("st") == 0)
    del bounds
    unset = pl.repeat(None, base.height, dtype=_I64, eager=True)
    srn = unset.alias("srn").scatter(starts["ri"], starts["rn"])  # every range has a start
    ern = unset.clone().alias("ern").scatter(ends["ri"], ends["rn"])
    del starts, ends
    # unclosed ranges end after everything, the earliest started last (it holds the ranges
    # started after it)
    r = base.with_columns(srn, ern).with_columns(
        pl.col("ern").fill_null(_OPEN - pl.col("srn")).alias("ern")
    )
    del base
    # the outermost role range of each thread: no earlier one of them ends after its start
    tops = (
        r.filter(pl.col("named").is_in(list(ROLE_PHASES)))
        .select(
            "gtid", "srn", pl.col("ern").alias("top_ern"), pl.col("named").alias("top_role"),
            pl.col("ern").shift(1).cum_max().over("gtid", order_by="srn").alias("before"),
        )
        .filter(pl.col("before").is_null() | (pl.col("before") < pl.col("srn")))
        .drop("before")
        .sort("gtid", "srn")
        .with_columns(pl.col("srn").alias("top_srn"))
    )
    roled = (
        r.sort("gtid", "srn")
        .join_asof(
            tops.drop("srn"), left_on="srn", right_on="top_srn", by="gtid",
            strategy="backward", allow_exact_matches=False, check_sortedness=False,
        )  # fmt: skip
        .with_columns(
            pl.when(pl.col("top_ern") > pl.col("ern")).then(pl.col("top_role")).alias("role")
        )
    )
    phase = (
        pl.when(pl.col("role") == DRAFT_ROLE)
        .then(pl.lit(DRAFT_ROLE))
        .when(pl.col("role").is_in(list(PREFILL_ROLES)) & pl.col("named").is_in(list(ACCELERABLE)))
        .then(pl.col("role"))
        .otherwise(pl.col("named"))
        .alias("phase")
    )
    return roled.select(
        "id", "gtid", "pid", "s", "e", phase, "depth", "named", "role", "srn", "ern"
    )


def phase_change_points(ranges: pl.DataFrame) -> pl.DataFrame:
    """The change points (see the module docs) of *ranges* (columns ``id, gtid, s, e, phase,
    depth``), sorted by ``t``; :data:`CHANGE_POINT_SCHEMA` columns."""
    if ranges.height == 0:
        return pl.DataFrame(schema=CHANGE_POINT_SCHEMA)
    r = ranges.select(
        pl.col("id").cast(_I64),
        pl.col("gtid").cast(_I64),
        pl.col("s").cast(_I64),
        pl.col("e").cast(_I64),
        # a code per row rather than a string: cheap to copy through joins, sort and group
        pl.col("phase").cast(pl.Categorical),
        pl.col("depth").cast(_I64),
    )
    # Boundaries carry only their range's row number (ri); the sort keys are dropped as soon
    # as the order is known, so tens of millions of ranges stay within a few narrow columns.
    # Order at one instant (a total order: ids are unique): ends before starts; starts outer
    # first -- the later end first, then by depth, then push order; ends inner first -- as a
    # stack of properly nested ranges. The end comes before the depth: depths count one NVTX
    # domain's stack each, so they do not compare across domains, while a range of any domain
    # nested in another's time ends no later than it.
    ordered = _placed_boundaries(ranges, r)
    if ordered is None:
        ri = pl.int_range(pl.len(), dtype=pl.UInt32).alias("ri")
        order = ["gtid", "t", "is_start", "k1", "k2", "k3"]
        ordered = (
            pl.concat(
                [
                    r.select(
                        "gtid", pl.col("s").alias("t"), pl.lit(1, pl.Int8).alias("is_start"),
                        (-pl.col("e").fill_null(_OPEN)).alias("k1"), pl.col("depth").alias("k2"),
                        pl.col("id").alias("k3"), ri,
                    ),
                    r.select(
                        "gtid", pl.col("e").alias("t"), pl.lit(0, pl.Int8).alias("is_start"),
                        (-pl.col("s")).alias("k1"), (-pl.col("depth")).alias("k2"),
                        (-pl.col("id")).alias("k3"), ri,
                    ).filter(pl.col("t").is_not_null()),
                ]
            )  # fmt: skip
            .sort(order, nulls_last=True)
            .select("gtid", "t", "is_start", "ri")
        )
    events = ordered.with_row_index("rn").with_columns(
        (pl.col("is_start").cast(pl.Int32) * 2 - 1).cum_sum().over("gtid").alias("lvl")
    )
    # The innermost range after each boundary: the last start of the thread (this one, for a
    # start) whose level equals the level after the boundary -- one as-of join. Tie-safe: its
    # key ``rn`` is unique (a row number of the total order above).
    starts = events.filter(pl.col("is_start") == 1).select(
        "gtid", "lvl", "rn", pl.col("ri").alias("owner")
    )
    owned = events.select("gtid", "t", "lvl", "rn").join_asof(
        starts, on="rn", by=["gtid", "lvl"], strategy="backward", check_sortedness=False
    )
    del events, starts
    # the state after an instant is the one after its last boundary
    last = (pl.col("gtid") != pl.col("gtid").shift(-1)) | (pl.col("t") != pl.col("t").shift(-1))
    points = owned.filter(last.fill_null(True)).with_columns(
        # no range open (level 0, or malformed below it): no owner
        pl.when(pl.col("lvl") > 0).then(pl.col("owner")).alias("owner")
    )
    owner = points["owner"]
    return (
        points.select(
            "gtid",
            "t",
            pl.col("lvl").cast(_I64),
            r["s"].gather(owner).alias("s"),
            r["e"].gather(owner).alias("e"),
            r["phase"].gather(owner).alias("phase"),
        )
        .select(list(CHANGE_POINT_SCHEMA))
        .sort("t", maintain_order=True)
    )


def _placed_boundaries(ranges: pl.DataFrame, r: pl.DataFrame) -> pl.DataFrame | None:
    """The boundaries of *r* (``gtid, t, is_start, ri``) in :func:`phase_change_points`'s
    total order without sorting them, when *ranges* carries :func:`phase_ranges`'s ``srn`` and
    ``ern`` (each boundary's place in its thread's order, the same order: 1, 2, ... over the
    thread's starts and closed ends); None when it does not, or when the places are not those
    of every boundary (a caller's subset of the ranges): the caller sorts.

    Threads come in ascending ``gtid``, each from the offset of the boundaries before it; each
    column is scattered to its places (at 20M kernels the sort of 20M boundaries by six keys
    was half of the change points' time)."""
    if not {"srn", "ern"} <= set(ranges.columns) or ranges.height == 0:
        return None
    closed = r["e"].is_not_null()
    places = ranges.select(
        pl.col("srn").cast(_I64), pl.when(closed).then(pl.col("ern")).cast(_I64).alias("ern")
    )
    per_thread = (
        r.select("gtid").with_columns(places).group_by("gtid")
        .agg(
            (pl.len() + pl.col("ern").count()).alias("n"),
            pl.max_horizontal(pl.col("srn").max(), pl.col("ern").max()).alias("top"),
            pl.col("srn").min().alias("low"),
        )
        .sort("gtid")
    )  # fmt: skip
    if per_thread.select(
        ((pl.col("top") != pl.col("n")) | (pl.col("low") < 1)).any()
    ).item() or per_thread["gtid"].null_count():
        return None
    offsets = dict(zip(per_thread["gtid"], per_thread["n"].cum_sum() - per_thread["n"], strict=True))
    base = r["gtid"].replace_strict(offsets, return_dtype=_I64) - 1
    at_start = base + places["srn"]
    at_end = (base + places["ern"]).filter(closed)
    total = int(per_thread["n"].sum())
    ri = pl.int_range(r.height, dtype=pl.UInt32, eager=True)

    def placed(name: str, starts: pl.Series, ends: pl.Series) -> pl.Series:
        column = pl.Series(name, [None], dtype=starts.dtype).extend_constant(None, total - 1)
        return column.scatter(at_start, starts).scatter(at_end, ends)

    return pl.DataFrame([
        placed("gtid", r["gtid"], r["gtid"].filter(closed)),
        placed("t", r["s"], r["e"].filter(closed)),
        placed("is_start", pl.repeat(1, r.height, dtype=pl.Int8, eager=True),
               pl.repeat(0, int(closed.sum()), dtype=pl.Int8, eager=True)),
        placed("ri", ri, ri.filter(closed)),
    ])  # fmt: skip


def lookup_phase(
    points: pl.DataFrame | pl.LazyFrame,
    change_points: pl.DataFrame,
    *,
    t: str,
    gtid: str | None,
    keep: Sequence[str] | None = None,
) -> pl.DataFrame:
    """*points* with a ``phase`` column (Categorical): the innermost phase range open on thread
    *gtid* at time *t* (NULL when none). With ``gtid=None`` every point is looked up in
    *change_points* as one thread (the caller has filtered them to it). Rows come back sorted
    by *t*, then the points with a NULL time or thread (they get no phase). *keep* names the
    point columns to return (default: all); a LazyFrame of points is read in the same plan,
    so the points are never held twice.
    """
    lazy = points.lazy()
    names = lazy.collect_schema().names()
    if "phase" in names:
        raise ValueError("points already have a phase column")
    out = [*(keep if keep is not None else names), "phase"]
    keyed = pl.col(t).is_not_null() if gtid is None else pl.col(t).is_not_null() & pl.col(gtid).is_not_null()
    # Only the owner's end and phase ride along: a change point's owner always started at or
    # before it (so by every later t), and has a phase exactly when a range is open (lvl > 0).
    cp = change_points.lazy().select(
        pl.col("t").alias("_cp_t"),
        pl.col("gtid").alias("_cp_gtid"),
        pl.col("e").fill_null(_OPEN).alias("_cp_until"),
        "phase",
    )
    known = lazy.filter(keyed).sort(t)
    threads = change_points["gtid"].unique()
    if gtid is None and threads.len() > 1:
        # two threads' change points at one instant would tie, and the join would pick either
        raise ValueError("a lookup without a thread column needs the change points of one thread")
    # Tie-safe: the change points have one row per (thread, t) (the state after an instant's
    # last boundary), so every as-of join below has a unique right key.
    if gtid is not None and threads.len() == 1:
        # One thread has phase ranges (the usual loop): a plain as-of join, half the cost of a
        # grouped one; points of other threads then get no phase, as the grouped join gives.
        joined = known.join_asof(
            cp.drop("_cp_gtid"), left_on=t, right_on="_cp_t", strategy="backward",
            check_sortedness=False,
        ).with_columns(
            pl.when(pl.col(gtid) == threads[0]).then(pl.col("phase")).alias("phase")
        )  # fmt: skip
    elif gtid is None:
        joined = known.join_asof(
            cp.drop("_cp_gtid"), left_on=t, right_on="_cp_t", strategy="backward",
            check_sortedness=False,
        )  # fmt: skip
    else:
        joined = known.join_asof(
            cp, left_on=t, right_on="_cp_t", by_left=gtid, by_right="_cp_gtid",
            strategy="backward", check_sortedness=False,
        )  # fmt: skip
    found = joined.with_columns(
        pl.when(pl.col(t) < pl.col("_cp_until")).then(pl.col("phase")).alias("phase")
    ).select(out)
    rest = lazy.filter(~keyed).with_columns(pl.lit(None, pl.Categorical).alias("phase"))
    return pl.concat([found, rest.select(out)]).collect()


@dataclass(frozen=True)
class PhaseIndex:
    """The change points of one rule set as a Polars frame, and (when built ``for_sql``) as a
    DuckDB relation named :attr:`name` registered on the connection; built once, read by many
    lookups."""

    name: str | None
    change_points: pl.DataFrame


#: The columns of :func:`phase_ranges`'s frame.
PHASE_RANGE_COLUMNS = "id, gtid, pid, s, e, phase, depth, named, role, srn, ern, counted, leaf"


def phase_ranges(con: duckdb.DuckDBPyConnection, rules: PhaseRules) -> pl.DataFrame:
    """The phase ranges of *rules* as a frame: :data:`PHASE_RANGE_COLUMNS` (see
    :func:`phase_ranges_sql`)."""
    # The flags' window functions took 2.1-2.9 s each in DuckDB at 20M kernels (one sort per
    # partition key, single-threaded per thread's partition), the nesting's numbering and
    # as-of join 4.6 s; in Polars all of it takes half the time (docs/performance.md#issue-35-
    # seventh-session-the-nesting-in-polars). tests/test_phase_map.py holds it equal to the SQL.
    frame = _effective_ranges(con, rules)
    return frame.with_columns(_COUNTED, _LEAF).select(PHASE_RANGE_COLUMNS.split(", "))


def create_phase_index(
    con: duckdb.DuckDBPyConnection,
    rules: PhaseRules,
    *,
    for_sql: bool = False,
    ranges: pl.DataFrame | None = None,
) -> PhaseIndex:
    """Build the change points of *rules* once (registered for :func:`phase_lookup_sql` only
    when *for_sql*: the Arrow copy costs memory on big traces); the caller drops them with
    :func:`drop_phase_index`. *ranges* is :func:`phase_ranges`'s frame when the caller has
    read it (for other uses too), else it is read here."""
    if ranges is None:
        ranges = phase_ranges(con, rules)
    points = phase_change_points(ranges)
    del ranges
    if not for_sql:
        return PhaseIndex(None, points)
    name = f"_specnsys_phase_map_{uuid.uuid4().hex}"
    index = PhaseIndex(name, points)
    con.register(name, points.with_columns(pl.col("phase").cast(pl.String)).to_arrow())
    return index


def drop_phase_index(con: duckdb.DuckDBPyConnection, index: PhaseIndex) -> None:
    if index.name is not None:
        con.unregister(index.name)


def phase_lookup_sql(points: str, index: PhaseIndex) -> str:
    """SQL adding ``phase`` (innermost open phase range, NULL if none) to every row of *points*.

    *points* is a SELECT with columns ``_gtid`` (thread) and ``_t`` (time) among others; the
    result has all of its columns plus ``phase``. One ASOF LEFT JOIN keeps every row once.
    *index* must have been built ``for_sql``.
    """
    if index.name is None:
        raise ValueError("phase_lookup_sql needs an index built with for_sql=True")
    # one change point per (gtid, t): the ASOF join's right key is unique, ties cannot occur
    return f"""
    SELECT q.*,
           CASE WHEN m.lvl > 0 AND m.s <= q._t AND (m.e IS NULL OR q._t < m.e)
                THEN m.phase END AS phase
    FROM ({points}) q ASOF LEFT JOIN {index.name} m ON q._gtid = m.gtid AND q._t >= m.t
    """
