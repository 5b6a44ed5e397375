"""sample_traces/make_gpu.sh and import_gpu.py: the round trip a lent GPU machine will make.

The machine has no nsys of its own, so make_gpu.sh runs Debian's relocatable
nsight-systems-target, streams the .qdstrm files into one xz stream in 15 MiB parts, and
import_gpu.py turns them into exports here. The end-to-end tests run the script's CPU path
(same script, ``--device cpu``) with that target, downloaded into a temporary folder with
``apt-get download`` (or taken from ``$SPECNSYS_NSYS_TARGET``: a .deb or an unpacked folder),
and import with the host nsys; they skip, saying why, where either is missing. The refusal
tests need no nsys: they build a capture folder in make_gpu.sh's format and break it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specnsys.ingest.nsys_rep import find_nsys

REPO = Path(__file__).resolve().parents[1]
MAKE = REPO / "sample_traces" / "make_gpu.sh"
IMPORT = REPO / "sample_traces" / "import_gpu.py"
HOST_IMPORTER = Path("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), **extra)
    env.pop("OUT", None)  # the device tool's variable would redirect make_gpu.sh's output
    return env


def run_import(*args: Path | str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(IMPORT), *map(str, args)], capture_output=True, text=True,
        env=_env(**env), timeout=300,
    )


def run_make(*args: Path | str, timeout_s: float = 600, **env: str
             ) -> subprocess.CompletedProcess[str]:
    """make_gpu.sh with this interpreter, and xz's fastest preset (the tests check the format,
    not the ratio; it halves the packing time). A run past *timeout_s* fails the test with the
    script's own log, which says which step it was in."""
    cmd = ["bash", str(MAKE), "--python", sys.executable, "--xz-preset", "1", *map(str, args)]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=_env(**env),
                              timeout=timeout_s, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        pytest.fail(f"make_gpu.sh still running after {timeout_s:g} s; its output:\n{out}")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- refusals, without nsys -----------------------------------------------------------------


def _pack(folder: Path, payloads: dict[str, bytes], part_size: int = 1 << 16) -> dict[str, Any]:
    """A folder as make_gpu.sh leaves it: payloads back to back in one xz stream, split."""
    folder.mkdir()
    captures, offset = [], 0
    for name, data in payloads.items():
        captures.append({"name": name, "status": "ok", "exit_status": 0, "stream_offset": offset,
                         "qdstrm_bytes": len(data), "qdstrm_sha256": _sha(data)})
        offset += len(data)
    packed = lzma.compress(b"".join(payloads.values()), format=lzma.FORMAT_XZ)
    parts = []
    for i in range(0, len(packed), part_size):
        name = f"captures.xz.part-{i // part_size:02d}"
        (folder / name).write_bytes(packed[i:i + part_size])
        parts.append({"name": name, "bytes": len(packed[i:i + part_size]),
                      "sha256": _sha(packed[i:i + part_size])})
    manifest = {"format": "specnsys-gpu-captures/1", "environment": {}, "captures": captures,
                "stream": {"complete": True, "parts": parts, "dropped_parts": []}, "notes": []}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return manifest


@pytest.fixture
def capture_dir(tmp_path: Path) -> Path:
    rng = random.Random(7)  # incompressible, so the stream has several parts
    _pack(tmp_path / "caps", {"spec_x": rng.randbytes(150_000), "base_x": rng.randbytes(90_000)})
    return tmp_path / "caps"


def _assert_refused(done: subprocess.CompletedProcess[str], dest: Path, words: str) -> None:
    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("import_gpu: error: "), done.stderr
    assert words in lines[0]
    assert not dest.exists() or list(dest.iterdir()) == []  # nothing half-imported, no temp


def test_intact_folder_passes_every_check_then_needs_nsys(capture_dir: Path, tmp_path: Path) -> None:
    """The control for the refusals below: the same folder unbroken gets past unpacking and
    sha256 checks and stops only at the missing nsys, leaving nothing in DEST."""
    dest = tmp_path / "dest"
    done = run_import(capture_dir, dest, SPECNSYS_NSYS=str(tmp_path / "no-nsys"))
    _assert_refused(done, dest, "nsys not found")


def test_missing_part_is_refused(capture_dir: Path, tmp_path: Path) -> None:
    (capture_dir / "captures.xz.part-01").unlink()
    dest = tmp_path / "dest"
    _assert_refused(run_import(capture_dir, dest), dest, "captures.xz.part-01: missing part")


