"""Value paths: where an annotation file finds a number in a call (``return.accepted``).

The annotation file names the value a mark takes by a small expression over the return value
and the arguments of the annotated call (docs/annotate.md#paths)::

    value    := "return" | "arg:" (NAME | INTEGER) | INTEGER | 'string'
              | value "." NAME | value "[" expr "]"
              | FUNCTION "(" expr ("," expr)* ")"          FUNCTION: len sum min max abs
    expr     := value | expr OP expr | "-" expr | "not" expr | "(" expr ")"
                                                           OP: + - * // % == != < <= > >= and or

``arg:k`` is the argument bound to parameter ``k`` (passed by position, by keyword, or its
default), ``arg:0`` the first positional argument (``self`` for a method patched on its class).
Examples: ``return.accepted``, ``len(return) - 1``, ``arg:scores.shape[1] - 1``,
``arg:num_matches + 1``.

The text is parsed with :mod:`ast` and every node is checked against a short whitelist; the
checked tree is then walked by :func:`_evaluate` here. Nothing is ever passed to ``eval`` or
``compile``: an expression can read values and do integer arithmetic and nothing else. Names
starting with ``__`` are refused (``.__class__`` would leave data access), and arithmetic is
done on numbers (and arrays) only, so ``'x' * 10**9``-style memory bombs are refused.

Standard library only: this module runs inside the profiled program.
"""

from __future__ import annotations

import ast
import inspect
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Arguments", "PathError", "ValuePath", "parse_path"]

_QUOTED = re.compile(r"'[^'\\]*'|\"[^\"\\]*\"")
_ROOT = re.compile(r"(?<![\w.])(?:arg:(?:([A-Za-z_][A-Za-z0-9_]*)|([0-9]+))|(return)(?![\w]))")
_RETURN = "_sn_return"
_ARG = "_sn_arg_"  # + name
_ARG_POS = "_sn_pos_"  # + index
#: The functions an expression may call, by name.
FUNCTIONS: dict[str, Callable[..., object]] = {"len": len, "sum": sum, "min": min, "max": max,
                                               "abs": abs}
_BINARY: dict[type[ast.operator], Callable[[object, object], object]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], object]] = {  # the objects of _evaluate
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
#: Longer than any expression an annotation needs; bounds the parse.
MAX_LENGTH = 400


class PathError(ValueError):
    """A path that does not parse; the message says where (column, 1-based) and why."""


@dataclass(frozen=True)
class ValuePath:
    """A checked expression: its text, its tree, and what it reads."""

    text: str
    tree: ast.expr = field(repr=False, compare=False)
    uses_return: bool = False
    #: a plain path (a root and attribute/item steps): it names an object, not a computed value
    plain: bool = True

    def get(self, args: Arguments, result: object = None) -> object:
        """The value in a finished call; raises LookupError, AttributeError, TypeError,
        IndexError, KeyError or ValueError (the caller reports them) when it does not resolve."""
        return _evaluate(self.tree, args, result)


class Arguments:
    """The arguments of one call, readable by parameter name or position.

    The positions of the parameters are read once per wrapped function (``inspect.signature``
    costs microseconds; binding every call with it would cost them on every step).
    """

    __slots__ = ("args", "kwargs", "_layout")

    def __init__(
        self, args: Sequence[object], kwargs: Mapping[str, object], layout: ArgumentLayout
    ) -> None:
        self.args = args
        self.kwargs = kwargs
        self._layout = layout

    def get(self, key: str | int | None) -> object:
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
    defaults: Mapping[str, object]

    @classmethod
    def of(cls, func: Callable[..., object]) -> ArgumentLayout:
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):  # builtins without a signature: keywords and indexes
            return cls({}, {})
        positions: dict[str, int] = {}
        defaults: dict[str, object] = {}
        for index, param in enumerate(signature.parameters.values()):
            if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                positions[param.name] = index
            if param.default is not param.empty:
                defaults[param.name] = param.default
        return cls(positions, defaults)


