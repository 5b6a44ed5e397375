"""The annotation language a real library needs (docs/annotate.md, issue 32 item 3).

``inside``/``outside`` (an entry's phase depends on the call it runs under), several entries on
one callable, ``calls``/``skip``, ``when``, ``after``/``until`` (a range between two calls),
``first_token``, ``output_tokens = true``, ``subclasses``, ``optional``, expressions in paths
(parsed with ``ast``, never evaluated by Python), ``[objects] call = N`` counted at call entry
(issue 29 item 4) and an object a run never builds (issue 30 item 5). Observed through the
injection's :class:`LogEmitter` (NVTX without a profiler is a no-op).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specnsys.inject import AnnotationError, environment, load_config
from specnsys.inject.emit import LogEmitter
from specnsys.inject.hooks import Reporter
from specnsys.inject.paths import ArgumentLayout, Arguments, PathError, parse_path
from specnsys.inject.runtime import LOG_ENV, VERBOSE_ENV, Injection

REPO = Path(__file__).resolve().parents[1]

MODULE = '''
class Model:
    def __init__(self, name):
        self.name = name
    def forward(self, x):
        return x + 1

class Loop:
    def __init__(self, steps):
        self.left = steps
    def more(self):
        return self.left > 0
    def sample(self, x):
        return x
    def run(self, model):
        model.forward(0)                 # the prefill
        while self.more():
            model.forward(1)
            self.sample(1)
            self.left -= 1
        return [1] * 3

def baseline(model, steps):
    return Loop(steps).run(model)

def speculative(model, draft, steps):
    draft.forward(0)
    return Loop(steps).run(model)

def nested(depth):
    """A factory that calls itself: the outermost call starts first."""
    inner = nested(depth - 1) if depth else None
    return Model(f"depth {depth}")

class Base:
    def propose(self, n):
        return [0] * n

class Ngram(Base):
    def propose(self, n):
        return super().propose(n)[:1]

def step(scores, num_matches):
    return None
'''


@pytest.fixture
def mod(tmp_path: Path) -> Iterator[types.ModuleType]:
    name = f"lang_mod_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        yield __import__(name)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def _inject(tmp_path: Path, text: str) -> tuple[Injection, io.StringIO, io.StringIO]:
    path = tmp_path / "annot.toml"
    path.write_text(textwrap.dedent(text))
    log, warnings = io.StringIO(), io.StringIO()
    injection = Injection(load_config(path), LogEmitter(log), Reporter("annot.toml", warnings))
    injection.install(watch_main=False)
    return injection, log, warnings


def _events(log: io.StringIO) -> list[str]:
    return log.getvalue().splitlines()


# --- expressions -------------------------------------------------------------------------------


def _value(text: str, *args: object, result: object = None, **kwargs: object) -> object:
    def f(scores: object = None, num_matches: int = 0, *rest: object, **kw: object) -> None: ...

    return parse_path(text).get(Arguments(args, kwargs, ArgumentLayout.of(f)), result)


class Shape:
    shape = (1, 5, 32)


def test_expressions_compute_counts_from_values() -> None:
    assert _value("len(return) - 1", result=[7, 8, 9]) == 2
    assert _value("arg:scores.shape[1] - 1", Shape()) == 4
    assert _value("arg:num_matches + 1", None, 3) == 4
    assert _value("(arg:num_matches + 1) * 2 // 3 % 5", None, 3) == 2
    assert _value("-arg:num_matches", num_matches=2) == -2
    assert _value("max(arg:num_matches, 1) + min(len(return), 9) + abs(-2) + sum(return)",
                  None, 0, result=[1, 2]) == 1 + 2 + 2 + 3
    assert _value("return == 'draft' and arg:num_matches >= 1", None, 1, result="draft") is True
    assert _value("not return", result=[]) is True
    assert _value("return['arg:x']", result={"arg:x": 5}) == 5  # a quoted key stays text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("return.__class__", "at column 8: names starting with '__' are not read"),
        ("return[1:2]", "not a slice"),
        ("return ** 99", "only + - * // %"),
        ("return if 1 else 2", "ifexp is not allowed"),
        ("(lambda: 1)()", "only len, sum, min, max, abs can be called"),
        ("len", "len is a function"),
        ("open('x')", "only len, sum, min, max, abs can be called"),
        ("len(return, key=1)", "positional arguments only"),
        ("return.x(1)", "only len, sum, min, max, abs can be called"),
        ("[return]", "list is not allowed"),
        ("1.5 + return", "only integer and string constants"),
        ("x" * 500, "longer than"),
    ],
)
def test_an_expression_outside_the_whitelist_is_refused(text: str, why: str) -> None:
    with pytest.raises(PathError) as err:
        parse_path(text)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_arithmetic_is_on_numbers_only() -> None:
    """``'x' * n`` would build a string of any size in the user's program."""
    with pytest.raises(TypeError, match="numbers only"):
        _value("return * 1000000000", result="x")
    with pytest.raises(TypeError, match="numbers only"):
        _value("return + return", result=[1])


