"""Shared pieces of the benchmarks: a fast generator of large nsys-schema exports shaped like a
speculative-decoding server, the bare ``sqlite3`` scan of the columns specnsys reads, and a
subprocess runner that reports wall time and peak RSS.

The generator writes rows with SQL (``INSERT ... SELECT`` from a recursive CTE over *waves*
crossed with a small per-wave template table), never with Python loops over rows: SQLite
produces the rows in C at about a million a second. One *wave* is a batch of ``batch``
requests served together:

* ``schedule`` (batch formation), ``prefill`` (8 kernels) and ``draft_prefill`` (4 kernels)
  push/pop ranges, then ``steps`` decode steps;
* one ``request`` start/end range per sequence, from admission to its last token (sequence
  ``b`` of a wave finishes ``b`` steps early, so request lengths differ);
* per decode step: a ``decode`` range holding ``draft`` (k = 4 draft forwards x 4 kernels),
  ``verify`` (8 kernels), ``sample`` (2 kernels), ``kv`` (1 kernel + 1 memset) and ``sync``
  (a device-to-host ``cudaMemcpyAsync`` and a ``cudaStreamSynchronize``), plus one
  ``proposed`` and one ``accepted`` mark per sequence (integer payloads, accepted in 0..k);
* every GPU op has its launching runtime row with a unique correlation id; names are
  registered strings (``textId`` / ``nameId`` into ``StringIds``), as nsys writes them.

Per decode step: 27 kernels, 31 runtime rows, 6 + 2 x batch NVTX rows, 1 memcpy, 1 memset.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from specnsys.cores import usable_cores
from specnsys.ingest.model import MODEL, STRINGS
from specnsys.testing.builder import VM_BITS, create_tables

OUT = Path(__file__).resolve().parent / "out"


def compile_specnsys() -> None:
    """Byte-compile specnsys's modules, as installing a package does. Where
    ``PYTHONDONTWRITEBYTECODE`` is set (it is on the machine the README's figures come from)
    a run from the source tree would otherwise compile every module from source each time
    (about 50 ms per process), a cost no installed copy pays and the bare scan does not have."""
    import compileall

    import specnsys

    compileall.compile_dir(Path(specnsys.__file__).parent, quiet=1)

PID, TID = 4242, 4242
DOMAIN_ID = 1
STREAM = 7
DRAFT_K = 4

PHASE_NAMES = (
    "request",
    "schedule",
    "prefill",
    "draft_prefill",
    "decode",
    "draft",
    "verify",
    "sample",
    "kv",
    "sync",
    "proposed",
    "accepted",
)
API_NAMES = (
    "cudaLaunchKernel_v7000",
    "cudaMemsetAsync_v3020",
    "cudaMemcpyAsync_v3020",
    "cudaStreamSynchronize_v3020",
)
KERNEL_NAMES = (
    "prefill_gemm",
    "prefill_attn",
    "prefill_norm",
    "prefill_act",
    "draft_gemm",
    "draft_attn",
    "draft_norm",
    "draft_act",
    "verify_gemm",
    "verify_attn",
    "verify_norm",
    "verify_act",
    "softmax_sample",
    "rejection_sample",
    "kv_rollback",
)

PREFILL_NS = 60_000  # schedule [0, 4) us, prefill [4, 44) us, draft_prefill [44, 58) us
STEP_NS = 40_000  # decode [0, 38) us of each step


@dataclass(frozen=True)
class Shape:
    """How one export is laid out: requests served ``batch`` at a time, ``steps`` per wave."""

    batch: int = 4
    steps: int = 32

    @property
    def kernels_per_wave(self) -> int:
        return 12 + 27 * self.steps

    @property
    def nvtx_per_wave(self) -> int:
        return 3 + self.batch + self.steps * (6 + 2 * self.batch)

    @property
    def wave_ns(self) -> int:
        return PREFILL_NS + self.steps * STEP_NS


def _templates(con: sqlite3.Connection, shape: Shape, sid: dict[str, int]) -> None:
    """Per-wave templates (offsets relative to the wave start) in TEMP tables.

    ``t_nvtx(ord, start, end, event_type, text_id, payload)``;
    ``t_ops(ord, launch, api_end, api_id, kind, gpu_start, gpu_end, name_id, demangled_id,
    bytes)`` with ``kind`` 0 kernel / 1 memset / 2 memcpy / 3 none (a sync call): one row per
    runtime call, ``ord`` is its position in the wave (correlation id = wave base + ord).
    """
    nvtx: list[tuple] = [
        (0, 0, 4_000, 59, sid["schedule"], None),
        (1, 4_000, 44_000, 59, sid["prefill"], None),
        (2, 44_000, 58_000, 59, sid["draft_prefill"], None),
    ]
    for b in range(shape.batch):
        end = PREFILL_NS + (shape.steps - b) * STEP_NS - 2_000
        nvtx.append((3 + b, 100 + b, end, 60, sid["request"], None))
    ops: list[tuple] = []

    def op(launch: int, api: str, kind: int, dur: int, name: str | None, nbytes: int = 0) -> None:
        api_end = launch + (3_000 if api.startswith("cudaStreamSynchronize") else 400)
        gpu_start = launch + 2_500
        name_id = sid[name] if name else None
        demangled = sid[f"void {name}<__half>(__half const*, __half*, int)"] if name else None
        ops.append(
            (
                len(ops),
                launch,
                api_end,
                sid[api],
                kind,
                gpu_start,
                gpu_start + dur,
                name_id,
                demangled,
                nbytes,
            )
        )

    launch_kernel = API_NAMES[0]
    for j in range(8):
        op(4_500 + j * 4_800, launch_kernel, 0, 4_200, KERNEL_NAMES[j % 4])
    for j in range(4):
        op(44_500 + j * 3_200, launch_kernel, 0, 2_600, KERNEL_NAMES[4 + j % 4])
    for s in range(shape.steps):
        base = PREFILL_NS + s * STEP_NS
        order = len(nvtx)
        spans = [
            ("decode", 0, 38_000),
            ("draft", 1_000, 17_000),
            ("verify", 17_000, 30_000),
            ("sample", 30_000, 33_000),
            ("kv", 33_000, 35_000),
            ("sync", 35_000, 37_000),
        ]
        for i, (name, a, b_) in enumerate(spans):
            nvtx.append((order + i, base + a, base + b_, 59, sid[name], None))
        for b in range(shape.batch):
            accepted = (s * 7 + b * 3 + s // 5) % (DRAFT_K + 1)
            nvtx.append(
                (order + 6 + 2 * b, base + 32_000 + 20 * b, None, 34, sid["proposed"], DRAFT_K)
            )
            nvtx.append(
                (order + 7 + 2 * b, base + 32_010 + 20 * b, None, 34, sid["accepted"], accepted)
            )
        for j in range(16):
            op(base + 1_200 + j * 980, launch_kernel, 0, 700, KERNEL_NAMES[4 + j % 4])
        for j in range(8):
            op(base + 17_200 + j * 1_550, launch_kernel, 0, 1_500, KERNEL_NAMES[8 + j % 4])
        op(base + 30_300, launch_kernel, 0, 900, KERNEL_NAMES[12])
        op(base + 31_500, launch_kernel, 0, 800, KERNEL_NAMES[13])
        op(base + 33_200, launch_kernel, 0, 600, KERNEL_NAMES[14])
        op(base + 34_200, API_NAMES[1], 1, 300, None, 1 << 16)
        op(base + 35_200, API_NAMES[2], 2, 500, None, 4 * shape.batch * (DRAFT_K + 1))
        op(base + 35_800, API_NAMES[3], 3, 0, None)
    con.execute("CREATE TEMP TABLE t_nvtx (ord, start, end_, event_type, text_id, payload)")
    con.executemany("INSERT INTO t_nvtx VALUES (?, ?, ?, ?, ?, ?)", nvtx)
    con.execute(
        "CREATE TEMP TABLE t_ops (ord, launch, api_end, api_id, kind, gpu_start, "
        "gpu_end, name_id, demangled_id, bytes)"
    )
    con.executemany("INSERT INTO t_ops VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ops)


def _fill_statements(
    shape: Shape, waves: int, sid: dict[str, int], gtid: int, gpid: int
) -> dict[str, list[str]]:
    """The INSERT statements of each big table: the waves crossed with the wave templates.

    ``CROSS JOIN`` fixes the loop order (waves outer, template rows inner), so rows come out
    in time order without a sort.
    """
    waves_cte = (
        f"WITH RECURSIVE w(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM w WHERE i < {waves - 1})"
    )
    ops_per_wave = 12 + 30 * shape.steps
    base = f"(w.i * {shape.wave_ns} + 1000000)"  # the session starts 1 ms before the first wave
    corr = f"(w.i * {ops_per_wave} + o.ord + 1)"
    gpu = f"{base} + o.gpu_start, {base} + o.gpu_end, 0, 1, {STREAM}, {corr}, {gpid}"
    return {
        "NVTX_EVENTS": [
            f"""INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId)
                VALUES (0, 75, 'specnsys', {gtid}, {DOMAIN_ID})""",
            f"""{waves_cte}
            INSERT INTO NVTX_EVENTS (start, "end", eventType, rangeId, globalTid, endGlobalTid,
                                     textId, domainId, int64Value)
            SELECT {base} + n.start, {base} + n.end_, n.event_type,
                   CASE WHEN n.event_type = 60 THEN w.i * {shape.batch} + n.ord END,
                   {gtid}, CASE WHEN n.event_type = 60 THEN {gtid} END,
                   n.text_id, {DOMAIN_ID}, n.payload
            FROM w CROSS JOIN t_nvtx n""",
        ],
        "CUPTI_ACTIVITY_KIND_RUNTIME": [
            f"""{waves_cte}
            INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME
            SELECT {base} + o.launch, {base} + o.api_end, 1, {gtid}, {corr}, o.api_id, 0, NULL
            FROM w CROSS JOIN t_ops o"""
        ],
        "CUPTI_ACTIVITY_KIND_KERNEL": [
            f"""{waves_cte}
            INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL
            SELECT {gpu}, o.demangled_id, o.name_id, 1, 64, 132, 1, 1, 256, 1, 1, 0, 49152, NULL
            FROM w CROSS JOIN t_ops o WHERE o.kind = 0"""
        ],
        "CUPTI_ACTIVITY_KIND_MEMSET": [
            f"""{waves_cte}
            INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET
            SELECT {gpu}, 0, o.bytes, NULL, 2 FROM w CROSS JOIN t_ops o WHERE o.kind = 1"""
        ],
        "CUPTI_ACTIVITY_KIND_MEMCPY": [
            f"""{waves_cte}
            INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY
            SELECT {gpu}, o.bytes, 2, 2, 1, NULL FROM w CROSS JOIN t_ops o WHERE o.kind = 2"""
        ],
    }


def _fill_part(
    part: Path, table: str, statements: list[str], shape: Shape, sid: dict[str, int]
) -> None:
    part.unlink(missing_ok=True)
    con = sqlite3.connect(part, check_same_thread=False)
    try:
        con.execute("PRAGMA journal_mode = OFF")
        con.execute("PRAGMA synchronous = OFF")
        create_tables(con, [table])
        _templates(con, shape, sid)
        for sql in statements:
            con.execute(sql)
        con.commit()
    finally:
        con.close()


def build_export(path: Path, kernels: int, shape: Shape = Shape()) -> dict[str, int]:
    """Write an export with at least *kernels* kernel rows to *path*; returns row counts.

    Written to ``<path>.partial`` and renamed, so an interrupted build never leaves a file
    that looks complete. Journal and fsync are off: a benchmark input, not a database.
    """
    waves = max(1, -(-kernels // shape.kernels_per_wave))
    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA cache_size = -262144")  # 256 MiB page cache while bulk-inserting
    tables = [
        "StringIds",
        "ThreadNames",
        "PROCESSES",
        "EXPORT_META_DATA",
        "NVTX_EVENTS",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "TARGET_INFO_GPU",
    ]
    create_tables(con, tables)
    strings = [
        "specnsys",
        "python3",
        "EngineCore",
        *PHASE_NAMES,
        *API_NAMES,
        *KERNEL_NAMES,
        *(f"void {k}<__half>(__half const*, __half*, int)" for k in KERNEL_NAMES),
    ]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(strings, start=1)))
    sid = {s: i for i, s in enumerate(strings, start=1)}
    gtid = VM_BITS | (PID << 24) | TID
    gpid = VM_BITS | (PID << 24)
    con.execute("INSERT INTO ThreadNames VALUES (?, 0, ?)", (sid["EngineCore"], gtid))
    con.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (gpid, PID))
    # The metadata of the nsys installed here (2022.4.2), so its `nsys stats` accepts the file.
    con.executemany(
        "INSERT INTO EXPORT_META_DATA VALUES (?, ?)",
        [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
            ("EXPORT_PRODUCT_VERSION", "2022.4.2.1"),
            ("EXPORT_SCHEMA_VERSION", "3.0.0"),
            ("EXPORT_SCHEMA_VERSION_MAJOR", "3"),
            ("EXPORT_SCHEMA_VERSION_MINOR", "0"),
            ("EXPORT_SCHEMA_VERSION_MICRO", "0"),
        ],
    )
    con.execute(
        "INSERT INTO TARGET_INFO_GPU VALUES (?, 0, 'NVIDIA H200', '0000:19:00.0', "
        "150754820096, 4800000000000, 1980000000, 132, 'GPU-0', 'GH100', 0, 9, 0)",
        (VM_BITS,),
    )
    con.commit()
    fills = _fill_statements(shape, waves, sid, gtid, gpid)
    parts = {table: tmp.with_name(f"{tmp.name}.{table}") for table in fills}
    # One part file per big table, filled in parallel (sqlite3 releases the GIL while it
    # steps), then moved in with SQLite's transfer optimization (pages copied, not rows).
    with ThreadPoolExecutor(max_workers=max(1, min(len(fills), usable_cores()))) as pool:
        list(pool.map(lambda t: _fill_part(parts[t], t, fills[t], shape, sid), fills))
    for table, part in parts.items():
        con.execute("ATTACH ? AS part", (str(part),))
        con.execute(f'INSERT INTO main."{table}" SELECT * FROM part."{table}"')
        con.commit()
        con.execute("DETACH part")
        part.unlink()
    counts = {
        name: con.execute(f'SELECT max(rowid) FROM "{table}"').fetchall()[0][0] or 0
        for name, table in (
            ("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"),
            ("runtime", "CUPTI_ACTIVITY_KIND_RUNTIME"),
            ("nvtx", "NVTX_EVENTS"),
            ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
            ("memset", "CUPTI_ACTIVITY_KIND_MEMSET"),
        )
    }
    con.close()
    os.replace(tmp, path)
    return counts


def export_path(kernels: int, shape: Shape = Shape()) -> Path:
    """Where the export with at least *kernels* kernels of *shape* is kept (under bench/out/)."""
    waves = max(1, -(-kernels // shape.kernels_per_wave))
    return OUT / f"specdec_b{shape.batch}_s{shape.steps}_{waves}w.sqlite"


def ensure_export(kernels: int, shape: Shape = Shape()) -> tuple[Path, float | None]:
    """The export for *kernels* (built when missing) and the build time (None if reused)."""
    OUT.mkdir(exist_ok=True)
    path = export_path(kernels, shape)
    if path.exists():
        return path, None
    started = time.perf_counter()
    build_export(path, kernels, shape)
    return path, time.perf_counter() - started


# -- the bare scan -------------------------------------------------------------------------


def read_columns(path: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    """(table, [(column, kind)]) for every source column specnsys reads that this export has."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    out = []
    for read in (STRINGS, *(src for table in MODEL for src in table.sources)):
        if read.table not in tables:
            continue
        present = {r[1] for r in con.execute(f'PRAGMA table_info("{read.table}")')}
        # a coalesced column is read from several source columns: the scan reads each of them
        cols = [(name, c.kind) for c in read.columns for name in c.sources() if name in present]
        if cols:
            out.append((read.table, cols))
    con.close()
    return out


