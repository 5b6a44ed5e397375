"""NVTX annotation API for speculative-decoding loops (docs/design.md#phases).

(Over 500 lines on purpose: it is the one module users import, as ``sa``, and its parts --
ranges, marks, method patching, the no-collector fast path, the torch-profiler scopes -- share
the cached NVTX handles.)

Users wrap the phases of their own generation loop in ranges of the fixed phase vocabulary,
in the NVTX domain ``specnsys``, so that ``specnsys`` can attribute every nanosecond of an
Nsight Systems trace to a phase::

    from specnsys import annotate as sa

    with sa.request(request_id=7):
        with sa.phase("prefill"):
            ...
        while not done:
            with sa.phase("decode"):
                with sa.phase("draft"):
                    ...
                with sa.phase("verify"):
                    ...
                sa.mark_acceptance(proposed=4, accepted=2)

Existing code can be annotated without editing it (``patch_module``), and phases can
decorate functions (``@sa.phase("sample")``).

Cost model. NVTX calls only reach a collector when one was injected at process start: Nsight
tools set ``NVTX_INJECTION64_PATH`` in the environment of the program they launch, and the
NVTX library loads that collector on the first call. When the variable is absent no collector
can ever attach to this process, so every call here becomes a Python no-op (no C call, no
attribute objects). ``SPECNSYS_NVTX=1`` forces the real calls (for example to exercise them
in tests), ``SPECNSYS_NVTX=0`` or nvtx's own ``NVTX_DISABLE`` forces the no-op path.
``bench/annotate_overhead.py`` measures both paths.

PyTorch profiler. While a ``torch.profiler`` (Kineto) is recording, every range and mark is
also a ``record_function`` scope, so one annotated run can be read from an nsys trace and from
the torch profiler's Chrome trace alike (docs/design.md#readers). torch is never imported
here: ``sys.modules`` says whether the program imported it, and its profiler's state is asked
on each range (one C call, about 0.1 us; a dictionary lookup when torch is not imported). Phases of
the vocabulary keep their name (``decode``); a custom phase is ``specnsys.range:<name>``, a
request ``specnsys.range:request=<id>``, a mark a zero-length ``specnsys.mark:<name>=<value>``
(:data:`~specnsys.vocabulary.TORCH_MARK_PREFIX`). ``set_enabled`` switches the NVTX calls
only; the scopes follow the profiler. A request ended on another thread than the one that
started it stays open to the profiler's end in a torch trace (Kineto ends a scope on its own
thread only).

The names (``PHASES``, ``DOMAIN``, ``MARKS``, ``VALUE_MARKS``) are defined in
:mod:`specnsys.vocabulary`, which the analysis shares without importing ``nvtx``; they are
re-exported here unchanged. This module imports only the standard library, ``nvtx``, the
vocabulary and the control log (it is loaded inside users' inference processes, which must not pay for the analysis
stack). It targets the ``nvtx``
0.2.11 API (``Domain.get_event_attributes`` + ``nvtx._lib`` push/pop on the domain handle),
because the Debian ``nsys`` 2022.4 drops ranges emitted by newer ``nvtx`` releases; domains
of newer releases that expose ``push_range``/``pop_range`` methods are used through those.
"""

from __future__ import annotations

import functools
import inspect
import operator
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Literal, Protocol, TypeVar

import nvtx

from specnsys.control_log import control_from_env
from specnsys.vocabulary import ACCEPTANCE_MARKS as MARKS
from specnsys.vocabulary import (
    ACCEPTED_MARK,
    DOMAIN,
    FIRST_TOKEN_MARK,
    OUTPUT_TOKENS_MARK,
    PHASE_RGB,
    PHASES,
    PROPOSED_MARK,
    REQUEST_PHASE,
    TOKENS_MARK,
    TORCH_MARK_PREFIX,
    TORCH_RANGE_PREFIX,
    VALUE_MARKS,
)

__all__ = [
    "DOMAIN",
    "MARKS",
    "PHASES",
    "Patch",
    "RequestHandle",
    "enabled",
    "VALUE_MARKS",
    "end_request",
    "mark_acceptance",
    "mark_first_token",
    "mark_tokens",
    "mark_value",
    "patch_attr",
    "patch_module",
    "phase",
    "request",
    "set_enabled",
    "start_request",
    "wrap_attr",
]

