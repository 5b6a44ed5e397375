"""A straightforward pandas implementation of specnsys's phase attribution, for comparison.

What a performance engineer would write by hand with the usual tools: ``pandas.read_sql_query``
over the export (Python's ``sqlite3``), merges and ``numpy``, a stack walk in Python for the
nesting. It computes the same numbers as ``specnsys phases`` (docs/design.md#attribution):

1. the analyzed process: the one with the most phase ranges; its driver thread: the thread
   with the most phase ranges; the window: first ``request`` start to last ``request`` end;
2. launch attribution: every kernel/memcpy/memset takes the innermost phase range open on the
   thread of its launching runtime call (joined on correlation id and pid) when the call
   started; ``unannotated`` if none, ``unattributed_gpu`` if the call is missing;
3. exclusive time: GPU-busy instants are split evenly among the phases with GPU work running
   (per-phase interval unions), idle instants go to the innermost phase range open on the
   driver thread, else to ``unannotated``.

Prints one JSON object ``{"window_ns", "phases": {name: wall_ns}}`` (float ns; the split is in
floating point here, where specnsys counts exact integer units).

Usage: python bench/pandas_attribution.py EXPORT.sqlite
"""

from __future__ import annotations

import json
import sqlite3
import sys

import numpy as np
import pandas as pd

from specnsys.attribution.launch import UNANNOTATED, UNATTRIBUTED_GPU

# The vocabulary is the specification, not the method: take it from the library; the
# attribution below is independent of specnsys's (pandas, no DuckDB).
from specnsys.vocabulary import DOMAIN, PHASES

UNATTRIBUTED = UNATTRIBUTED_GPU


def load(path: str) -> dict[str, pd.DataFrame]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def q(sql: str) -> pd.DataFrame:
        return pd.read_sql_query(sql, con)

    out = {
        "strings": q("SELECT id, value FROM StringIds"),
        "nvtx": q(
            'SELECT start, "end", eventType, globalTid, textId, text, domainId FROM NVTX_EVENTS'
        ),
        "runtime": q(
            "SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            "WHERE eventClass IN (0, 1) OR eventClass IS NULL"
        ),
    }
    ops = []
    for table in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
    ):
        if table in tables:
            ops.append(q(f'SELECT start, "end", correlationId, globalPid FROM "{table}"'))
    out["ops"] = pd.concat(ops, ignore_index=True)
    con.close()
    return out