# --- parsing ---------------------------------------------------------------------------------


def parse_path(text: object) -> ValuePath:
    """Parse and check *text* (see the module docstring); raises :class:`PathError`."""
    if not isinstance(text, str):
        raise PathError(f"a path is a string, not {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise PathError(f"{text[:40]!r}...: longer than {MAX_LENGTH} characters")
    source, columns = _substitute(text)
    try:
        tree = ast.parse(source.strip() or "()", mode="eval").body
    except SyntaxError as exc:
        offset = (exc.offset or 0) - 1
        at = columns[offset] if 0 <= offset < len(columns) else len(text)  # 0: at the end
        raise PathError(f"{text!r} at column {at + 1}: {_syntax_hint(text, at)}") from None
    checker = _Checker(text, columns)
    checker.visit(tree)
    if not checker.roots:
        raise PathError(
            f"{text!r}: a path starts with 'return' or 'arg:NAME' (e.g. return.accepted, arg:k)"
        )
    return ValuePath(text, tree, checker.uses_return, _is_plain(tree))


def _substitute(text: str) -> tuple[str, list[int]]:
    """*text* with ``return`` and ``arg:X`` replaced by identifiers Python can parse, outside
    quoted keys; and, per character of the result, the column of *text* it came from."""
    out: list[str] = []
    columns: list[int] = []

    def put(piece: str, column: int, width: int) -> None:
        out.append(piece)
        columns.extend(column + min(i, width - 1) for i in range(len(piece)))

    pos = 0
    for quoted in [*_QUOTED.finditer(text), None]:
        end = quoted.start() if quoted else len(text)
        chunk_at = pos
        for m in _ROOT.finditer(text, pos, end):
            for i in range(chunk_at, m.start()):
                put(text[i], i, 1)
            name = (_ARG + m.group(1) if m.group(1) else _ARG_POS + m.group(2) if m.group(2)
                    else _RETURN)
            put(name, m.start(), m.end() - m.start())
            chunk_at = m.end()
        for i in range(chunk_at, end):
            put(text[i], i, 1)
        if quoted:
            for i in range(quoted.start(), quoted.end()):
                put(text[i], i, 1)
            pos = quoted.end()
    return "".join(out), columns


def _syntax_hint(text: str, at: int) -> str:
    rest = text[at:]
    if text.rstrip().endswith(".") or re.search(r"\.\s*(\.|$|\[|\()", text):
        return "expected an attribute name after '.'"
    if text.count("(") != text.count(")"):
        return "'(' is not closed by ')'" if text.count("(") > text.count(")") else \
            "unexpected ')'"
    if text.count("[") != text.count("]"):
        return "expected ']'"
    if rest.startswith("arg:") or text.rstrip().endswith("arg:"):
        return "expected a parameter name or position after 'arg:'"
    return "not an expression (a path is return or arg:NAME, with .name, [index], + - ...)"


class _Checker(ast.NodeVisitor):
    """Refuses every node outside the whitelist, with the column it starts at."""

    def __init__(self, text: str, columns: list[int]) -> None:
        self.text, self.columns = text, columns
        self.roots = 0
        self.uses_return = False

    def fail(self, node: ast.AST, why: str) -> PathError:
        offset = getattr(node, "col_offset", 0)
        if isinstance(node, ast.Attribute) and node.end_col_offset is not None:
            offset = node.end_col_offset - len(node.attr)
        at = self.columns[min(offset, len(self.columns) - 1)] if self.columns else 0
        return PathError(f"{self.text!r} at column {at + 1}: {why}")

    def generic_visit(self, node: ast.AST) -> None:
        raise self.fail(node, f"{type(node).__name__.lower()} is not allowed in a path "
                              "(values, .name, [index], len/sum/min/max/abs, + - * // %, "
                              "comparisons, and/or/not)")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == _RETURN:
            self.roots += 1
            self.uses_return = True
        elif node.id.startswith((_ARG, _ARG_POS)):
            self.roots += 1
        elif node.id in FUNCTIONS:
            raise self.fail(node, f"{node.id} is a function: call it, {node.id}(...)")
        else:
            raise self.fail(node, f"unknown name {node.id!r}: a path starts with 'return' or "
                                  "'arg:NAME' (e.g. return.accepted, arg:k)")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, bool) or not isinstance(node.value, (int, str)):
            raise self.fail(node, "only integer and string constants")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__"):
            raise self.fail(node, "names starting with '__' are not read")
        self.visit(node.value)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.slice, (ast.Slice, ast.Tuple)):
            raise self.fail(node, "an index is one integer or key, not a slice")
        self.visit(node.value)
        self.visit(node.slice)

    def visit_Call(self, node: ast.Call) -> None:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise self.fail(node, f"only {', '.join(FUNCTIONS)} can be called")
        if node.keywords or not node.args or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, f"{node.func.id}(...) takes positional arguments only")
        for arg in node.args:
            self.visit(arg)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) not in _BINARY:
            raise self.fail(node, "only + - * // % are allowed")
        self.visit(node.left)
        self.visit(node.right)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, (ast.USub, ast.Not)):
            raise self.fail(node, "only - and not are allowed before a value")
        self.visit(node.operand)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(type(op) not in _COMPARE for op in node.ops):
            raise self.fail(node, "only == != < <= > >= compare")
        self.visit(node.left)
        for value in node.comparators:
            self.visit(value)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        for value in node.values:
            self.visit(value)


