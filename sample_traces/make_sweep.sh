#!/usr/bin/env bash
# A real sweep: the instrument workload captured with nsys at k 0 (baseline) / 2 / 4 / 6 x
# concurrency 1 / 4 / 8, two repeats each (24 captures, tiny preset, CPU, one torch thread),
# then collected into the dataset sample_traces/sweep/ (the traces themselves stay in OUT:
# about 0.7 MB each, too many to bundle). Needs nsys on PATH and torch installed.
# Usage: bash sample_traces/make_sweep.sh [OUT]   (default OUT: runs/sweep)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/sweep}
mkdir -p "$out"
common=(--preset tiny --device cpu --threads 1 --seed 0 --requests 8 --max-new-tokens 32
        --warmup 1 --draft noised --noise 0.1 --profile chat)

capture() {
    local name=$1; shift
    python -m specnsys profile --timeout 300 -o "$out/$name" -- \
        python -m instrument.run "${common[@]}" "$@" >/dev/null
}

for repeat in 1 2; do
    for c in 1 4 8; do
        capture "baseline_c${c}_k0_r${repeat}" --mode baseline --concurrency "$c"
        for k in 2 4 6; do
            capture "spec_c${c}_k${k}_r${repeat}" --mode spec --k "$k" --concurrency "$c"
        done
    done
done
rm -rf sample_traces/sweep
python -m specnsys collect "$out" -o sample_traces/sweep \
    --pattern '{mode}_c{concurrency}_k{k}_r{repeat}' --label workload=chat --label preset=tiny
du -sh sample_traces/sweep
