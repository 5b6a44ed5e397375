#!/usr/bin/env bash
# The Hugging Face walkthroughs of docs/stacks.md: an unedited transformers script (a tiny
# random Llama on CPU), captured with no annotation file, in a baseline run, with an assistant
# model and with prompt lookup, then analyze and compare. Rerun it to see the figures the doc
# prints (they move from run to run on a shared CPU; the structure does not).
#   bash bench/hf_walkthrough.sh [OUT_DIR]      (needs nsys and the hf extra: pip install -e '.[hf]')
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/hf}
mkdir -p "$out"
for mode in baseline assisted lookup; do
    specnsys profile -o "$out/$mode" -- python tests/fixtures/hf_generate.py --mode "$mode" --k 4
done
specnsys analyze "$out/assisted.sqlite"
specnsys compare "$out/baseline.sqlite" "$out/assisted.sqlite"
specnsys analyze "$out/lookup.sqlite"
specnsys compare "$out/baseline.sqlite" "$out/lookup.sqlite"
