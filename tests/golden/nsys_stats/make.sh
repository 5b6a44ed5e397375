#!/usr/bin/env bash
# Regenerates the stored NVIDIA reference reports used by tests/test_projection.py for the
# three corpus exports on which `nsys stats -r nvtxgpuproj` is slow (30-60 s each with nsys
# 2022.4.2: its projection is an R-tree join in SQLite). Every other export is checked against
# a live `nsys stats` run in the test itself.
# Usage: bash tests/golden/nsys_stats/make.sh  (needs nsys on PATH and ../shared/traces/real)
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