def phase_segments(ranges: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flatten one thread's nested ranges into disjoint (start, end, phase) segments of the
    innermost open range, with a stack walk over the ranges in start order."""
    starts: list[int] = []
    ends: list[int] = []
    names: list[str] = []
    stack: list[tuple[int, str]] = []  # (end, phase)
    cursor = None

    def emit(until: int) -> None:
        nonlocal cursor
        if stack and cursor is not None and until > cursor:
            starts.append(cursor)
            ends.append(until)
            names.append(stack[-1][1])
        cursor = until

    ordered = ranges.sort_values(["start", "end"], ascending=[True, False])
    for s, e, phase in zip(ordered["start"], ordered["end"], ordered["phase"], strict=True):
        while stack and stack[-1][0] <= s:
            emit(stack[-1][0])
            stack.pop()
        emit(s)
        stack.append((e, phase))
    while stack:
        emit(stack[-1][0])
        stack.pop()
    return np.array(starts, np.int64), np.array(ends, np.int64), np.array(names, object)


def lookup(segments: tuple[np.ndarray, np.ndarray, np.ndarray], t: np.ndarray) -> np.ndarray:
    """The phase of the segment containing each time in *t* (None outside all segments)."""
    starts, ends, names = segments
    out = np.full(len(t), None, dtype=object)
    if len(starts) == 0:
        return out
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t < ends[np.clip(i, 0, None)])
    out[ok] = names[i[ok]]
    return out


def attribute(path: str) -> dict[str, object]:
    d = load(path)
    strings = d["strings"].set_index("id")["value"]
    nvtx = d["nvtx"]
    nvtx["name"] = nvtx["text"].fillna(nvtx["textId"].map(strings))
    nvtx["pid"] = (nvtx["globalTid"] // (1 << 24)) & 0xFFFFFF
    domains = nvtx[nvtx["eventType"] == 75].groupby(["pid", "domainId"])["name"].first()
    nvtx = nvtx.join(domains.rename("domain"), on=["pid", "domainId"])
    ranges = nvtx[
        nvtx["eventType"].isin([59, 70])
        & (nvtx["domain"] == DOMAIN)
        & nvtx["name"].isin(PHASES)
        & (nvtx["end"] > nvtx["start"])
    ]
    ranges = ranges.rename(columns={"name": "phase"})
    pid = int(ranges["pid"].value_counts().idxmax())
    driver = int(ranges[ranges["pid"] == pid]["globalTid"].value_counts().idxmax())
    requests = nvtx[
        (nvtx["pid"] == pid)
        & (nvtx["name"] == "request")
        & (nvtx["domain"] == DOMAIN)
        & nvtx["eventType"].isin([59, 60, 70, 71])
    ]
    ws, we = int(requests["start"].min()), int(requests["end"].max())
    segments = {g: phase_segments(r) for g, r in ranges.groupby("globalTid")}

    # 1. launch attribution
    ops = d["ops"]
    ops["pid"] = (ops["globalPid"] // (1 << 24)) & 0xFFFFFF
    rt = d["runtime"]
    rt["pid"] = (rt["globalTid"] // (1 << 24)) & 0xFFFFFF
    rt = rt.sort_values("start").drop_duplicates(["pid", "correlationId"])
    ops = ops.merge(
        rt.rename(columns={"start": "api_start"}), how="left", on=["pid", "correlationId"]
    )
    ops["phase"] = UNATTRIBUTED
    launched = ops["api_start"].notna()
    ops.loc[launched, "phase"] = UNANNOTATED
    for g, rows in ops[launched].groupby("globalTid"):
        if g in segments:
            found = lookup(segments[g], rows["api_start"].to_numpy(np.int64))
            ops.loc[rows.index[found != None], "phase"] = found[found != None]  # noqa: E711

    # 2. exclusive time: per-phase unions of GPU intervals, split evenly where they overlap
    ops = ops[
        (ops["pid"] == pid) & (ops["start"] < we) & (ops["end"] > ws) & (ops["end"] > ops["start"])
    ]
    ops = ops.assign(s=ops["start"].clip(lower=ws), e=ops["end"].clip(upper=we))
    islands = []
    for phase, rows in ops.groupby("phase"):
        rows = rows.sort_values(["s", "e"])
        s, e = rows["s"].to_numpy(), rows["e"].to_numpy()
        prev_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]])
        group = np.cumsum(s > prev_max)
        isl = (
            pd.DataFrame({"g": group, "s": s, "e": e})
            .groupby("g")
            .agg(a=("s", "min"), b=("e", "max"))
        )
        isl["phase"] = phase
        islands.append(isl)
    isl = (
        pd.concat(islands, ignore_index=True)
        if islands
        else pd.DataFrame({"a": [], "b": [], "phase": []})
    )
    drv = segments.get(driver, (np.array([], np.int64),) * 2 + (np.array([], object),))
    cuts = np.unique(
        np.concatenate(
            [isl["a"].to_numpy(np.int64), isl["b"].to_numpy(np.int64), drv[0], drv[1], [ws, we]]
        )
    )
    cuts = cuts[(cuts >= ws) & (cuts <= we)]
    delta = np.zeros(len(cuts), np.int64)
    np.add.at(delta, np.searchsorted(cuts, isl["a"].to_numpy(np.int64)), 1)
    np.add.at(delta, np.searchsorted(cuts, isl["b"].to_numpy(np.int64)), -1)
    running = np.cumsum(delta)[:-1]  # distinct phases with GPU work in [cuts[i], cuts[i+1])
    length = np.diff(cuts).astype(np.float64)
    share = np.where(running > 0, length / np.maximum(running, 1), 0.0)
    cumulative = np.concatenate([[0.0], np.cumsum(share)])
    wall: dict[str, float] = {}
    a_idx = np.searchsorted(cuts, isl["a"].to_numpy(np.int64))
    b_idx = np.searchsorted(cuts, isl["b"].to_numpy(np.int64))
    gpu = pd.Series(cumulative[b_idx] - cumulative[a_idx]).groupby(isl["phase"].to_numpy()).sum()
    for phase, value in gpu.items():
        wall[phase] = wall.get(phase, 0.0) + float(value)
    idle = running == 0
    cpu_phase = lookup(drv, cuts[:-1][idle])
    cpu_phase[cpu_phase == None] = UNANNOTATED  # noqa: E711
    cpu = pd.Series(length[idle]).groupby(cpu_phase).sum()
    for phase, value in cpu.items():
        wall[phase] = wall.get(phase, 0.0) + float(value)
    return {"pid": pid, "window_ns": we - ws, "phases": wall}


if __name__ == "__main__":
    print(json.dumps(attribute(sys.argv[1])))
