"""Issue 34, item 1: the analysis window (``--window auto|requests|A:B|steps:N-M``).

Built CPU-only loops whose warm-up is known: ``auto`` drops exactly the slow first steps and
the compile span before them, and the analysis over that window equals the analysis of the
same loop built without its warm-up. Slices by milliseconds and by steps cut where asked;
bad windows are one line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import specnsys
from specnsys.attribution.window import MIN_STEPS, parse_window, steady_state
from specnsys.cli.main import main
from specnsys.errors import BadInputError
from specnsys.metrics.analysis import Analysis
from specnsys.testing.builder import NsysExportBuilder

STEP = 1_000  # ns of a steady decode step
WARM = 3  # warm-up steps, 10x slower


def _loop(
    *, warm_up: bool, compile_span: bool = True, steps: int = 20, start: int = 0
) -> NsysExportBuilder:
    """A baseline loop from *start*: [compile span], WARM slow steps, then *steps* steady
    ones; each step is decode > forward (70 %) + sample (20 %) and a tokens mark. One request
    spans it."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    t = start
    first = start
    if warm_up:
        if compile_span:
            b.push_pop(0, 5_000, "torch.compile: compile_fx", pid=1, tid=1)
            t = 5_000
        for _ in range(WARM):
            _step(b, t, 10 * STEP)
            t += 10 * STEP
        first = t
    for _ in range(steps):
        _step(b, t, STEP)
        t += STEP
    b.start_end(0 if warm_up else first, t, "request", pid=1, tid=1, domain_id=1)
    return b


