"""Typed results: frozen dataclasses with a typed "not available", one generic ``to_dict``.

Every number specnsys reports either has a value or a reason it has none ("not available:
why", docs/design.md#metrics). A result field whose value may be missing is typed
``float | NotAvailable`` (or any ``T | NotAvailable``): the reason travels with the field,
so no renderer has to look it up in a side dictionary, and a missing value cannot be read as
a number by accident (:class:`NotAvailable` is falsy and not a number).

:func:`to_dict` turns any tree of such dataclasses into the JSON document the ``--json``
outputs print: a :class:`NotAvailable` field becomes ``null`` and its reason goes into the
enclosing object's ``not_available`` mapping (the contract every command's JSON already
follows); tuples become lists; nested results become objects. :func:`save` / :func:`load`
keep a result as that JSON with its kind and specnsys's version, and read it back into the
same classes (registered with :func:`result_kind`), so a forecast or an analysis can be kept
and compared later without recomputing it.

Base module: it imports nothing of specnsys but ``__version__``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar, Union, overload

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "JSONValue",
    "NotAvailable",
    "Result",
    "ResultLoadError",
    "from_dict",
    "load",
    "result_kind",
    "save",
    "to_dict",
    "value_or_none",
]


JSONValue: TypeAlias = "str | int | float | bool | None | list[JSONValue] | dict[str, JSONValue]"
"""A JSON document as :func:`json.loads` returns it: what a reader of a file narrows (with
``isinstance``) before it trusts a value's type."""


@dataclasses.dataclass(frozen=True)
class NotAvailable:
    """A value the trace cannot support, and why (one complete sentence part, no newline)."""

    reason: str

    def __bool__(self) -> bool:
        return False


class Result:
    """The base of the typed results: ``to_dict()`` is what the command's ``--json`` prints,
    as the older results' own ``to_dict`` methods are (tests/test_to_dict_is_json.py)."""

    __slots__ = ()

    def to_dict(self) -> dict[str, object]:
        """This result as its command's JSON document (:func:`to_dict`)."""
        if not dataclasses.is_dataclass(self) or isinstance(self, type):
            raise TypeError(f"{type(self).__name__} is not a dataclass")
        return to_dict(self)


class ResultLoadError(ValueError):
    """A saved result that cannot be read back (wrong kind, another format, damaged)."""


T = TypeVar("T")
_KINDS: dict[str, type[DataclassInstance]] = {}


def result_kind(name: str) -> Callable[[type[T]], type[T]]:
    """Register a result dataclass under *name*, so :func:`load` can rebuild it."""

    def register(cls: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} is not a dataclass")
        _KINDS[name] = cls
        cls.__result_kind__ = name  # type: ignore[attr-defined]
        return cls

    return register


def value_or_none(value: T | NotAvailable) -> T | None:
    """*value*, or None when it is not available (for arithmetic that accepts a None)."""
    return None if isinstance(value, NotAvailable) else value


def _jsonable(value: object) -> object:
    if isinstance(value, NotAvailable):
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no infinity; a caller that needs it states it in words
    return value


def to_dict(result: DataclassInstance) -> dict[str, object]:
    """The JSON object of a result dataclass (module docs): fields in declaration order,
    ``not_available`` last (only when a field is missing, merged with a ``not_available``
    field the result may already have). Fields declared with ``metadata={"json": False}``
    are left out."""
    out: dict[str, object] = {}
    reasons: dict[str, str] = {}
    for f in dataclasses.fields(result):
        if not f.metadata.get("json", True):
            continue
        value = getattr(result, f.name)
        if isinstance(value, NotAvailable):
            reasons[f.name] = value.reason
        out[f.name] = _jsonable(value)
    if reasons or "not_available" in out:
        own = out.get("not_available")
        out["not_available"] = {**own, **reasons} if isinstance(own, dict) else dict(reasons)
    return out


def _items(value: JSONValue, name: str) -> list[JSONValue]:
    """*value*, a JSON array (TypeError otherwise: the hint's next option is tried)."""
    if not isinstance(value, list):
        raise TypeError(f"{name}: expected an array, got {type(value).__name__}")
    return value


def _build(hint: object, value: JSONValue, reasons: dict[str, str], name: str) -> object:
    """*value* (from JSON) as the type *hint* says: nested results rebuilt, ``None`` with a
    reason turned back into :class:`NotAvailable`, lists into tuples where declared."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and NotAvailable in options and name in reasons:
            return NotAvailable(reasons[name])
        if value is None:
            return None
        for option in options:
            if option in (NotAvailable, type(None)):
                continue
            try:
                return _build(option, value, reasons, name)
            except (TypeError, ValueError, KeyError):
                continue
        return value
    if origin is tuple:
        args = typing.get_args(hint)
        inner = args[0] if args else object
        return tuple(_build(inner, v, {}, name) for v in _items(value, name))
    if origin is list:
        args = typing.get_args(hint)
        return [_build(args[0] if args else object, v, {}, name) for v in _items(value, name)]
    if origin is dict:
        args = typing.get_args(hint)
        inner = args[1] if len(args) == 2 else object
        if not isinstance(value, dict):
            raise TypeError(f"{name}: expected an object, got {type(value).__name__}")
        return {k: _build(inner, v, {}, name) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise TypeError(f"{name}: expected an object for {hint.__name__}")
        return from_dict(hint, value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def from_dict(cls: type[T], doc: Mapping[str, JSONValue]) -> T:
    """Rebuild a result of class *cls* from its :func:`to_dict` document."""
    hints = typing.get_type_hints(cls)
    told = doc.get("not_available")
    reasons = {k: str(v) for k, v in told.items()} if isinstance(told, dict) else {}
    kwargs: dict[str, object] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.metadata.get("json", True) or f.name not in doc:
            continue
        kwargs[f.name] = _build(hints[f.name], doc[f.name], reasons, f.name)
    return cls(**kwargs)


FORMAT = "specnsys-result"


def save(result: object, path: str | Path) -> Path:
    """Write *result* (a registered result dataclass) as JSON to *path*, atomically."""
    from specnsys import __version__

    kind = getattr(type(result), "__result_kind__", None)
    if kind is None or not dataclasses.is_dataclass(result) or isinstance(result, type):
        raise TypeError(f"{type(result).__name__} is not a registered result kind")
    path = Path(path)
    doc = {"format": FORMAT, "kind": kind, "specnsys": __version__, "result": to_dict(result)}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


@overload
def load(path: str | Path, kind: None = None) -> DataclassInstance: ...
@overload
def load(path: str | Path, kind: type[T]) -> T: ...
def load(path: str | Path, kind: type[T] | None = None) -> T | DataclassInstance:
    """Read a result written by :func:`save` (of class *kind* when given)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultLoadError(f"{path}: not a saved specnsys result ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ResultLoadError(f"{path}: not a saved specnsys result")
    cls = _KINDS.get(str(doc.get("kind")))
    if cls is None:
        raise ResultLoadError(f"{path}: unknown result kind {doc.get('kind')!r}")
    if kind is not None and cls is not kind:
        raise ResultLoadError(f"{path}: holds a {doc['kind']}, not a {kind.__name__}")
    try:  # *kind*, when given, is the registered class (checked above)
        return from_dict(cls, doc["result"]) if kind is None else from_dict(kind, doc["result"])
    except (TypeError, KeyError, ValueError) as exc:
        raise ResultLoadError(f"{path}: damaged result ({exc})") from None