# ARGB colors so the phases are told apart at a glance in the Nsight Systems timeline.
_COLORS: dict[str, int] = {name: 0xFF000000 | rgb for name, rgb in PHASE_RGB.items()}
_CUSTOM_COLOR = 0xFFBCBD22
_MARK_COLOR = 0xFF17BECF

F = TypeVar("F", bound=Callable[..., object])


def _env_enabled() -> bool:
    """Decide once whether NVTX calls can reach a collector (see module docstring)."""
    forced = os.environ.get("SPECNSYS_NVTX", "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off") or os.environ.get("NVTX_DISABLE"):
        return False
    return bool(os.environ.get("NVTX_INJECTION64_PATH") or os.environ.get("NVTX_INJECTION32_PATH"))


class _Backend:
    """The real NVTX calls for domain ``specnsys``, bridging nvtx API generations."""

    def __init__(self) -> None:
        self.domain = nvtx.get_domain(DOMAIN)
        if hasattr(self.domain, "push_range"):  # newer nvtx: methods on the domain
            d = self.domain
            self.push = d.push_range
            self.pop = d.pop_range
            self.start = d.start_range
            self.end = d.end_range
            self.mark = d.mark
        else:  # nvtx <= 0.2.11: module functions taking the domain handle
            from nvtx import _lib

            # Default-argument closures: one Python frame per call, no global lookups.
            handle = self.domain.handle
            self.push = lambda a, _f=_lib.push_range, _h=handle: _f(a, _h)
            self.pop = functools.partial(_lib.pop_range, handle)
            self.start = lambda a, _f=_lib.start_range, _h=handle: _f(a, _h)
            self.end = _lib.end_range
            self.mark = lambda a, _f=_lib.mark, _h=handle: _f(a, _h)
        make: Callable[..., object] | None = getattr(nvtx, "EventAttributes", None)
        if make is None:
            from nvtx import _lib

            make = _lib.EventAttributes
        self._event_attributes: Callable[..., object] = make

    def attributes(self, message: str, color: int, payload: int | None = None) -> object:
        """Event attributes with a registered message string (an ``nvtx`` object).

        Built directly rather than through ``Domain.get_event_attributes``, whose lru_cache
        would keep one object per distinct payload (request ids, byte counts) forever.
        """
        registered = self.domain.get_registered_string(message)
        return self._event_attributes(registered, color, None, payload)


class _QuietBackend(_Backend):
    """An unprofiled control run's backend: every call of the annotated loop happens as it
    would under nsys (so ``set_enabled`` and its warm-ups behave alike), and none reaches
    NVTX."""

    def __init__(self) -> None:
        def nothing(*_args: object) -> None:
            return None

        self.push = self.pop = self.start = self.end = self.mark = nothing

    def attributes(self, message: str, color: int, payload: int | None = None) -> object:
        return None


_lock = threading.Lock()
_control = control_from_env()
"""An unprofiled control run's log (``profile --control``), else None."""
_backend: _Backend | None = None if _control is None else _QuietBackend()
_enabled: bool = _env_enabled() or (
    _control is not None and os.environ.get("SPECNSYS_NVTX", "").strip().lower() not in
    ("0", "false", "no", "off")
)  # fmt: skip


def _get_backend() -> _Backend:
    global _backend
    if _backend is None:
        with _lock:
            if _backend is None:
                _backend = _Backend()
    return _backend


def enabled() -> bool:
    """Whether annotations emit real NVTX events (False: all calls are Python no-ops)."""
    return _enabled


def set_enabled(flag: bool) -> None:
    """Switch between real NVTX calls and the no-op path.

    Affects phases looked up, requests started and patches made after the call; functions
    already decorated with ``@phase(...)`` keep the mode they were decorated in (the no-op
    decorator returns the function itself, which is what makes it free). Meant for tests and
    for programs that attach a collector by means the environment check cannot see.
    """
    global _enabled
    with _lock:
        _enabled = bool(flag)
        _phase_cache.clear()
        _custom_cache.clear()


# --------------------------------------------------------------------------- torch profiler

_modules = sys.modules


class _TorchScopes:
    """The torch profiler's ``record_function`` ops, looked up once torch is imported."""

    __slots__ = ("active", "enter", "exit")

    def __init__(self, torch: ModuleType) -> None:
        self.active: Callable[[], bool] = torch._C._autograd._profiler_enabled
        ops = torch.ops.profiler
        self.enter: Callable[[str, None], object] = ops._record_function_enter_new
        self.exit: Callable[[object], None] = ops._record_function_exit._RecordFunction


