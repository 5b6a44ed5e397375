"""CUDA graphs replayed with ``--cuda-graph-trace=node``: node-level ops take the phase their
node was captured in (``CUDA_GRAPH_NODE_EVENTS``, clones followed through
``originalGraphNodeId``), whole-graph rows and node ops are counted once, and what is left on
the launch's phase is said in a warning.

The built trace reproduces a speculative decode step captured into a graph (the shape vLLM and
SGLang profile): on the main thread, a capture with ``draft``, ``verify`` and ``sample`` ranges
open while the nodes are created, the captured graph cloned and instantiated (two hops of
clones, outside every phase), then replayed three times by a ``cudaGraphLaunch`` inside
``decode``. Every replayed op carries the launch's correlation id and its instantiated node.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import specnsys
from specnsys.attribution import PhaseBreakdown, exclusive_phase_times, gpu_ops_with_phase
from specnsys.attribution.launch import attributed_gpu_ops
from specnsys.attribution.phase_map import create_phase_index
from specnsys.attribution.rules import default_rules
from specnsys.testing import NsysExportBuilder
from specnsys.testing.builder import GRAPH_CLONED

US = 1000  # the trace is laid out in microseconds
WINDOW = 20_000 * US
REPLAYS = (6_000 * US, 10_000 * US, 14_000 * US)  # decode range starts
DECODE = 1_000 * US  # each decode range's length

#: captured node -> (phase open at its capture, op kind, GPU duration per replay, name)
NODES = {
    101: ("draft", "kernel", 30 * US, "draft_gemm"),
    102: ("draft", "kernel", 20 * US, "draft_attn"),
    103: ("verify", "kernel", 100 * US, "verify_gemm"),
    104: ("verify", "memcpy", 10 * US, "HtoD"),
    105: ("sample", "kernel", 20 * US, "rejection_sample"),
}
CLONE, EXEC = 10, 100  # cloned graph: node + 10; its instantiation: node + 100
CAPTURE = {"draft": (1_000 * US, 1_300 * US), "verify": (1_300 * US, 1_600 * US),
           "sample": (1_600 * US, 1_900 * US)}  # fmt: skip


def _build(
    path: Path,
    *,
    old_shape: bool = False,
    node_events: bool = True,
    missing: tuple[int, ...] = (),
    graph_rows: bool = False,
    node_ops: bool = True,
    capture_phases: bool = True,
) -> Path:
    """The decode-graph trace (see the module docs). *missing*: captured nodes whose creation
    event is left out (their clones stay, so their chains break off); *graph_rows*: a
    whole-graph row per replay too; *node_ops*: per-node ops (else no node detail at all);
    *capture_phases*: the phase ranges open during the capture (else none is)."""
    b = (
        NsysExportBuilder(product_version="2022.2.1.31", schema_version="2.9.1",
                          old_graph_events=True)
        if old_shape
        else NsysExportBuilder()
    )  # fmt: skip
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys")
    b.start_end(0, WINDOW, "request", domain_id=1)
    corr = 1
    if capture_phases:
        for phase, (s, e) in CAPTURE.items():
            b.push_pop(s, e, phase, domain_id=1)
    # capture: one launch call per node, its node created inside it
    for node, (phase, kind, _, _) in NODES.items():
        s = CAPTURE[phase][0] + (node % 2 + 1) * 100 * US
        api = "cudaLaunchKernel_v7000" if kind == "kernel" else "cudaMemcpyAsync_v3020"
        b.runtime(s, s + 20 * US, api, corr)
        corr += 1
        if node_events and node not in missing:
            b.graph_node(s + 5 * US, s + 6 * US, node, name=api)
    if node_events:  # cudaGraphClone, then cudaGraphInstantiate of the clone: no phase open
        for node in NODES:
            b.graph_node(2_000 * US, 2_001 * US, node + CLONE, original=node,
                         event_class=GRAPH_CLONED, name="cudaGraphClone")  # fmt: skip
            b.graph_node(2_500 * US, 2_501 * US, node + EXEC, original=node + CLONE,
                         name="cudaGraphInstantiate")  # fmt: skip
    for start in REPLAYS:
        b.push_pop(start, start + DECODE, "decode", domain_id=1)
        b.runtime(start + 10 * US, start + 20 * US, "cudaGraphLaunch_v10000", corr)
        t = start + 100 * US
        if graph_rows:
            total = sum(d for _, _, d, _ in NODES.values())
            b.graph(t, t + total, corr, graph_id=1, graph_exec_id=2)
        for node, (_, kind, dur, name) in NODES.items() if node_ops else ():
            if kind == "kernel":
                b.kernel(t, t + dur, name, corr, graph_node_id=node + EXEC)
            else:
                b.memcpy(t, t + dur, 4096, corr, graph_node_id=node + EXEC)
            t += dur
        corr += 1
    return b.write(path)


def _expected(phases_of_nodes: dict[int, str]) -> dict[str, tuple[int, int]]:
    """phase -> (GPU busy ns, kernels) over the three replays, given each node's phase."""
    out: dict[str, tuple[int, int]] = {}
    for node, (_, kind, dur, _) in NODES.items():
        busy, kernels = out.get(phases_of_nodes[node], (0, 0))
        out[phases_of_nodes[node]] = (busy + dur * 3, kernels + 3 * (kind == "kernel"))
    return out