def _step(b: NsysExportBuilder, t: int, length: int) -> None:
    b.push_pop(t, t + length, "decode", pid=1, tid=1, domain_id=1)
    b.push_pop(t + length // 10, t + 8 * length // 10, "forward", pid=1, tid=1, domain_id=1)
    b.push_pop(t + 8 * length // 10, t + length, "sample", pid=1, tid=1, domain_id=1)
    b.mark(t + length - 1, "tokens", pid=1, tid=1, domain_id=1, payload_int=1)


def _walls(a: Analysis) -> dict[str, int]:
    return {k: v["wall_ns"] for k, v in a.phases.items() if v["wall_ns"]}


def test_auto_drops_exactly_the_warm_up_and_equals_the_steady_state_run(tmp_path: Path) -> None:
    warm = _loop(warm_up=True).write(tmp_path / "warm.sqlite")
    # the same steady steps at the same times, without the warm-up before them
    steady = _loop(warm_up=False, start=5_000 + WARM * 10 * STEP).write(tmp_path / "steady.sqlite")
    auto = specnsys.analyze(warm, window="auto")
    ref = specnsys.analyze(steady)
    assert auto.window_rule == "auto"
    assert auto.window_dropped is not None
    assert auto.window_dropped["steps_before"] == WARM
    assert auto.window_dropped["before_ns"] == 5_000 + WARM * 10 * STEP
    assert len(auto.window_dropped["spans"]) == 1
    assert (auto.window_start_ns, auto.window_end_ns) == (ref.window_start_ns, ref.window_end_ns)
    assert _walls(auto) == _walls(ref)
    assert (auto.tokens, auto.steps, auto.per_token_ns, auto.p) == (
        ref.tokens, ref.steps, ref.per_token_ns, ref.p
    )  # fmt: skip
    # the default window keeps the warm-up: the share of forward is the same, time is not
    plain = specnsys.analyze(warm)
    assert plain.window_rule == "requests" and plain.steps == WARM + 20


def test_auto_without_a_compile_span_drops_the_slow_steps_only(tmp_path: Path) -> None:
    a = specnsys.analyze(_loop(warm_up=True, compile_span=False).write(tmp_path / "t.sqlite"),
                         window="auto")  # fmt: skip
    assert a.window_dropped is not None
    assert a.window_dropped["steps_before"] == WARM and a.window_dropped["spans"] == []
    assert a.steps == 20


def test_auto_keeps_a_run_without_warm_up_and_a_short_run_whole(tmp_path: Path) -> None:
    a = specnsys.analyze(_loop(warm_up=False).write(tmp_path / "s.sqlite"), window="auto")
    assert a.window_dropped is not None and a.window_dropped["before_ns"] == 0
    short = specnsys.analyze(
        _loop(warm_up=True, compile_span=False, steps=2).write(tmp_path / "short.sqlite"),
        window="auto",
    )
    assert short.steps == WARM + 2  # 5 steps: too few to judge, kept whole
    assert "fewer than" in short.window_dropped["why"]  # type: ignore[index]


def test_the_change_point_rule() -> None:
    assert steady_state([10] * 3 + [1] * 20)[0] == 3
    assert steady_state([1] * 20)[0] == 0
    # a slow step late in the run is the run's own
    assert steady_state([1] * 15 + [10] + [1] * 4)[0] == 0
    # noise within the band is not warm-up; ties and odd counts
    assert steady_state([14, 10, 10, 12, 10, 10, 10, 10, 10])[0] == 0  # durations are ints
    assert steady_state([2, 2, 1, 1, 1, 1, 1, 1, 1])[0] == 2
    assert steady_state([5] * (MIN_STEPS - 1))[0] == 0


def test_slices_by_milliseconds_and_by_steps(tmp_path: Path) -> None:
    path = _loop(warm_up=False).write(tmp_path / "s.sqlite")
    by_steps = specnsys.analyze(path, window="steps:2-5")
    assert (by_steps.window_start_ns, by_steps.window_end_ns) == (2 * STEP, 6 * STEP)
    assert by_steps.steps == 4 and by_steps.tokens == 4
    by_ms = specnsys.analyze(path, window="0.002:0.006")
    assert (by_ms.window_start_ns, by_ms.window_end_ns) == (2 * STEP, 6 * STEP)
    assert _walls(by_ms) == _walls(by_steps)
    phases = specnsys.phases(path, window="steps:2-5")
    assert phases.breakdown.window_ns == 4 * STEP
    assert phases.breakdown.window_rule == "steps:2-5"


@pytest.mark.parametrize(
    ("window", "words"),
    [
        ("steps:5-2", "step 5 comes after step 2"),
        ("3:1", "need 0 <= A < B"),
        ("1:1", "need 0 <= A < B"),
        ("", "expected auto, requests"),
        ("steps:900-901", "the run has 20 decode steps"),
        ("5000:6000", "starts after the window ends"),
        ("nan:1", "expected auto"),
    ],
)
def test_a_bad_window_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], window: str, words: str
) -> None:
    path = _loop(warm_up=False).write(tmp_path / "s.sqlite")
    for command in ("analyze", "phases"):
        assert main([command, str(path), "--window", window]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and words in err, err


def test_a_window_leaving_no_step_is_refused(tmp_path: Path) -> None:
    b = _loop(warm_up=False)
    path = b.write(tmp_path / "s.sqlite")
    with pytest.raises(BadInputError, match="leaves no decode step"):
        specnsys.analyze(path, window="0.0001:0.0005")  # inside step 0, after its start


def test_every_output_says_which_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(_loop(warm_up=True).write(tmp_path / "w.sqlite"))
    assert main(["analyze", path, "--window", "auto"]) == 0
    text = capsys.readouterr().out
    assert "--window auto: the first 3 decode steps" in text and "dropped 0.035 ms before" in text
    assert main(["analyze", path, "--window", "auto", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["window_rule"] == "auto" and doc["window_dropped"]["steps_before"] == WARM
    assert main(["phases", path, "--window", "auto", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["window_rule"] == "auto"
    assert main(["phases", path, "--window", "auto"]) == 0
    assert "--window auto" in capsys.readouterr().out.splitlines()[0]


def test_parse_window_spellings() -> None:
    assert parse_window(None).kind == "requests"
    assert parse_window("auto").text == "auto"
    assert parse_window(" steps:0-3 ").text == "steps:0-3"
    assert parse_window("1.5:2").text == "1.5:2"


def test_collect_takes_the_window_into_every_run(tmp_path: Path) -> None:
    from specnsys.runset.collect import collect

    folder = tmp_path / "traces"
    folder.mkdir()
    _loop(warm_up=True).write(folder / "warm.sqlite")
    first = collect([folder], tmp_path / "ds", window="auto", workers=1)
    assert len(first.analysed) == 1
    import polars as pl

    runs = pl.scan_parquet(tmp_path / "ds" / "runs").collect()
    assert runs["window_rule"].to_list() == ["auto"] and runs["steps"].to_list() == [20]
    steps = pl.scan_parquet(tmp_path / "ds" / "steps").collect()
    assert steps.height == 20  # the warm-up steps are not in the dataset
    # another rule is another analysis of the same trace
    again = collect([folder], tmp_path / "ds", workers=1)
    assert len(again.analysed) == 1
    with pytest.raises(BadInputError, match="--window 'bogus'"):
        collect([folder], tmp_path / "ds2", window="bogus")
