"""Import what ``sample_traces/make_gpu.sh`` brought back: verify, unpack, import, export.

Usage: ``python sample_traces/import_gpu.py CAPTURE_DIR [DEST]`` (DEST: ./gpu-traces).

CAPTURE_DIR holds ``manifest.json`` and the ``captures.xz.part-NN`` files: one xz stream of the
captures' ``.qdstrm`` files back to back, in manifest order. The device machine has only the
nsys *target*; the stream is turned into a report here by the host's ``QdstrmImporter`` (found
the way ``specnsys profile`` finds it), exported with ``nsys export --type sqlite`` and opened
with ``specnsys info``. One line per capture on stdout.

Refusals come first and leave nothing behind: a part the manifest lists that is missing, of
the wrong size or sha256, or a ``.qdstrm`` whose sha256 differs from the manifest's, is one
``import_gpu: error: ...`` line on stderr and exit status 2 before anything is imported.
Everything is unpacked and exported under a private folder in DEST; only a finished export is
renamed to ``DEST/NAME.sqlite``. A stream cut short on the device (the run reached its time
limit, or parts were dropped to fit the return limit) still yields every capture before the
cut; the ones after it are reported as incomplete. Exit status: 0 when every capture in the
stream was imported, 1 when some could not be (incomplete, importer or export failure),
2 on bad input.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import lzma
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specnsys.capture import _import_stream  # the importer search `specnsys profile` uses
from specnsys.errors import SpecnsysError
from specnsys.ingest.nsys_rep import export_report_to, find_nsys

PROG = "import_gpu"
PART_GLOB = "captures.xz.part-*"
CHUNK = 1 << 20


class BadInput(Exception):
    """Input that cannot be trusted: reported as one line, exit status 2, nothing imported."""


@dataclass
class Capture:
    name: str
    offset: int
    size: int
    sha256: str
    path: Path | None = None  # the verified .qdstrm under the private folder
    problem: str | None = None  # why it was not imported


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def load_manifest(folder: Path) -> dict[str, Any]:
    path = folder / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"{path}: no manifest (is {folder} a make_gpu.sh output folder?)") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("captures"), list):
        raise BadInput(f"{path}: not a make_gpu.sh manifest (no captures list)")
    return manifest


def checked_parts(folder: Path, manifest: dict[str, Any]) -> tuple[list[Path], str | None]:
    """The stream's parts in order, each checked against the manifest when it lists them;
    with the note to print when the manifest does not (the run was cut before it could)."""
    stream = manifest.get("stream")
    if not stream or not isinstance(stream.get("parts"), list):
        found = sorted(folder.glob(PART_GLOB))
        if not found:
            raise BadInput(f"{folder}: no {PART_GLOB} files")
        return found, "the manifest lists no parts (make_gpu.sh was cut short): reading those here"
    parts = []
    for entry in stream["parts"]:
        path = folder / entry["name"]
        if not path.is_file():
            raise BadInput(f"{path}: missing part listed in the manifest")
        if path.stat().st_size != entry["bytes"]:
            raise BadInput(f"{path}: {path.stat().st_size} bytes, the manifest says {entry['bytes']}")
        if _sha256(path) != entry["sha256"]:
            raise BadInput(f"{path}: sha256 differs from the manifest's")
        parts.append(path)
    if not parts:
        raise BadInput(f"{folder}: the manifest lists no parts")
    note = None
    if stream.get("dropped_parts"):
        note = f"parts dropped on the device to fit the return limit: {stream['dropped_parts']}"
    return parts, note


def streamed(manifest: dict[str, Any]) -> list[Capture]:
    """The captures whose .qdstrm went into the stream, in stream order."""
    caps = [
        Capture(c["name"], c["stream_offset"], c["qdstrm_bytes"], c["qdstrm_sha256"])
        for c in manifest["captures"]
        if "stream_offset" in c
    ]
    caps.sort(key=lambda c: c.offset)
    expected = 0
    for c in caps:
        if c.offset != expected:
            raise BadInput(f"manifest: {c.name} starts at byte {c.offset}, expected {expected}")
        expected += c.size
    return caps


def _decompressed(parts: list[Path]) -> Iterator[bytes]:
    """The stream's bytes; stops quietly where the parts end (a stream cut short)."""
    decomp = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    for part in parts:
        with part.open("rb") as f:
            while block := f.read(CHUNK):
                try:
                    yield decomp.decompress(block)
                except lzma.LZMAError as exc:
                    raise BadInput(f"{part}: not a valid xz stream: {exc}") from None
                if decomp.eof:
                    return