_torch: _TorchScopes | None = None
#: Scopes open on all threads (changed under :data:`_scope_lock`), so that closing a range
#: costs one read while no profiler is recording.
_open_scopes = 0
_scope_lock = threading.Lock()
_scope_stacks = threading.local()


def _torch_ops() -> _TorchScopes | None:
    """The profiler's ops, looked up the first time torch is found imported (None before:
    then no profiler can run)."""
    global _torch
    torch = _modules.get("torch")
    if torch is None:
        return None
    try:
        _torch = _TorchScopes(torch)
    except (AttributeError, RuntimeError):  # torch half imported, or without the ops
        return None
    return _torch


def _recording() -> _TorchScopes | None:
    """The profiler's ops while a torch profiler is recording, else None."""
    scopes = _torch if _torch is not None else _torch_ops()
    return scopes if scopes is not None and scopes.active() else None


def _scope_open(owner: object, name: str) -> None:
    """Open a ``record_function`` scope *name* for the range *owner* is entering, when a torch
    profiler is recording; :func:`_scope_close` with the same *owner* closes it. Callers call
    it only once torch is imported (``_torch`` set or ``"torch"`` in ``sys.modules``)."""
    global _open_scopes
    scopes = _torch if _torch is not None else _torch_ops()
    if scopes is None or not scopes.active():
        return
    handle = scopes.enter(name, None)
    stack = getattr(_scope_stacks, "stack", None)
    if stack is None:
        stack = _scope_stacks.stack = []
    stack.append((owner, handle))
    with _scope_lock:
        _open_scopes += 1


def _scope_close(owner: object) -> None:
    """Close the scope *owner* opened last on this thread, if its range opened one (a range
    entered while no profiler was recording has none, even if one started since). Callers
    test :data:`_open_scopes` first: while none is open, closing costs that one read."""
    global _open_scopes
    stack = getattr(_scope_stacks, "stack", None)
    if not stack or stack[-1][0] is not owner:
        return
    _, handle = stack.pop()
    with _scope_lock:
        _open_scopes -= 1
    assert _torch is not None
    _torch.exit(handle)


def _scope_mark(message: str, value: int | None = None) -> None:
    """A mark as a zero-length scope ``specnsys.mark:<message>=<value>`` (while recording)."""
    if _torch is None and "torch" not in _modules:
        return
    scopes = _recording()
    if scopes is not None:
        payload = "" if value is None else f"={value}"
        scopes.exit(scopes.enter(f"{TORCH_MARK_PREFIX}{message}{payload}", None))


def _scope_name(name: str) -> str:
    """The ``record_function`` name of phase *name*: itself for a phase of the vocabulary,
    ``specnsys.range:<name>`` for a custom one (its domain, which scopes lack, in the name)."""
    return name if name in PHASES else f"{TORCH_RANGE_PREFIX}{name}"


class PhaseRange(Protocol):
    """What :func:`phase` returns, a context manager and a decorator: one declared type, so
    that ``@annotate.phase("draft")`` keeps the function typed under ``mypy --strict`` (a
    union of the two implementations reads as an untyped decorator there)."""

    name: str

    def __enter__(self) -> PhaseRange: ...

    def __exit__(self, *exc: object) -> Literal[False]: ...

    def __call__(self, func: F) -> F: ...


class _Phase:
    """A reusable NVTX push/pop range; stateless, so one instance serves every thread.

    NVTX keeps the push/pop stack per thread, so nesting and concurrent use of the same
    instance are both safe.
    """

    __slots__ = ("name", "_scope", "_attributes", "_push", "_pop")

    def __init__(self, name: str, color: int) -> None:
        backend = _get_backend()
        self.name = name
        self._scope = _scope_name(name)
        self._attributes = backend.attributes(name, color)
        self._push = backend.push
        self._pop = backend.pop

    def __enter__(self) -> _Phase:
        self._push(self._attributes)
        if _torch is not None or "torch" in _modules:
            _scope_open(self, self._scope)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if _open_scopes:
            _scope_close(self)
        self._pop()
        return False

    def __call__(self, func: F) -> F:
        push, pop, attributes = self._push, self._pop, self._attributes

        @functools.wraps(func)
        def wrapper(*args: object, **kwargs: object) -> object:
            push(attributes)
            if _torch is not None or "torch" in _modules:
                _scope_open(wrapper, self._scope)
            try:
                return func(*args, **kwargs)
            finally:
                if _open_scopes:
                    _scope_close(wrapper)
                pop()

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"phase({self.name!r})"


