"""Kernel categories (issue 20 item 2): GPU work split by what kind of kernel ran."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest

import specnsys
from specnsys import api
from specnsys.attribution.categories import categorize_ops
from specnsys.attribution.launch import gpu_ops_with_phase
from specnsys.testing import gpu_loop
from tests.cli_driver import run_one
from tests.conftest import json_doc

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "traces" / "real"

# (phase, kernel name, start, end): what the built trace launches, and the category expected
KERNELS = [
    ("verify", "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", 1_000, 1_400, "gemm"),
    ("verify", "flash_fwd_splitkv_kernel", 1_400, 1_700, "attention"),
    ("verify", "void at::native::vectorized_elementwise_kernel<4>", 1_700, 1_800,
     "norm_elementwise"),
    ("sample", "void at::native::radixSortKVInPlace<float>", 2_000, 2_250, "topk_topp"),
    ("sample", "rejection_sample_kernel", 2_250, 2_300, "sampling"),
    ("sample", "my_custom_op", 2_300, 2_330, "other"),
    ("draft", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 500, 900, "nccl"),
]


class _Done:
    """One command line's outcome, run in-process as a user would run it."""

    def __init__(self, argv: list[str]) -> None:
        got = run_one(argv)
        assert got["traceback"] is None, got["traceback"]
        self.returncode, self.stdout, self.stderr = got["status"], got["stdout"], got["stderr"]


def run_cli(*args: str) -> _Done:
    return _Done(list(args))


def _trace(tmp_path: Path) -> Path:
    """draft [400, 950), verify [950, 1900), sample [1900, 2400) inside one request; each kernel
    launched inside its phase; one memcpy in sample, one kernel running past the window."""
    b = gpu_loop(3_000)
    spans = {"draft": (400, 950), "verify": (950, 1_900), "sample": (1_900, 2_400)}
    for phase, (start, end) in spans.items():
        b.push_pop(start, end, phase, pid=1, tid=1, domain_id=1)
    corr = 1
    for phase, name, start, end, _ in KERNELS:
        launch = spans[phase][0] + 10 + corr
        b.runtime(launch, launch + 5, "cudaLaunchKernel", corr, pid=1, tid=1)
        b.kernel(start, end, name, corr, pid=1)
        corr += 1
    b.runtime(1_950, 1_960, "cudaMemcpyAsync", corr, pid=1, tid=1)
    b.memcpy(2_330, 2_380, 4096, corr, pid=1)
    corr += 1
    # launched in sample, runs [2_900, 3_200): only its 100 ns inside the window count
    b.runtime(2_000, 2_005, "cudaLaunchKernel", corr, pid=1, tid=1)
    b.kernel(2_900, 3_200, "fused_add_rms_norm_kernel", corr, pid=1)
    return b.write(tmp_path / "categories.sqlite")


def test_every_op_gets_its_category_and_the_phase_it_was_launched_in(tmp_path: Path) -> None:
    path = _trace(tmp_path)
    result = api.phases(path, by="category")
    assert result.categories is not None
    got = {
        (r["phase"], r["category"]): (r["ops"], r["gpu_ns"])
        for r in result.categories.iter_rows(named=True)
    }
    expected: dict[tuple[str, str], tuple[int, int]] = {}
    for phase, _, start, end, category in KERNELS:
        ops, ns = expected.get((phase, category), (0, 0))
        expected[(phase, category)] = (ops + 1, ns + end - start)
    expected[("sample", "memcpy_memset")] = (1, 50)
    expected[("sample", "norm_elementwise")] = (1, 100)  # clipped to the window's end
    assert got == expected


def test_cli_json_shares_are_of_the_summed_gpu_op_time(tmp_path: Path) -> None:
    done = run_cli("phases", "--by", "category", "--json", str(_trace(tmp_path)))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)["categories"]
    total = sum(end - start for *_, start, end, _ in KERNELS) + 50 + 100
    assert doc["shares_of"] == "gpu_op_ns" and doc["gpu_op_ns"] == total
    assert sum(r["gpu_ns"] for r in doc["rows"]) == total
    assert sum(r["share"] for r in doc["rows"]) == pytest.approx(1.0, abs=1e-12)
    gemm = next(r for r in doc["rows"] if r["category"] == "gemm")
    assert gemm["by_phase"] == {"verify": 400}
    assert [r["gpu_ns"] for r in doc["rows"]] == sorted(
        (r["gpu_ns"] for r in doc["rows"]), reverse=True)


