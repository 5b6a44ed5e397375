"""``specnsys export TRACE --format perfetto -o FILE``: the timeline as a Chrome trace-event
JSON for Perfetto UI (:mod:`specnsys.render.perfetto`)."""

from __future__ import annotations

import argparse
import sys
from typing import IO, cast

from specnsys import api
from specnsys.cli.common import RULES_HELP, add_analysis_window_argument, check_output, count_arg
from specnsys.errors import UsageError
from specnsys.render import registry

#: --max-events: at least the track names and a slice, at most what no browser could open.
MAX_EVENTS_LIMIT = 10**9
events_arg = count_arg("events", 1, MAX_EVENTS_LIMIT)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "export",
        help="the timeline (phase tracks, NVTX ranges, GPU ops by launch phase, steps) as a "
        "Chrome trace-event JSON for Perfetto UI",
    )
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    p.add_argument("--format", choices=[e.kind for e in registry.EXPORTS], default="perfetto",
                   help="; ".join(f"{e.kind}: {e.help}" for e in registry.EXPORTS))  # fmt: skip
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="FILE.json, FILE.json.gz (gzip), or - for standard output")  # fmt: skip
    p.add_argument("--pid", type=int, help="process to export (default: the annotated one)")
    p.add_argument("--rules", metavar="RULES", help=RULES_HELP)
    add_analysis_window_argument(p)
    p.add_argument("--max-events", type=events_arg, default=api.MAX_EVENTS, metavar="N",
                   help=f"at most N events (default {api.MAX_EVENTS:,}): beyond, the window "
                   "is cut to the prefix that fits, with a warning saying what was dropped")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys.small_files import write_files

    suffixes = registry.export_renderer(args.format).suffixes
    out = None
    if args.output != "-":
        # the last suffix first (``x.gz``), then the whole one (``.json.gz``, not ``.tar.gz``)
        out = check_output(args.output, tuple(s.rpartition(".")[2] for s in suffixes), [args.trace])
        if not any(out.name.lower().endswith("." + s) for s in suffixes):
            raise UsageError(f"{out}: the output must end in {' or '.join('.' + s for s in suffixes)}")
    result = api.export(args.trace, format=args.format, rules=args.rules, pid=args.pid,
                        window=args.window, max_events=args.max_events,
                        use_cache=not args.no_cache)  # fmt: skip
    if out is None:
        sys.stdout.flush()
        sink = _stdout_bytes()
        result.write(sink)
        sink.flush()
    else:
        compress = out.name.lower().endswith(".gz")
        counted: list[int] = []
        write_files({out: lambda handle: counted.append(result.write(handle, compress=compress))})
        print(f"{out}: {counted[0]:,} events ({out.stat().st_size / 1024:.0f} KiB)")
    api.warn(result)
    return 0


class _TextSink:
    """Bytes written to a text stream that has no binary buffer (a notebook's or a test's
    captured stdout): the document is ASCII JSON (``json.dumps`` escapes the rest)."""

    def __init__(self, text: IO[str]) -> None:
        self._text = text

    def write(self, data: bytes) -> int:
        self._text.write(data.decode("ascii"))
        return len(data)

    def flush(self) -> None:
        self._text.flush()


def _stdout_bytes() -> IO[bytes]:
    """Standard output as a binary stream: its buffer, or a :class:`_TextSink` over it."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        return cast("IO[bytes]", buffer)
    return cast("IO[bytes]", _TextSink(sys.stdout))
