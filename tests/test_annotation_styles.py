"""Issue 29 on real captures: one draft forward and p, whatever the annotation style.

The unedited fixture loop (tests/fixtures/unedited_spec.py) is captured under ``specnsys
profile --annotate`` with its draft hooked three ways: each draft forward (the walkthrough's
file), each draft step (``propose``, k forwards inside), and both nested. The draft cost
ratio c must be one draft forward over one verify in every style, and the best k follow from
it. A fourth capture hooks the target's own ``forward`` method, which the prefill calls as
every decode step does: the prefill's forwards are prefill work, and p leaves them out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specnsys.ingest.nsys_rep import find_nsys
from specnsys.metrics import amdahl

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "unedited_spec.py"
FIXTURE_TOML = REPO / "tests" / "fixtures" / "unedited_spec.toml"

pytestmark = [
    pytest.mark.nsys,
    pytest.mark.slow,
    pytest.mark.skipif(find_nsys() is None, reason="nsys is not on PATH"),
]

PER_FORWARD = FIXTURE_TOML.read_text()
#: The draft step: ``propose`` instead of the draft instance's forward (no object to pick).
PER_STEP = PER_FORWARD[PER_FORWARD.index("[[hook]]") :].replace(
    'on = "draft.forward"', 'on = "__main__:propose"'
)
NESTED = PER_FORWARD + '\n[[hook]]\non = "__main__:propose"\nphase = "draft"\n'
#: The target's forward method hooked (it runs in the prefill too), the prefill around it.
TARGET_FORWARD = """
[objects.target]
factory = "__main__:build_model"
where = "arg:name"
equals = "target"

[[hook]]
on = "target.forward"
phase = "forward"

[[hook]]
on = "__main__:generate"
phase = "request"
output_tokens = "len(return)"

[[hook]]
on = "__main__:prefill"
phase = "prefill"
tokens = "len(return)"

[[hook]]
on = "__main__:baseline_step"
phase = "decode"
tokens = "len(return)"

