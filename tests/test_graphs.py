"""CUDA graphs recorded as whole-graph rows (``--cuda-graph-trace=graph``)."""

from __future__ import annotations

from pathlib import Path

import specnsys
from specnsys.attribution import exclusive_phase_times, gpu_ops_with_phase
from specnsys.attribution.projection import nvtx_gpu_projection
from specnsys.testing import NsysExportBuilder


def _graph_trace(tmp_path: Path) -> Path:
    """verify launches one graph replay that runs [300, 900) while the CPU is in sample."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    b.start_end(0, 1000, "request", pid=1, tid=1, domain_id=1)
    b.push_pop(100, 300, "verify", pid=1, tid=1, domain_id=1)
    b.push_pop(300, 1000, "sample", pid=1, tid=1, domain_id=1)
    b.runtime(120, 140, "cudaGraphLaunch", correlation_id=7, pid=1, tid=1)
    b.graph(300, 900, correlation_id=7, graph_id=3, graph_exec_id=4)
    b.graph(950, 980, correlation_id=8)  # its launch row is missing from the trace
    return b.write(tmp_path / "graphs.sqlite")


def test_graph_rows_are_ingested_and_attributed_to_the_launching_phase(tmp_path: Path) -> None:
    with specnsys.open(_graph_trace(tmp_path)) as t:
        graphs = t.table("graphs").collect()
        assert graphs.select("graph_id", "graph_exec_id", "correlation_id").rows() == [
            (3, 4, 7),
            (1, 1, 8),
        ]
        ops = gpu_ops_with_phase(t).sort("start")
        assert ops.select("op_kind", "phase", "name").rows() == [
            ("graph", "verify", "graph 3"),
            ("graph", "unattributed_gpu", "graph 1"),
        ]
        pb = exclusive_phase_times(t)
        rows = {r["phase"]: r for r in pb.frame.iter_rows(named=True)}
        # GPU busy [300,900) belongs to verify although the CPU is in sample then
        assert rows["verify"]["wall_ns"] == 200 + 600
        assert rows["verify"]["gpu_busy_ns"] == 600
        assert rows["verify"]["launches"] == 1  # cudaGraphLaunch is a launch
        assert rows["unattributed_gpu"]["wall_ns"] == 30
        assert rows["sample"]["wall_ns"] == 1000 - 800 - 30 - 100
        assert pb.frame["wall_ns"].sum() == pb.window_ns == 1000
        proj = nvtx_gpu_projection(t)
        verify = proj.filter(proj["name"] == "specnsys:verify").row(0, named=True)
        assert (verify["proj_start"], verify["proj_duration"], verify["gpu_ops"]) == (300, 600, 1)
        assert t.summary.capabilities["gpu_activity"].available
