"""Value paths: where an annotation file finds a number in a call (``return.accepted``).

The annotation file names the value a mark takes by a path from the return value or an argument
of the annotated call, through attributes, keys and indexes, optionally measured with ``len``::

    path     := "len(" path ")" | root step*
    root     := "return" | "arg:" (NAME | INTEGER)
    step     := "." NAME | "[" INTEGER "]" | "[" QUOTED "]"

``arg:k`` is the argument bound to parameter ``k`` (passed by position, by keyword, or its
default), ``arg:0`` the first positional argument (``self`` for a method patched on its class).
The grammar is parsed here, by hand, into a tuple of steps: the user's text is never evaluated
(no ``eval``), so a path can read a value and do nothing else. Names starting with ``__`` are
refused for the same reason (``.__class__`` would leave data access).

Standard library only: this module runs inside the profiled program.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Arguments", "PathError", "ValuePath", "parse_path"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"-?[0-9]+")
_QUOTED = re.compile(r"'([^'\\]*)'|\"([^\"\\]*)\"")


class PathError(ValueError):
    """A path that does not parse; the message says where (column, 1-based) and why."""


@dataclass(frozen=True)
class ValuePath:
    """A parsed path: its root, its steps and whether ``len`` is taken of the value."""

    text: str
    root: str  # "return" or "arg"
    arg: str | int | None  # parameter name or positional index (root "arg")
    steps: tuple[tuple[str, str | int], ...]  # ("attr", name) | ("item", key)
    length: bool = False

    @property
    def uses_return(self) -> bool:
        return self.root == "return"

    def get(self, args: Arguments, result: Any = None) -> Any:
        """The value at this path in a finished call; raises LookupError, AttributeError,
        TypeError, IndexError or KeyError (the caller reports them) when it does not resolve."""
        value = result if self.root == "return" else args.get(self.arg)
        for kind, key in self.steps:
            value = getattr(value, key) if kind == "attr" else value[key]  # type: ignore[arg-type]
        return len(value) if self.length else value


class Arguments:
    """The arguments of one call, readable by parameter name or position.

    The positions of the parameters are read once per wrapped function (``inspect.signature``
    costs microseconds; binding every call with it would cost them on every step).
    """

    __slots__ = ("args", "kwargs", "_layout")

    def __init__(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], layout: ArgumentLayout
    ) -> None:
        self.args = args
        self.kwargs = kwargs
        self._layout = layout

    def get(self, key: str | int | None) -> Any:
        if isinstance(key, int):
            return self.args[key]
        assert key is not None
        if key in self.kwargs:
            return self.kwargs[key]
        position = self._layout.positions.get(key)
        if position is not None and position < len(self.args):
            return self.args[position]
        if key in self._layout.defaults:
            return self._layout.defaults[key]
        raise LookupError(f"argument {key!r} was not passed")


@dataclass(frozen=True)
class ArgumentLayout:
    """Where each named parameter of a function sits among the positional arguments."""

    positions: Mapping[str, int]
    defaults: Mapping[str, Any]

    @classmethod
    def of(cls, func: Callable[..., Any]) -> ArgumentLayout:
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):  # builtins without a signature: keywords and indexes
            return cls({}, {})
        positions: dict[str, int] = {}
        defaults: dict[str, Any] = {}
        for index, param in enumerate(signature.parameters.values()):
            if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                positions[param.name] = index
            if param.default is not param.empty:
                defaults[param.name] = param.default
        return cls(positions, defaults)


def parse_path(text: str) -> ValuePath:
    """Parse *text* (see the module docstring); raises :class:`PathError`."""
    if not isinstance(text, str):
        raise PathError(f"a path is a string, not {type(text).__name__}")
    body = text.strip()
    length = False
    offset = len(text) - len(text.lstrip())
    if body.startswith("len(") or body.startswith("len ("):
        if not body.endswith(")"):
            raise PathError(f"{text!r}: 'len(' is not closed by ')'")
        inner_start = body.index("(") + 1
        offset += inner_start
        body = body[inner_start:-1].strip()
        length = True
        if body.startswith("len("):
            raise PathError(f"{text!r}: len(len(...)) is not a value")
    return _parse_plain(text, body, offset, length)


def _parse_plain(text: str, body: str, offset: int, length: bool) -> ValuePath:
    def fail(at: int, why: str) -> PathError:
        return PathError(f"{text!r} at column {offset + at + 1}: {why}")

    arg: str | int | None = None
    if body.startswith("return"):
        root, pos = "return", len("return")
    elif body.startswith("arg:"):
        root, pos = "arg", len("arg:")
        m = _NAME.match(body, pos) or _INT.match(body, pos)
        if m is None:
            raise fail(pos, "expected a parameter name or position after 'arg:'")
        arg = int(m.group()) if m.group()[0] in "-0123456789" else m.group()
        if isinstance(arg, int) and arg < 0:
            raise fail(pos, "a positional argument index is >= 0")
        pos = m.end()
    else:
        raise fail(0, "a path starts with 'return' or 'arg:NAME' (e.g. return.accepted, arg:k)")
    steps: list[tuple[str, str | int]] = []
    while pos < len(body):
        char = body[pos]
        if char == ".":
            m = _NAME.match(body, pos + 1)
            if m is None:
                raise fail(pos + 1, "expected an attribute name after '.'")
            if m.group().startswith("__"):
                raise fail(pos + 1, "names starting with '__' are not read")
            steps.append(("attr", m.group()))
            pos = m.end()
        elif char == "[":
            m = _INT.match(body, pos + 1) or _QUOTED.match(body, pos + 1)
            if m is None:
                raise fail(pos + 1, "expected an integer or a quoted key inside [ ]")
            if m.re is _INT:
                key: str | int = int(m.group())
            else:
                key = m.group(1) if m.group(1) is not None else m.group(2)
            if m.end() >= len(body) or body[m.end()] != "]":
                raise fail(m.end(), "expected ']'")
            steps.append(("item", key))
            pos = m.end() + 1
        else:
            raise fail(pos, f"unexpected {char!r} (a step is .name, [integer] or ['key'])")
    return ValuePath(text, root, arg, tuple(steps), length)
