"""Built-in engine rule packs (``--rules vllm|sglang|trtllm|torch``), their no-match note, and
the name groupings ``ranges --group-by name`` / ``kernels --by short|demangled``.

Each engine trace below reproduces the nesting and the range texts the engine's own emitter
pushes (the file and line each name comes from is given beside it; the versions are in each
pack's header, specnsys/attribution/packs/*.toml). Every kernel runs inside the CPU range that
launched it, so a phase's wall time is the exclusive CPU time of its ranges, which the tests
write out by hand: every phase time equals that value and the phases sum to the window.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import specnsys
from specnsys.attribution.kernel_summary import kernel_summary
from specnsys.attribution.projection import nvtx_gpu_projection, nvtx_gpu_projection_summary
from specnsys.attribution.rules import ENGINE_PACKS, builtin_rules
from specnsys.testing import NsysExportBuilder
from tests.conftest import corpus_files
from tests.test_projection import GOLDEN, _read_csv

NSYSAI = [p for p in corpus_files() if p.name.startswith("2026.2.1_nsysai_")]


class _Thread:
    """Ranges and launches of one engine thread: each kernel is launched 10 ns into its range
    and runs inside it, so GPU time and CPU phase agree."""

    def __init__(self, b: NsysExportBuilder, pid: int = 1, tid: int = 1) -> None:
        self.b, self.pid, self.tid, self.corr = b, pid, tid, 0

    def range(self, start: int, end: int, text: str, domain: int = 0) -> None:
        self.b.push_pop(start, end, text, pid=self.pid, tid=self.tid, domain_id=domain)

    def kernel(self, start: int, end: int, name: str) -> None:
        """A launch at [start - 10, start - 5) and its kernel at [start, end)."""
        self.corr += 1
        self.b.runtime(start - 10, start - 5, "cudaLaunchKernel", self.corr, pid=self.pid,
                       tid=self.tid)  # fmt: skip
        self.b.kernel(start, end, name, self.corr, pid=self.pid)

    def copy_to_host(self, start: int, end: int) -> None:
        self.corr += 1
        self.b.runtime(start - 10, start - 5, "cudaMemcpyAsync", self.corr, pid=self.pid,
                       tid=self.tid)  # fmt: skip
        self.b.memcpy(start, end, 4096, self.corr, pid=self.pid, copy_kind=2)


def _builder(process: str) -> tuple[NsysExportBuilder, _Thread]:
    b = NsysExportBuilder()
    b.process(1, process)
    b.thread(1, 1, "main")
    return b, _Thread(b)


def _phases(path: Path, rules: str) -> tuple[dict[str, int], int]:
    """wall ns per phase (zero rows dropped) and the window; the phases sum to the window."""
    result = specnsys.phases(path, rules=rules)
    walls = {r["phase"]: int(r["wall_ns"]) for r in result.frame.iter_rows(named=True)}
    assert sum(walls.values()) == result.breakdown.window_ns
    return {k: v for k, v in walls.items() if v}, result.breakdown.window_ns


def _vllm_trace(tmp_path: Path) -> Path:
    """Two steps of a vLLM V1 worker with EAGLE drafting, VLLM_NVTX_SCOPES_FOR_PROFILING=1 and
    --enable-layerwise-nvtx-tracing (gpu_model_runner.py @ 4e17906: execute_model() then
    sample_tokens())."""
    b, t = _builder("VLLM::Worker")
    layer = "{'Module': 'top.model.layers.%d', 'Inputs': [[4, 4096]]}"
    for step in (0, 1000):
        t.range(step + 0, step + 100, "gpu_model_runner: preprocess")  # execute_model()
        t.kernel(step + 20, step + 90, "index_put_kernel")
        t.range(step + 100, step + 500, "gpu_model_runner: forward")  # _model_forward()
        t.range(step + 150, step + 300, layer % 0)  # nvtx_pytorch_hooks.py module_fwd_pre_hook
        t.kernel(step + 170, step + 290, "flash_fwd_kernel")
        t.range(step + 300, step + 450, layer % 1)
        t.kernel(step + 320, step + 440, "sm90_xmma_gemm")
        t.range(step + 500, step + 550, "gpu_model_runner: postprocess")  # compute_logits
        t.kernel(step + 510, step + 540, "lm_head_gemm")
        t.range(step + 550, step + 650, "gpu_model_runner: sample")  # sample_tokens(): _sample
        t.kernel(step + 560, step + 640, "rejection_sample_kernel")
        t.range(step + 650, step + 900, "gpu_model_runner: draft")  # propose_draft_token_ids
        for k in range(3):  # EAGLE's k = 3 draft forwards: no NVTX of their own (eagle.py)
            t.kernel(step + 660 + 80 * k, step + 720 + 80 * k, "eagle_draft_gemm")
        t.range(step + 900, step + 950, "gpu_model_runner: bookkeep")  # _bookkeeping_sync
        t.copy_to_host(step + 910, step + 940)
        t.range(step + 950, step + 960, "gpu_model_runner: eplb")
        t.range(step + 960, step + 970, "gpu_model_runner: ModelRunnerOutput")
    return b.write(tmp_path / "vllm.sqlite")


def test_vllm_pack_phase_times(tmp_path: Path) -> None:
    walls, window = _phases(_vllm_trace(tmp_path), "vllm")
    assert window == 1970
    assert walls == {
        "schedule": 2 * 100,  # preprocess
        "forward": 2 * 400,  # forward, layer ranges inside it included
        "sample": 2 * (50 + 100),  # postprocess (logits) + sample
        "draft": 2 * 250,
        "sync": 2 * 50,  # bookkeep
        "unannotated": 2 * 20 + 30,  # eplb + ModelRunnerOutput, and the gap between steps
    }


def test_vllm_pack_analyze_sees_a_speculative_run_without_verify(tmp_path: Path) -> None:
    analysis = specnsys.analyze(_vllm_trace(tmp_path), rules="vllm")
    assert analysis.mode == "spec"
    assert analysis.phases["draft"]["wall_ns"] == 500
    assert analysis.phases["forward"]["wall_ns"] == 800
    assert "verify" not in analysis.phases  # the pack's documented limit
    assert analysis.draft_cost_ratio is None and "draft_cost_ratio" in analysis.not_available


def _sglang_trace(tmp_path: Path) -> Path:
    """Two iterations of SGLang's event_loop_normal with SGLANG_ENABLE_NVTX_SCHEDULER=1
    (names from python/sglang/srt/utils/nvtx_utils.py @ cff3707, the stage order from
    managers/scheduler.py event_loop_normal)."""
    b, t = _builder("sglang::scheduler")
    t.range(0, 1700, "scheduler.event_loop_normal")  # the whole loop: no rule
    for it in (0, 1000):
        t.range(it + 0, it + 20, "scheduler.recv_requests")
        t.range(it + 20, it + 40, "scheduler.process_input_requests")
        t.range(it + 40, it + 100, "scheduler.get_next_batch_to_run")
        t.range(it + 50, it + 90, "scheduler.get_new_batch_prefill")
        t.range(it + 100, it + 600, "scheduler.run_batch")
        t.kernel(it + 120, it + 300, "eagle_draft_gemm")  # draft, verify, sample: one range
        t.kernel(it + 320, it + 560, "verify_gemm")
        t.kernel(it + 570, it + 590, "tree_speculative_sampling")
        t.range(it + 600, it + 700, "scheduler.process_batch_result")
        t.copy_to_host(it + 620, it + 680)
    return b.write(tmp_path / "sglang.sqlite")


def test_sglang_pack_phase_times(tmp_path: Path) -> None:
    walls, window = _phases(_sglang_trace(tmp_path), "sglang")
    assert window == 1700
    assert walls == {
        "schedule": 2 * 100,  # recv + process_input + get_next_batch (prefill selection inside)
        "decode": 2 * 500,  # run_batch
        "sync": 2 * 100,  # process_batch_result
        "unannotated": 300,  # [700, 1000): only the event loop's range is open
    }


def _trtllm_trace(tmp_path: Path) -> Path:
    """A prefill then a speculative generation step of PyExecutor._executor_loop with a draft
    model (py_executor.py @ 9521caf; nvtx_range's domain is "TensorRT-LLM", _utils.py)."""
    b, t = _builder("trtllm-worker")
    b.domain(1, "TensorRT-LLM", pid=1, tid=1)
    trt = 1
    # iteration 1: context requests only; the draft batch is empty (_prepare_draft_tokens)
    t.range(0, 50, "_schedule", trt)
    t.range(50, 60, "_prepare_draft_tokens", trt)
    t.range(60, 400, "[Executor] _forward_step 6: 4 ctx reqs, 0 gen reqs", trt)
    t.kernel(80, 390, "context_fmha")
    t.range(400, 450, "_sample_async", trt)
    t.kernel(410, 440, "argmax_kernel")
    t.range(450, 460, "_update_request_states", trt)
    t.range(460, 490, "_update_requests", trt)
    t.copy_to_host(470, 480)
    t.range(490, 500, "_handle_responses", trt)
    # iteration 2: drafting, then the target forward over the drafts
    t.range(500, 550, "_schedule", trt)
    t.range(550, 900, "_prepare_draft_tokens", trt)
    t.range(550, 580, "_prepare_draft_batch", trt)  # nested, no rule: stays draft
    t.kernel(600, 700, "draft_gemm")  # draft_model_engine.forward
    t.range(800, 830, "_sample_async", trt)  # the draft tokens' sampling (nested)
    t.kernel(810, 820, "argmax_kernel")
    t.range(830, 850, "_update_requests", trt)
    t.range(900, 1200, "[Executor] _forward_step 7: 0 ctx reqs, 4 gen reqs", trt)
    t.kernel(920, 1190, "xqa_kernel")
    t.range(1200, 1260, "_sample_async", trt)
    t.kernel(1210, 1250, "accept_draft_tokens")
    t.range(1260, 1270, "_update_request_states", trt)
    t.range(1270, 1300, "_update_requests", trt)
    t.copy_to_host(1280, 1290)
    t.range(1300, 1320, "_handle_responses", trt)
    t.range(1320, 1330, "_schedule")  # same text, default domain: not the executor's
    return b.write(tmp_path / "trtllm.sqlite")


def test_trtllm_pack_phase_times(tmp_path: Path) -> None:
    walls, window = _phases(_trtllm_trace(tmp_path), "trtllm")
    assert window == 1330
    assert walls == {
        "schedule": 50 + 50,
        "prefill": 340,  # 4 ctx reqs, 0 gen reqs
        "forward": 300,  # 0 ctx reqs, 4 gen reqs
        # its nested _sample_async and _update_requests are the draft's own (issue 29)
        "draft": 10 + 350,
        "sample": 50 + 60,
        "sync": 30 + 30,
        "unannotated": 10 + 10 + 10 + 20 + 10,  # state updates, responses, default-domain range
    }


def test_trtllm_pack_analyze(tmp_path: Path) -> None:
    analysis = specnsys.analyze(_trtllm_trace(tmp_path), rules="trtllm")
    assert analysis.mode == "spec"
    assert analysis.phases["prefill"]["wall_ns"] == 340
    assert analysis.phases["forward"]["ranges"] == 1 and analysis.phases["draft"]["ranges"] == 2


def _torch_trace(tmp_path: Path) -> Path:
    """emit_nvtx op ranges: '<op>, seq = N, op_id = M' nested as autograd records them."""
    b, t = _builder("python3")
    t.range(0, 300, "aten::linear, op_id = 318126")
    t.range(20, 280, "aten::addmm, seq = 4, op_id = 318127")
    t.kernel(40, 270, "sm90_xmma_gemm")
    t.range(300, 400, "aten::relu, op_id = 318128")
    t.kernel(320, 390, "elementwise_kernel")
    t.range(400, 700, "aten::linear, op_id = 318129")
    t.range(420, 680, "aten::addmm, seq = 5, op_id = 318130")
    t.kernel(440, 670, "sm90_xmma_gemm")
    t.range(700, 750, "my_user_range")  # not an operator: no rule
    return b.write(tmp_path / "torch.sqlite")


def test_torch_pack_phase_times(tmp_path: Path) -> None:
    walls, window = _phases(_torch_trace(tmp_path), "torch")
    assert window == 750
    assert walls == {
        "aten::linear": 20 + 20 + 20 + 20,
        "aten::addmm": 260 + 260,
        "aten::relu": 100,
        "unannotated": 50,
    }


def test_every_pack_loads_through_the_rules_loader() -> None:
    for name in ENGINE_PACKS:
        rules = builtin_rules(name)
        assert rules.name == name and rules.source == "built-in" and rules.rules


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specnsys", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_a_pack_that_matches_nothing_says_so_in_one_line(tmp_path: Path) -> None:
    path = _sglang_trace(tmp_path)
    out = _cli("phases", str(path), "--rules", "vllm")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines == [
        f"specnsys: warning: --rules vllm matched no NVTX range in {path} (ranges present: "
        "scheduler.get_new_batch_prefill (2), scheduler.get_next_batch_to_run (2), "
        "scheduler.process_batch_result (2), scheduler.process_input_requests (2), "
        "scheduler.recv_requests (2) and 2 more names)"
    ]
    # a matching pack is silent
    assert _cli("phases", str(path), "--rules", "sglang").stderr == ""
    assert specnsys.phases(path, rules="sglang").data_warnings == ()


# -------------------------------------------------------------------------- corpus: --rules torch


@pytest.mark.corpus
@pytest.mark.skipif(not NSYSAI, reason="real corpus not present")
@pytest.mark.parametrize("path", NSYSAI, ids=lambda p: p.stem)
@pytest.mark.usefixtures("corpus_cache")
def test_torch_pack_answers_on_the_emit_nvtx_corpus(path: Path) -> None:
    result = specnsys.phases(path, rules="torch")
    frame = result.frame
    assert frame["wall_ns"].sum() == result.breakdown.window_ns > 0
    ops = [p for p in frame["phase"].to_list() if p.startswith("aten::")]
    assert "aten::mm" in ops or "aten::copy_" in ops
    assert not any("op_id" in p for p in frame["phase"].to_list())
    assert not any("matched no NVTX range" in w for w in result.data_warnings)


def _stripped(name: str) -> str:
    return re.sub(r",\s*(seq|op_id)\s*=\s*\d+", "", name)


@pytest.mark.corpus
@pytest.mark.skipif(not NSYSAI, reason="real corpus not present")
@pytest.mark.parametrize("path", NSYSAI, ids=lambda p: p.stem)
def test_ranges_group_by_name_sums_nsys_nvtxgpuproj(path: Path) -> None:
    """Per name, op ids stripped: instances, CPU and projected GPU time are the sums of
    NVIDIA's own per-range rows (nsys stats -r nvtxgpuproj, stored in tests/golden)."""
    ref = _read_csv(GOLDEN / f"{path.stem}_nvtxgpuproj.csv")
    if ref is None:  # the stored reports are gzipped
        import gzip

        data = gzip.decompress((GOLDEN / f"{path.stem}_nvtxgpuproj.csv.gz").read_bytes())
        ref = pl.read_csv(data, infer_schema_length=0)
    expected = (
        ref.select(
            pl.col("Name").map_elements(_stripped, return_dtype=pl.String).alias("name"),
            pl.col("Style").alias("style"),
            pl.col("Orig Duration (ns)").cast(pl.Int64).alias("cpu"),
            pl.col("Projected Duration (ns)").cast(pl.Int64).alias("proj"),
            pl.col("NumGPUOps").cast(pl.Int64).alias("ops"),
        )
        .group_by("name", "style")
        .agg(pl.len().alias("instances"), pl.sum("cpu"), pl.sum("proj"), pl.sum("ops"))
        .sort("name", "style")
    )
    table = specnsys.ranges(path, group_by="name")
    ours = table.frame.select(
        "name", "style", pl.col("instances").cast(pl.UInt32),
        pl.col("cpu_ns").cast(pl.Int64).alias("cpu"), pl.col("proj_ns").cast(pl.Int64).alias("proj"),
        pl.col("gpu_ops").cast(pl.Int64).alias("ops"),
    ).sort("name", "style")  # fmt: skip
    assert ours.to_dicts() == expected.to_dicts()
    assert table.frame.height < specnsys.ranges(path).frame.height  # op ids did split names
    assert table.to_dict()["group_by"] == "name"


# ------------------------------------------------------------------- groupings on built traces


def test_ranges_group_by_name_merges_decorated_texts(tmp_path: Path) -> None:
    with specnsys.open(_torch_trace(tmp_path)) as trace:
        projection = nvtx_gpu_projection(trace)
    by_text = nvtx_gpu_projection_summary(projection)
    by_name = nvtx_gpu_projection_summary(projection, "name")
    assert by_text.height == 5 and by_name.height == 3
    rows = {r["name"]: r for r in by_name.iter_rows(named=True)}
    assert rows["aten::addmm"]["instances"] == 2
    assert rows["aten::addmm"]["proj_ns"] == 230 + 230
    assert rows["aten::linear"]["gpu_busy_ns"] == 230 + 230
    assert rows["aten::relu"]["gpu_ops"] == 1
    with pytest.raises(ValueError):
        nvtx_gpu_projection_summary(projection, "op")


def _kernels_trace(tmp_path: Path) -> Path:
    """One templated kernel in two instantiations and two grids, and another kernel."""
    b, t = _builder("python3")
    t.range(0, 1000, "step")
    for i, (demangled, grid, dur) in enumerate([
        ("void gemm<float, 128>(float*, int)", (8, 1, 1), 100),
        ("void gemm<float, 128>(float*, int)", (16, 1, 1), 200),
        ("void gemm<half, 64>(half*, int)", (8, 1, 1), 40),
        ("void softmax<float>(float*, int)", (1, 1, 1), 10),
    ]):  # fmt: skip
        t.corr += 1
        start = 100 + 200 * i
        b.runtime(start - 10, start - 5, "cudaLaunchKernel", t.corr)
        b.kernel(start, start + dur, demangled.split("<")[0].removeprefix("void "), t.corr,
                 demangled=demangled, grid=grid)  # fmt: skip
    return b.write(tmp_path / "kernels.sqlite")


def test_kernels_by_short_and_demangled_name(tmp_path: Path) -> None:
    with specnsys.open(_kernels_trace(tmp_path)) as trace:
        default = kernel_summary(trace)
        short = kernel_summary(trace, "short")
        demangled = kernel_summary(trace, "demangled")
    assert default.height == 4 and "grid_x" in default.columns
    assert short.select("name", "total_ns", "instances").to_dicts() == [
        {"name": "gemm", "total_ns": 340, "instances": 3},
        {"name": "softmax", "total_ns": 10, "instances": 1},
    ]
    assert demangled.select("name", "total_ns", "instances").to_dicts() == [
        {"name": "void gemm<float, 128>(float*, int)", "total_ns": 300, "instances": 2},
        {"name": "void gemm<half, 64>(half*, int)", "total_ns": 40, "instances": 1},
        {"name": "void softmax<float>(float*, int)", "total_ns": 10, "instances": 1},
    ]
    assert "grid_x" not in short.columns
    assert short["share"].sum() == pytest.approx(1.0)
    assert short["min_ns"].to_list() == [40, 10] and short["max_ns"].to_list() == [200, 10]


def test_kernels_and_ranges_options_on_the_command_line(tmp_path: Path) -> None:
    path = _kernels_trace(tmp_path)
    plain = _cli("kernels", str(path), "--json")
    assert "by" not in json.loads(plain.stdout)  # the default document is unchanged
    by = _cli("kernels", str(path), "--by", "short", "--json")
    doc = json.loads(by.stdout)
    assert doc["by"] == "short" and [r["name"] for r in doc["rows"]] == ["gemm", "softmax"]
    text = _cli("kernels", str(path), "--by", "demangled")
    assert text.returncode == 0 and "grid" not in text.stdout and "gemm<half, 64>" in text.stdout
    bad = _cli("kernels", str(path), "--by", "mangled")
    assert bad.returncode == 2 and bad.stdout == ""
    both = _cli("ranges", str(path), "--instances", "--group-by", "name")
    assert both.returncode == 2 and both.stdout == ""
    assert len(both.stderr.strip().splitlines()) == 1
    assert both.stderr.startswith("specnsys: error: ")
