"""Tests of specnsys.annotate without a profiler attached.

Both code paths are exercised: the no-op path (what runs when no collector is injected) and
the real-NVTX path forced with ``set_enabled(True)``, whose calls go into the NVTX library and
return without a collector. Whether ranges actually land in a trace is checked by the nsys
capture tests, not here.
"""

from __future__ import annotations

import sys
import threading
import types

import pytest

from specnsys import annotate


@pytest.fixture(params=[False, True], ids=["noop", "nvtx"])
def mode(request: pytest.FixtureRequest):
    """Run a test on both paths and restore the process-wide switch afterwards."""
    before = annotate.enabled()
    annotate.set_enabled(request.param)
    yield request.param
    annotate.set_enabled(before)


def test_vocabulary_matches_design() -> None:
    assert annotate.PHASES == (
        "request",
        "prefill",
        "draft_prefill",
        "decode",
        "forward",
        "draft",
        "verify",
        "sample",
        "kv",
        "sync",
        "schedule",
    )
    assert annotate.DOMAIN == "specnsys"
    assert annotate.MARKS == ("proposed", "accepted")


def test_phase_context_manager_nests(mode: bool) -> None:
    with annotate.phase("decode") as outer, annotate.phase("verify") as inner:
        value = 42
    assert value == 42
    assert outer.name == "decode" and inner.name == "verify"


def test_phase_is_cached_and_reentrant(mode: bool) -> None:
    ph = annotate.phase("kv")
    assert annotate.phase("kv") is ph
    with ph, ph:
        pass


def test_phase_pops_on_exception(mode: bool) -> None:
    with pytest.raises(RuntimeError), annotate.phase("sample"):
        raise RuntimeError("boom")
    with annotate.phase("sample"):  # still usable afterwards
        pass


def test_phase_decorator(mode: bool) -> None:
    @annotate.phase("sample")
    def pick(x: int, *, bonus: int = 0) -> int:
        """Docstring survives."""
        return x + bonus

    assert pick(2, bonus=3) == 5
    assert pick.__name__ == "pick"
    assert pick.__doc__ == "Docstring survives."


def test_decorator_propagates_exceptions(mode: bool) -> None:
    @annotate.phase("verify")
    def fail() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        fail()


def test_unknown_phase_rejected(mode: bool) -> None:
    with pytest.raises(ValueError, match="unknown phase 'decoding'"):
        annotate.phase("decoding")
    with pytest.raises(ValueError):
        annotate.phase("")


def test_custom_phase_allowed_on_request(mode: bool) -> None:
    with annotate.phase("my_engine_step", allow_custom=True):
        pass
    # Registering a custom name once does not admit it into the vocabulary.
    with pytest.raises(ValueError):
        annotate.phase("my_engine_step")
    with pytest.raises(ValueError):
        annotate.phase("", allow_custom=True)


def test_request_context_manager(mode: bool) -> None:
    with annotate.request(request_id=3) as handle:
        assert handle.request_id == 3 and handle.is_open
    assert not handle.is_open


def test_requests_overlap_and_end_on_another_thread(mode: bool) -> None:
    first = annotate.start_request(1)
    second = annotate.start_request(2)
    annotate.end_request(first)
    errors: list[BaseException] = []

    def finish() -> None:
        try:
            annotate.end_request(second)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=finish)
    t.start()
    t.join()
    assert errors == []
    assert not second.is_open


def test_request_double_end_raises(mode: bool) -> None:
    handle = annotate.start_request(7)
    annotate.end_request(handle)
    with pytest.raises(ValueError, match="already ended"):
        annotate.end_request(handle)


def test_request_id_must_be_integer(mode: bool) -> None:
    with pytest.raises(TypeError):
        annotate.start_request("7")  # type: ignore[arg-type]


def test_mark_acceptance(mode: bool) -> None:
    for accepted in range(5):
        annotate.mark_acceptance(proposed=4, accepted=accepted)
    with pytest.raises(ValueError):
        annotate.mark_acceptance(proposed=4, accepted=5)
    with pytest.raises(ValueError):
        annotate.mark_acceptance(proposed=4, accepted=-1)
    with pytest.raises(TypeError):
        annotate.mark_acceptance(proposed=4, accepted=1.5)  # type: ignore[arg-type]