class _NoopPhase:
    """The phase used when no collector can attach: no NVTX call, only the torch profiler's
    scope while one is recording (see the module docstring)."""

    __slots__ = ("name", "_scope")

    def __init__(self, name: str, color: int) -> None:
        self.name = name
        self._scope = _scope_name(name)

    def __enter__(self) -> _NoopPhase:
        if _torch is not None or "torch" in _modules:
            _scope_open(self, self._scope)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if _open_scopes:
            _scope_close(self)
        return False

    def __call__(self, func: F) -> F:
        """The function itself while the program has not imported torch (no profiler can
        record it: a function decorated before torch is imported opens no scope), else a
        wrapper that opens the scope while a torch profiler records."""
        if "torch" not in _modules:
            return func
        scope = self._scope

        @functools.wraps(func)
        def wrapper(*args: object, **kwargs: object) -> object:
            _scope_open(wrapper, scope)  # torch is imported (see above)
            try:
                return func(*args, **kwargs)
            finally:
                if _open_scopes:
                    _scope_close(wrapper)

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"phase({self.name!r}, noop)"


_phase_cache: dict[str, PhaseRange] = {}
_custom_cache: dict[str, PhaseRange] = {}


def phase(name: str, *, allow_custom: bool = False) -> PhaseRange:
    """Return the NVTX push/pop range for ``name``, usable as context manager or decorator.

    ``name`` must be one of ``PHASES`` so traces stay analyzable without name-mapping rules;
    pass ``allow_custom=True`` to emit another name in the same domain (map it onto a phase
    with a name rule at analysis time). The returned object is cached per name, so
    ``with phase("decode"):`` in a hot loop costs a dict lookup plus the push/pop.

    Raises ValueError for a name outside the vocabulary unless ``allow_custom`` is set.
    """
    try:
        return _phase_cache[name]
    except KeyError:
        pass
    if name not in PHASES:
        if not allow_custom:
            raise ValueError(
                f"unknown phase {name!r}; expected one of {', '.join(PHASES)} "
                "(pass allow_custom=True for a user-defined range name)"
            )
        if not isinstance(name, str) or not name:
            raise ValueError("a custom phase name must be a non-empty string")
        cached = _custom_cache.get(name)
        if cached is None:
            cls = _Phase if _enabled else _NoopPhase
            cached = _custom_cache.setdefault(name, cls(name, _CUSTOM_COLOR))
        return cached
    cls = _Phase if _enabled else _NoopPhase
    return _phase_cache.setdefault(name, cls(name, _COLORS[name]))


# --------------------------------------------------------------------------- requests


class RequestHandle:
    """An open ``request`` range; pass it to ``end_request`` (from any thread)."""

    __slots__ = ("request_id", "_range_id", "_open", "_scope", "_control_key")

    def __init__(self, request_id: int, range_id: object, scope: object = None) -> None:
        self.request_id = request_id
        self._range_id = range_id
        self._open = True
        self._scope = scope  # the torch profiler's record_function handle, while recording
        # an unprofiled control run's note of the start (specnsys.control_log), of the
        # requests a profiled run would show (not those under set_enabled(False))
        self._control_key = _control.start() if _control is not None and _enabled else None

    @property
    def is_open(self) -> bool:
        return self._open

    def __repr__(self) -> str:
        state = "open" if self._open else "ended"
        return f"RequestHandle(request_id={self.request_id}, {state})"


def start_request(request_id: int) -> RequestHandle:
    """Open a ``request`` start/end range whose payload is ``request_id`` (an int64).

    Start/end ranges (not push/pop) because requests overlap each other under batching and
    may be finished by another thread than the one that admitted them.
    """
    rid = operator.index(request_id)
    range_id = None
    if _enabled:
        backend = _get_backend()
        range_id = backend.start(backend.attributes(REQUEST_PHASE, _COLORS[REQUEST_PHASE], rid))
    scopes = _recording()
    scope = (
        None
        if scopes is None
        else scopes.enter(f"{TORCH_RANGE_PREFIX}{REQUEST_PHASE}={rid}", None)
    )
    return RequestHandle(rid, range_id, scope)


