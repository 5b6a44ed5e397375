#!/usr/bin/env bash
# Regenerates the stored NVIDIA reference reports used by tests/test_projection.py for the
# three corpus exports on which `nsys stats -r nvtxgpuproj` is slow (30-60 s each with nsys
# 2022.4.2: its projection is an R-tree join in SQLite). Every other export is checked against
# a live `nsys stats` run in the test itself.
# Usage: bash tests/golden/nsys_stats/make.sh  (needs nsys on PATH, ../shared/traces/real and
# PYTHON=<a python with specnsys importable>)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
corpus=${SPECNSYS_CORPUS:-$here/../../../../shared/traces/real}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for name in 2026.2.1_nsysai_h100-2gpu-1s 2026.2.1_nsysai_mfu-2gpu-after \
            2026.2.1_nsysai_mfu-2gpu-before; do
    cp "$corpus/$name.sqlite" "$work/"   # nsys stats gets a copy: the corpus stays untouched
    nsys stats -r nvtxgpuproj,gpukernsum --format csv -o "$work/$name" \
        --force-overwrite true "$work/$name.sqlite" >/dev/null
    for report in nvtxgpuproj gpukernsum; do
        gzip -9 -n -c "$work/${name}_$report.csv" > "$here/${name}_$report.csv.gz"
    done
done
nsys --version > "$here/NSYS_VERSION"
# The tied copy of mfu-2gpu-before used by tests/test_reliability_numbers.py (issue 22, item 16):
# every second runtime call of a thread starts at its predecessor's start; made by the test's own
# tie_copy (the corpus file is copied first, never written), then the same nsys stats command.
# nsys 2022.4.2 took 78 s on it here: too slow to run inside the test.
python=${PYTHON:-python3}
(cd "$here/../../.." && "$python" -c 'import sys; from pathlib import Path
from tests.test_reliability_numbers import tie_copy
tie_copy(Path(sys.argv[1]), Path(sys.argv[2]))' \
    "$corpus/2026.2.1_nsysai_mfu-2gpu-before.sqlite" "$work/tied.sqlite")
nsys stats -r nvtxgpuproj --format csv -o "$work/tied" --force-overwrite true \
    "$work/tied.sqlite" >/dev/null
gzip -9 -n -c "$work/tied_nvtxgpuproj.csv" \
    > "$here/2026.2.1_nsysai_mfu-2gpu-before-tied_nvtxgpuproj.csv.gz"
