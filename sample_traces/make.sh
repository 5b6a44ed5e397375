#!/usr/bin/env bash
# Regenerates the bundled sample traces: real nsys captures of the instrument workload
# (tiny preset, CPU, one torch thread). Needs nsys on PATH and torch installed.
# Usage: bash sample_traces/make.sh   (from the repository root or anywhere)
set -euo pipefail
cd "$(dirname "$0")/.."
out=sample_traces
common=(--preset tiny --device cpu --threads 1 --seed 0 --requests 8 --max-new-tokens 32
        --warmup 1 --draft noised --noise 0.1)

capture() {
    local name=$1; shift
    python -m specnsys profile --timeout 300 -o "$out/$name" -- \
        python -m instrument.run "${common[@]}" "$@" >/dev/null
    rm -f "$out/$name.nsys-rep"
    echo "$out/$name.sqlite  $(du -k "$out/$name.sqlite" | cut -f1) KiB"
}

capture baseline_chat_c1 --mode baseline --profile chat --concurrency 1
capture baseline_chat_c4 --mode baseline --profile chat --concurrency 4
capture baseline_rag_c4  --mode baseline --profile rag  --concurrency 4
capture spec_chat_c1_k4  --mode spec --k 4 --profile chat --concurrency 1
capture spec_chat_c4_k2  --mode spec --k 2 --profile chat --concurrency 4
capture spec_chat_c4_k4  --mode spec --k 4 --profile chat --concurrency 4
capture spec_chat_c4_k6  --mode spec --k 6 --profile chat --concurrency 4
capture spec_rag_c4_k4   --mode spec --k 4 --profile rag  --concurrency 4