def end_request(handle: RequestHandle, output_tokens: int | None = None) -> None:
    """Close a range opened by ``start_request``; ending it twice raises ValueError.

    With ``output_tokens`` (the request's output length) an ``output_tokens`` mark is emitted
    on this thread immediately before the range ends, so that TPOT per request can be read
    from the trace: the analysis pairs each request with the last such mark on its ending
    thread at or before its end (NVTX range ends carry no payload of their own).
    """
    if not handle._open:
        raise ValueError(f"request {handle.request_id} was already ended")
    n = None if output_tokens is None else operator.index(output_tokens)
    if n is not None and n < 0:
        raise ValueError(f"output_tokens must be >= 0, got {n}")
    handle._open = False
    if _control is not None and handle._control_key is not None:
        _control.end(handle._control_key, n)
    if n is not None and handle._range_id is not None:
        _emit_mark(OUTPUT_TOKENS_MARK, n)
    if handle._scope is not None:
        if n is not None:
            _scope_mark(OUTPUT_TOKENS_MARK, n)
        assert _torch is not None
        _torch.exit(handle._scope)
        handle._scope = None
    if handle._range_id is not None:
        _get_backend().end(handle._range_id)
        handle._range_id = None


@contextmanager
def request(request_id: int) -> Iterator[RequestHandle]:
    """``with request(request_id=3):`` -- a ``request`` range around the block."""
    handle = start_request(request_id)
    try:
        yield handle
    finally:
        end_request(handle)


# --------------------------------------------------------------------------- marks


_mark_cache: dict[tuple[str, int], object] = {}
_MARK_CACHE_MAX_VALUE = 1024


def _emit_mark(message: str, value: int) -> None:
    """Emit a mark; attributes of small payloads (acceptance counts) are reused."""
    backend = _get_backend()
    if 0 <= value < _MARK_CACHE_MAX_VALUE:
        key = (message, value)
        attributes = _mark_cache.get(key)
        if attributes is None:
            attributes = _mark_cache.setdefault(
                key, backend.attributes(message, _MARK_COLOR, value)
            )
    else:
        attributes = backend.attributes(message, _MARK_COLOR, value)
    backend.mark(attributes)


def mark_acceptance(proposed: int, accepted: int) -> None:
    """Emit the ``proposed``/``accepted`` mark pair for one sequence in one step.

    ``proposed`` is k (drafts offered), ``accepted`` the accepted draft tokens 0..k, not
    counting the bonus/correction token. Acceptance statistics then come from the same trace
    as the timings. Raises ValueError when ``accepted`` is outside 0..proposed.
    """
    k = operator.index(proposed)
    n = operator.index(accepted)
    if k < 0 or not 0 <= n <= k:
        raise ValueError(f"need 0 <= accepted <= proposed, got proposed={k}, accepted={n}")
    _scope_mark(PROPOSED_MARK, k)
    _scope_mark(ACCEPTED_MARK, n)
    if not _enabled:
        return
    _emit_mark(PROPOSED_MARK, k)
    _emit_mark(ACCEPTED_MARK, n)


def mark_tokens(n: int) -> None:
    """Emit a ``tokens`` mark: ``n`` output tokens were emitted (one step, whole batch).

    Output tokens cannot be inferred from timings (a speculative step emits 1..k+1 per
    sequence, truncated at each request's end), so the loop states them; per-token time and
    the measured speedup rest on their sum.
    """
    v = operator.index(n)
    if v < 0:
        raise ValueError(f"token count must be >= 0, got {v}")
    _scope_mark(TOKENS_MARK, v)
    if not _enabled:
        return
    if _control is not None:
        _control.tokens(v)
    _emit_mark(TOKENS_MARK, v)


def mark_first_token(request_id: int) -> None:
    """Emit a ``first_token`` mark for ``request_id`` (TTFT is measured up to this point)."""
    rid = operator.index(request_id)
    _scope_mark(FIRST_TOKEN_MARK, rid)
    if not _enabled:
        return
    _emit_mark(FIRST_TOKEN_MARK, rid)


