"""Kernel categories: what kind of GPU work ran, for time no NVTX range explains.

A trace whose NVTX names say nothing useful (or whose decode step is one CUDA-graph replay)
still tells verify-like work from sample-like work by its kernel names: GEMMs and attention
are the model's forward passes, sorting and top-k/top-p kernels are the sampler, NCCL is
communication. Each GPU op gets one category: memcpy and memset by their kind, whole-graph
replay rows as ``cuda_graph``, kernels by the first pattern of an ordered regex table that
their name matches, ``other`` when none does. A rules file can put its own ``[[category]]``
entries in front of the built-in table (see :mod:`.rules`).

Patterns are RE2 (DuckDB's ``regexp_matches``, the engine that checks them when a rules file
is read), matched once per distinct kernel name, then joined back: the cost is the number of
distinct names, not the number of kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "CATEGORY_ORDER",
    "DEFAULT_CATEGORIES",
    "KernelCategory",
    "categorize_ops",
    "category_table",
]


@dataclass(frozen=True)
class KernelCategory:
    """Kernels whose name matches *pattern* (RE2, searched anywhere) are *name*."""

    name: str
    pattern: str


#: The built-in table, tried in order (the first match wins): attention before GEMM, since
#: attention kernels are often CUTLASS or contain "gemm"; sampling-side sorts and top-k/top-p
#: before the elementwise catch-all. Names follow PyTorch/ATen, cuBLAS/cuBLASLt/CUTLASS,
#: FlashAttention/FlashInfer/xFormers, vLLM/SGLang/TensorRT-LLM custom ops and NCCL.
DEFAULT_CATEGORIES: tuple[KernelCategory, ...] = (
    KernelCategory("nccl", r"(?i)nccl"),
    KernelCategory(
        "attention",
        r"(?i)(flash|fmha|attention|attn|paged_?att|mha_|_mha|sdpa|flashinfer|xformers"
        r"|decode_?kernel_?mla|mla_)",
    ),
    KernelCategory(
        "gemm",
        r"(?i)(gemm|gemv|cublas|cutlass|matmul|xmma|nvjet|wgmma|splitk|sm\d+_.*_(tn|nt|nn|tt)"
        r"|_s\d+gemm|_h\d+gemm|ampere_|volta_|turing_|hopper_)",
    ),
    KernelCategory(
        "topk_topp",
        r"(?i)(top_?k|top_?p|min_?p|radix|sort|bitonic)",
    ),
    KernelCategory(
        "sampling",
        r"(?i)(sampl|multinomial|rejection|argmax|gumbel|exponential|uniform|philox|curand"
        r"|distribution|softmax|logit|penalt)",
    ),
    KernelCategory(
        "norm_elementwise",
        r"(?i)(norm|rms|elementwise|silu|gelu|relu|swiglu|act_and_mul|activation|rotary|rope"
        r"|reduce|reduction|cat_|catarray|index|gather|scatter|fill|copy|cast|embedding"
        r"|vectorized|unrolled|add_|mul_|bias)",
    ),
)

#: Report order of the categories that do not come from a name pattern.
OP_KIND_CATEGORIES = {"memcpy": "memcpy_memset", "memset": "memcpy_memset", "graph": "cuda_graph"}
OTHER = "other"
CATEGORY_ORDER: tuple[str, ...] = (
    *(c.name for c in DEFAULT_CATEGORIES),
    "memcpy_memset",
    "cuda_graph",
    OTHER,
)


def _case_sql(categories: tuple[KernelCategory, ...]) -> tuple[str, list[str]]:
    """One ``CASE`` naming the first category whose pattern matches ``name`` (parameters: the
    patterns, in order, then the names)."""
    whens = " ".join(
        f"WHEN regexp_matches(name, ${2 * i + 1}) THEN ${2 * i + 2}"
        for i in range(len(categories))
    )
    params: list[str] = []
    for c in categories:
        params += [c.pattern, c.name]
    return f"CASE {whens} ELSE '{OTHER}' END", params


def categorize_ops(
    con: duckdb.DuckDBPyConnection,
    ops: pl.DataFrame,
    extra: tuple[KernelCategory, ...] = (),
) -> pl.DataFrame:
    """*ops* (``op_kind``, ``name``, ...: :func:`~.launch.gpu_ops_with_phase`'s frame) with a
    ``category`` column; *extra* categories are tried before the built-in table."""
    table = (*extra, *DEFAULT_CATEGORIES)
    names = ops.filter(pl.col("op_kind") == "kernel").select(pl.col("name").unique())
    case, params = _case_sql(table)
    if names.height:
        cursor = con.cursor()  # a view of its own: nothing registered on the shared connection
        try:
            cursor.register("specnsys_kernel_names", names.to_arrow())
            named = cursor.sql(
                f"SELECT name, {case} AS category FROM specnsys_kernel_names", params=params
            ).pl()
        finally:
            cursor.close()
    else:
        named = pl.DataFrame(schema={"name": pl.String, "category": pl.String})
    by_kind = pl.col("op_kind").cast(pl.String).replace_strict(
        OP_KIND_CATEGORIES, default=None, return_dtype=pl.String
    )
    return ops.join(named, on="name", how="left", nulls_equal=True).with_columns(
        pl.when(pl.col("op_kind") == "kernel")
        .then(pl.col("category").fill_null(OTHER))
        .otherwise(by_kind)
        .alias("category")
    )


def category_table(ops: pl.DataFrame, window: tuple[int, int]) -> pl.DataFrame:
    """GPU time per (phase, category) of categorized *ops*, each op clipped to *window*.

    Columns ``phase``, ``category``, ``ops``, ``gpu_ns``: the summed op time (concurrent ops
    on several streams each count), so the denominator of a share is the summed GPU op time
    of the window, not the window.
    """
    start, end = window
    clipped = pl.min_horizontal(pl.col("end"), end) - pl.max_horizontal(pl.col("start"), start)
    return (
        ops.with_columns(clipped.clip(lower_bound=0).alias("_ns"))
        .group_by("phase", "category")
        .agg(pl.len().alias("ops"), pl.col("_ns").sum().cast(pl.Int64).alias("gpu_ns"))
        .sort(["phase", "gpu_ns", "category"], descending=[False, True, False])
    )