# --- conditions --------------------------------------------------------------------------------


def test_inside_outside_and_calls_give_one_callable_the_phase_of_its_caller(
    tmp_path: Path, mod: types.ModuleType
) -> None:
    """One file for both runs: the target's first forward of a loop is the prefill, later ones
    forward (under baseline) or verify (under speculative), and the draft's forward (called
    outside the loop) is none of them."""
    name = mod.__name__
    injection, log, warnings = _inject(tmp_path, f"""
        [[hook]]
        on = "{name}:Model.forward"
        inside = "{name}:Loop.run"
        calls = 1
        phase = "prefill"
        [[hook]]
        on = "{name}:Model.forward"
        inside = "{name}:baseline"
        outside = "{name}:speculative"
        phase = "forward"
        [[hook]]
        on = "{name}:Model.forward"
        inside = ["{name}:speculative"]
        when = "arg:x == 1"
        phase = "verify"
    """)
    try:
        m = mod.Model("t")
        mod.baseline(m, 2)
        assert _events(log) == ["push prefill", "pop prefill", "push forward", "pop forward",
                                "push forward", "pop forward"]
        log.truncate(0), log.seek(0)
        mod.speculative(m, mod.Model("d"), 1)
        # calls counts per call of Loop.run: the second run's first forward is a prefill again
        assert _events(log) == ["push prefill", "pop prefill", "push verify", "pop verify"]
        log.truncate(0), log.seek(0)
        m.forward(5)  # outside every inside: nothing
        assert _events(log) == [] and warnings.getvalue() == ""
    finally:
        injection.uninstall()


def test_skip_leaves_out_the_warm_up_calls(tmp_path: Path, mod: types.ModuleType) -> None:
    name = mod.__name__
    injection, log, _ = _inject(tmp_path, f"""
        [[hook]]
        on = "{name}:baseline"
        phase = "request"
        skip = 1
        output_tokens = "len(return)"
    """)
    try:
        for _ in range(3):
            mod.baseline(mod.Model("t"), 0)
        assert _events(log) == ["start request 0", "end request 0 output_tokens 3",
                                "start request 1", "end request 1 output_tokens 3"]
    finally:
        injection.uninstall()