def mark_value(name: str, value: int) -> None:
    """Emit a mark ``name`` with an integer payload, for facts the analysis needs.

    Examples: ``target_bytes`` (bytes read by one target forward, for bandwidth estimates),
    ``output_tokens``. Integers only: the payload is stored as int64 in the trace.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("mark name must be a non-empty string")
    v = operator.index(value)
    _scope_mark(name, v)
    if not _enabled:
        return
    _emit_mark(name, v)


# --------------------------------------------------------------------------- patching


class Patch:
    """Undo handle for ``patch_module``/``patch_attr``; also a context manager.

    ``undo()`` restores every attribute exactly as it was: an attribute that lived on the
    object itself is put back, one that was found through the class (a method of an
    instance) is deleted again so the class attribute shows through.
    """

    def __init__(self) -> None:
        self._restore: list[tuple[object, str, bool, object]] = []

    def _add(self, obj: object, attr: str, had_own: bool, original: object) -> None:
        self._restore.append((obj, attr, had_own, original))

    @property
    def active(self) -> bool:
        return bool(self._restore)

    def undo(self) -> None:
        """Restore the original attributes (last patched first); a second call does nothing."""
        while self._restore:
            obj, attr, had_own, original = self._restore.pop()
            if had_own:
                setattr(obj, attr, original)
            else:
                delattr(obj, attr)

    def __enter__(self) -> Patch:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.undo()
        return False


def _own_attribute(obj: object, attr: str) -> tuple[bool, object]:
    """Whether ``attr`` is stored on ``obj`` itself, and the raw stored value."""
    try:
        own = vars(obj)
    except TypeError:
        return False, None
    if attr in own:
        return True, own[attr]
    return False, None


def _wrap(func: Callable[..., object], ph: PhaseRange) -> Callable[..., object]:
    """Always a real wrapper (even on the no-op path) so a patch is visible and undoable."""

    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> object:
        with ph:
            return func(*args, **kwargs)

    wrapper.__specnsys_phase__ = ph.name  # type: ignore[attr-defined]
    return wrapper


def patch_attr(
    obj: object,
    attr: str,
    phase_name: str,
    *,
    allow_custom: bool = False,
    patch: Patch | None = None,
) -> Patch:
    """Wrap the callable ``obj.attr`` in the range ``phase_name``, without editing its source.

    ``obj`` may be a module (``patch_attr(torch, "multinomial", "sample")``), a class (every
    instance is affected, static and class methods keep their kind) or an instance (only that
    object is affected -- e.g. the target model of a loop whose draft model shares its class).
    Returns a ``Patch`` whose ``undo()`` restores the original; pass ``patch`` to collect
    several attributes into one handle.
    """
    ph = phase(phase_name, allow_custom=allow_custom)
    return wrap_attr(obj, attr, lambda func: _wrap(func, ph), patch=patch)


def wrap_attr(
    obj: object,
    attr: str,
    make_wrapper: Callable[[Callable[..., object]], Callable[..., object]],
    *,
    patch: Patch | None = None,
) -> Patch:
    """Replace the callable ``obj.attr`` by ``make_wrapper(original)``, undoably.

    The mechanics of :func:`patch_attr` for any wrapper (``specnsys.inject`` wraps calls in a
    phase *and* reads marks from their results): ``obj`` may be a module, a class (static and
    class methods keep their kind) or an instance (only that object is affected).
    """
    handle = patch if patch is not None else Patch()
    had_own, raw = _own_attribute(obj, attr)
    if inspect.isclass(obj) and isinstance(raw, (staticmethod, classmethod)):
        replacement: object = type(raw)(make_wrapper(raw.__func__))
    else:
        current = getattr(obj, attr)  # bound method for an instance, function otherwise
        if not callable(current):
            raise TypeError(f"{type(obj).__name__}.{attr} is not callable")
        replacement = make_wrapper(current)
    setattr(obj, attr, replacement)
    handle._add(obj, attr, had_own, raw)
    return handle


def patch_module(obj: object, mapping: Mapping[str, str], *, allow_custom: bool = False) -> Patch:
    """Wrap several callables of ``obj`` at once: ``mapping`` is attribute name -> phase.

    Example -- annotate an existing loop from the outside::

        with patch_module(target_model, {"forward": "verify"}), \\
             patch_module(sampler_module, {"sample": "sample"}):
            run_existing_generation_script()

    For ``torch.nn.Module`` instances patching ``forward`` works because ``Module.__call__``
    looks ``forward`` up on the instance. All names are validated before anything is
    changed, so a bad mapping leaves ``obj`` untouched.
    """
    for attr, phase_name in mapping.items():
        phase(phase_name, allow_custom=allow_custom)
        if not callable(getattr(obj, attr)):
            raise TypeError(f"{type(obj).__name__}.{attr} is not callable")
    handle = Patch()
    try:
        for attr, phase_name in mapping.items():
            patch_attr(obj, attr, phase_name, allow_custom=allow_custom, patch=handle)
    except BaseException:
        handle.undo()
        raise
    return handle
