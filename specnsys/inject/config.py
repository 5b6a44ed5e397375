"""The annotation file: which calls of an unedited program become phases, requests and marks.

A TOML file (docs/annotate.md is the reference)::

    [objects.draft]                     # the 2nd object __main__.build_model returns
    factory = "__main__:build_model"
    call = 2

    [[hook]]
    on = "draft.forward"                # a method of that one object
    phase = "draft"

    [[hook]]
    on = "__main__:speculative_step"    # module:qualname (the script runs as __main__)
    phase = "decode"
    proposed = "arg:k"
    accepted = "return.accepted"
    tokens = "len(return.tokens)"

Everything is checked here, before the program starts: a wrong key, phase, target or path is
one line naming the file, the entry and what is wrong (:class:`AnnotationError`, exit status 2).
What can only be known at run time (a module that is never imported, a path that does not
resolve on the actual value) is a warning of the running program (:mod:`.runtime`).

Standard library and base modules only: the profiled program parses the file again.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, TypeGuard

from specnsys.errors import UsageError
from specnsys.inject.paths import PathError, ValuePath, parse_path
from specnsys.small_files import read_small_text
from specnsys.vocabulary import PHASES, REQUEST_PHASE

__all__ = ["AnnotationError", "Config", "Hook", "ObjectRule", "Target", "load_config"]

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOOK_KEYS = {
    "on", "phase", "tokens", "proposed", "accepted", "request_id", "output_tokens",
    "inside", "outside", "calls", "skip", "when", "after", "until", "first_token", "optional",
    "subclasses",
}
_OBJECT_KEYS = {"factory", "call", "where", "equals", "object"}
_TOP_KEYS = {"hook", "objects", "requires"}
#: The keys that tell two entries on one callable apart (the first whose conditions hold
#: applies to a call).
_CONDITIONS = ("inside", "outside", "calls", "skip", "when")
#: An annotation file names a few dozen functions; anything this big is not one.
ANNOTATION_MAX_BYTES = 1 << 20


class AnnotationError(UsageError):
    """The annotation file cannot be used (exit status 2); one line: file, entry, problem."""


@dataclass(frozen=True)
class Target:
    """A callable to wrap: ``module:qualname``, or ``object.method`` of a named object."""

    text: str
    module: str | None  # None: a method of a named object
    qualname: str  # "func", "Class.method"; the method name for an object
    obj: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.module or f"<object {self.obj}>", self.qualname)


@dataclass(frozen=True)
class Hook:
    """What one call of a target gives: a phase range around it, marks from its values, and
    the conditions under which it applies (docs/annotate.md#the-annotation-file)."""

    entry: str  # "hook 3 (on = '...')": how messages name it
    target: Target
    phase: str | None
    tokens: ValuePath | None = None
    proposed: ValuePath | None = None
    accepted: ValuePath | None = None
    request_id: ValuePath | None = None
    output_tokens: ValuePath | None = None
    #: ``output_tokens = true``: the sum of the ``tokens`` marks emitted during the request
    count_output_tokens: bool = False
    inside: tuple[Target, ...] = ()  # applies while a call of one of these runs on the thread
    outside: tuple[Target, ...] = ()  # ... and while no call of any of these runs
    calls: tuple[int, int | None] | None = None  # 1-based, inclusive; None: open-ended
    when: ValuePath | None = None
    after: str | None = None  # a range of this phase from the call's return...
    until: tuple[Target, ...] = ()  # ... to the next call of one of these
    first_token: bool = False
    optional: bool = False  # not reported when the callable does not exist
    subclasses: bool = False  # also every subclass's own override of the method

    @property
    def marks(self) -> tuple[tuple[str, ValuePath], ...]:
        """The mark paths that are set, by field name."""
        fields = ("tokens", "proposed", "accepted", "output_tokens")
        return tuple((f, p) for f in fields if (p := getattr(self, f)) is not None)

    @property
    def conditional(self) -> bool:
        """Whether some calls of the target may not reach this entry."""
        return bool(self.inside or self.outside or self.calls or self.when is not None)

    @property
    def when_at_entry(self) -> bool:
        """A ``when`` read from the arguments decides at the call's start; one that reads
        ``return`` decides, after the call, whether its marks and ``after`` range are given."""
        return self.when is not None and not self.when.uses_return


@dataclass(frozen=True)
class ObjectRule:
    """A named object: what a factory returns on the selected calls (so that draft and target
    of one class, built by one function, are told apart)."""

    entry: str  # "objects.draft"
    name: str
    factory: Target
    call: int | None  # 1-based: the n-th call of the factory
    where: ValuePath | None  # with ``equals``: calls whose value at ``where`` equals it
    equals: object  # a TOML string, number or boolean
    obj: ValuePath  # the object within the call (default: ``return``)

    @property
    def at_entry(self) -> bool:
        """An object taken from an argument (``object = "arg:self"``) is selected when the call
        starts, so that its methods are hooked for the call's own duration."""
        return not self.obj.uses_return


@dataclass(frozen=True)
class Config:
    path: Path
    hooks: tuple[Hook, ...]
    objects: tuple[ObjectRule, ...]
    #: the module a program must import for the file to concern it (``requires``)
    requires: str | None = None

    @property
    def label(self) -> str:
        return self.path.name

    @property
    def scope_targets(self) -> tuple[Target, ...]:
        """Callables named in ``inside``, ``outside`` or ``until``: their calls are followed
        (per thread) even where no entry hooks them."""
        seen: dict[tuple[str, str], Target] = {}
        for hook in self.hooks:
            for target in (*hook.inside, *hook.outside, *hook.until):
                seen.setdefault(target.key, target)
        return tuple(seen.values())


def load_config(path: str | Path) -> Config:
    """Read and check the annotation file *path*; raises :class:`AnnotationError`."""
    path = Path(path)
    label = str(path)
    try:
        data = tomllib.loads(read_small_text(
            path, what="an annotation file is a TOML file", max_bytes=ANNOTATION_MAX_BYTES,
            error=AnnotationError))
    except OSError as exc:
        raise AnnotationError(
            f"{label}: cannot read the annotation file: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError:
        raise AnnotationError(f"{label}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise AnnotationError(f"{label}: not valid TOML: {exc}") from None
    return parse_config(data, path)


def parse_config(data: Mapping[str, object], path: Path) -> Config:
    """Check the parsed TOML *data* of the file *path* and build the :class:`Config`."""
    label = str(path)
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise AnnotationError(
            f"{label}: unknown top-level key {unknown[0]!r} (expected [[hook]] and [objects.NAME])"
        )
    raw_objects = data.get("objects", {})
    if not isinstance(raw_objects, dict):
        raise AnnotationError(f"{label}: 'objects' must be a table of [objects.NAME] tables")
    objects = tuple(
        _object(label, name, body) for name, body in raw_objects.items()
    )
    raw_hooks = data.get("hook", [])
    if not isinstance(raw_hooks, list) or not all(isinstance(h, dict) for h in raw_hooks):
        raise AnnotationError(f"{label}: 'hook' must be an array of tables ([[hook]])")
    if not raw_hooks:
        raise AnnotationError(f"{label}: no [[hook]] entries: nothing would be annotated")
    names = {o.name for o in objects}
    hooks = tuple(_hook(label, i, body, names) for i, body in enumerate(raw_hooks, start=1))
    _check_shared_targets(label, hooks)
    requires = data.get("requires")
    if requires is not None and not (isinstance(requires, str) and _DOTTED.fullmatch(requires)):
        raise AnnotationError(f"{label}: requires must be a module name (e.g. \"transformers\")")
    hooked_objects = {h.target.obj for h in hooks}
    hooked_objects |= {t.obj for h in hooks for t in (*h.inside, *h.outside, *h.until)}
    for rule in objects:
        if rule.name not in hooked_objects:
            raise AnnotationError(
                f"{label}: {rule.entry}: no [[hook]] uses this object "
                f"(on = \"{rule.name}.METHOD\")"
            )
    return Config(path, hooks, objects, requires)


def _check_shared_targets(label: str, hooks: tuple[Hook, ...]) -> None:
    """Several entries may hook one callable when conditions tell them apart: at each call the
    first whose conditions hold applies. An unconditional one would hide every later one."""
    first: dict[tuple[str, str], Hook] = {}
    for hook in hooks:
        earlier = first.get(hook.target.key)
        if earlier is None:
            first[hook.target.key] = hook
            continue
        if earlier.subclasses != hook.subclasses:
            raise AnnotationError(
                f"{label}: {hook.entry}: {hook.target.text} is hooked by {earlier.entry} with "
                "another 'subclasses'; give every entry on one callable the same"
            )
        blocker = next((h for h in hooks if h.target.key == hook.target.key
                        and h is not hook and not h.conditional
                        and hooks.index(h) < hooks.index(hook)), None)
        if blocker is not None:
            raise AnnotationError(
                f"{label}: {hook.entry}: {hook.target.text} is already hooked by "
                f"{blocker.entry}, which has no condition ({', '.join(_CONDITIONS)}), so this "
                "entry would never apply; give one entry all its phase and marks, or tell "
                "them apart with inside/outside/calls/when"
            )


def _target(label: str, entry: str, text: object, objects: set[str] | None) -> Target:
    """``module:qualname``; with *objects*, also ``NAME.method`` of a named object."""
    if not isinstance(text, str) or not text.strip():
        raise AnnotationError(f"{label}: {entry}: the target must be a non-empty string")
    if ":" in text:
        module, _, qualname = text.partition(":")
        if not _DOTTED.fullmatch(module):
            raise AnnotationError(f"{label}: {entry}: {text!r}: {module!r} is not a module name")
        if "<locals>" in qualname:
            raise AnnotationError(
                f"{label}: {entry}: {text!r}: a function defined inside another cannot be "
                "reached; hook the objects its enclosing function returns ([objects.NAME])"
            )
        if not _DOTTED.fullmatch(qualname):
            raise AnnotationError(
                f"{label}: {entry}: {text!r}: {qualname!r} is not a qualified name "
                "(function, Class.method)"
            )
        return Target(text, module, qualname)
    if objects is None:
        raise AnnotationError(
            f"{label}: {entry}: {text!r}: expected module:qualname (e.g. __main__:build_model)"
        )
    obj, dot, method = text.partition(".")
    if not dot or not _NAME.fullmatch(obj) or not _NAME.fullmatch(method):
        raise AnnotationError(
            f"{label}: {entry}: {text!r}: expected module:qualname or OBJECT.method "
            "(an object named in [objects.NAME])"
        )
    if obj not in objects:
        known = ", ".join(sorted(objects)) or "none is defined"
        raise AnnotationError(
            f"{label}: {entry}: {text!r}: no object named {obj!r} ([objects.{obj}]; {known})"
        )
    return Target(text, None, method, obj)


def _path(label: str, entry: str, key: str, text: object) -> ValuePath:
    try:
        return parse_path(text)
    except PathError as exc:
        raise AnnotationError(f"{label}: {entry}: {key}: {exc}") from None


def _hook(label: str, index: int, body: Mapping[str, object], objects: set[str]) -> Hook:
    on = body.get("on")
    entry = f"hook {index}" + (f" (on = {on!r})" if isinstance(on, str) else "")
    unknown = sorted(set(body) - _HOOK_KEYS)
    if unknown:
        raise AnnotationError(
            f"{label}: {entry}: unknown key {unknown[0]!r} "
            f"(expected {', '.join(sorted(_HOOK_KEYS))})"
        )
    if on is None:
        raise AnnotationError(f"{label}: {entry}: missing 'on' (the function or method to hook)")
    target = _target(label, entry, on, objects)
    phase = body.get("phase")
    if phase is not None and (not isinstance(phase, str) or phase not in PHASES):
        raise AnnotationError(
            f"{label}: {entry}: unknown phase {phase!r} (expected one of {', '.join(PHASES)})"
        )
    count_output = body.get("output_tokens") is True
    paths = {
        key: _path(label, entry, key, body[key])
        for key in ("tokens", "proposed", "accepted", "request_id", "output_tokens")
        if key in body and not (key == "output_tokens" and count_output)
    }
    if ("proposed" in paths) != ("accepted" in paths):
        raise AnnotationError(
            f"{label}: {entry}: 'proposed' and 'accepted' come as a pair (one of each per "
            "sequence per step)"
        )
    is_request = phase == REQUEST_PHASE
    for key in ("request_id", "output_tokens"):
        if key in body and not is_request:
            raise AnnotationError(f"{label}: {entry}: {key!r} needs phase = \"request\"")
    if "request_id" in paths and paths["request_id"].uses_return:
        raise AnnotationError(
            f"{label}: {entry}: request_id: the request starts before the call returns; "
            "take it from an argument (arg:NAME)"
        )
    extra = _conditions(label, entry, body, target, objects)
    if phase is None and not paths and not extra["after"] and not extra["first_token"]:
        raise AnnotationError(
            f"{label}: {entry}: give a 'phase', 'after' or a mark (tokens, accepted, "
            "first_token...)"
        )
    return Hook(entry, target, phase, **paths, count_output_tokens=count_output,
                **extra)


def _targets(
    label: str, entry: str, key: str, value: object, objects: set[str]
) -> tuple[Target, ...]:
    """``inside``/``outside``/``until``: one target or a list of them."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise AnnotationError(f"{label}: {entry}: {key}: an empty list names no callable")
    return tuple(_target(label, f"{entry}: {key}", item, objects) for item in items)


def _flag(label: str, entry: str, body: Mapping[str, object], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise AnnotationError(f"{label}: {entry}: {key} must be true or false")
    return value


def _count(value: object, least: int) -> TypeGuard[int]:
    """Whether *value* is an integer (not a boolean) of at least *least*."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _calls(label: str, entry: str, body: Mapping[str, object]) -> tuple[int, int | None] | None:
    """``calls = N`` (only the n-th), ``calls = [FIRST, LAST]`` (inclusive), ``skip = N``."""
    if "calls" in body and "skip" in body:
        raise AnnotationError(f"{label}: {entry}: give 'calls' or 'skip', not both")
    if "skip" in body:
        skip = body["skip"]
        if not _count(skip, 0):
            raise AnnotationError(f"{label}: {entry}: skip must be an integer >= 0")
        return (skip + 1, None) if skip else None
    if "calls" not in body:
        return None
    calls = body["calls"]
    if _count(calls, 1):
        return (calls, calls)
    if isinstance(calls, list) and len(calls) == 2:
        first, last = calls
        if _count(first, 1) and _count(last, 1) and first <= last:
            return (first, last)
    raise AnnotationError(
        f"{label}: {entry}: calls must be an integer >= 1 (that call) or [FIRST, LAST] "
        "(1-based, inclusive)"
    )


class _Conditions(TypedDict, total=False):
    """The :class:`Hook` fields :func:`_conditions` reads (those the file gives)."""

    inside: tuple[Target, ...]
    outside: tuple[Target, ...]
    until: tuple[Target, ...]
    calls: tuple[int, int | None] | None
    when: ValuePath
    after: str | None
    first_token: bool
    optional: bool
    subclasses: bool


def _conditions(
    label: str, entry: str, body: Mapping[str, object], target: Target, objects: set[str]
) -> _Conditions:
    """The keys that say when an entry applies and what it gives beside its phase."""
    out: _Conditions = {}
    if "inside" in body:
        out["inside"] = _targets(label, entry, "inside", body["inside"], objects)
    if "outside" in body:
        out["outside"] = _targets(label, entry, "outside", body["outside"], objects)
    if "until" in body:
        out["until"] = _targets(label, entry, "until", body["until"], objects)
    out["calls"] = _calls(label, entry, body)
    if "when" in body:
        out["when"] = _path(label, entry, "when", body["when"])
    after = body.get("after")
    if after is not None and (
        not isinstance(after, str) or after not in PHASES or after == REQUEST_PHASE
    ):
        raise AnnotationError(
            f"{label}: {entry}: after: unknown phase {after!r} (a push/pop phase: "
            f"{', '.join(p for p in PHASES if p != REQUEST_PHASE)})"
        )
    out["after"] = after
    if "until" in body and after is None:
        raise AnnotationError(f"{label}: {entry}: 'until' ends an 'after' range: give 'after'")
    if after is not None and "until" not in body:
        out["until"] = (target,)
    out["first_token"] = _flag(label, entry, body, "first_token")
    out["optional"] = _flag(label, entry, body, "optional")
    out["subclasses"] = _flag(label, entry, body, "subclasses")
    if out["subclasses"] and (target.module is None or "." not in target.qualname):
        raise AnnotationError(
            f"{label}: {entry}: subclasses = true needs a method of a class "
            "(module:Class.method)"
        )
    return out


def _object(label: str, name: str, body: object) -> ObjectRule:
    entry = f"objects.{name}"
    if not _NAME.fullmatch(name):
        raise AnnotationError(f"{label}: {entry}: an object name is a Python identifier")
    if not isinstance(body, dict):
        raise AnnotationError(f"{label}: {entry}: must be a table ([objects.{name}])")
    unknown = sorted(set(body) - _OBJECT_KEYS)
    if unknown:
        raise AnnotationError(
            f"{label}: {entry}: unknown key {unknown[0]!r} "
            f"(expected {', '.join(sorted(_OBJECT_KEYS))})"
        )
    if "factory" not in body:
        raise AnnotationError(f"{label}: {entry}: missing 'factory' (module:qualname)")
    factory = _target(label, entry, body["factory"], None)
    call = body.get("call")
    if call is not None and (isinstance(call, bool) or not isinstance(call, int) or call < 1):
        raise AnnotationError(f"{label}: {entry}: call must be an integer >= 1 (1: the first)")
    where = _path(label, entry, "where", body["where"]) if "where" in body else None
    if (where is None) != ("equals" not in body):
        raise AnnotationError(f"{label}: {entry}: 'where' and 'equals' come together")
    if where is not None and where.uses_return:
        raise AnnotationError(
            f"{label}: {entry}: where: select calls by an argument (arg:NAME), not the result"
        )
    equals = body.get("equals")
    if where is not None and not isinstance(equals, (str, int, float, bool)):
        raise AnnotationError(f"{label}: {entry}: equals must be a string, number or boolean")
    obj = _path(label, entry, "object", body.get("object", "return"))
    if not obj.plain:
        raise AnnotationError(
            f"{label}: {entry}: object: {obj.text!r} computes a value; name an object "
            "(return, return.model, arg:self, ...)"
        )
    return ObjectRule(entry, name, factory, call, where, equals, obj)