def test_after_until_makes_a_range_between_two_calls(tmp_path: Path, mod: types.ModuleType) -> None:
    """A loop body as a decode step (from each true return of its condition to its next
    check), a sample range from a forward's return to the next check; first_token and
    output_tokens = true from the tokens marks."""
    name = mod.__name__
    injection, log, warnings = _inject(tmp_path, f"""
        [[hook]]
        on = "{name}:Loop.run"
        phase = "request"
        output_tokens = true
        [[hook]]
        on = "{name}:Loop.more"
        inside = "{name}:Loop.run"
        when = "return"
        after = "decode"
        [[hook]]
        on = "{name}:Model.forward"
        inside = "{name}:Loop.run"
        after = "sample"
        until = "{name}:Loop.more"
        phase = "forward"
        [[hook]]
        on = "{name}:Loop.sample"
        tokens = "arg:x + 1"
        first_token = true
    """)
    try:
        mod.baseline(mod.Model("t"), 2)
        step = ["push decode", "push forward", "pop forward", "push sample", "mark tokens 2",
                "pop sample", "pop decode"]
        assert _events(log) == [
            "start request 0",
            "push forward", "pop forward", "push sample", "pop sample",  # the prefill's
            step[0], *step[1:5], "mark first_token 0", *step[5:],
            *step,
            "end request 0 output_tokens 4",
        ]
        assert warnings.getvalue() == ""
    finally:
        injection.uninstall()


def test_subclasses_hooks_every_override_once_even_when_defined_later(
    tmp_path: Path, mod: types.ModuleType
) -> None:
    name = mod.__name__
    injection, log, _ = _inject(tmp_path, f"""
        [[hook]]
        on = "{name}:Base.propose"
        subclasses = true
        phase = "draft"
        tokens = "len(return)"
    """)
    try:
        base: Any = mod.Base  # defined by the module this test writes: known only at run time

        class Later(base):
            def propose(self, n: int) -> list[int]:
                return [1] * (n + 1)

        for gen in (mod.Base(), mod.Ngram(), Later()):
            gen.propose(3)
        # Ngram's super() call is inside its own hooked call: one range, one mark, not two
        assert _events(log) == ["push draft", "mark tokens 3", "pop draft",
                                "push draft", "mark tokens 1", "pop draft",
                                "push draft", "mark tokens 4", "pop draft"]
    finally:
        injection.uninstall()
    assert "__init_subclass__" not in vars(mod.Base)  # undone


def test_optional_entries_are_not_reported_when_missing(tmp_path: Path, mod: types.ModuleType) -> None:
    name = mod.__name__
    injection, _, warnings = _inject(tmp_path, f"""
        [[hook]]
        on = "{name}:only_in_newer_releases"
        phase = "prefill"
        optional = true
        [[hook]]
        on = "{name}:renamed"
        phase = "kv"
    """)
    try:
        injection.report_unmatched()
        (line,) = warnings.getvalue().splitlines()
        assert "renamed" in line and "only_in_newer_releases" not in line
    finally:
        injection.uninstall()