def test_mark_value(mode: bool) -> None:
    annotate.mark_value("target_bytes", 2**40)
    annotate.mark_value("output_tokens", 0)
    with pytest.raises(TypeError):
        annotate.mark_value("target_bytes", 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        annotate.mark_value("", 1)


def test_token_and_request_marks(mode: bool) -> None:
    annotate.mark_tokens(0)
    annotate.mark_tokens(5)
    annotate.mark_first_token(7)
    with pytest.raises(ValueError):
        annotate.mark_tokens(-1)
    with pytest.raises(TypeError):
        annotate.mark_tokens(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        annotate.mark_first_token("7")  # type: ignore[arg-type]
    handle = annotate.start_request(7)
    with pytest.raises(ValueError, match="output_tokens"):
        annotate.end_request(handle, output_tokens=-1)
    assert handle.is_open  # a refused call leaves the range open
    annotate.end_request(handle, output_tokens=12)
    assert not handle.is_open
    assert set(annotate.VALUE_MARKS) >= {"tokens", "first_token", "output_tokens"}


class _Model:
    def __init__(self) -> None:
        self.calls = 0

    def forward(self, x: int) -> int:
        self.calls += 1
        return 2 * x

    def sample(self, x: int) -> int:
        return x + 1

    @staticmethod
    def helper(x: int) -> int:
        return x - 1

    @classmethod
    def make(cls) -> _Model:
        return cls()


def test_patch_instance_wraps_and_undoes(mode: bool) -> None:
    model = _Model()
    other = _Model()
    handle = annotate.patch_module(model, {"forward": "verify", "sample": "sample"})
    assert "forward" in vars(model)
    assert model.forward.__specnsys_phase__ == "verify"  # type: ignore[attr-defined]
    assert model.forward(3) == 6 and model.calls == 1
    assert model.sample(1) == 2
    assert "forward" not in vars(other)  # only that instance is patched
    handle.undo()
    assert "forward" not in vars(model) and "sample" not in vars(model)
    assert model.forward(3) == 6 and model.calls == 2
    handle.undo()  # idempotent


def test_patch_as_context_manager(mode: bool) -> None:
    model = _Model()
    with annotate.patch_module(model, {"forward": "forward"}) as handle:
        assert handle.active
        assert hasattr(model.forward, "__specnsys_phase__")
    assert not hasattr(model.forward, "__specnsys_phase__")


def test_patch_module_object() -> None:
    mod = types.ModuleType("fake_engine")

    def step(x: int) -> int:
        return x * 10

    vars(mod)["step"] = step  # a module built here: its one function
    with annotate.patch_module(mod, {"step": "decode"}):
        assert mod.step is not step
        assert mod.step(2) == 20
    assert mod.step is step


def test_patch_class_keeps_method_kinds(mode: bool) -> None:
    class Local(_Model):
        forward = _Model.forward  # own attribute, restored on undo
        helper = _Model.__dict__["helper"]
        make = _Model.__dict__["make"]
    with annotate.patch_module(Local, {"forward": "verify", "helper": "kv", "make": "schedule"}):
        inst = Local()
        assert inst.forward(4) == 8
        assert Local.helper(5) == 4
        assert isinstance(Local.make(), Local)
        assert isinstance(Local.__dict__["helper"], staticmethod)
        assert isinstance(Local.__dict__["make"], classmethod)
    assert Local.__dict__["forward"] is _Model.forward
    assert Local.__dict__["helper"] is _Model.__dict__["helper"]


def test_patch_attr_single() -> None:
    model = _Model()
    handle = annotate.patch_attr(model, "forward", "forward")
    assert model.forward(1) == 2
    handle.undo()
    assert "forward" not in vars(model)


def test_bad_mapping_leaves_object_untouched() -> None:
    model = _Model()
    with pytest.raises(ValueError):
        annotate.patch_module(model, {"forward": "verify", "sample": "not_a_phase"})
    assert "forward" not in vars(model)
    with pytest.raises(AttributeError):
        annotate.patch_module(model, {"missing": "verify"})
    model.value = 3  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        annotate.patch_module(model, {"value": "verify"})
    with annotate.patch_module(model, {"forward": "engine_step"}, allow_custom=True):
        assert model.forward(1) == 2


def test_noop_decorator_returns_function_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch imported (no profiler can record: see tests/test_kineto_annotate.py)."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    before = annotate.enabled()
    annotate.set_enabled(False)
    try:

        def f() -> int:
            return 1

        assert annotate.phase("sample")(f) is f
    finally:
        annotate.set_enabled(before)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"NVTX_INJECTION64_PATH": "/opt/nsys/libToolsInjection64.so"}, True),
        ({"NVTX_INJECTION64_PATH": "/x.so", "NVTX_DISABLE": "1"}, False),
        ({"NVTX_INJECTION64_PATH": "/x.so", "SPECNSYS_NVTX": "0"}, False),
        ({"SPECNSYS_NVTX": "1"}, True),
    ],
)
def test_collector_detection(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: bool
) -> None:
    for name in ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH", "NVTX_DISABLE", "SPECNSYS_NVTX"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert annotate._env_enabled() is expected