[[hook]]
on = "__main__:greedy"
phase = "sample"
"""


def _specnsys(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specnsys", *args], env=env, capture_output=True, text=True,
        cwd=REPO, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("styles")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECNSYS_ANNOTATE")}
    env.update(PYTHONPATH=str(REPO), SPECNSYS_CACHE_DIR=str(folder / "cache"))
    styles = {
        "per_forward": (PER_FORWARD, "spec"),
        "per_step": (PER_STEP, "spec"),
        "nested": (NESTED, "spec"),
        "target_forward": (TARGET_FORWARD, "baseline"),
    }
    out = {}
    for name, (toml, mode) in styles.items():
        annot = folder / f"{name}.toml"
        annot.write_text(toml)
        done = _specnsys(
            "profile", "--annotate", str(annot), "-o", str(folder / name), "--",
            sys.executable, str(FIXTURE), "--mode", mode, "--k", "4", "--requests", "3",
            env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out[name] = folder / f"{name}.sqlite"
    return out


def _analyze(path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = _specnsys("analyze", str(path), "--json", env=env)
    assert done.returncode == 0, done.stderr
    doc: dict = json.loads(done.stdout)
    return doc


def _mean_ms(path: Path, sql: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = _specnsys("sql", str(path), sql, "--format", "json", env=env)
    assert done.returncode == 0, done.stderr
    value: float = json.loads(done.stdout)[0]["v"]
    return value


_MEAN_DURATION = """SELECT avg(duration) AS v FROM nvtx WHERE kind = 'push_pop' AND domain =
    'specnsys' AND text = '{phase}'"""
#: Draft ranges that hold no draft range: the draft forwards when both are hooked.
_MEAN_INNERMOST_DRAFT = """SELECT avg(o.duration) AS v FROM nvtx o
    WHERE o.kind = 'push_pop' AND o.domain = 'specnsys' AND o.text = 'draft'
      AND o.start >= (SELECT min(start) FROM nvtx WHERE text = 'request')  -- not the warm-up
      AND NOT EXISTS (SELECT 1 FROM nvtx i WHERE i.kind = 'push_pop' AND i.text = 'draft'
                      AND i.global_tid = o.global_tid AND i.id <> o.id
                      AND i.start >= o.start AND i."end" <= o."end")"""


@pytest.mark.parametrize("style", ["per_forward", "nested"])
def test_c_is_one_draft_forward_over_one_verify(captures: dict[str, Path], style: str) -> None:
    """c is the mean innermost draft range over the mean verify range: on the walkthrough's
    file (a range per draft forward), and nested, where the innermost ranges time the
    forwards apart."""
    path = captures[style]
    doc = _analyze(path)
    innermost = _mean_ms(path, _MEAN_INNERMOST_DRAFT) / _mean_ms(
        path, _MEAN_DURATION.format(phase="verify")
    )
    assert doc["draft_cost_ratio"] == pytest.approx(innermost, rel=0.05)
    assert doc["draft_forwards_source"] == {
        "per_forward": "repeated_draft_ranges", "nested": "nested_draft_ranges"
    }[style]  # fmt: skip
    assert doc["draft_forwards_per_step"] == pytest.approx(4, rel=0.1)  # k = 4, a few cut short
    # the best k is Leviathan's at this trace's alpha and c
    a, w = doc["acceptance"], doc["whatif"]
    assert w["c"] == doc["draft_cost_ratio"]
    assert w["best_k"] == amdahl.best_k(a["alpha"], doc["draft_cost_ratio"])[0]
    assert not [x for x in doc["warnings"] if x.startswith("annotation structure")]


#: The nested capture's draft ranges, by text or by StringIds (either nsys layout).
_DRAFT_ROWS = """SELECT rowid, start, "end", globalTid FROM NVTX_EVENTS
    WHERE coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) = 'draft'"""


def _one_style_of(nested: Path, out: Path, keep: str) -> Path:
    """A copy of the nested capture with one hook style's draft ranges only: ``inner`` keeps
    the per-forward ranges (drops the ``propose`` ranges that hold them), ``outer`` keeps the
    per-step ranges. One run seen through each style: no run-to-run noise between them."""
    import shutil
    import sqlite3

    shutil.copyfile(nested, out)
    db = sqlite3.connect(out)
    try:
        drafts = db.execute(_DRAFT_ROWS).fetchall()
        outer = {
            r for r, s, e, t in drafts
            if any(i != r and tt == t and s <= ss and ee <= e for i, ss, ee, tt in drafts)
        }  # fmt: skip
        drop = outer if keep == "inner" else {r for r, *_ in drafts} - outer
        assert outer and drop, (len(drafts), len(outer))
        db.executemany("DELETE FROM NVTX_EVENTS WHERE rowid = ?", [(r,) for r in drop])
        db.commit()
    finally:
        db.close()
    return out


def test_c_agrees_whatever_the_draft_hook_style(captures: dict[str, Path], tmp_path: Path) -> None:
    """The same c per forward and nested, and per step the same up to the measured host time
    between a step's forwards. Compared on one run (the
    nested capture seen through each style) so that the check is about the hook style, not
    about two captures' timing (separate captures of this CPU loop differ by 10 % and more
    on a loaded machine); each real capture's own c is checked against its own ranges above
    and below."""
    nested = captures["nested"]
    docs = {
        "nested": _analyze(nested),
        "per_forward": _analyze(_one_style_of(nested, tmp_path / "f.sqlite", keep="inner")),
        "per_step": _analyze(_one_style_of(nested, tmp_path / "s.sqlite", keep="outer")),
    }
    sources = {style: d["draft_forwards_source"] for style, d in docs.items()}
    assert sources == {"nested": "nested_draft_ranges", "per_forward": "repeated_draft_ranges",
                       "per_step": "proposed_marks"}  # fmt: skip
    c = {style: d["draft_cost_ratio"] for style, d in docs.items()}
    # nested and per-forward time the same ranges: one c
    assert c["nested"] == pytest.approx(c["per_forward"], rel=1e-9), c
    # per step: the step's draft time over the forwards it proposed, so it is larger than per
    # forward by exactly the host time between the forwards inside a step: the ratio of the two
    # c is the ratio of one step's range per forward to one forward's range, on the same run.
    # (A fixed band, 10 %, held on a quiet machine, 5.4 %, and failed under load, 13.2 %: the
    # gap is the machine's time between forwards, not the product's error.)
    per_step_range = _mean_ms(tmp_path / "s.sqlite", _MEAN_DURATION.format(phase="draft"))
    forward_range = _mean_ms(tmp_path / "f.sqlite", _MEAN_DURATION.format(phase="draft"))
    between = per_step_range / docs["per_step"]["draft_forwards_per_step"] / forward_range
    assert between >= 1, between  # a step's range holds its forwards
    assert c["per_step"] / c["per_forward"] == pytest.approx(between, rel=0.05), (c, between)


def test_the_per_step_capture_takes_one_draft_forward_from_the_proposed_marks(
    captures: dict[str, Path],
) -> None:
    """The real per-step capture (``propose`` hooked, k forwards inside each range): c is one
    draft step's mean range over the forwards it proposed, over one verify -- not the whole
    step's time (k times too large) -- whatever another capture's timing was."""
    path = captures["per_step"]
    doc = _analyze(path)
    assert doc["draft_forwards_source"] == "proposed_marks"
    assert doc["draft_forwards_per_step"] == pytest.approx(4, rel=0.1)
    step = _mean_ms(path, _MEAN_DURATION.format(phase="draft"))
    verify = _mean_ms(path, _MEAN_DURATION.format(phase="verify"))
    expected = step / doc["draft_forwards_per_step"] / verify
    assert doc["draft_cost_ratio"] == pytest.approx(expected, rel=0.05)


def test_the_prefills_forwards_are_prefill_and_p_leaves_them_out(captures: dict[str, Path]) -> None:
    path = captures["target_forward"]
    doc = _analyze(path)
    assert doc["mode"] == "baseline"
    # the decode forwards by hand: target forward ranges that no prefill range holds
    # (inside the requests: the script's warm-up forward runs before the first one)
    decode_forward = _mean_ms(path, """
        SELECT sum(f.duration) AS v FROM nvtx f WHERE f.kind = 'push_pop' AND f.text = 'forward'
          AND f.start >= (SELECT min(start) FROM nvtx WHERE text = 'request')
          AND NOT EXISTS (SELECT 1 FROM nvtx p WHERE p.kind = 'push_pop' AND p.text = 'prefill'
                          AND p.global_tid = f.global_tid
                          AND p.start <= f.start AND f."end" <= p."end")""")
    assert doc["p"] == pytest.approx(decode_forward / doc["window_ns"], abs=0.01)
    prefills = doc["phases"]["prefill"]
    assert prefills["ranges"] == 3  # one per request, its forward inside is part of it
    assert doc["nesting"]["reassigned"] == {"forward->prefill": 3}
    assert doc["phases"]["forward"]["ranges"] == doc["steps"]  # one per decode step