def test_proposals_from_an_expression_and_empty_steps(tmp_path: Path, mod: types.ModuleType) -> None:
    """``arg:scores.shape[1] - 1``: the real proposal length; a step that proposed nothing
    gives a 0/0 pair (a sequence-step whose one token is the target's)."""
    name = mod.__name__
    injection, log, _ = _inject(tmp_path, f"""
        [[hook]]
        on = "{name}:step"
        proposed = "arg:scores.shape[1] - 1"
        accepted = "arg:num_matches"
        tokens = "arg:num_matches + 1"
    """)
    try:
        mod.step(Shape(), 2)
        one = type("One", (), {"shape": (1, 1, 32)})()
        mod.step(one, 0)
        assert _events(log) == ["mark proposed 4", "mark accepted 2", "mark tokens 3",
                                "mark proposed 0", "mark accepted 0", "mark tokens 1"]
    finally:
        injection.uninstall()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[hook]]\non='m:f'\nphase='kv'\ninside='m g'", "inside: 'm g': expected module"),
        ("[[hook]]\non='m:f'\nphase='kv'\ncalls=0", "calls must be an integer >= 1"),
        ("[[hook]]\non='m:f'\nphase='kv'\ncalls=[3, 2]", "[FIRST, LAST]"),
        ("[[hook]]\non='m:f'\nphase='kv'\nskip=-1", "skip must be an integer >= 0"),
        ("[[hook]]\non='m:f'\nphase='kv'\nskip=1\ncalls=2", "'calls' or 'skip', not both"),
        ("[[hook]]\non='m:f'\nafter='request'", "after: unknown phase 'request'"),
        ("[[hook]]\non='m:f'\nphase='kv'\nuntil='m:g'", "'until' ends an 'after' range"),
        ("[[hook]]\non='m:f'\nphase='kv'\nfirst_token=1", "first_token must be true or false"),
        ("[[hook]]\non='m:f'\nphase='kv'\nsubclasses=true", "needs a method of a class"),
        ("[[hook]]\non='m:f'\nphase='kv'\nwhen='return.'", "when: 'return.'"),
        ("[[hook]]\non='m:f'\nphase='kv'\noutput_tokens=true", "needs phase = \"request\""),
        ("[[hook]]\non='m:C.f'\nphase='kv'\ninside='m:g'\n[[hook]]\non='m:C.f'\nphase='kv'\n"
         "subclasses=true", "another 'subclasses'"),
        ("requires = 'a b'\n[[hook]]\non='m:f'\nphase='kv'", "requires must be a module name"),
        ("[objects.d]\nfactory='m:f'\nobject='len(return)'\n[[hook]]\non='d.g'\nphase='kv'",
         "computes a value"),
    ],
)
def test_every_new_key_is_checked_before_the_program_starts(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "annot.toml"
    path.write_text(text)
    with pytest.raises(AnnotationError) as err:
        load_config(path)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith(f"{path}: ")


# --- objects (issues 29 and 30) ----------------------------------------------------------------


def test_call_n_counts_a_self_recursive_factory_at_call_entry(tmp_path: Path, mod: types.ModuleType) -> None:
    """``call = 1`` is the call that started first: the outermost of a factory that calls
    itself (HF's generate runs the assistant's generate inside the target's). Counting at
    return picked the innermost."""
    name = mod.__name__
    injection, log, _ = _inject(tmp_path, f"""
        [objects.outer]
        factory = "{name}:nested"
        call = 1
        [[hook]]
        on = "outer.forward"
        phase = "verify"
    """)
    try:
        built = mod.nested(2)  # calls 1 (depth 2), 2, 3 (depth 0)
        assert built.name == "depth 2"
        built.forward(0)
        mod.Model("other").forward(0)
        assert _events(log) == ["push verify", "pop verify"]
    finally:
        injection.uninstall()


def test_an_object_taken_from_an_argument_is_hooked_for_the_call(
    tmp_path: Path, mod: types.ModuleType
) -> None:
    name = mod.__name__
    injection, log, _ = _inject(tmp_path, f"""
        [objects.model]
        factory = "{name}:baseline"
        object = "arg:model"
        [[hook]]
        on = "model.forward"
        inside = "{name}:Loop.run"
        phase = "forward"
    """)
    try:
        m = mod.Model("t")
        mod.baseline(m, 1)
        mod.baseline(m, 1)  # selected again: wrapped once
        assert _events(log).count("push forward") == 4
    finally:
        injection.uninstall()


def test_a_run_that_never_builds_an_object_does_not_warn(tmp_path: Path) -> None:
    """The walkthrough's baseline run builds no draft: no warning (issue 30), and one note
    under SPECNSYS_ANNOTATE_VERBOSE=1."""
    pytest.importorskip("torch")
    fixture = REPO / "tests" / "fixtures" / "unedited_spec.py"
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    base["PYTHONPATH"] = str(REPO)
    env = {**base, **environment(REPO / "tests" / "fixtures" / "unedited_spec.toml", base),
           LOG_ENV: str(tmp_path / "log")}
    argv = [sys.executable, str(fixture), "--mode", "baseline", "--requests", "1",
            "--max-new", "4"]
    quiet = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    verbose = subprocess.run(argv, env={**env, VERBOSE_ENV: "1"}, capture_output=True,
                             text=True, timeout=120)
    assert verbose.stderr == (
        "specnsys: note: unedited_spec.toml: objects.draft: __main__:build_model never gave an "
        "object (the 'where' value) in this run\n"
    )
