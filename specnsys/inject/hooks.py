"""The wrapper put around one hooked callable: phase ranges, requests, marks, objects.

One wrapper per callable, whatever the annotation file asks of it, so that marks are emitted
inside the call's phase range (as a hand-annotated loop does) and the wrapper costs one extra
Python frame. Several entries may name one callable; at each call the first whose conditions
hold (``inside``, ``outside``, ``when``, ``calls``) applies, so one file serves a baseline and a
speculative run, and the assistant model's forward is told from the target's by the call it
runs under. Everything read from the user's values is guarded: a path that does not resolve or
a count that is not an integer is one warning line naming the entry and the call (the first
time only), never an exception inside the user's program.

Per thread, :class:`_Thread` follows what the wrappers do: which hooked or followed callables
are running (``inside``/``outside``), how often an entry was reached within the running call it
counts in (``calls``), the ranges the injection has open (an ``after`` range stays open past its
call, until the next call of an ``until`` callable or the end of the call around it), and the
requests open (``first_token``, ``output_tokens = true``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Protocol, SupportsIndex

from specnsys.inject.config import Hook, ObjectRule, Target
from specnsys.inject.emit import Emitter
from specnsys.inject.paths import ArgumentLayout, Arguments, ValuePath

if TYPE_CHECKING:
    from specnsys.annotate import RequestHandle

__all__ = ["Reporter", "Runtime", "make_wrapper"]

_NO_RESULT = object()
Key = tuple[str, str]


class Reporter:
    """Warnings of the running program: one line each, ``specnsys: warning: FILE: ...``."""

    def __init__(self, label: str, stream: IO[str] | None = None) -> None:
        self.label = label
        self._stream = stream
        self._said: set[tuple[str, str]] = set()

    def warn(self, message: str, *, kind: str = "warning") -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        with contextlib.suppress(Exception):  # a closed stderr must not fail the program
            stream.write(f"specnsys: {kind}: {self.label}: {' '.join(message.split())}\n")
            stream.flush()

    def warn_once(self, entry: str, what: str, message: str) -> None:
        if (entry, what) not in self._said:
            self._said.add((entry, what))
            self.warn(f"{message} (further failures of this entry are not reported)")


class ObjectSink(Protocol):
    """Receives the objects a factory call selected (the injection hooks their methods)."""

    def attach(self, rule: ObjectRule, obj: object) -> None: ...


@dataclass
class _Open:
    """A range the injection pushed on this thread: a call's own, or an ``after`` range."""

    ctx: AbstractContextManager[object]  # the context manager whose __exit__ pops it
    after: bool = False
    until: frozenset[Key] = frozenset()


@dataclass
class _Request:
    handle: RequestHandle
    tokens: int = 0  # tokens marks emitted while it was the innermost open request
    first_token: bool = False  # its first_token mark was emitted


@dataclass
class _Frame:
    """One running call of a followed callable: how often each entry was reached in it."""

    counts: dict[str, int] = field(default_factory=dict)


class _Thread(threading.local):
    def __init__(self) -> None:
        self.running: dict[Key, list[_Frame]] = {}  # callable -> its running calls, innermost last
        self.applied: dict[Key, int] = {}  # running calls of a callable that applied an entry
        self.ranges: list[_Open] = []
        self.requests: list[_Request] = []


