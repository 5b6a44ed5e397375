"""Per-range cost of ``specnsys.annotate.phase`` with no profiler attached.

A phase range sits around every draft step, verify and sampling call of a decode loop, so
its cost when nobody is profiling must be indistinguishable from no annotation at all. This
prints nanoseconds per range (best of several repeats, minus the cost of the bare loop) and
ratios against two references:

* ``with contextlib.nullcontext():`` -- the cheapest possible context manager;
* ``nvtx.push_range(...)`` / ``nvtx.pop_range(...)`` -- the raw nvtx package calls.

Run: ``python bench/annotate_overhead.py [--number N] [--repeat R]``. Numbers are a
benchmark, not a test: compare ratios, not absolute values, across machines.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import timeit

import nvtx

from specnsys import annotate

if os.environ.get("NVTX_INJECTION64_PATH"):
    print("note: NVTX_INJECTION64_PATH is set -- a collector is attached; figures include it")


def _measure(stmt: str, setup: str, number: int, repeat: int, namespace: dict) -> float:
    """Best-of-``repeat`` seconds per execution of ``stmt``."""
    timer = timeit.Timer(stmt, setup, globals=namespace)
    return min(timer.repeat(repeat=repeat, number=number)) / number


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--number", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    ns: dict = {"contextlib": contextlib, "nvtx": nvtx, "annotate": annotate}
    annotate.set_enabled(False)
    ns["noop_phase"] = annotate.phase("decode")
    cases = {
        "empty loop body (pass)": ("pass", ""),
        "with contextlib.nullcontext()": ("with contextlib.nullcontext(): pass", ""),
        "with phase('decode') [no-op path]": ("with annotate.phase('decode'): pass", ""),
        "with <cached phase> [no-op path]": ("with noop_phase: pass", ""),
        "nvtx.push_range/pop_range (raw)": (
            "nvtx.push_range('decode', domain='specnsys'); nvtx.pop_range(domain='specnsys')",
            "",
        ),
        "with nvtx.annotate('decode', domain=...)": (
            "with nvtx.annotate('decode', domain='specnsys'): pass",
            "",
        ),
    }
    results: dict[str, float] = {}
    for label, (stmt, setup) in cases.items():
        results[label] = _measure(stmt, setup, args.number, args.repeat, ns)

    # The real-call path of phase(): what runs when a collector may be attached (without
    # one, NVTX's C entry points return immediately, so this is the Python-side cost).
    annotate.set_enabled(True)
    ns["real_phase"] = annotate.phase("decode")
    results["with phase('decode') [nvtx path, no collector]"] = _measure(
        "with annotate.phase('decode'): pass", "", args.number, args.repeat, ns
    )
    results["mark_acceptance(4, 2) [nvtx path, no collector]"] = _measure(
        "annotate.mark_acceptance(proposed=4, accepted=2)", "", args.number, args.repeat, ns
    )
    annotate.set_enabled(False)
    results["mark_acceptance(4, 2) [no-op path]"] = _measure(
        "annotate.mark_acceptance(proposed=4, accepted=2)", "", args.number, args.repeat, ns
    )

    loop = results["empty loop body (pass)"]
    null = results["with contextlib.nullcontext()"] - loop
    raw = results["nvtx.push_range/pop_range (raw)"] - loop
    print(
        f"enabled at import: {annotate._env_enabled()}  (number={args.number}, best of {args.repeat})"
    )
    print(f"{'case':52s} {'ns/range':>9s} {'x nullctx':>10s} {'x raw nvtx':>11s}")
    for label, seconds in results.items():
        if label == "empty loop body (pass)":
            print(f"{label:52s} {seconds * 1e9:9.1f}   (subtracted from the rows below)")
            continue
        net = seconds - loop
        print(f"{label:52s} {net * 1e9:9.1f} {net / null:10.2f} {net / raw:11.3f}")


if __name__ == "__main__":
    main()