def test_cli_text_lists_categories_after_the_phases(tmp_path: Path) -> None:
    done = run_cli("phases", "--by", "category", str(_trace(tmp_path)))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "GPU op time per kernel category" in text
    line = next(x for x in text.splitlines() if x.startswith("topk_topp"))
    assert "sample 100%" in line
    plain = run_cli("phases", str(_trace(tmp_path)))
    assert "kernel category" not in plain.stdout and text.startswith(plain.stdout.rstrip("\n"))


def test_a_rules_file_category_is_tried_before_the_built_in_table(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'extends = "specnsys"\n'
        '[[category]]\nname = "my_sampler"\npattern = "^(my_custom_op|rejection_)"\n'
    )
    result = api.phases(_trace(tmp_path), rules=rules, by="category")
    assert result.categories is not None
    by_category = dict(
        result.categories.group_by("category").agg(pl.col("gpu_ns").sum()).iter_rows()
    )
    assert by_category["my_sampler"] == 50 + 30
    assert "sampling" not in by_category and "other" not in by_category


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[[category]]\nname = "x"\npattern = "("\n', "category 1: 'pattern' is not a valid regex"),
        ('[[category]]\nname = "x"\n', "category 1: 'pattern' must be a regex string"),
        ('[[category]]\nname = "x"\npattern = "a"\ncolour = "red"\n', "unknown key(s)"),
        ('category = "gemm"\n', "written as [[category]] tables"),
    ],
)
def test_a_bad_category_entry_is_one_line_exit_2(tmp_path: Path, body: str, message: str) -> None:
    rules = tmp_path / "bad.toml"
    rules.write_text('extends = "specnsys"\n' + body)
    done = run_cli("phases", "--by", "category", "--rules", str(rules), str(_trace(tmp_path)))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("specnsys: error: ") and done.stderr.count("\n") == 1
    assert message in done.stderr


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the real corpus is not here")
def test_a_real_llm_trace_splits_by_category_and_adds_up_to_its_gpu_ops() -> None:
    """An FSDP training step on 2 H100s (nsys 2026.2): attention, GEMM, NCCL and elementwise
    kernels by name; the categories add up to every op the raw export has in the window."""
    path = CORPUS / "2026.2.1_nsysai_mfu-2gpu-after.sqlite"
    result = api.phases(path, rules="nvtx", by="category")
    assert result.categories is not None
    b = result.breakdown
    by_category = dict(
        result.categories.group_by("category").agg(pl.col("gpu_ns").sum()).iter_rows()
    )
    assert {"attention", "gemm", "nccl", "norm_elementwise"} <= set(by_category)
    assert max(by_category, key=lambda c: by_category[c]) == "attention"
    ws, we = b.window_start_ns, b.window_end_ns
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        raw = sum(
            con.execute(
                f"SELECT coalesce(sum(min(end, {we}) - max(start, {ws})), 0) FROM {table} "
                f"WHERE start < {we} AND end > {ws} AND globalPid / 16777216 % 16777216 = ?",
                (b.pid,),
            ).fetchone()[0]
            for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                          "CUPTI_ACTIVITY_KIND_MEMSET")
        )
    assert sum(by_category.values()) == raw


def test_categorize_ops_matches_each_distinct_name_once(tmp_path: Path) -> None:
    """The same kernel name always lands in the same category (the join is by name)."""
    with specnsys.open(_trace(tmp_path)) as t:
        ops = gpu_ops_with_phase(t)
        doubled = pl.concat([ops, ops])
        out = categorize_ops(t.connection, doubled)
    assert out.height == doubled.height
    assert out.group_by("name").agg(pl.col("category").n_unique())["category"].max() == 1


def test_analyze_says_what_kind_of_work_each_phase_ran(tmp_path: Path) -> None:
    """analyze's top_kernels: per phase, kernel time by category over the phase's summed
    kernel time (kernels only: the memcpy is not in it)."""
    doc = json_doc(api.analyze(_trace(tmp_path)).to_dict())
    by_phase = doc["top_kernels"]["by_phase"]
    assert [(c["category"], c["time_ns"]) for c in by_phase["verify"]["categories"]] == [
        ("gemm", 400), ("attention", 300), ("norm_elementwise", 100)]
    sample = by_phase["sample"]
    assert [(c["category"], c["time_ns"]) for c in sample["categories"]] == [
        ("topk_topp", 250), ("norm_elementwise", 100), ("sampling", 50), ("other", 30)]
    assert sum(c["share"] for c in sample["categories"]) == pytest.approx(1.0)
    assert sample["kernel_ns"] == 430
    done = run_cli("analyze", str(_trace(tmp_path)))
    assert "  verify: 3 kernels, 0.001 ms (gemm 50.0%, attention 37.5%, norm_elementwise 12.5%)" in (
        done.stdout)
