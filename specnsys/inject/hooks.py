"""The wrapper put around one hooked callable: a phase range, a request range, marks, objects.

One wrapper per callable, whatever the annotation file asks of it, so that marks are emitted
inside the call's phase range (as a hand-annotated loop does) and the wrapper costs one extra
Python frame. Everything read from the user's values is guarded: a path that does not resolve
or a count that is not an integer is one warning line naming the entry and the call (the first
time only), never an exception inside the user's program.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any, Protocol

from specnsys.inject.config import Hook, ObjectRule
from specnsys.inject.emit import Emitter
from specnsys.inject.paths import ArgumentLayout, Arguments, ValuePath

__all__ = ["Reporter", "make_wrapper"]

_NO_RESULT: Any = object()


class Reporter:
    """Warnings of the running program: one line each, ``specnsys: warning: FILE: ...``."""

    def __init__(self, label: str, stream: IO[str] | None = None) -> None:
        self.label = label
        self._stream = stream
        self._said: set[tuple[str, str]] = set()

    def warn(self, message: str) -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        with contextlib.suppress(Exception):  # a closed stderr must not fail the program
            stream.write(f"specnsys: warning: {self.label}: {' '.join(message.split())}\n")
            stream.flush()

    def warn_once(self, entry: str, what: str, message: str) -> None:
        if (entry, what) not in self._said:
            self._said.add((entry, what))
            self.warn(f"{message} (further failures of this entry are not reported)")


class ObjectSink(Protocol):
    """Receives the objects a factory call selected (the injection hooks their methods)."""

    def attach(self, rule: ObjectRule, obj: Any) -> None: ...


def make_wrapper(
    func: Callable[..., Any],
    hook: Hook | None,
    rules: Sequence[ObjectRule],
    *,
    emitter: Emitter,
    reporter: Reporter,
    sink: ObjectSink | None = None,
    where: str,
    called: Callable[[str], None] | None = None,
) -> Callable[..., Any]:
    """Wrap *func* (the callable named *where*) for *hook* and the object *rules* of which it
    is the factory. *called* is told each hook entry the first time it runs."""
    layout = ArgumentLayout.of(func)
    phase = hook.phase if hook is not None else None
    is_request = phase == "request"
    range_phase = None if is_request else phase
    marks = _MarkReader(hook, emitter, reporter, where) if hook and hook.marks else None
    requests = _RequestIds(hook, reporter, where) if is_request and hook else None
    factory = _Factory(rules, sink, reporter, where) if rules and sink is not None else None
    first = [hook.entry] if hook is not None and called is not None else []

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if first:
            assert called is not None
            called(first.pop())
        call = Arguments(args, kwargs, layout)
        handle = emitter.start_request(requests.next(call)) if requests is not None else None
        result = _NO_RESULT
        try:
            with emitter.phase(range_phase) if range_phase else contextlib.nullcontext():
                result = func(*args, **kwargs)
                if marks is not None:
                    marks.emit(call, result)
            if factory is not None:
                factory.select(call, result)
            return result
        finally:
            if handle is not None:
                assert requests is not None
                emitter.end_request(handle, requests.output_tokens(call, result))

    wrapper.__specnsys_hook__ = where  # type: ignore[attr-defined]
    return wrapper


def _read(
    path: ValuePath, call: Arguments, result: Any, reporter: Reporter, entry: str, where: str,
    what: str,
) -> Any:
    """The value at *path*, or ``_NO_RESULT`` after a warning when it does not resolve."""
    try:
        return path.get(call, result)
    except Exception as exc:  # the user's objects may raise anything from a property
        reporter.warn_once(
            entry, what,
            f"{entry}: {what} = {path.text!r} did not resolve on a call of {where}: "
            f"{type(exc).__name__}: {exc}",
        )
        return _NO_RESULT


def _ints(value: Any) -> list[int]:
    """An int, or a sequence of ints (list, tuple, or anything with ``tolist()``: a tensor or an
    array), as a list; raises TypeError for anything else."""
    if hasattr(value, "tolist") and not isinstance(value, (int, list, tuple)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [operator.index(v) for v in value]
    return [operator.index(value)]


class _MarkReader:
    """Reads the mark values of one hook from a finished call and emits them."""

    def __init__(self, hook: Hook, emitter: Emitter, reporter: Reporter, where: str) -> None:
        self.hook, self.emitter, self.reporter, self.where = hook, emitter, reporter, where

    def _values(self, what: str, path: ValuePath, call: Arguments, result: Any) -> list[int]:
        value = _read(path, call, result, self.reporter, self.hook.entry, self.where, what)
        if value is _NO_RESULT:
            return []
        try:
            return _ints(value)
        except TypeError:
            self.reporter.warn_once(
                self.hook.entry, what,
                f"{self.hook.entry}: {what} = {path.text!r} gave a {type(value).__name__} on a "
                f"call of {self.where}, not an integer or a sequence of integers",
            )
            return []

    def emit(self, call: Arguments, result: Any) -> None:
        hook = self.hook
        if hook.proposed is not None and hook.accepted is not None:
            accepted = self._values("accepted", hook.accepted, call, result)
            proposed = self._values("proposed", hook.proposed, call, result)
            if len(proposed) == 1 and len(accepted) != 1:
                proposed = proposed * len(accepted)  # one k for every sequence of the step
            if not accepted or not proposed:
                pass  # no sequence this step, or a value that did not resolve (reported)
            elif len(proposed) != len(accepted):
                self.reporter.warn_once(
                    hook.entry, "pairs",
                    f"{hook.entry}: proposed has {len(proposed)} values and accepted "
                    f"{len(accepted)} on a call of {self.where}; no acceptance marks emitted",
                )
            else:
                for k, n in zip(proposed, accepted, strict=True):
                    try:
                        self.emitter.acceptance(k, n)
                    except ValueError as exc:
                        self.reporter.warn_once(
                            hook.entry, "range", f"{hook.entry}: on a call of {self.where}: {exc}"
                        )
        if hook.tokens is not None:
            tokens = self._values("tokens", hook.tokens, call, result)
            if tokens:
                try:
                    self.emitter.tokens(sum(tokens))
                except ValueError as exc:
                    self.reporter.warn_once(
                        hook.entry, "tokens", f"{hook.entry}: on a call of {self.where}: {exc}"
                    )


class _RequestIds:
    """The id of each request a hooked call opens (``request_id``, else 0, 1, 2...), and its
    output length when it ends (``output_tokens``)."""

    def __init__(self, hook: Hook, reporter: Reporter, where: str) -> None:
        self.hook, self.reporter, self.where = hook, reporter, where
        self._counter = itertools.count()

    def next(self, call: Arguments) -> int:
        number = next(self._counter)
        if self.hook.request_id is None:
            return number
        value = _read(
            self.hook.request_id, call, None, self.reporter, self.hook.entry, self.where,
            "request_id",
        )
        try:
            return operator.index(value)
        except TypeError:
            if value is not _NO_RESULT:
                self.reporter.warn_once(
                    self.hook.entry, "request_id",
                    f"{self.hook.entry}: request_id gave a {type(value).__name__}, not an "
                    f"integer, on a call of {self.where}; numbering the requests instead",
                )
            return number

    def output_tokens(self, call: Arguments, result: Any) -> int | None:
        path = self.hook.output_tokens
        if path is None or result is _NO_RESULT:
            return None
        value = _read(path, call, result, self.reporter, self.hook.entry, self.where,
                      "output_tokens")
        try:
            n = sum(_ints(value)) if value is not _NO_RESULT else None
        except TypeError:
            n = None
        if n is None or n < 0:
            if value is not _NO_RESULT:
                self.reporter.warn_once(
                    self.hook.entry, "output_tokens",
                    f"{self.hook.entry}: output_tokens gave {type(value).__name__} on a call of "
                    f"{self.where}, not a count of tokens",
                )
            return None
        return n


class _Factory:
    """Counts the calls of a factory and hands the selected objects to the sink."""

    def __init__(
        self, rules: Sequence[ObjectRule], sink: ObjectSink, reporter: Reporter, where: str
    ) -> None:
        self.rules, self.sink, self.reporter, self.where = rules, sink, reporter, where
        self.calls = 0

    def select(self, call: Arguments, result: Any) -> None:
        self.calls += 1
        for rule in self.rules:
            if rule.call is not None and rule.call != self.calls:
                continue
            if rule.where is not None:
                value = _read(rule.where, call, result, self.reporter, rule.entry, self.where,
                              "where")
                try:
                    same = value is not _NO_RESULT and bool(value == rule.equals)
                except Exception:  # an array compared element-wise has no single truth
                    same = False
                if not same:
                    continue
            obj = _read(rule.obj, call, result, self.reporter, rule.entry, self.where, "object")
            if obj is not _NO_RESULT:
                self.sink.attach(rule, obj)