def _rows(path: Path) -> tuple[dict[str, dict], PhaseBreakdown]:
    with specnsys.open(path) as t:
        pb = exclusive_phase_times(t)
        assert pb.frame["wall_ns"].sum() == pb.window_ns == WINDOW  # every ns once
        return {r["phase"]: r for r in pb.frame.iter_rows(named=True)}, pb


def _check_gpu(rows: dict[str, dict], expected: dict[str, tuple[int, int]]) -> None:
    for phase, row in rows.items():
        busy, kernels = expected.get(phase, (0, 0))
        assert (row["gpu_busy_ns"], row["kernels"]) == (busy, kernels), phase


CAPTURED = {node: phase for node, (phase, _, _, _) in NODES.items()}


@pytest.mark.parametrize("old_shape", [False, True], ids=["node_events", "old_graph_events"])
def test_replayed_decode_graph_splits_into_the_phases_its_nodes_were_captured_in(
    tmp_path: Path, old_shape: bool
) -> None:
    path = _build(tmp_path / "nodes.sqlite", old_shape=old_shape)
    rows, pb = _rows(path)
    _check_gpu(rows, _expected(CAPTURED))
    # draft: 2 kernels x 3 replays = 150 us of GPU; decode launched them but ran none
    assert rows["draft"]["gpu_busy_ns"] == 150 * US and rows["decode"]["gpu_busy_ns"] == 0
    # the GPU runs while the CPU is in decode: those instants are the GPU ops' phases
    replay = sum(d for _, _, d, _ in NODES.values())
    assert rows["decode"]["wall_ns"] == 3 * (DECODE - replay)
    assert rows["verify"]["wall_ns"] == 300 * US + 3 * 110 * US
    assert rows["decode"]["launches"] == 3  # the graph launches stay where they were made
    assert pb.graph_notes == []
    with specnsys.open(path) as t:
        ops = gpu_ops_with_phase(t).filter(pl.col("start") >= REPLAYS[0])
        assert ops.height == 15 and set(ops["api_name"]) == {"cudaGraphLaunch"}
        by_name = dict(zip(ops["name"], ops["phase"], strict=False))
        assert by_name == {"draft_gemm": "draft", "draft_attn": "draft", "verify_gemm": "verify",
                           "HtoD": "verify", "rejection_sample": "sample"}  # fmt: skip