class Runtime:
    """What the wrappers of one injection share: where events go, per-thread state, and the
    counts of ``calls`` entries that count over the whole process."""

    def __init__(
        self, emitter: Emitter, reporter: Reporter, sink: ObjectSink | None = None,
        called: Callable[[str], None] | None = None,
    ) -> None:
        self.emitter, self.reporter, self.sink = emitter, reporter, sink
        self.called = called
        self.thread = _Thread()
        self._lock = threading.Lock()
        self._process_counts: dict[str, int] = {}

    # --- conditions --------------------------------------------------------------------------

    def choose(self, key: Key, hooks: Sequence[Hook], call: Arguments, where: str) -> Hook | None:
        """The first entry of *hooks* that applies to this call of *key*, or None."""
        state = self.thread
        if state.applied.get(key):
            return None  # inside a call of this callable that applied an entry: nothing twice
        running = state.running
        for hook in hooks:
            if hook.inside and not any(running.get(t.key) for t in hook.inside):
                continue
            if any(running.get(t.key) for t in hook.outside):
                continue
            if hook.when_at_entry and not self._true(hook, call, _NO_RESULT, where):
                continue
            if hook.calls is not None and not self._counted(hook):
                continue
            return hook
        return None

    def _counted(self, hook: Hook) -> bool:
        """Count this call for *hook* (within the innermost running call of the first of its
        ``inside`` callables that is running, else over the process) and say whether it is in
        ``calls``."""
        assert hook.calls is not None
        running = self.thread.running
        frames = next((running[t.key] for t in hook.inside if running.get(t.key)), None)
        if frames:
            counts = frames[-1].counts
            n = counts[hook.entry] = counts.get(hook.entry, 0) + 1
        else:
            with self._lock:
                n = self._process_counts[hook.entry] = self._process_counts.get(hook.entry, 0) + 1
        first, last = hook.calls
        return n >= first and (last is None or n <= last)

    def _true(self, hook: Hook, call: Arguments, result: object, where: str) -> bool:
        assert hook.when is not None
        value = read(hook.when, call, result, self.reporter, hook.entry, where, "when")
        try:
            return value is not _NO_RESULT and bool(value)
        except Exception:  # an array of several values has no single truth
            self.reporter.warn_once(
                hook.entry, "when-truth",
                f"{hook.entry}: when = {hook.when.text!r} gave a {type(value).__name__} on a "
                f"call of {where}, which is neither true nor false",
            )
            return False

    def gives_after_call(self, hook: Hook, call: Arguments, result: object, where: str) -> bool:
        """Whether the marks and ``after`` range of *hook* are given for this finished call."""
        if hook.when is None or hook.when_at_entry:
            return True
        return self._true(hook, call, result, where)

    # --- ranges ------------------------------------------------------------------------------

    def close_until(self, key: Key) -> None:
        """A call of *key* starts: end the ``after`` ranges it is an ``until`` of (only ranges
        on top of the stack, where nothing but ``after`` ranges lie above them)."""
        ranges = self.thread.ranges
        lowest = None
        for index in range(len(ranges) - 1, -1, -1):
            if not ranges[index].after:
                break
            if key in ranges[index].until:
                lowest = index
        if lowest is not None:
            self.pop_to(lowest)

    def push(self, phase: str, *, after: bool = False, until: frozenset[Key] = frozenset()) -> None:
        ctx = self.emitter.phase(phase)
        ctx.__enter__()
        self.thread.ranges.append(_Open(ctx, after, until))

    def pop_to(self, height: int) -> None:
        """End every range the injection opened above *height* on this thread, innermost
        first (an ``after`` range never outlives the call it was opened in)."""
        ranges = self.thread.ranges
        while len(ranges) > height:
            ranges.pop().ctx.__exit__(None, None, None)

    # --- requests and marks ------------------------------------------------------------------

    def tokens(self, n: int) -> None:
        self.emitter.tokens(n)
        if self.thread.requests:
            self.thread.requests[-1].tokens += n

    def first_token(self) -> None:
        """A ``first_token`` mark for the innermost open request, once per request."""
        if self.thread.requests and not self.thread.requests[-1].first_token:
            request = self.thread.requests[-1]
            request.first_token = True
            self.emitter.first_token(request.handle.request_id)


def read(
    path: ValuePath, call: Arguments, result: object, reporter: Reporter, entry: str, where: str,
    what: str,
) -> object:
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


def make_wrapper(
    func: Callable[..., object],
    key: Key,
    hooks: Sequence[Hook],
    rules: Sequence[ObjectRule],
    runtime: Runtime,
    *,
    where: str,
) -> Callable[..., object]:
    """Wrap *func* (the callable *key*, named *where* in messages) for *hooks* (tried in order
    at each call) and the object *rules* of which it is the factory."""
    layout = ArgumentLayout.of(func)
    readers = {h.entry: _MarkReader(h, runtime, where) for h in hooks if h.marks}
    requests = {h.entry: _RequestIds(h, runtime.reporter, where) for h in hooks
                if h.phase == "request"}
    factory = (_Factory(rules, runtime.sink, runtime.reporter, where)
               if rules and runtime.sink is not None else None)
    untils = {h.entry: frozenset(t.key for t in h.until) for h in hooks}
    unseen = {h.entry for h in hooks}
    state = runtime.thread

    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> object:
        runtime.close_until(key)
        call = Arguments(args, kwargs, layout)
        hook = runtime.choose(key, hooks, call, where) if hooks else None
        frames = state.running.setdefault(key, [])
        frames.append(_Frame())
        height = len(state.ranges)
        number = factory.enter(call) if factory is not None else 0
        request: _Request | None = None
        result = _NO_RESULT
        gives = False
        if hook is not None:
            state.applied[key] = state.applied.get(key, 0) + 1
            if hook.entry in unseen and runtime.called is not None:
                unseen.discard(hook.entry)
                runtime.called(hook.entry)
        try:
            if hook is not None and hook.phase == "request":
                request = _Request(runtime.emitter.start_request(requests[hook.entry].next(call)))
                state.requests.append(request)
            elif hook is not None and hook.phase is not None:
                runtime.push(hook.phase)
            result = func(*args, **kwargs)
            if hook is not None:
                gives = runtime.gives_after_call(hook, call, result, where)
                if gives and hook.entry in readers:
                    readers[hook.entry].emit(call, result)
                if gives and hook.first_token:
                    runtime.first_token()
            return result
        finally:
            runtime.pop_to(height)
            if factory is not None:
                factory.leave(call, result, number)
            if request is not None:
                assert hook is not None
                with contextlib.suppress(ValueError):
                    state.requests.remove(request)
                count = (request.tokens if hook.count_output_tokens
                         else requests[hook.entry].output_tokens(call, result))
                runtime.emitter.end_request(request.handle, count if result is not _NO_RESULT
                                            else None)
            frames.pop()
            if hook is not None:
                state.applied[key] -= 1
                if hook.after is not None and gives:
                    runtime.push(hook.after, after=True, until=untils[hook.entry])

    wrapper.__specnsys_hook__ = where  # type: ignore[attr-defined]
    return wrapper


