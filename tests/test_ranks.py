"""Several processes (issue 20, item 4): every rank's phases over its own window, the union
window, NCCL time per phase, the straggler, and ``--pid``'s single-process view unchanged.

Built traces reproduce a tensor-parallel decode loop: one process per rank (its own pid,
thread and device), each with ``specnsys`` domain ranges and the kernels its driver thread
launched inside them, an NCCL all-reduce in every verify, and one rank (the straggler) whose
verify GEMM runs longer by a known amount per step.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import specnsys
from specnsys.api import resolve_rules
from specnsys.attribution.phase_map import phase_ranges
from specnsys.metrics.ranks import ONE_PROCESS
from specnsys.render.analyze_text import straggler_line
from specnsys.testing import NsysExportBuilder
from tests.conftest import CORPUS, SAMPLE_TRACES, corpus_files, json_doc

NSYSAI = [p for p in corpus_files() if p.name.startswith("2026.2.1_nsysai_")]

PERIOD = 2000  # a step starts every PERIOD ns on every rank (tensor-parallel lockstep)
FIRST = 1000  # the first step's start
STEPS = 4
DRAFT, VERIFY, SAMPLE, NCCL = 300, 500, 200, 150  # per step; the NCCL kernel is in verify


def pid_of(rank: int) -> int:
    """Pids fall as the device rises: rank order (by device) is not pid order."""
    return 500 - 7 * rank


class Rank:
    """One worker process: thread 1 drives, device = rank, domain ``specnsys`` (id 1)."""

    def __init__(self, b: NsysExportBuilder, rank: int, extra: list[int]) -> None:
        self.b, self.rank, self.pid, self.corr = b, rank, pid_of(rank), 0
        self.extra = extra  # ns added to the verify GEMM of each step
        b.process(self.pid, f"worker{rank}")
        b.thread(self.pid, 1, "main")
        b.domain(1, "specnsys", pid=self.pid, tid=1)

    def pp(self, start: int, end: int, text: str) -> None:
        self.b.push_pop(start, end, text, pid=self.pid, tid=1, domain_id=1)

    def kernel(self, start: int, end: int, name: str) -> None:
        """Launched 10 ns before it starts, inside the same range; runs on the rank's device."""
        self.corr += 1
        self.b.runtime(start - 10, start - 5, "cudaLaunchKernel", self.corr, pid=self.pid)
        self.b.kernel(start, end, name, self.corr, pid=self.pid, device=self.rank)

    def loop(self, request: tuple[int, int]) -> list[int]:
        """The request range and STEPS decode steps; returns each step's end."""
        self.b.start_end(*request, "request", pid=self.pid, tid=1, domain_id=1, payload_int=0)
        ends = []
        for i in range(STEPS):
            s, x = FIRST + i * PERIOD, self.extra[i]
            self.pp(s, s + DRAFT, "draft")
            self.kernel(s + 20, s + DRAFT - 20, "draft_gemm_kernel")
            v = s + DRAFT
            self.pp(v, v + VERIFY + x, "verify")
            self.kernel(v + 20, v + 300 + x, "sm90_xmma_gemm_bf16")
            self.kernel(v + 300 + x, v + 300 + x + NCCL, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
            w = v + VERIFY + x
            self.pp(w, w + SAMPLE, "sample")
            self.kernel(w + 20, w + 120, "topk_topp_sampling_kernel")
            self.pp(s, w + SAMPLE, "decode")  # pushed first in time order is not needed: nested
            ends.append(w + SAMPLE)
        return ends


def tp_trace(
    tmp_path: Path, ranks: int, straggler: int | None = None, lags: tuple[int, ...] = ()
) -> tuple[Path, dict[int, dict[str, int]]]:
    """*ranks* worker processes; rank *straggler*'s verify runs *lags* ns longer per step.
    Returns the export and, per rank, its expected request window and phase times."""
    b = NsysExportBuilder()
    expected: dict[int, dict[str, int]] = {}
    for r in range(ranks):
        extra = list(lags) if r == straggler else [0] * STEPS
        worker = Rank(b, r, extra)
        b.gpu(r)
        start = FIRST - 100 - 10 * r  # request windows differ by rank: a union to check
        end = FIRST + (STEPS - 1) * PERIOD + DRAFT + VERIFY + SAMPLE + sum(extra[-1:]) + 50
        worker.loop((start, end))
        steps_ns = STEPS * (DRAFT + VERIFY + SAMPLE) + sum(extra)
        expected[r] = {
            "window_start_ns": start,
            "window_end_ns": end,
            "draft": STEPS * DRAFT,
            "verify": STEPS * VERIFY + sum(extra),
            "sample": STEPS * SAMPLE,
            "decode": 0,  # every instant of a step is in draft, verify or sample
            "unannotated": (end - start) - steps_ns,  # before, between and after the steps
            "nccl_verify": STEPS * NCCL,
        }
    return b.write(tmp_path / f"tp{ranks}.sqlite"), expected


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specnsys", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


# ------------------------------------------------------------------------- per-rank phases


@pytest.mark.parametrize("n", [2, 3, 8])
def test_every_rank_phase_time_and_window(tmp_path: Path, n: int) -> None:
    lags = (40, 120, 80, 400)  # median 100, max 400
    path, expected = tp_trace(tmp_path, n, straggler=n - 1, lags=lags)
    analysis = specnsys.analyze(path)
    assert analysis.ranks is not None
    doc = json_doc(analysis.ranks)
    assert doc["processes"] == n
    assert "ranks" not in analysis.not_available
    for row in doc["ranks"]:
        r = row["rank"]
        want = expected[r]
        assert (row["pid"], row["process"], row["device"]) == (pid_of(r), f"worker{r}", r)
        assert (row["window_start_ns"], row["window_end_ns"]) == (
            want["window_start_ns"], want["window_end_ns"],
        )  # fmt: skip
        phases = row["phases"]
        walls = {name: p["wall_ns"] for name, p in phases.items()}
        for phase in ("draft", "verify", "sample", "unannotated"):
            assert walls[phase] == want[phase], (r, phase)
        assert walls.get("decode", 0) == 0
        assert sum(walls.values()) == row["window_ns"]  # phases sum to the rank's own window
        assert phases["verify"]["nccl_ns"] == want["nccl_verify"]
        assert phases["verify"]["nccl_kernels"] == STEPS
        assert phases["draft"]["nccl_ns"] == phases["sample"]["nccl_ns"] == 0
        assert row["nccl_ns"] == want["nccl_verify"] and row["nccl_kernels"] == STEPS
        assert phases["verify"]["kernels"] == 2 * STEPS and phases["draft"]["kernels"] == STEPS
        assert row["steps"] == STEPS and row["step_phase"] == "decode"
    # the union window: the earliest rank start to the latest rank end
    starts = [e["window_start_ns"] for e in expected.values()]
    ends = [e["window_end_ns"] for e in expected.values()]
    assert (doc["window_start_ns"], doc["window_end_ns"]) == (min(starts), max(ends))
    assert doc["window_ns"] == max(ends) - min(starts)


@pytest.mark.parametrize("n", [2, 5])
def test_straggler_and_its_lag(tmp_path: Path, n: int) -> None:
    lags = (40, 120, 80, 400)
    straggler = 1
    path, _ = tp_trace(tmp_path, n, straggler=straggler, lags=lags)
    ranks = specnsys.analyze(path).ranks
    assert ranks is not None
    doc = json_doc(ranks)
    s = doc["straggler"]
    assert (s["rank"], s["pid"], s["basis"]) == (straggler, pid_of(straggler), "steps")
    assert s["matched_steps"] == STEPS
    assert s["median_lag_ns"] == statistics.median(lags) == 100
    assert s["max_lag_ns"] == max(lags)
    assert s["window_end_lag_ns"] == lags[-1]
    others = [r for r in doc["ranks"] if r["rank"] != straggler]
    assert all(r["median_lag_ns"] == 0 and r["max_lag_ns"] == 0 for r in others)
    per_step = doc["ranks"][straggler]["window_ns"] / STEPS  # the lag's denominator
    assert s["lag_share"] == pytest.approx(100 / per_step) and s["stands_out"]
    assert "time per step" in s["lag_share_of"]


def test_ranks_that_end_together_name_no_straggler(tmp_path: Path) -> None:
    """The 2-GPU corpus export: rank 0's window ends 3.1 us after rank 1's, in a 299 ms
    window. That is not a straggler (it was named one); the text says none stands out and
    gives the lag with its denominator."""
    trace = CORPUS / "2026.2.1_nsysai_mfu-2gpu-after.sqlite"
    if not trace.exists():
        pytest.skip(f"{trace} not present")
    ranks = specnsys.analyze(trace).ranks
    assert ranks is not None
    doc = json_doc(ranks)
    s = doc["straggler"]
    assert s["basis"] == "window" and s["window_end_lag_ns"] < 10_000
    assert s["lag_share"] == pytest.approx(s["window_end_lag_ns"] / doc["window_ns"])
    assert s["lag_share_of"] == "the union window of all processes" and not s["stands_out"]
    assert straggler_line(s).startswith("straggler: none stands out (lag under 1 %); last is ")


def test_ranks_follow_devices_not_pids_and_a_process_without_gpu_work_comes_last(
    tmp_path: Path,
) -> None:
    b = NsysExportBuilder()
    for r in range(2):
        Rank(b, r, [0] * STEPS).loop((900, 9000))
    # an engine core: schedule ranges, no GPU work, the lowest pid of all
    b.process(3, "engine_core")
    b.thread(3, 1, "main")
    b.domain(1, "specnsys", pid=3, tid=1)
    for i in range(3):
        b.push_pop(1000 + i * 100, 1050 + i * 100, "schedule", pid=3, tid=1, domain_id=1)
    ranks = specnsys.analyze(b.write(tmp_path / "core.sqlite")).ranks
    assert ranks is not None
    doc = json_doc(ranks)
    assert [(r["rank"], r["pid"], r["device"]) for r in doc["ranks"]] == [
        (0, pid_of(0), 0), (1, pid_of(1), 1), (2, 3, None),
    ]  # fmt: skip
    core = doc["ranks"][2]
    assert core["phases"]["schedule"]["wall_ns"] == 150 and core["window_ns"] == 250
    assert core["nccl_ns"] == 0 and core["steps"] == 0
    # the core has no steps: the straggler is the rank whose window ends last
    s = doc["straggler"]
    assert s["basis"] == "window" and s["matched_steps"] == 0 and s["median_lag_ns"] is None
    assert s["rank"] in (0, 1) and s["window_end_lag_ns"] == 9000 - 1250


def test_unequal_step_counts_match_by_index_and_say_so(tmp_path: Path) -> None:
    b = NsysExportBuilder()
    Rank(b, 0, [0] * STEPS).loop((900, 9000))
    late = Rank(b, 1, [0, 30, 0, 0])
    late.loop((900, 9000))
    s = FIRST + STEPS * PERIOD  # one step more on rank 1
    late.pp(s, s + 100, "draft")
    late.pp(s + 100, s + 200, "verify")
    late.pp(s, s + 200, "decode")
    late.b.start_end(s - 10, s + 300, "request", pid=late.pid, tid=1, domain_id=1, payload_int=1)
    ranks = specnsys.analyze(b.write(tmp_path / "uneven.sqlite")).ranks
    assert ranks is not None
    doc = json_doc(ranks)
    assert [r["steps"] for r in doc["ranks"]] == [STEPS, STEPS + 1]
    assert doc["straggler"]["matched_steps"] == STEPS
    assert doc["straggler"]["rank"] == 1 and doc["straggler"]["max_lag_ns"] == 30
    assert doc["straggler"]["median_lag_ns"] == 0
    assert doc["straggler"]["lag_share"] == 0 and not doc["straggler"]["stands_out"]
    assert doc["notes"] == [f"the ranks have {STEPS} to {STEPS + 1} steps; the first {STEPS} "
                            "of each are matched by index"]  # fmt: skip


# ---------------------------------------------------------------- the single-process view


def test_pid_keeps_the_single_process_view(tmp_path: Path) -> None:
    path, expected = tp_trace(tmp_path, 3, straggler=2, lags=(10, 20, 30, 40))
    whole = specnsys.analyze(path)
    assert whole.ranks is not None
    for row in json_doc(whole.ranks)["ranks"]:
        one = specnsys.analyze(path, pid=row["pid"])
        assert one.ranks is None
        assert one.not_available["ranks"] == f"--pid {row['pid']}: the view of one process was asked for"
        # the single-process analysis of a process is that process's rank row
        assert (one.window_start_ns, one.window_end_ns) == (
            row["window_start_ns"], row["window_end_ns"],
        )  # fmt: skip
        for name, p in row["phases"].items():
            assert one.phases[name]["wall_ns"] == p["wall_ns"], name
            assert one.phases[name]["kernels"] == p["kernels"], name
    # the default's own numbers are those of the process --pid would pick (most phase ranges,
    # ties: the lowest pid), exactly as before
    lowest = min(pid_of(r) for r in range(3))
    assert whole.pid == lowest
    same = specnsys.analyze(path, pid=lowest).to_dict()
    default = whole.to_dict()
    for key in ("ranks", "not_available"):
        same.pop(key), default.pop(key)
    assert same == {**default, "pid": lowest}


def test_pid_text_has_no_ranks_block_and_json_a_null_section(tmp_path: Path) -> None:
    path, _ = tp_trace(tmp_path, 2, straggler=1, lags=(10, 20, 30, 40))
    text = _cli("analyze", str(path), "--pid", str(pid_of(1)))
    assert text.returncode == 0 and text.stderr == ""
    assert "straggler" not in text.stdout and "ranks:" not in text.stdout
    doc = json.loads(_cli("analyze", str(path), "--pid", str(pid_of(1)), "--json").stdout)
    assert doc["ranks"] is None and doc["pid"] == pid_of(1)
    full = _cli("analyze", str(path))
    assert full.returncode == 0 and full.stderr == ""
    assert "2 processes ran GPU work or phase ranges" in full.stdout
    # which process the figures are of, why that one, and how to choose another (issue 30)
    assert (
        f"the figures above are process {min(pid_of(0), pid_of(1))}'s (the process with the most phase "
        "ranges, ties to the lowest pid; --pid PID analyzes another, phases --all-processes "
        "shows each in full)"
    ) in " ".join(full.stdout.split())
    assert (
        f"straggler: rank 1 (pid {pid_of(1)}, worker1): its decode steps end a median 25 ns "
        "(max 40 ns) after the earliest rank's (1.39% of its time per step), over 4 steps "
        "matched by index"
    ) in full.stdout  # nanosecond lags are shown in ns, not as 0.000 ms
    assert "NCCL ms" in full.stdout


def test_single_process_traces_have_a_null_ranks_section(tmp_path: Path) -> None:
    sample = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
    analysis = specnsys.analyze(sample)
    assert analysis.ranks is None and analysis.not_available["ranks"] == ONE_PROCESS
    text = _cli("analyze", str(sample)).stdout
    assert ONE_PROCESS not in text and "straggler" not in text
    # one GPU worker: the same
    path, _ = tp_trace(tmp_path, 1)
    one = specnsys.analyze(path)
    assert one.ranks is None and one.not_available["ranks"] == ONE_PROCESS


def test_the_per_rank_pass_is_skipped_for_one_process() -> None:
    """One process: the ranks pass reads nothing but the ingest summary, held in memory; the
    model's DuckDB connection (opened lazily, on the first query) is never even opened."""
    from specnsys.metrics.events import resolve
    from specnsys.metrics.ranks import rank_breakdowns

    sample = SAMPLE_TRACES / "spec_chat_c1_k4.sqlite"
    specnsys.open(sample).close()  # ingested once: the second opening reads the cache
    with specnsys.open(sample) as trace:
        assert trace._con is None
        assert rank_breakdowns(trace, resolve(None)) == []
        assert trace._con is None  # no query ran


# --------------------------------------------------------------------- phases --all-processes


def test_phases_all_processes(tmp_path: Path) -> None:
    path, expected = tp_trace(tmp_path, 4, straggler=2, lags=(40, 120, 80, 400))
    result = specnsys.phases(path, all_processes=True)
    assert result.ranks is not None and len(result.ranks) == 4
    doc = result.to_dict()
    for row in doc["ranks"]:
        want = expected[row["rank"]]
        phases = row["phases"]
        assert phases["verify"]["wall_ns"] == want["verify"]
        assert phases["verify"]["nccl_ns"] == want["nccl_verify"]
        assert sum(p["wall_ns"] for p in phases.values()) == row["window_ns"]
        assert {"gpu_wall_ns", "cpu_wall_ns", "launches"} <= set(phases["verify"])
    assert doc["straggler"]["rank"] == 2
    out = _cli("phases", str(path), "--all-processes")
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.count("exclusive wall time per phase") == 4
    assert f"rank 2: pid {pid_of(2)} (worker2), device 2; NCCL 0.001 ms in 4 kernels" in out.stdout
    assert "straggler: rank 2" in out.stdout
    js = json.loads(_cli("phases", str(path), "--all-processes", "--json").stdout)
    assert js == json.loads(json.dumps(doc))
    # the default phases output stays one process's
    default = json.loads(_cli("phases", str(path), "--json").stdout)
    assert "ranks" not in default and default["pid"] == min(pid_of(r) for r in range(4))


def test_phases_all_processes_usage_errors(tmp_path: Path) -> None:
    path, _ = tp_trace(tmp_path, 2)
    for extra in (["--pid", str(pid_of(0))], ["--by", "category"]):
        out = _cli("phases", str(path), "--all-processes", *extra)
        assert out.returncode == 2 and out.stdout == ""
        assert len(out.stderr.strip().splitlines()) == 1
        assert out.stderr.startswith("specnsys: error: ")


def test_phases_all_processes_on_one_process_is_that_process(tmp_path: Path) -> None:
    path, expected = tp_trace(tmp_path, 1)
    result = specnsys.phases(path, all_processes=True)
    assert result.ranks is not None and len(result.ranks) == 1
    doc = result.to_dict()
    assert doc["processes"] == 1 and doc["ranks"][0]["phases"]["draft"]["wall_ns"] == 4 * DRAFT
    assert "straggler: none" in _cli("phases", str(path), "--all-processes").stdout


# ---------------------------------------------------------------------- corpus: --rules torch


@pytest.mark.corpus
@pytest.mark.skipif(not NSYSAI, reason="real corpus not present")
@pytest.mark.parametrize("path", NSYSAI, ids=lambda p: p.stem)
@pytest.mark.usefixtures("corpus_cache")
def test_two_gpu_corpus_answers_per_rank(path: Path) -> None:
    """Both ranks of the 2-GPU emit_nvtx exports, under --rules torch: each rank's phases sum
    to its window, and per rank the kernels each phase launched are the kernels ``ranges``
    (nsys's nvtxgpuproj semantics: an op in every range enclosing its launch) puts in ranges
    of that name and in no range nested inside one."""
    result = specnsys.phases(path, rules="torch", all_processes=True)
    assert result.ranks is not None and len(result.ranks) == 2
    doc = result.to_dict()
    assert [r["device"] for r in doc["ranks"]] == [0, 1]
    projection = specnsys.ranges(path, instances=True).frame
    with specnsys.open(path) as trace:
        parents = dict(trace.sql("SELECT id, parent FROM nvtx WHERE parent IS NOT NULL").fetchall())
        rules = resolve_rules("torch")
        assert rules is not None
        phase_ids = set(phase_ranges(trace.connection, rules)["id"].to_list())
        nccl = dict(
            trace.sql(
                "SELECT pid, sum(duration) FROM kernels WHERE short_name ILIKE '%nccl%' GROUP BY 1"
            ).fetchall()
        )
    for rank, row in zip(result.ranks, doc["ranks"], strict=True):
        b = rank.breakdown
        assert int(b.frame["wall_ns"].sum()) == b.window_ns == row["window_ns"] > 0
        # no request ranges: the window spans all the rank's GPU work, every NCCL kernel in it
        assert row["nccl_ns"] == nccl.get(rank.pid, 0)
        if nccl:  # the mfu exports' all-to-all: launched in c10d's collective op
            phases = {n for n, p in row["phases"].items() if p["nccl_ns"]}
            assert any(n.startswith("c10d::") for n in phases)
        # GPU ops (kernels, copies, sets) per launching phase of this rank
        table = specnsys.phases(path, rules="torch", pid=rank.pid, by="category").categories
        assert table is not None
        ours = {
            str(n): int(k)
            for n, k in table.group_by("phase").agg(pl.col("ops").sum()).iter_rows()
            if n not in ("unannotated", "unattributed_gpu")
        }
        mine = projection.filter(pl.col("pid") == rank.pid)
        assert ours == _innermost_ops(mine, parents, phase_ids)
    # analyze (a generic run under --rules torch) has the same ranks section
    ranks = specnsys.analyze(path, rules="torch").ranks
    assert ranks is not None
    analyzed = json_doc(ranks)
    assert [r["pid"] for r in analyzed["ranks"]] == [r["pid"] for r in doc["ranks"]]
    for row in analyzed["ranks"]:
        assert sum(p["wall_ns"] for p in row["phases"].values()) == row["window_ns"]


def _innermost_ops(
    instances: pl.DataFrame, parents: dict[int, int], phase_ids: set[int]
) -> dict[str, int]:
    """GPU ops per phase name (op ids stripped), each op counted for the innermost *phase*
    range around its launch only: a phase range's ops (nvtxgpuproj's NumGPUOps, which counts
    an op for every enclosing range) minus those of the phase ranges nearest inside it. Ranges
    the rules do not map (NCCL's own ranges) are not phases: their ops stay with the phase
    around them."""
    import re

    def phase_parent(rid: int) -> int | None:
        up = parents.get(rid)
        while up is not None and up not in phase_ids:
            up = parents.get(up)
        return up

    rows = [
        r for r in instances.select("range_id", "name", "gpu_ops").to_dicts()
        if r["range_id"] in phase_ids
    ]  # fmt: skip
    nested: dict[int, int] = {}
    for r in rows:
        up = phase_parent(r["range_id"])
        if up is not None:
            nested[up] = nested.get(up, 0) + r["gpu_ops"]
    out: dict[str, int] = {}
    for r in rows:
        own = r["gpu_ops"] - nested.get(r["range_id"], 0)
        if own:
            name = re.sub(r",\s*(seq|op_id)\s*=\s*\d+", "", r["name"])
            out[name] = out.get(name, 0) + own
    return out


def test_the_default_process_of_a_trace_without_phase_ranges_is_the_busiest_on_the_gpu(
    tmp_path: Path,
) -> None:
    """No NVTX at all: the figures are those of the process with the most GPU ops, and the
    text says that rule (docs/design.md "Scope") and how to choose another."""
    b = NsysExportBuilder()
    corr = 0
    for pid, kernels in ((10, 2), (20, 5)):
        b.process(pid, f"worker{pid}")
        b.thread(pid, pid, "main")
        b.gpu(pid // 10 - 1)
        for i in range(kernels):
            corr += 1
            t = 1000 * i
            b.runtime(t, t + 10, "cudaLaunchKernel_v7000", corr, pid=pid, tid=pid)
            b.kernel(t + 20, t + 500, "gemm", corr, pid=pid, device=pid // 10 - 1)
    path = b.write(tmp_path / "two.sqlite")
    done = _cli("analyze", str(path))
    assert done.returncode == 0, done.stderr
    assert (
        "the figures above are process 20's (no process has phase ranges: the one with the "
        "most GPU ops; --pid PID analyzes another"
    ) in " ".join(done.stdout.split())