def test_node_model_table_reads_both_layouts_and_ignores_graph_level_events(
    tmp_path: Path,
) -> None:
    new = _build(tmp_path / "new.sqlite")
    old = _build(tmp_path / "old.sqlite", old_shape=True)
    with specnsys.open(new) as a, specnsys.open(old) as b:
        cols = ["start", "tid", "graph_node_id", "original_graph_node_id", "name"]
        nodes = a.table("graph_nodes").collect()
        assert nodes.height == 15 and nodes.select(cols).equals(
            b.table("graph_nodes").collect().select(cols)
        )
        assert nodes.filter(pl.col("graph_node_id") == 205)["original_graph_node_id"][0] == 115
        kernels = a.table("kernels").collect()
        assert sorted(set(kernels["graph_node_id"])) == [201, 202, 203, 205]
        assert set(a.table("memcpy").collect()["graph_node_id"]) == {204}
    # graph-level events (the layout CUDA_GRAPH_EVENTS has now) are no node events
    g = NsysExportBuilder()
    g.process(1, "python3")
    g.thread(1, 1, "main")
    g.graph_event(10, 20, 1)
    g.graph_event(30, 40, 2, original=1, event_class=GRAPH_CLONED)
    with specnsys.open(g.write(tmp_path / "graph_events.sqlite")) as t:
        assert t.table("graph_nodes").collect().height == 0
        assert "CUDA_GRAPH_EVENTS" in t.summary.source_tables


def test_missing_node_events_leave_their_ops_on_the_launch_with_a_warning(
    tmp_path: Path,
) -> None:
    # 105's creation event is missing (its clone chain 205 -> 115 -> 105 breaks off), 104's too
    path = _build(tmp_path / "missing.sqlite", missing=(104, 105))
    rows, pb = _rows(path)
    _check_gpu(rows, _expected({**CAPTURED, 104: "decode", 105: "decode"}))
    assert pb.graph_notes == [
        "6 CUDA graph node ops (0.090 ms of GPU time) have no graph node creation event in the "
        "trace (none for their node, or for the node it was cloned from): attributed to the phase of their graph launch, not to the phase their node "
        "was captured in"
    ]


def test_whole_graph_rows_without_node_detail_take_the_launch_phase_with_a_warning(
    tmp_path: Path,
) -> None:
    path = _build(tmp_path / "graph_mode.sqlite", graph_rows=True, node_ops=False,
                  node_events=False)  # fmt: skip
    rows, pb = _rows(path)
    replay = sum(d for _, _, d, _ in NODES.values())
    _check_gpu(rows, {"decode": (3 * replay, 0)})
    assert pb.graph_notes == [
        f"3 whole-graph replays ({3 * replay / 1e6:.3f} ms of GPU time) attributed to the phase "
        "of their graph launch: the trace has no per-node kernels for them (capture with "
        "--cuda-graph-trace=node to split a replay by the phases its nodes were captured in)"
    ]


def test_node_events_without_matching_ops_exit_0_with_a_warning(tmp_path: Path) -> None:
    # --cuda-graph-trace=graph with the node events recorded: the replays are graph rows
    path = _build(tmp_path / "unmatched.sqlite", graph_rows=True, node_ops=False)
    rows, pb = _rows(path)
    replay = sum(d for _, _, d, _ in NODES.values())
    _check_gpu(rows, {"decode": (3 * replay, 0)})
    assert len(pb.graph_notes) == 2
    assert pb.graph_notes[1] == (
        "15 CUDA graph node events, but no GPU op ran as one of those nodes (no kernel, copy or "
        "memset with a matching graphNodeId): graph work is attributed to the phase of its "
        "launch"
    )
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "analyze", "--json", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert pb.graph_notes[0] in doc["warnings"] and pb.graph_notes[1] in doc["warnings"]
    assert doc["phases"]["decode"]["gpu_busy_ns"] == 3 * replay