def bare_scan_script(path: Path) -> str:
    """One aggregate per source table over exactly the columns specnsys reads (those present)."""
    lines = []
    for table, cols in read_columns(path):
        terms = [f'total(length("{c}"))' if kind == "text" else f'total("{c}")' for c, kind in cols]
        lines.append(f'SELECT {", ".join(terms)} FROM "{table}";')
    return "\n".join(lines)


def bare_scan_command(path: Path) -> tuple[list[str], str]:
    """The ``sqlite3`` CLI command and its stdin script for the bare scan of *path*."""
    if not shutil.which("sqlite3"):
        raise RuntimeError("the sqlite3 command-line shell is not installed")
    return ["sqlite3", f"file:{path}?mode=ro&immutable=1"], bare_scan_script(path)


# -- running contenders ---------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One measured subprocess: wall time, peak RSS of it and its descendants, exit status."""

    wall_s: float
    peak_rss_mb: float
    returncode: int | None  # None: killed (at the timeout, or at the memory cap)
    stdout: str
    stderr: str
    killed_for_memory: bool = False
    cpu_s: float | None = None  # user + system time; None when killed before it could be read

    @property
    def timed_out(self) -> bool:
        return self.returncode is None and not self.killed_for_memory

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def session_rss_mb(sid: int) -> float:
    """Resident memory of every process in session *sid* (the command and its children)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid:  # field 6 of stat: the session id
                continue
            with open(f"/proc/{entry}/statm") as handle:
                total += int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    return total / 2**20


#: Runs the measured command and writes its own peak RSS and CPU time (user and system, of it
#: and the children it waited for) to a file. ``ru_maxrss`` of a process forked from a large
#: one includes the parent's memory at the fork (Linux records the old address space's
#: high-water mark at exec), so the command is spawned by this small interpreter instead of by
#: the benchmark process itself.
LAUNCHER = """
import os, sys
out, argv = sys.argv[1], sys.argv[2:]
pid = os.posix_spawnp(argv[0], argv, os.environ)
_, status, usage = os.wait4(pid, 0)
with open(out, "w") as handle:
    handle.write(f"{usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}")
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_measured(
    cmd: Sequence[str],
    *,
    timeout: float | None = None,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    rss_cap_mb: float | None = None,
) -> Run:
    """Run *cmd* in a new session; measure its wall time and its own peak RSS.

    At *timeout*, or when the session's resident memory passes *rss_cap_mb* (checked four
    times a second, so a contender cannot exhaust a machine shared with other work), the whole
    session is killed and ``returncode`` is None; the peak RSS is then the largest the
    checks saw.
    """
    with tempfile.NamedTemporaryFile(prefix="specnsys-rss-", delete=False) as handle:
        rss_file = Path(handle.name)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-S", "-I", "-c", LAUNCHER, str(rss_file), *cmd],
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    captured = {"out": "", "err": ""}

    def drain(stream: IO[str], key: str) -> None:
        captured[key] = stream.read()

    readers = [
        threading.Thread(target=drain, args=(proc.stdout, "out"), daemon=True),
        threading.Thread(target=drain, args=(proc.stderr, "err"), daemon=True),
    ]
    for reader in readers:
        reader.start()
    if stdin is not None and proc.stdin is not None:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:
            pass
    deadline = None if timeout is None else started + timeout
    over_memory = False
    seen_mb = 0.0
    next_check = 0.0
    code: int | None = None
    while True:
        status = proc.poll()
        if status is not None:
            code = status
            break
        now = time.perf_counter()
        if now >= next_check:
            next_check = now + 0.25
            current = session_rss_mb(proc.pid)
            seen_mb = max(seen_mb, current)
            over_memory = rss_cap_mb is not None and current > rss_cap_mb
        if over_memory or (deadline is not None and now > deadline):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
        time.sleep(0.01)
    wall = time.perf_counter() - started
    for reader in readers:
        reader.join(timeout=10)
    peak, cpu = seen_mb, None
    if code is not None:
        try:
            maxrss, cpu_text = rss_file.read_text().split()
            peak, cpu = int(maxrss) / 1024, float(cpu_text)
        except (OSError, ValueError):
            pass
    rss_file.unlink(missing_ok=True)
    return Run(wall, peak, code, captured["out"], captured["err"], over_memory, cpu)


def load_average() -> str:
    """``uptime``'s load averages (1, 5, 15 min): other work on the machine skews timings."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"
