"""The findings inside the steps (metrics/findings.py) on every real export of the corpus.

    python bench/findings_corpus.py [CORPUS_DIR]

Prints, per export: its mode, window, GPU idle by cause (host wait / sync wait / dependency
gaps, summed over the phases) and each finding (kind, phase, time, share of the phase), so
that a finding can be checked against the trace it came from. Not a timing benchmark.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import specnsys

HERE = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else HERE.parent / "shared" / "traces" / "real"
    for path in sorted(folder.glob("*.sqlite")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                a = specnsys.analyze(path)
            except specnsys.SpecnsysError as err:
                print(f"{path.name}: {err}")
                continue
        if a.findings is None:
            print(f"{path.name}: {a.mode}, no GPU work: no findings")
            continue
        idle = a.findings["idle_by_phase"].values()
        sums = {k: sum(v[k] for v in idle) for k in ("host_wait_ns", "sync_wait_ns", "dependency_ns")}
        print(
            f"{path.name}: {a.mode}, window {a.window_ns / 1e6:.3f} ms, GPU idle: host wait "
            f"{sums['host_wait_ns'] / 1e6:.3f} ms, sync wait {sums['sync_wait_ns'] / 1e6:.3f} ms, "
            f"dependency {sums['dependency_ns'] / 1e6:.3f} ms; "
            f"{len(a.findings['findings'])} findings"
        )
        for f in a.findings["findings"]:
            print(
                f"    {f['kind']:<16} {f['phase'][:40]:<40} {f['time_ns'] / 1e6:>10.3f} ms "
                f"{'n/a' if f['share_of_phase'] is None else format(f['share_of_phase'], '.1%'):>7}  "
                f"{f['what'] or ''}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
