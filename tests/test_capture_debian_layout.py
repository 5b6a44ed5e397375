"""``specnsys profile`` on Debian's Nsight Systems without the importer link ``.ci/run`` used to make.

Debian's ``nsight-systems`` installs the nsys binary in ``/usr/lib/x86_64-linux-gnu/
nsight-systems/target-linux-x64`` and its ``QdstrmImporter`` in ``/usr/lib/nsight-systems/
host-linux-x64``; nsys looks for the importer only beside its real binary, so without a link
``<lib>/x86_64-linux-gnu/nsight-systems/host-linux-x64`` every capture printed nsys's "Importer
error status ..." lines and stopped at a ``.qdstrm`` stream (issue 30).

The link must not be removed for the test (other captures run on this machine at the same time),
so the test builds a private copy of Debian's layout without it: every file of the real
``target-linux-x64`` folder linked, except the nsys binary itself, which is copied (nsys finds its
importer from its real executable, ``/proc/self/exe``, which a link would lead back to the real
installation and its link), and ``SPECNSYS_NSYS`` points at the copy's ``bin/nsys``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import specnsys
from specnsys import capture
from specnsys.capture import CaptureError, find_importer, profile
from specnsys.ingest.nsys_rep import find_nsys
from tests.test_capture import FAILING_PROGRAM

pytestmark = [
    pytest.mark.nsys,
    pytest.mark.skipif(find_nsys() is None, reason="nsys is not on PATH"),
]

_ARCH = "x86_64-linux-gnu"


def _debian_layout(root: Path, *, with_host: bool) -> Path:
    """Debian's layout of nsys under *root* (``lib/nsight-systems/bin/nsys`` ->
    ``../target-linux-x64/nsys``, ``lib/nsight-systems/target-linux-x64`` ->
    ``../x86_64-linux-gnu/nsight-systems/target-linux-x64``; *with_host*: a
    ``lib/nsight-systems/host-linux-x64`` holding the real importer), without the link
    ``lib/x86_64-linux-gnu/nsight-systems/host-linux-x64``. Returns ``bin/nsys``."""
    nsys = find_nsys()
    assert nsys is not None
    real_binary = Path(nsys).resolve()
    importer = find_importer(nsys)
    if real_binary.parent.name != "target-linux-x64" or importer is None:
        pytest.skip(f"nsys at {real_binary} is not in a target-linux-x64/host-linux-x64 layout")
    lib = root / "lib"
    target = lib / _ARCH / "nsight-systems" / "target-linux-x64"
    target.mkdir(parents=True)
    for entry in real_binary.parent.iterdir():
        if entry.name != real_binary.name:
            (target / entry.name).symlink_to(entry)
    shutil.copy2(real_binary, target / real_binary.name)  # a real file: see the module doc
    home = lib / "nsight-systems"
    (home / "bin").mkdir(parents=True)
    (home / "target-linux-x64").symlink_to(Path("..") / _ARCH / "nsight-systems" / target.name)
    (home / "bin" / "nsys").symlink_to(Path("..") / "target-linux-x64" / "nsys")
    if with_host:
        (home / "host-linux-x64").symlink_to(importer.parent)
    assert not (lib / _ARCH / "nsight-systems" / "host-linux-x64").exists()
    return home / "bin" / "nsys"


@pytest.fixture(scope="module")
def debian_nsys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _debian_layout(tmp_path_factory.mktemp("debian"), with_host=True)


def test_the_layout_hides_the_importer_from_nsys(debian_nsys: Path, tmp_path: Path) -> None:
    """The control: nsys of the private layout cannot import (so the tests below test the
    case of the issue), while the real link is still in place for everyone else."""
    done = subprocess.run(
        [str(debian_nsys), "profile", "-t", "nvtx,osrt", *capture.SAFE_FLAGS,
         "--export=sqlite", "-o", str(tmp_path / "raw"), sys.executable, "-c", "pass"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert "Unable to retrieve the importer version" in done.stdout + done.stderr
    assert (tmp_path / "raw.qdstrm").is_file() and not (tmp_path / "raw.sqlite").exists()


def _profile_cli(nsys: Path, out: Path, *program: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specnsys", "profile", "-o", str(out), "--", *program],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "SPECNSYS_NSYS": str(nsys)},
    )  # fmt: skip


def test_profile_without_the_link_prints_only_the_program_output(
    debian_nsys: Path, tmp_path: Path
) -> None:
    """Issue 30's command: ``profile -- python -c "print(1)"`` prints ``1`` and the export's
    path, nothing of nsys's importer, and the export holds the capture."""
    done = _profile_cli(debian_nsys, tmp_path / "run", sys.executable, "-c", "print(1)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1", str(tmp_path / "run.sqlite")]
    assert done.stderr == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.log", "run.sqlite"]
    assert "Importer" not in (tmp_path / "run.log").read_text()
    with specnsys.open(tmp_path / "run.sqlite", use_cache=False) as t:
        assert t.summary.row_counts["processes"] > 0


def test_a_failing_program_ends_with_its_own_lines_without_the_link(
    debian_nsys: Path, tmp_path: Path
) -> None:
    """tests/test_capture.py's output test on this layout: the last stderr lines are the
    program's traceback and specnsys's one line, not nsys's importer error."""
    done = _profile_cli(debian_nsys, tmp_path / "run", sys.executable, "-c", FAILING_PROGRAM)
    assert done.returncode == 1, done.stderr
    assert done.stdout == "to stdout\n"
    err = done.stderr.splitlines()
    assert err[0] == "to stderr" and "Traceback (most recent call last):" in err
    assert err[-2] == "ZeroDivisionError: division by zero"
    assert err[-1].startswith("specnsys: error: the profiled command failed (exit status 1)")
    assert not any("Importer" in line for line in err)


def test_no_importer_anywhere_is_one_line_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the host half of Nsight Systems (nor Debian's folder of it), the capture fails
    with one line naming what to install or link, and nothing of nsys's on the way."""
    nsys = _debian_layout(tmp_path / "root", with_host=False)
    monkeypatch.setattr(capture, "DEBIAN_HOST_DIRS", (tmp_path / "no-such-host",))
    monkeypatch.setenv("SPECNSYS_NSYS", str(nsys))
    assert find_importer(str(nsys)) is None
    with pytest.raises(CaptureError) as caught:
        profile([sys.executable, "-c", "pass"], tmp_path / "out" / "run", echo=False,
                timeout_s=300)  # fmt: skip
    message = str(caught.value)
    assert "\n" not in message
    assert "no QdstrmImporter was found" in message and "apt install nsight-systems" in message
    assert str(tmp_path / "root" / "lib" / _ARCH / "nsight-systems" / "host-linux-x64") in message
    assert not (tmp_path / "out" / "run.sqlite").exists()


def test_the_importer_is_found_through_each_link_of_the_binary(debian_nsys: Path) -> None:
    """``bin/nsys`` -> ``../target-linux-x64/nsys``, whose folder is a link: the importer is
    the ``host-linux-x64`` beside that link, found before Debian's fixed folder."""
    found = find_importer(str(debian_nsys))
    assert found == debian_nsys.parent.parent / "host-linux-x64" / "QdstrmImporter"
