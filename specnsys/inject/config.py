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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specnsys.errors import UsageError
from specnsys.inject.paths import PathError, ValuePath, parse_path
from specnsys.small_files import read_small_text
from specnsys.vocabulary import PHASES, REQUEST_PHASE

__all__ = ["AnnotationError", "Config", "Hook", "ObjectRule", "Target", "load_config"]

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOOK_KEYS = {
    "on", "phase", "tokens", "proposed", "accepted", "request_id", "output_tokens",
}
_OBJECT_KEYS = {"factory", "call", "where", "equals", "object"}
_TOP_KEYS = {"hook", "objects"}
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
    """What one call of a target gives: a phase range around it, marks from its values."""

    entry: str  # "hook 3 (on = '...')": how messages name it
    target: Target
    phase: str | None
    tokens: ValuePath | None = None
    proposed: ValuePath | None = None
    accepted: ValuePath | None = None
    request_id: ValuePath | None = None
    output_tokens: ValuePath | None = None

    @property
    def marks(self) -> tuple[tuple[str, ValuePath], ...]:
        """The mark paths that are set, by field name."""
        fields = ("tokens", "proposed", "accepted", "output_tokens")
        return tuple((f, p) for f in fields if (p := getattr(self, f)) is not None)


@dataclass(frozen=True)
class ObjectRule:
    """A named object: what a factory returns on the selected calls (so that draft and target
    of one class, built by one function, are told apart)."""

    entry: str  # "objects.draft"
    name: str
    factory: Target
    call: int | None  # 1-based: the n-th call of the factory
    where: ValuePath | None  # with ``equals``: calls whose value at ``where`` equals it
    equals: Any
    obj: ValuePath  # the object within the call (default: ``return``)


@dataclass(frozen=True)
class Config:
    path: Path
    hooks: tuple[Hook, ...]
    objects: tuple[ObjectRule, ...]

    @property
    def label(self) -> str:
        return self.path.name


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


def parse_config(data: dict[str, Any], path: Path) -> Config:
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
    seen: dict[tuple[str, str], str] = {}
    for hook in hooks:
        if hook.target.key in seen:
            raise AnnotationError(
                f"{label}: {hook.entry}: {hook.target.text} is already hooked by "
                f"{seen[hook.target.key]}; give one entry all its phase and marks"
            )
        seen[hook.target.key] = hook.entry
    hooked_objects = {h.target.obj for h in hooks}
    for rule in objects:
        if rule.name not in hooked_objects:
            raise AnnotationError(
                f"{label}: {rule.entry}: no [[hook]] uses this object "
                f"(on = \"{rule.name}.METHOD\")"
            )
    return Config(path, hooks, objects)


def _target(label: str, entry: str, text: Any, objects: set[str] | None) -> Target:
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


def _path(label: str, entry: str, key: str, text: Any) -> ValuePath:
    try:
        return parse_path(text)
    except PathError as exc:
        raise AnnotationError(f"{label}: {entry}: {key}: {exc}") from None


def _hook(label: str, index: int, body: dict[str, Any], objects: set[str]) -> Hook:
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
    if phase is not None and phase not in PHASES:
        raise AnnotationError(
            f"{label}: {entry}: unknown phase {phase!r} (expected one of {', '.join(PHASES)})"
        )
    paths = {
        key: _path(label, entry, key, body[key])
        for key in ("tokens", "proposed", "accepted", "request_id", "output_tokens")
        if key in body
    }
    if ("proposed" in paths) != ("accepted" in paths):
        raise AnnotationError(
            f"{label}: {entry}: 'proposed' and 'accepted' come as a pair (one of each per "
            "sequence per step)"
        )
    is_request = phase == REQUEST_PHASE
    for key in ("request_id", "output_tokens"):
        if key in paths and not is_request:
            raise AnnotationError(f"{label}: {entry}: {key!r} needs phase = \"request\"")
    if "request_id" in paths and paths["request_id"].uses_return:
        raise AnnotationError(
            f"{label}: {entry}: request_id: the request starts before the call returns; "
            "take it from an argument (arg:NAME)"
        )
    if phase is None and not paths:
        raise AnnotationError(f"{label}: {entry}: give a 'phase' or a mark (tokens, accepted...)")
    return Hook(entry, target, phase, **paths)


def _object(label: str, name: str, body: Any) -> ObjectRule:
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
    if obj.length:
        raise AnnotationError(f"{label}: {entry}: object: len(...) is a number, not an object")
    return ObjectRule(entry, name, factory, call, where, equals, obj)