def test_part_with_wrong_sha256_is_refused(capture_dir: Path, tmp_path: Path) -> None:
    part = capture_dir / "captures.xz.part-02"
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF  # same size, other content
    part.write_bytes(bytes(data))
    dest = tmp_path / "dest"
    _assert_refused(run_import(capture_dir, dest), dest, "part-02: sha256 differs")


def test_qdstrm_with_wrong_sha256_is_refused(capture_dir: Path, tmp_path: Path) -> None:
    manifest = json.loads((capture_dir / "manifest.json").read_text())
    manifest["captures"][1]["qdstrm_sha256"] = "0" * 64
    (capture_dir / "manifest.json").write_text(json.dumps(manifest))
    dest = tmp_path / "dest"
    _assert_refused(run_import(capture_dir, dest), dest, "base_x.qdstrm: sha256 differs")


def test_folder_without_manifest_is_refused(tmp_path: Path) -> None:
    (tmp_path / "caps").mkdir()
    dest = tmp_path / "dest"
    _assert_refused(run_import(tmp_path / "caps", dest), dest, "no manifest")


def test_make_gpu_refuses_a_target_without_nsys(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    done = run_make("--device", "cpu", tmp_path / "target", tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("make_gpu.sh: error: no target-linux-x64")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "no target-linux-x64/nsys" in manifest["notes"][-1]
    assert manifest["captures"] == []


# ---- processes: a capture's leftovers never hold the stream open, and are ended -------------

# nsys 2022.4 daemonizes its agent (its own session, parent 1) with every descriptor nsys had,
# and its launcher runs the program in yet another session: neither dies with nsys, nor with
# `timeout`'s process group. This stand-in target does the same, so that the test runs anywhere.
_LINGERING_NSYS = """#!/usr/bin/env bash
if [[ $1 == --version ]]; then echo "NVIDIA Nsight Systems version 2022.4.2.1-lingering"; exit 0; fi
base=""
while (($#)); do case $1 in -o) base=$2; shift 2 ;; *) shift ;; esac; done
head -c 300000 /dev/urandom >"$base.qdstrm"
setsid sleep 300 &  # the agent: a session of its own, every inherited descriptor
echo $! >>"$LINGER_PIDS"
if [[ -n ${LINGER_HANG:-} ]]; then sleep 300; fi  # a capture that never finishes
exit 0
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("hang", [False, True], ids=["finishes", "hangs"])
def test_lingering_capture_processes_neither_stall_the_run_nor_survive_it(
    tmp_path: Path, hang: bool
) -> None:
    """The CI hang of 2026-12-01: a capture process that outlived its nsys kept the packer's
    pipe open, and make_gpu.sh waited for the stream's end until it was killed at 600 s. Now
    captures get no descriptor of the stream, and whatever a capture started (found by its mark,
    never by name) is ended after it; a look-alike process the run did not start survives."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "nsys").write_text(_LINGERING_NSYS)
    (target / "nsys").chmod(0o755)
    pids = tmp_path / "pids"
    pids.touch()
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    env = {"LINGER_PIDS": str(pids)} | ({"LINGER_HANG": "1"} if hang else {})
    try:
        done = run_make("--device", "cpu", "--capture-timeout-s", "3", target, tmp_path / "out",
                        timeout_s=120, **env)
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) == 2, done.stdout + done.stderr
        survivors = [p for p in started if _alive(p)]
        assert survivors == [], f"left running: {survivors}"
        assert _alive(bystander.pid)
        manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
        want = ("failed_with_stream", 124) if hang else ("ok", 0)
        assert [(c["status"], c["exit_status"]) for c in manifest["captures"]] == [want] * 2
        for cap, pid in zip(manifest["captures"], started, strict=True):
            assert f"SIGTERM to pid {pid}" in cap["ended"], cap  # the record says what went
        assert manifest["stream"]["xz_exit_status"] == 0
        assert manifest["stream"]["uncompressed_bytes"] == 600000
        assert done.returncode == (1 if hang else 0), done.stdout + done.stderr
    finally:
        for p in [int(p) for p in pids.read_text().split()]:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        bystander.kill()
        bystander.wait()


# ---- the CPU path end to end, with the relocated target -------------------------------------


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nsight-systems-target as a .deb: $SPECNSYS_NSYS_TARGET, else apt-get download."""
    if find_nsys() is None or not HOST_IMPORTER.is_file():
        pytest.skip(f"needs nsys on PATH and the host importer {HOST_IMPORTER}")
    given = os.environ.get("SPECNSYS_NSYS_TARGET")
    if given:
        return Path(given)
    if shutil.which("apt-get") is None:
        pytest.skip("no $SPECNSYS_NSYS_TARGET and no apt-get to download nsight-systems-target")
    folder = tmp_path_factory.mktemp("nsys-target")
    done = subprocess.run(["apt-get", "download", "nsight-systems-target"], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    debs = list(folder.glob("nsight-systems-target_*.deb"))
    if done.returncode != 0 or not debs:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"apt-get download nsight-systems-target failed: {last}")
    return debs[0]


@pytest.fixture(scope="module")
def unpacked_target(target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The target as `dpkg -x` leaves it (make_gpu.sh's other form of TARGET)."""
    if target.is_dir():
        return target
    if shutil.which("dpkg") is None:
        pytest.skip("no dpkg to unpack the target .deb")
    root = tmp_path_factory.mktemp("target-root")
    subprocess.run(["dpkg", "-x", str(target), str(root)], check=True, timeout=300)
    return root


@pytest.fixture(scope="module")
def cpu_run(target: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("gpu-captures")
    # GPU metrics forced on: nsys refuses them without a GPU, which drives the retry path
    done = run_make("--device", "cpu", "--gpu-metrics", "on", target, out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


@pytest.mark.nsys
@pytest.mark.slow
def test_cpu_path_round_trip(cpu_run: tuple[Path, str], tmp_path: Path) -> None:
    out, log = cpu_run
    manifest = json.loads((out / "manifest.json").read_text())
    assert "Nsight Systems version 2022.4" in manifest["environment"]["nsys_version"]
    tried, *captures = manifest["captures"]
    assert (tried["name"], tried["status"], tried["exit_status"]) == (
        "spec_tiny_c4_k4.with_gpu_metrics", "failed", 1)
    assert "--gpu-metrics-device=0" in tried["command"] and "No such GPU" in tried["output_tail"]
    assert "stream_offset" not in tried
    assert [c["name"] for c in captures] == ["spec_tiny_c4_k4", "baseline_tiny_c4"]
    for c in captures:
        assert "gpu-metrics" not in c["command"]  # off after the first refusal
        assert (c["status"], c["exit_status"]) == ("ok", 0), c
        assert "-t nvtx,osrt" in c["command"] and "--device cpu" in c["command"]
    stream = manifest["stream"]
    assert stream["complete"] and stream["xz_exit_status"] == 0
    assert stream["uncompressed_bytes"] == sum(c["qdstrm_bytes"] for c in captures)
    for p in stream["parts"]:
        data = (out / p["name"]).read_bytes()
        assert len(data) <= 15 * 2**20 and _sha(data) == p["sha256"]
    assert sorted(f.name for f in out.iterdir()) == sorted(
        ["manifest.json", "make_gpu.log"] + [p["name"] for p in stream["parts"]])
    assert "2 of 2 captures ok" in log and (out / "make_gpu.log").read_text() == log

    dest = tmp_path / "traces"
    done = run_import(out, dest)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [ln.split("\t")[:2] for ln in lines] == [
        ["spec_tiny_c4_k4", "ok"], ["baseline_tiny_c4", "ok"],
        ["spec_tiny_c4_k4.with_gpu_metrics", "failed on the device"]]
    assert "retried without --gpu-metrics-device" in lines[2]
    assert "acceptance_marks" in lines[0] and "kernels 0" in lines[0]
    assert sorted(f.name for f in dest.iterdir()) == ["baseline_tiny_c4.sqlite",
                                                      "spec_tiny_c4_k4.sqlite"]
    spec = dest / "spec_tiny_c4_k4.sqlite"
    info = subprocess.run([sys.executable, "-m", "specnsys", "info", "--json", str(spec)],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["nvtx_domains"] == ["specnsys"]
    phases = subprocess.run([sys.executable, "-m", "specnsys", "phases", str(spec)],
                            capture_output=True, text=True, env=_env(), timeout=120)
    assert phases.returncode == 0, phases.stderr
    rows = {ln.split()[0] for ln in phases.stdout.splitlines()[3:] if ln.strip()}
    assert {"draft", "verify", "sample", "total"} <= rows


@pytest.mark.nsys
@pytest.mark.slow
def test_stream_cut_short_yields_the_captures_before_the_cut(
    cpu_run: tuple[Path, str], tmp_path: Path
) -> None:
    """A run killed at the device tool's limit leaves no parts list and a stream that ends
    early: the captures wholly inside it still import, the rest are named as incomplete."""
    out, _ = cpu_run
    cut = tmp_path / "cut"
    shutil.copytree(out, cut)
    manifest = json.loads((cut / "manifest.json").read_text())
    first = manifest["captures"][1]["qdstrm_bytes"]  # [0]: the refused GPU-metrics try
    packed = b"".join((cut / p["name"]).read_bytes() for p in manifest["stream"]["parts"])
    decomp, produced, fed = lzma.LZMADecompressor(), 0, 0
    while produced < first:  # the compressed length that holds the whole first capture
        produced += len(decomp.decompress(packed[fed:fed + 4096]))
        fed += 4096
    assert fed < len(packed) - 1024, "the second capture must still be cut off"
    for p in manifest["stream"]["parts"]:
        (cut / p["name"]).unlink()
    (cut / "captures.xz.part-00").write_bytes(packed[:fed])
    manifest["stream"] = None
    (cut / "manifest.json").write_text(json.dumps(manifest))

    dest = tmp_path / "traces"
    done = run_import(cut, dest)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("import_gpu: note: the manifest lists no parts")
    assert lines[1].split("\t")[:2] == ["spec_tiny_c4_k4", "ok"]
    assert lines[2].split("\t")[:2] == ["baseline_tiny_c4", "not imported"]
    assert "incomplete" in lines[2]
    assert [f.name for f in dest.iterdir()] == ["spec_tiny_c4_k4.sqlite"]


@pytest.mark.nsys
@pytest.mark.slow
def test_failed_capture_is_recorded_not_hidden(unpacked_target: Path, tmp_path: Path) -> None:
    """The CUDA plan on a machine without a GPU: the workload exits 1 under nsys; the manifest
    says so with its exit status and last lines, and the script still finishes the stream.
    With 1 MiB parts the stream is cut to the 6 parts that fit the device tool's 8 files, the
    rest dropped and listed; the import names the capture incomplete."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the CUDA plan would succeed here")
    out = tmp_path / "out"
    done = run_make("--only", "baseline_small_c4", "--part-mib", "1", unpacked_target, out)
    assert done.returncode == 1, done.stdout + done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["environment"]["gpu_metrics"] == "off"
    [cap] = manifest["captures"]
    assert cap["name"] == "baseline_small_c4"
    assert cap["status"] in ("failed", "failed_with_stream") and cap["exit_status"] == 1
    assert "torch.cuda.is_available() is False" in cap["output_tail"]
    assert "-t cuda,nvtx,osrt" in cap["command"] and "--cuda-memory-usage=true" in cap["command"]
    stream = manifest["stream"]
    assert stream["xz_exit_status"] == 0 and not stream["complete"]
    kept = [p["name"] for p in stream["parts"]]
    assert kept == [f"captures.xz.part-{i:02d}" for i in range(6)]
    assert stream["dropped_parts"][0] == "captures.xz.part-06"
    assert sorted(f.name for f in out.iterdir()) == sorted(["manifest.json", "make_gpu.log", *kept])
    assert "0 of 1 captures ok" in done.stdout and "dropped captures.xz.part-06" in done.stdout

    dest = tmp_path / "traces"
    imported = run_import(out, dest)
    assert imported.returncode == 1, imported.stdout + imported.stderr
    lines = imported.stdout.splitlines()
    assert lines[0].startswith("import_gpu: note: parts dropped on the device")
    assert lines[1].split("\t")[:2] == ["baseline_small_c4", "not imported"]
    assert "incomplete" in lines[1] and list(dest.iterdir()) == []


@pytest.mark.nsys
@pytest.mark.slow
def test_captures_past_the_deadline_are_recorded_as_skipped(
    unpacked_target: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = run_make("--device", "cpu", "--deadline-s", "0", unpacked_target, out)
    assert done.returncode == 1  # nothing captured is not a success
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(c["name"], c["status"]) for c in manifest["captures"]] == [
        ("spec_tiny_c4_k4", "skipped"), ("baseline_tiny_c4", "skipped")]
    assert all("deadline" in c["reason"] for c in manifest["captures"])
    assert manifest["stream"]["uncompressed_bytes"] == 0