def unpack(parts: list[Path], caps: list[Capture], work: Path) -> None:
    """Write each capture's .qdstrm under *work*, verifying its sha256; a capture the stream
    ends inside is marked incomplete, a complete one with another sha256 is bad input."""
    pending = iter(caps)
    current = next(pending, None)
    out: io.BufferedWriter | None = None
    digest = hashlib.sha256()
    written = 0
    try:
        for data in _decompressed(parts):
            view = memoryview(data)
            while view and current is not None:
                if out is None:
                    current.path = work / f"{current.name}.qdstrm"
                    out, digest, written = current.path.open("wb"), hashlib.sha256(), 0
                take = view[: current.size - written]
                out.write(take)
                digest.update(take)
                written += len(take)
                view = view[len(take):]
                if written == current.size:
                    out.close()
                    out = None
                    if digest.hexdigest() != current.sha256:
                        raise BadInput(f"{current.name}.qdstrm: sha256 differs from the manifest's")
                    current = next(pending, None)
    finally:
        if out is not None:
            out.close()
    for c in [current, *pending] if current is not None else []:
        c.problem = "incomplete: the stream ends before its last byte (run cut short on the device)"
        if c.path is not None:
            c.path.unlink(missing_ok=True)
            c.path = None


def info_line(export: Path) -> str:
    """What ``specnsys info --json`` says of *export*, in one line."""
    from specnsys.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()) as err:
        status = main(["info", "--json", str(export)])
    if status != 0:
        return f"specnsys info failed ({status}): {err.getvalue().strip()}"
    info = json.loads(buf.getvalue())
    rows = info["row_counts"]
    caps = info["capabilities"]
    usable = [k for k, v in caps.items() if v["available"]]
    return (
        f"nsys {info['version']['product_version']}  span {info['span_ns'] / 1e9:.3f} s  "
        f"nvtx {rows['nvtx']}  cuda api {rows['runtime']}  kernels {rows['kernels']}  "
        f"memcpy {rows['memcpy']}  gpu metrics {rows['gpu_metrics']}  "
        f"supports: {', '.join(usable) or 'nothing'}"
    )


def import_one(nsys: str, cap: Capture, work: Path, dest: Path) -> Path:
    assert cap.path is not None
    report = cap.path.with_suffix(".nsys-rep")
    _import_stream(nsys, cap.path, report, os.environ)
    staged = work / f"{cap.name}.sqlite"
    export_report_to(nsys, report, staged)
    final = dest / f"{cap.name}.sqlite"
    os.replace(staged, final)
    return final


def run(folder: Path, dest: Path) -> int:
    manifest = load_manifest(folder)
    parts, note = checked_parts(folder, manifest)
    caps = streamed(manifest)
    dest.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{PROG}-", dir=dest))
    try:
        unpack(parts, caps, work)  # every input check comes before any need for nsys
        nsys = find_nsys()
        if nsys is None:
            raise BadInput("nsys not found (set SPECNSYS_NSYS or put nsys on PATH)")
        if note:
            print(f"{PROG}: note: {note}")
        failed = 0
        for cap in caps:
            if cap.path is not None:
                try:
                    final = import_one(nsys, cap, work, dest)
                except SpecnsysError as exc:
                    cap.problem = f"import failed: {exc}"
                else:
                    print(f"{cap.name}\tok\t{final}\t{info_line(final)}", flush=True)
                    continue
            failed += 1
            print(f"{cap.name}\tnot imported\t-\t{cap.problem}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for c in manifest["captures"]:
        if "stream_offset" not in c:
            why = c.get("reason") or f"exit status {c.get('exit_status')}"
            tail = (c.get("output_tail") or "").strip().splitlines()
            last = f"; last line: {tail[-1]}" if tail else ""
            print(f"{c['name']}\t{c.get('status')} on the device\t-\t{why}{last}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2 or args[0].startswith("-"):
        print(f"usage: python sample_traces/import_gpu.py CAPTURE_DIR [DEST]\n{__doc__}",
              file=sys.stderr)
        return 2
    dest = Path(args[1]) if len(args) == 2 else Path("gpu-traces")
    try:
        return run(Path(args[0]), dest)
    except BadInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