def _index(value: object) -> int:
    """``operator.index(value)``: TypeError for a value that is not an integer."""
    if type(value) is int:  # the common case, before the slower protocol check
        return value
    if isinstance(value, SupportsIndex):
        return operator.index(value)
    raise TypeError(f"{type(value).__name__!r} object cannot be interpreted as an integer")


def _ints(value: object) -> list[int]:
    """An int, or a sequence of ints (list, tuple, or anything with ``tolist()``: a tensor or an
    array), as a list; raises TypeError for anything else."""
    if hasattr(value, "tolist") and not isinstance(value, (int, list, tuple)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_index(v) for v in value]
    return [_index(value)]


class _MarkReader:
    """Reads the mark values of one hook from a finished call and emits them."""

    def __init__(self, hook: Hook, runtime: Runtime, where: str) -> None:
        self.hook, self.runtime, self.where = hook, runtime, where
        self.reporter, self.emitter = runtime.reporter, runtime.emitter

    def _values(self, what: str, path: ValuePath, call: Arguments, result: object) -> list[int]:
        value = read(path, call, result, self.reporter, self.hook.entry, self.where, what)
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

    def emit(self, call: Arguments, result: object) -> None:
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
                    # 0/0 is a step that offered nothing (prompt lookup found no match): a
                    # sequence-step of its own, whose one token is the target's
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
                    self.runtime.tokens(sum(tokens))
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
        value = read(
            self.hook.request_id, call, None, self.reporter, self.hook.entry, self.where,
            "request_id",
        )
        try:
            return _index(value)
        except TypeError:
            if value is not _NO_RESULT:
                self.reporter.warn_once(
                    self.hook.entry, "request_id",
                    f"{self.hook.entry}: request_id gave a {type(value).__name__}, not an "
                    f"integer, on a call of {self.where}; numbering the requests instead",
                )
            return number

    def output_tokens(self, call: Arguments, result: object) -> int | None:
        path = self.hook.output_tokens
        if path is None or result is _NO_RESULT:
            return None
        value = read(path, call, result, self.reporter, self.hook.entry, self.where,
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
    """Counts the calls of a factory when they start (1 = the first call to start, so a
    factory that calls itself gives its outermost call the lower number) and hands the
    selected objects to the sink: an argument's object when the call starts, a returned one
    when it returns."""

    def __init__(
        self, rules: Sequence[ObjectRule], sink: ObjectSink, reporter: Reporter, where: str
    ) -> None:
        self.rules, self.sink, self.reporter, self.where = rules, sink, reporter, where
        self._numbers = itertools.count(1)

    def enter(self, call: Arguments) -> int:
        number = next(self._numbers)
        for rule in self.rules:
            if rule.at_entry:
                self._select(rule, call, _NO_RESULT, number)
        return number

    def leave(self, call: Arguments, result: object, number: int) -> None:
        if result is _NO_RESULT:
            return
        for rule in self.rules:
            if not rule.at_entry:
                self._select(rule, call, result, number)

    def _select(self, rule: ObjectRule, call: Arguments, result: object, number: int) -> None:
        if rule.call is not None and rule.call != number:
            return
        if rule.where is not None:
            value = read(rule.where, call, result, self.reporter, rule.entry, self.where, "where")
            try:
                same = value is not _NO_RESULT and bool(value == rule.equals)
            except Exception:  # an array compared element-wise has no single truth
                same = False
            if not same:
                return
        obj = read(rule.obj, call, result, self.reporter, rule.entry, self.where, "object")
        if obj is not _NO_RESULT:
            self.sink.attach(rule, obj)


def target_keys(targets: Sequence[Target]) -> frozenset[Key]:
    return frozenset(t.key for t in targets)
