"""Labels of the runs of a set: what was swept (model, draft, k, concurrency, workload, repeat,
commit, gpu, ...), from a CSV, from ``--label name=value`` options, or from file-name patterns.

Labels are strings (the dataset stores them as ``label_<name>`` columns, apart from what the
trace itself says); later sources override earlier ones: patterns, then the CSV, then the
options.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path

from specnsys.errors import BadInputError, UsageError
from specnsys.small_files import read_small_text

__all__ = ["LABEL_NAME", "Labeler", "parse_label_options"]

#: A label name: it becomes a column name (``label_<name>``) and a sweep axis.
LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: The columns of a labels CSV that name the trace (the rest are labels).
TRACE_COLUMNS = ("trace", "path", "file")
#: A labels CSV has a row per trace: 16 MiB is some 100,000 rows, far past any sweep.
LABELS_MAX_BYTES = 16 << 20


def _check_name(name: str, where: str) -> str:
    if not LABEL_NAME.match(name):
        raise UsageError(
            f"{where}: {name!r} is not a label name (letters, digits and _, not starting "
            "with a digit)"
        )
    return name


def parse_label_options(options: Sequence[str]) -> dict[str, str]:
    """``--label name=value`` options as a dict (a repeated name: the last wins)."""
    out: dict[str, str] = {}
    for option in options:
        name, sep, value = option.partition("=")
        if not sep:
            raise UsageError(f"--label {option!r}: write it as name=value")
        out[_check_name(name.strip(), "--label")] = value.strip()
    return out


def _compile_pattern(pattern: str) -> re.Pattern[str]:
    """``{workload}_c{concurrency}_k{k}`` as an anchored regex over a file's stem: each
    placeholder matches a non-empty run of characters (the shortest that lets the rest match);
    the text between placeholders must appear literally."""
    parts: list[str] = []
    names: set[str] = set()
    last = 0
    for m in _PLACEHOLDER.finditer(pattern):
        parts.append(re.escape(pattern[last : m.start()]))
        name = _check_name(m.group(1), f"--pattern {pattern!r}")
        if name in names:
            raise UsageError(f"--pattern {pattern!r}: {{{name}}} appears twice")
        names.add(name)
        parts.append(f"(?P<{name}>.+?)")
        last = m.end()
    parts.append(re.escape(pattern[last:]))
    if not names:
        raise UsageError(f"--pattern {pattern!r}: no {{name}} placeholder")
    return re.compile("^" + "".join(parts) + "$")


class Labeler:
    """The labels of each trace from the three sources (see the module docs)."""

    def __init__(
        self,
        *,
        csv_path: str | Path | None = None,
        options: Sequence[str] = (),
        patterns: Sequence[str] = (),
    ) -> None:
        self.fixed = parse_label_options(options)
        self.patterns = [_compile_pattern(p) for p in patterns]
        self.by_path: dict[str, dict[str, str]] = {}
        self.by_name: dict[str, list[tuple[int, dict[str, str]]]] = {}  # name -> (line, labels)
        self.csv_path: Path | None = None
        if csv_path is not None:
            self._read_csv(Path(csv_path))

    def _read_csv(self, path: Path) -> None:
        try:
            text = read_small_text(path, what="a labels file is a CSV file",
                                   max_bytes=LABELS_MAX_BYTES)
            # a spreadsheet's "CSV UTF-8" starts with a byte order mark: not part of the header
            rows = list(csv.DictReader(io.StringIO(text.removeprefix("\ufeff"), newline="")))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise BadInputError(f"{path}: cannot read the labels CSV ({exc})") from None
        if not rows:
            raise BadInputError(f"{path}: the labels CSV has no rows")
        key = next((c for c in TRACE_COLUMNS if c in rows[0]), None)
        if key is None:
            raise BadInputError(
                f"{path}: the labels CSV needs a column naming the trace ({', '.join(TRACE_COLUMNS)})"
            )
        names = [c for c in rows[0] if c != key]
        for c in names:
            _check_name(c, str(path))
        self.csv_path = path
        lines: dict[str, int] = {}  # resolved path -> its line
        for number, row in enumerate(rows, start=2):
            trace = (row.get(key) or "").strip()
            if not trace:
                raise BadInputError(f"{path}: line {number}: no trace named")
            labels = {c: (row.get(c) or "").strip() for c in names}
            resolved = str(Path(trace).resolve())
            if resolved in lines:
                raise BadInputError(
                    f"{path}: lines {lines[resolved]} and {number} both label {resolved}: "
                    "give one row per trace"
                )
            lines[resolved] = number
            self.by_path[resolved] = labels
            self.by_name.setdefault(Path(trace).name, []).append((number, labels))

    def labels(self, trace: Path) -> dict[str, str]:
        """The labels of *trace*: patterns, then its CSV row (by path, else by file name when
        one row has that name), then the options."""
        out: dict[str, str] = {}
        stem = trace.name.split(".")[0]
        for pattern in self.patterns:
            m = pattern.match(stem)
            if m:
                out.update(m.groupdict())
                break
        row = self.by_path.get(str(trace.resolve()))
        if row is None:
            named = self.by_name.get(trace.name, [])
            if len(named) > 1:
                raise BadInputError(
                    f"{trace}: no row of {self.csv_path} names its path, and lines "
                    f"{named[0][0]} and {named[1][0]} both name a {trace.name}: give its path"
                )
            row = named[0][1] if named else None
        if row:
            out.update({k: v for k, v in row.items() if v != ""})
        out.update(self.fixed)
        return out
