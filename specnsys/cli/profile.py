"""``specnsys profile [--annotate FILE|PRESET|none] -o OUT -- COMMAND...``: capture COMMAND with
nsys and export SQLite; an unedited Python program gets specnsys phases and marks from an
annotation file, or from the built-in preset of a library it imports (Hugging Face
transformers: ``hf``, chosen by default when the program imports it)."""

from __future__ import annotations

import argparse
import math
import os

from specnsys.capture import CONTROL_LIMIT, control_runs, profile
from specnsys.cli.common import count_arg
from specnsys.errors import UsageError
from specnsys.inject import AUTO, NONE, annotation_file, environment
from specnsys.inject.presets import PRESETS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "profile",
        help="run a command under nsys profile and export the trace to SQLite",
        description="Runs nsys profile with flags that are safe on these machines "
        "(--sample=none --cpuctxsw=none), finishes the import/export when nsys stops "
        "half-way, and prints the path of the .sqlite export as its last line. The program's "
        "stdout and stderr pass through, as with nsys profile, and are kept in OUT.log; the "
        "intermediate .qdstrm/.nsys-rep files are removed once the export exists.",
    )
    p.add_argument("-o", "--output", required=True, help="report base name (e.g. runs/spec_k4)")
    p.add_argument(
        "-t", "--trace", help="nsys -t value (default: cuda,nvtx,osrt with a GPU, else nvtx,osrt)"
    )
    p.add_argument(
        "--timeout", type=_seconds, default=600.0, help="seconds before giving up (default 600)"
    )
    p.add_argument("--nsys-arg", action="append", default=[], help="extra nsys profile argument")
    p.add_argument(
        "--keep-report",
        action="store_true",
        help="keep the .nsys-rep report beside the export (to open in the Nsight Systems GUI)",
    )
    p.add_argument(
        "--annotate",
        metavar="FILE|PRESET|none",
        default=AUTO,
        help="annotation file (TOML) that turns calls of an unedited Python program into "
        "specnsys phases and marks (docs/annotate.md; checked before nsys starts), or a "
        f"built-in preset ({', '.join(PRESETS)}: Hugging Face transformers, docs/stacks.md). "
        "Default: the preset of a library the program imports, if any (a program that "
        "imports none runs untouched); none: no annotation",
    )
    p.add_argument(
        "--control",
        type=count_arg("control", 1, CONTROL_LIMIT),
        metavar="N",
        help="also run the command N times without nsys, timed by the annotation layer, so "
        "analyze and compare can report the profiler's overhead (OUT.control.json)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to profile")
    p.set_defaults(run=run)


def _seconds(text: str) -> float:
    """A positive, finite number of seconds: 0 would give up at once, inf never."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def _annotation_env(spec: str, trace: str | None) -> dict[str, str]:
    """What the profiled program's environment gets for ``--annotate SPEC`` (see the help)."""
    nvtx = trace is None or "nvtx" in trace.split(",")
    if spec == AUTO:
        # every preset of a library, applied only if the program imports it (one for now)
        return environment(PRESETS["hf"], auto=True) if nvtx and "hf" in PRESETS else {}
    if not nvtx:
        raise UsageError(f"--annotate emits NVTX ranges: add nvtx to -t {trace}")
    return environment(annotation_file(spec))


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    # Only the profiled program's environment carries the injection; ours is unchanged.
    env = {**os.environ, **_annotation_env(args.annotate, args.trace)} if args.annotate != NONE \
        else None
    result = profile(
        command,
        args.output,
        trace=args.trace,
        timeout_s=args.timeout,
        extra_args=args.nsys_arg,
        keep_report=args.keep_report,
        env=env,
    )
    print(result.sqlite, flush=True)
    if args.control:
        out = control_runs(command, result.sqlite, env or os.environ, args.control,
                           args.timeout)  # fmt: skip
        print(out, flush=True)
    return 0