def _is_plain(node: ast.expr) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Constant,
                                                                           ast.UnaryOp)):
            return False
        node = node.value
    return isinstance(node, ast.Name) and node.id not in FUNCTIONS


# --- evaluation ------------------------------------------------------------------------------


def _number(value: object) -> object:
    """Arithmetic operands: numbers, and arrays/tensors (what a loop's counts are), not text or
    containers (``'x' * n`` would build a string of any size)."""
    if isinstance(value, (str, bytes, bytearray, list, tuple, dict, set)):
        raise TypeError(f"arithmetic on a {type(value).__name__}: numbers only")
    return value


def _evaluate(node: ast.expr, args: Arguments, result: object) -> Any:
    """Walk a checked tree (see :class:`_Checker` for the nodes that can occur).

    The values are the profiled program's own objects (tensors, arrays, its classes), read,
    indexed, compared and negated by whatever methods they have: their type is not known
    before they run, so the result is left dynamic here (the callers get an ``object``)."""
    if isinstance(node, ast.Name):
        if node.id == _RETURN:
            return result
        if node.id.startswith(_ARG_POS):
            return args.get(int(node.id[len(_ARG_POS):]))
        return args.get(node.id[len(_ARG):])
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute):
        return getattr(_evaluate(node.value, args, result), node.attr)
    if isinstance(node, ast.Subscript):
        key = _evaluate(node.slice, args, result)
        if hasattr(key, "__index__") and not isinstance(key, int):
            key = operator.index(key)
        return _evaluate(node.value, args, result)[key]
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return FUNCTIONS[node.func.id](*(_evaluate(a, args, result) for a in node.args))
    if isinstance(node, ast.BinOp):
        left = _number(_evaluate(node.left, args, result))
        right = _number(_evaluate(node.right, args, result))
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, args, result)
        if isinstance(node.op, ast.USub):
            _number(value)  # numbers and arrays only
            return operator.neg(value)
        return not value
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, args, result)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(right_node, args, result)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        last: object = None
        for part in node.values:
            last = _evaluate(part, args, result)
            if isinstance(node.op, ast.And) != bool(last):
                return last
        return last
    raise TypeError(f"unexpected {type(node).__name__}")  # not reached: the checker refused it