def test_graph_rows_and_node_ops_of_one_launch_are_counted_once(tmp_path: Path) -> None:
    path = _build(tmp_path / "both.sqlite", graph_rows=True)
    rows, pb = _rows(path)
    _check_gpu(rows, _expected(CAPTURED))  # as without the graph rows: nothing twice
    assert pb.graph_notes == [
        "3 whole-graph rows not counted: the same launches' per-node kernels, copies and "
        "memsets are in the trace and are counted instead"
    ]
    with specnsys.open(path) as t:
        index = create_phase_index(t.connection, default_rules())
        lean = attributed_gpu_ops(t, index, pid=1)
        assert "graph" not in set(lean["op_kind"].cast(pl.String))
        assert lean.height == gpu_ops_with_phase(t).height == 15


def test_nodes_captured_outside_every_phase_keep_the_launch_phase(tmp_path: Path) -> None:
    path = _build(tmp_path / "no_capture_phases.sqlite", capture_phases=False)
    rows, pb = _rows(path)
    replay = sum(d for _, _, d, _ in NODES.values())
    _check_gpu(rows, {"decode": (3 * replay, 12)})
    assert pb.graph_notes == []  # nothing is missing: the capture had no phase open


def test_node_ids_are_per_process(tmp_path: Path) -> None:
    """Two processes reuse node id 7 (ids are unique within a process only): each process's
    kernel takes the phase of its own process's node."""
    b = NsysExportBuilder()
    for pid, phase in ((1, "draft"), (2, "verify")):
        b.process(pid, f"worker{pid}")
        b.thread(pid, 1, "main")
        b.domain(1, "specnsys", pid=pid)
        b.push_pop(100, 200, phase, pid=pid, domain_id=1)
        b.graph_node(150, 151, 7, pid=pid)
        b.push_pop(300, 400, "decode", pid=pid, domain_id=1)
        b.runtime(310, 320, "cudaGraphLaunch_v10000", 9, pid=pid)
        b.kernel(330, 380, f"k{pid}", 9, pid=pid, graph_node_id=7)
    with specnsys.open(b.write(tmp_path / "two.sqlite")) as t:
        ops = gpu_ops_with_phase(t)
        assert sorted(zip(ops["pid"], ops["phase"], strict=False)) == [
            (1, "draft"), (2, "verify")
        ]
        for pid, phase in ((1, "draft"), (2, "verify")):
            rows = {r["phase"]: r for r in exclusive_phase_times(t, pid=pid).frame.to_dicts()}
            assert (rows[phase]["gpu_busy_ns"], rows["decode"]["gpu_busy_ns"]) == (50, 0)


def test_a_clone_cycle_ends_and_its_ops_stay_on_the_launch(tmp_path: Path) -> None:
    """Malformed node events (7 cloned from 8, 8 from 7) never reach a captured node: the
    recursion stops at its hop bound and the op is left on its launch, with the warning."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys")
    b.push_pop(100, 200, "draft", domain_id=1)
    b.graph_node(150, 151, 7, original=8)
    b.graph_node(160, 161, 8, original=7)
    b.push_pop(300, 400, "decode", domain_id=1)
    b.runtime(310, 320, "cudaGraphLaunch_v10000", 9)
    b.kernel(330, 380, "k", 9, graph_node_id=7)
    with specnsys.open(b.write(tmp_path / "cycle.sqlite")) as t:
        assert gpu_ops_with_phase(t)["phase"].to_list() == ["decode"]
        notes = exclusive_phase_times(t).graph_notes
        assert len(notes) == 1 and notes[0].startswith("1 CUDA graph node ops (0.000 ms")


def test_node_ops_without_any_node_event_stay_on_the_launch_with_a_warning(
    tmp_path: Path,
) -> None:
    path = _build(tmp_path / "no_events.sqlite", node_events=False)
    rows, pb = _rows(path)
    replay = sum(d for _, _, d, _ in NODES.values())
    _check_gpu(rows, {"decode": (3 * replay, 12)})
    assert len(pb.graph_notes) == 1
    assert pb.graph_notes[0].startswith(
        f"15 CUDA graph node ops ({3 * replay / 1e6:.3f} ms of GPU time) have no graph node "
        "creation event"
    )
