"""A Chrome trace-event JSON file read as a stream: the ``traceEvents`` one event at a time.

A torch-profiler trace of a long run is hundreds of MB of JSON; ``json.load`` would hold the
whole text and every event's dict at once. Here the text is read in chunks (through ``gzip``
for a ``.json.gz``, recognized by its magic bytes), and :meth:`json.JSONDecoder.raw_decode`,
the standard library's C scanner, decodes one value at a time from the buffered chunk: the
top-level keys other than ``traceEvents`` whole (they are small), the events one by one as
the caller takes them. Memory stays at a chunk plus one event.

Numbers with a fraction or an exponent are kept as their text (:class:`Number`), so that a
time written in microseconds with three decimals (``"ts": 5444713137854.499``, as Kineto
writes it) converts to integer nanoseconds exactly: a double holds 15-16 significant digits
and such a time has 16 or more.

Both layouts of the trace-event format are read: an object with a ``traceEvents`` array (what
``torch.profiler`` writes) and a bare array of events. A file cut short inside the array (a
run killed while writing, a partial copy) gives the events before the cut, and
:attr:`ChromeTraceStream.cut_short` says so; anything else that is not such JSON is a one-line
:class:`~specnsys.errors.BadInputError`.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from specnsys.errors import BadInputError

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["BOM", "CHUNK_CHARS", "GZIP_MAGIC", "ChromeTraceStream", "Number", "text_head"]

GZIP_MAGIC = b"\x1f\x8b"

#: Characters read per chunk: large enough that the per-chunk work (compacting the buffer)
#: is negligible, small enough to keep memory flat.
CHUNK_CHARS = 1 << 20

#: The longest single JSON value read (an event, or a top-level key's value): a trace event is
#: a few hundred characters; a longer value is no event, and reading it would hold it whole.
MAX_VALUE_CHARS = 1 << 28

#: How close to the end of the buffer a decoding error must be for the value to be merely
#: incomplete (cut by the chunk boundary) rather than malformed: a value cut at the end fails
#: there, or inside a ``\\uXXXX`` escape a few characters before it.
_NEAR_END = 8

_SPACE = re.compile(r"[ \t\n\r]*")
_SEPARATORS = re.compile(r"[ \t\n\r,]*")


class Number(str):
    """A JSON number written with a fraction or an exponent, as its exact text."""

    __slots__ = ()


class _Malformed(Exception):
    """The text is not JSON at *position* (a character offset in the decompressed text)."""

    def __init__(self, message: str, position: int, at_end: bool) -> None:
        super().__init__(message)
        self.position = position
        self.at_end = at_end


class ChromeTraceStream:
    """The events of one trace-event file, read once, front to back.

    Use as a context manager; :meth:`events` yields the ``traceEvents`` entries (whatever
    JSON values they are: the caller checks them), after which :attr:`metadata` holds the
    other top-level keys (only those before the array while it is being read).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.metadata: dict[str, object] = {}
        #: The file ended inside the event array (cut short): the events before it were read.
        self.cut_short = False
        self._source: IO[str] | None = None
        self._raw: IO[bytes] | None = None
        self._buf = ""
        self._pos = 0
        self._base = 0  # offset of ``_buf[0]`` in the whole text
        self._eof = False
        self._scan = json.JSONDecoder(parse_float=Number).raw_decode
        self._gzip: _TolerantGzip | None = None

    def __enter__(self) -> ChromeTraceStream:
        try:
            raw = self.path.open("rb")
        except OSError as exc:
            raise BadInputError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        self._raw = raw
        try:
            head = raw.read(2)
            raw.seek(0)
            binary: IO[bytes] = raw
            if head == GZIP_MAGIC:
                self._gzip = _TolerantGzip(raw)
                binary = io.BufferedReader(self._gzip)
            # utf-8-sig: a byte-order mark some editors write is skipped, not an error
            self._source = io.TextIOWrapper(binary, encoding="utf-8-sig", errors="strict")
        except BaseException:
            raw.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._source is not None:
            self._source.close()
        if self._raw is not None:
            self._raw.close()  # GzipFile leaves the file it was given open

    # ------------------------------------------------------------------ reading

    def _more(self) -> bool:
        """Append the next chunk to the buffer (at least as much as it holds, so a long value
        is decoded a logarithmic number of times); False at the end of the text."""
        if self._eof:
            return False
        assert self._source is not None
        rest = len(self._buf) - self._pos
        if rest > MAX_VALUE_CHARS:
            raise BadInputError(
                f"{self.path}: a JSON value of over {MAX_VALUE_CHARS:,} characters at character "
                f"{self._base + self._pos}: not a Chrome trace event"
            )
        try:
            chunk = self._source.read(max(CHUNK_CHARS, rest))
        except UnicodeDecodeError as exc:
            raise BadInputError(
                f"{self.path}: not UTF-8 text ({exc.reason}): not a Chrome trace"
            ) from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise BadInputError(f"{self.path}: not a valid gzip file ({exc})") from None
        except OSError as exc:
            raise BadInputError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        if not chunk:
            self._eof = True
            if self._gzip is not None and self._gzip.cut:
                self.cut_short = True
            return False
        self._base += self._pos
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        return True

    def _skip(self, pattern: re.Pattern[str] = _SPACE) -> str | None:
        """Skip what *pattern* matches; the next character, or None at the end of the text."""
        while True:
            self._pos = pattern.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._more():
                return None

    def _decode_at(self, pos: int) -> tuple[object, int]:
        """The JSON value starting at *pos* of the buffer and where it ends; raises
        :class:`_Malformed` (``at_end`` when the buffer may merely stop too early)."""
        try:
            return self._scan(self._buf, pos)
        except json.JSONDecodeError as exc:
            at_end = exc.pos >= len(self._buf) - _NEAR_END or exc.msg.startswith(
                "Unterminated string"
            )
            raise _Malformed(exc.msg, self._base + exc.pos, at_end) from None
        except RecursionError:
            raise _Malformed("nested too deeply", self._base + pos, False) from None

    def _value(self) -> object:
        """The next whole JSON value (reading as many chunks as it takes)."""
        while True:
            if self._skip() is None:
                raise self._error("the text ends where a value should be", truncated=True)
            try:
                value, end = self._decode_at(self._pos)
            except _Malformed as exc:
                if exc.at_end and self._more():
                    continue
                raise self._error(f"{exc} at character {exc.position}", exc.at_end) from None
            if end == len(self._buf) and self._more():
                continue  # a number at the end of a chunk may go on in the next one
            self._pos = end
            return value

    def _expect(self, char: str, where: str) -> None:
        found = self._skip()
        if found != char:
            what = "the end of the text" if found is None else repr(found)
            raise self._error(f"expected {char!r} {where}, found {what}", found is None)
        self._pos += 1

    def _error(self, detail: str, truncated: bool) -> BadInputError:
        if truncated:
            return BadInputError(f"{self.path}: truncated JSON ({detail}): not a whole Chrome trace")
        return BadInputError(f"{self.path}: not valid JSON ({detail}): not a Chrome trace")

    # ------------------------------------------------------------------ the trace

    def events(self) -> Iterator[object]:
        """Every entry of the trace's event array, in file order; the other top-level keys
        go to :attr:`metadata`."""
        first = self._skip()
        if first is None:
            raise BadInputError(f"{self.path}: empty file (no JSON text), not a Chrome trace")
        if first == "[":
            self._pos += 1
            yield from self._array()
            self._finish()
            return
        if first != "{":
            try:
                value = self._value()
            except BadInputError:
                raise BadInputError(
                    f"{self.path}: not JSON (it starts with {first!r}): not a Chrome trace "
                    "(torch.profiler's export_chrome_trace / tensorboard_trace_handler JSON)"
                ) from None
            raise BadInputError(
                f"{self.path}: JSON {type(value).__name__}, not a trace-event object with "
                "traceEvents: not a Chrome trace"
            )
        self._pos += 1
        found = False
        for key in self._keys():
            if key == "traceEvents":
                if self._skip() != "[":
                    raise BadInputError(f"{self.path}: traceEvents is not an array of events")
                self._pos += 1
                found = True
                yield from self._array()
                if self.cut_short:
                    return
            else:
                self.metadata[key] = self._value()
        if not found:
            shown = ", ".join(list(self.metadata)[:5]) or "no keys"
            raise BadInputError(
                f"{self.path}: JSON without a traceEvents array (keys: {shown}): not a Chrome "
                "trace (torch.profiler's export_chrome_trace / tensorboard_trace_handler JSON)"
            )

    def _keys(self) -> Iterator[str]:
        """The keys of the top-level object, each followed by its value (read by the caller),
        up to its closing brace."""
        if self._skip() == "}":
            self._pos += 1
            self._finish()
            return
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise self._error(f"an object key that is no string at character {self._base + self._pos}", False)
            self._expect(":", f"after the key {key!r}")
            yield key
            if self.cut_short:
                return
            nxt = self._skip()
            if nxt == ",":
                self._pos += 1
                continue
            if nxt == "}":
                self._pos += 1
                self._finish()
                return
            what = "the end of the text" if nxt is None else repr(nxt)
            raise self._error(f"expected ',' or '}}' after the value of {key!r}, found {what}", nxt is None)

    def _array(self) -> Iterator[object]:
        """The values of an array whose ``[`` was read, up to its ``]`` (commas and spaces
        between values are skipped leniently, as Chrome's own loader does). At the end of
        the text before the ``]`` the array is cut short: :attr:`cut_short` is set and the
        values read so far stand."""
        scan = self._scan
        separators = _SEPARATORS.match
        while True:
            buf = self._buf
            n = len(buf)
            pos = separators(buf, self._pos).end()  # type: ignore[union-attr]
            last = self._eof
            while pos < n:
                if buf[pos] == "]":
                    self._pos = pos + 1
                    return
                try:
                    value, end = scan(buf, pos)
                except json.JSONDecodeError:
                    break  # maybe cut by the chunk's end: decided below
                except RecursionError:
                    raise self._error(
                        f"nested too deeply at character {self._base + pos}", False
                    ) from None
                if end == n and not last:
                    break  # a number may go on in the next chunk
                yield value
                pos = separators(buf, end).end()  # type: ignore[union-attr]
            self._pos = pos
            if pos < n:
                try:
                    self._decode_at(pos)
                except _Malformed as exc:
                    if not exc.at_end:
                        raise self._error(f"{exc} at character {exc.position}", False) from None
            if last:  # the text ended inside the array
                self.cut_short = True
                return
            self._more()  # at the end of the text, one more pass with ``last`` set

    def _finish(self) -> None:
        """After the top-level value only spaces may follow."""
        rest = self._skip()
        if rest is not None:
            raise self._error(
                f"text after the end of the trace at character {self._base + self._pos}", False
            )


class _TolerantGzip(io.RawIOBase):
    """A gzip stream that ends, instead of raising, where a cut-short file stops: every
    byte decompressed before the cut is handed on (``GzipFile.read`` raises ``EOFError``
    and loses the last read's bytes), and :attr:`cut` says it happened."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._file = gzip.GzipFile(fileobj=raw)
        self.cut = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self.cut:
            return 0
        view = memoryview(buffer).cast("B")
        try:
            data = self._file.read1(len(view))
        except EOFError:
            self.cut = True
            return 0
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._file.close()
        super().close()


def text_head(path: Path, size: int = 64) -> bytes:
    """The first *size* bytes of *path*'s text (decompressed when it is gzip); empty when it
    cannot be read (the caller's own open says why)."""
    try:
        with path.open("rb") as raw:
            head = raw.read(size)
            if head[:2] != GZIP_MAGIC:
                return head
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw) as unzipped:
                return unzipped.read(size)
    except (OSError, EOFError, zlib.error):
        return b""


#: The UTF-8 byte-order mark, which the reader skips (``utf-8-sig``).
BOM = codecs.BOM_UTF8
