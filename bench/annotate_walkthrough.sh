#!/usr/bin/env bash
# The walkthrough of docs/annotate.md: the unedited fixture loop (tests/fixtures/unedited_spec.py)
# captured with its annotation file in a baseline and a speculative run, then analyze and
# compare. The figures docs/annotate.md prints are this script's output (they move from run to
# run on a shared CPU; the structure does not).
#   bash bench/annotate_walkthrough.sh [OUT_DIR]      (needs nsys and torch)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/walkthrough}
mkdir -p "$out"
toml=tests/fixtures/unedited_spec.toml
specnsys profile --annotate "$toml" -o "$out/base" -- \
    python tests/fixtures/unedited_spec.py --mode baseline
specnsys profile --annotate "$toml" -o "$out/spec" -- \
    python tests/fixtures/unedited_spec.py --mode spec --k 4
specnsys analyze "$out/spec.sqlite"
specnsys compare "$out/base.sqlite" "$out/spec.sqlite"
