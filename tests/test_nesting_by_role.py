"""Issue 29: right numbers however a loop is annotated (docs/design.md#nesting-by-role).

Built CPU-only exports (no GPU work: every instant belongs to the innermost phase range of
the driver thread), so each phase time is a hand-computed sum:

* a forward that a prefill runs is prefill work, and p leaves it out;
* whatever runs inside a draft range (its own sampling, its forwards) is draft work, counted
  once however finely the draft is hooked, and one draft forward is found from the finest
  ranges (or the proposed marks);
* each structural check fires on a trace built to break it, and stays silent on the samples.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import specnsys
from specnsys.metrics.analysis import Analysis
from specnsys.metrics.structure import STRUCTURE_PREFIX
from specnsys.testing.builder import NsysExportBuilder
from tests.conftest import SAMPLE_TRACES, json_doc

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)


class Loop:
    """A one-thread loop written as nsys would record it (domain ``specnsys``)."""

    def __init__(self) -> None:
        self.b = NsysExportBuilder()
        self.b.process(1, "python3")
        self.b.thread(1, 1, "main")
        self.b.domain(1, "specnsys", pid=1, tid=1)

    def range(self, s: int, e: int, phase: str) -> Loop:
        self.b.push_pop(s, e, phase, pid=1, tid=1, domain_id=1)
        return self

    def request(self, s: int, e: int) -> Loop:
        self.b.start_end(s, e, "request", pid=1, tid=1, domain_id=1)
        return self

    def mark(self, t: int, name: str, value: int) -> Loop:
        self.b.mark(t, name, pid=1, tid=1, domain_id=1, payload_int=value)
        return self

    def analyze(self, tmp_path: Path, name: str = "t.sqlite") -> Analysis:
        return specnsys.analyze(self.b.write(tmp_path / name))

    def path(self, tmp_path: Path, name: str) -> Path:
        return self.b.write(tmp_path / name)


def _walls(a: Analysis) -> dict[str, int]:
    return {name: row["wall_ns"] for name, row in a.phases.items() if row["wall_ns"]}


def _structural(a: Analysis) -> list[str]:
    return [w for w in a.warnings if w.startswith(STRUCTURE_PREFIX)]


def _baseline_with_prefill_forward() -> Loop:
    """Prefill [0, 200) runs the same forward [10, 190) as the two decode steps."""
    loop = Loop().request(0, 1000)
    loop.range(0, 200, "prefill").range(10, 190, "forward").mark(195, "tokens", 1)
    for s in (200, 500):
        loop.range(s, s + 300, "decode").range(s + 10, s + 250, "forward")
        loop.range(s + 250, s + 290, "sample").mark(s + 295, "tokens", 1)
    return loop


def test_a_forward_run_by_the_prefill_is_prefill_and_p_leaves_it_out(tmp_path: Path) -> None:
    a = _baseline_with_prefill_forward().analyze(tmp_path)
    assert a.mode == "baseline"
    # prefill: its own 20 ns + the forward's 180; forward: the two decode forwards only
    assert _walls(a) == {
        "prefill": 200, "forward": 480, "decode": 40, "sample": 80, "unannotated": 200,
    }  # fmt: skip
    assert a.p == pytest.approx(480 / 1000)
    assert a.amdahl_ceiling == pytest.approx(1 / (1 - 0.48))
    assert a.phases["prefill"]["ranges"] == 1  # the forward inside is part of it
    assert a.phases["forward"]["ranges"] == 2
    assert a.steps == 2 and a.tokens == 3
    assert a.phases["prefill"]["cpu_inclusive_ns"] == 200  # never the forward's time twice
    assert a.nesting is not None and a.nesting["reassigned"] == {"forward->prefill": 1}
    assert _structural(a) == []


def test_forward_steps_do_not_count_the_prefill_forward_as_a_decode_step(tmp_path: Path) -> None:
    """Without tokens marks the output tokens come from forward steps: the prefill's forward
    is not one of them (one first token per request + one per decode forward)."""
    loop = Loop().request(0, 1000)
    loop.range(0, 200, "prefill").range(10, 190, "forward")
    for s in (200, 500):
        loop.range(s, s + 300, "decode").range(s + 10, s + 250, "forward")
        loop.range(s + 250, s + 290, "sample")
    a = loop.analyze(tmp_path)
    assert a.tokens_source == "forward_steps"
    assert a.tokens == 1 + 2


def _spec_step(loop: Loop, s: int, drafts: str) -> None:
    """One speculative step [s, s + 300): the draft [s + 10, s + 150) hooked per *drafts*
    (``step``: one range; ``forward``: four ranges; ``both``: four inside one), a sample range
    of the draft's own inside it, verify [s + 150, s + 280), the target's sample after."""
    loop.range(s, s + 300, "decode")
    forwards = [(s + 15, s + 45), (s + 50, s + 80), (s + 85, s + 115), (s + 120, s + 145)]
    if drafts in ("step", "both"):
        loop.range(s + 10, s + 150, "draft")
    if drafts in ("forward", "both"):
        for fs, fe in forwards:
            loop.range(fs, fe, "draft")
    loop.range(s + 146, s + 149, "sample")  # the draft's logits processing, inside its range
    loop.range(s + 150, s + 280, "verify").range(s + 280, s + 295, "sample")
    loop.mark(s + 296, "proposed", 4).mark(s + 297, "accepted", 2).mark(s + 298, "tokens", 3)


def _spec(drafts: str) -> Loop:
    loop = Loop().request(0, 700)
    loop.range(0, 100, "prefill").mark(99, "tokens", 1)
    for s in (100, 400):
        _spec_step(loop, s, drafts)
    return loop


def test_everything_inside_a_draft_is_draft_and_counted_once(tmp_path: Path) -> None:
    a = _spec("both").analyze(tmp_path)
    walls = _walls(a)
    # per step: draft 140 (its sample inside), verify 130, the target's sample 15
    assert walls["draft"] == 280 and walls["verify"] == 260 and walls["sample"] == 30
    assert a.phases["draft"]["ranges"] == 2  # the forwards inside each step count once
    assert a.phases["draft"]["cpu_inclusive_ns"] == 280
    assert a.phases["sample"]["ranges"] == 2
    assert a.nesting is not None and a.nesting["reassigned"] == {"sample->draft": 2}
    assert _structural(a) == []


@pytest.mark.parametrize(
    ("drafts", "draft_wall", "forwards", "source", "one_forward"),
    [
        # nested: the innermost ranges time one forward apart (30, 30, 30, 25)
        ("both", 280, 8, "nested_draft_ranges", (3 * 30 + 25) / 4),
        ("forward", 2 * (3 * 30 + 25), 8, "repeated_draft_ranges", 2 * (3 * 30 + 25) / 8),
        ("step", 280, 8, "proposed_marks", 280 / 8),
    ],
)
def test_one_draft_forward_is_found_whatever_the_hook_style(
    tmp_path: Path, drafts: str, draft_wall: int, forwards: int, source: str,
    one_forward: float,
) -> None:  # fmt: skip
    """c = one draft forward / one verify, each style from its own finest ranges: both nested
    (the leaves' mean), per forward (more draft ranges than steps: draft time / forwards), per
    step (draft time / the proposed marks' 4 drafts per sequence-step)."""
    a = _spec(drafts).analyze(tmp_path)
    assert a.draft_forwards_source == source
    assert a.draft_forwards_per_step == pytest.approx(forwards / 2)
    assert a.phases["draft"]["wall_ns"] == draft_wall
    assert a.per_range_ns["draft_forward_ns"] == pytest.approx(one_forward)
    assert a.per_range_ns["draft_step_ns"] == pytest.approx(draft_wall / 2)
    assert a.draft_cost_ratio == pytest.approx(one_forward / 130)
    doc = a.to_dict()
    assert doc["draft_forwards_per_step"] == pytest.approx(forwards / 2)
    assert doc["draft_forwards_source"] == source


def test_compare_does_not_count_the_drafts_sampling_as_the_targets(tmp_path: Path) -> None:
    """A sample range inside draft is draft work: against a baseline whose sampling costs the
    same per step, compare sees no sample growth (before issue 29: 'sample got slower')."""
    base = Loop().request(0, 700)
    base.range(0, 100, "prefill").mark(99, "tokens", 1)
    for s in range(100, 700, 100):
        base.range(s, s + 100, "decode").range(s + 5, s + 80, "forward")
        base.range(s + 80, s + 95, "sample").mark(s + 97, "tokens", 1)
    spec = _spec("step")
    result = specnsys.compare(base.path(tmp_path, "b.sqlite"), spec.path(tmp_path, "s.sqlite"))
    sample = json_doc(result.to_dict())["phases"]["sample"]
    assert sample["baseline_ns_per_token"] == pytest.approx(90 / 7)
    assert sample["spec_ns_per_token"] == pytest.approx(30 / 7)  # the draft's 6 ns are draft


# ----------------------------------------------------------------- structural checks


def _one_structural(a: Analysis, words: str) -> str:
    found = _structural(a)
    assert len(found) == 1, found
    assert words in found[0], found[0]
    return found[0]


def test_a_speculative_run_without_verify_is_named(tmp_path: Path) -> None:
    loop = Loop().request(0, 400)
    loop.range(0, 100, "decode").range(10, 60, "draft").range(60, 90, "forward")
    loop.mark(95, "proposed", 2).mark(96, "accepted", 1).mark(97, "tokens", 2)
    line = _one_structural(loop.analyze(tmp_path), "without verify ranges")
    assert "r and the predicted speedup" in line


def test_a_speculative_run_without_draft_is_named(tmp_path: Path) -> None:
    loop = Loop().request(0, 400)
    loop.range(0, 100, "decode").range(10, 60, "sample").range(60, 90, "verify")
    loop.mark(95, "tokens", 2)
    _one_structural(loop.analyze(tmp_path), "without draft ranges")


def test_a_verify_inside_a_draft_is_a_structural_error_and_counts_as_draft(tmp_path: Path) -> None:
    loop = Loop().request(0, 400)
    for s in (0, 200):
        loop.range(s, s + 200, "decode").range(s + 10, s + 100, "draft")
        loop.range(s + 20, s + 40, "verify").range(s + 50, s + 70, "verify")  # the draft's own
        loop.range(s + 100, s + 190, "verify").mark(s + 195, "tokens", 2)
    a = loop.analyze(tmp_path)
    assert a.phases["draft"]["wall_ns"] == 180 and a.phases["verify"]["wall_ns"] == 180
    assert a.phases["verify"]["ranges"] == 2 and a.steps == 2
    _one_structural(a, "4 verify ranges inside draft ranges")


def test_a_draft_inside_a_verify_is_a_structural_error(tmp_path: Path) -> None:
    loop = Loop().request(0, 400)
    for s in (0, 200):
        loop.range(s, s + 200, "decode").range(s + 10, s + 100, "draft")
        loop.range(s + 100, s + 190, "verify").range(s + 110, s + 130, "draft")
        loop.mark(s + 195, "tokens", 2)
    _one_structural(loop.analyze(tmp_path), "2 draft ranges inside verify ranges")


def test_a_non_accelerable_phase_inside_a_target_forward_is_named(tmp_path: Path) -> None:
    loop = Loop().request(0, 400)
    for s in (0, 200):
        loop.range(s, s + 200, "decode").range(s + 10, s + 150, "forward")
        loop.range(s + 120, s + 150, "sample").range(s + 150, s + 190, "kv")
        loop.mark(s + 195, "tokens", 1)
    line = _one_structural(loop.analyze(tmp_path), "inside a target forward or verify")
    assert "2 sample" in line


def test_decode_steps_holding_one_phase_only_are_named(tmp_path: Path) -> None:
    loop = Loop().request(0, 400)
    for s in (0, 200):
        loop.range(s, s + 200, "decode").range(s + 10, s + 190, "forward")
        loop.mark(s + 195, "tokens", 1)
    _one_structural(loop.analyze(tmp_path), "every decode step holds only forward")


def test_more_decode_steps_than_output_tokens_are_named(tmp_path: Path) -> None:
    """A decode hook on a call made several times per step (8 'steps' for 4 tokens)."""
    loop = Loop().request(0, 800)
    for s in range(0, 800, 100):
        loop.range(s, s + 100, "decode").range(s + 10, s + 60, "forward")
        loop.range(s + 60, s + 90, "sample")
        if s % 200 == 0:
            loop.mark(s + 95, "tokens", 1)
    _one_structural(loop.analyze(tmp_path), "8 decode steps (decode ranges) for 4 output tokens")


def test_more_decode_steps_than_marked_sequence_steps_are_named(tmp_path: Path) -> None:
    loop = Loop().request(0, 800)
    for s in range(0, 800, 100):
        loop.range(s, s + 100, "decode").range(s + 10, s + 40, "draft")
        loop.range(s + 40, s + 80, "verify").range(s + 80, s + 90, "sample")
        loop.mark(s + 95, "tokens", 2)
        if s % 200 == 0:
            loop.mark(s + 96, "proposed", 2).mark(s + 97, "accepted", 1)
    _one_structural(loop.analyze(tmp_path), "but 4 sequence-steps of proposed/accepted marks")


def test_the_structural_checks_are_silent_on_every_sample_trace() -> None:
    for path in sorted(SAMPLE_TRACES.glob("*.sqlite")):
        a = specnsys.analyze(path)
        assert _structural(a) == [], (path.name, _structural(a))
        assert a.nesting is not None and a.nesting["reassigned"] == {}, path.name
