#!/usr/bin/env bash
# Captures the instrument workload under a relocated Nsight Systems *target* (Debian's
# nsight-systems-target 2022.4, unpacked anywhere) on a machine that has no nsys of its own --
# the GPU machine lent to a session -- and packs the raw .qdstrm streams for the trip back.
# sample_traces/import_gpu.py turns them into SQLite exports on a machine with the nsys host.
#
# Usage: bash sample_traces/make_gpu.sh [options] TARGET [OUT]
#   TARGET  the nsight-systems-target .deb, the folder `dpkg -x` unpacked it into, or its
#           .../nsight-systems/target-linux-x64 folder (the one holding `nsys`)
#   OUT     where the packed captures go: default $OUT (the device tool's folder), else
#           ./gpu-captures
# Options:
#   --device cuda|cpu     cuda (default): -t cuda,nvtx,osrt --cuda-memory-usage=true on the
#                         1b/small presets; cpu: -t nvtx,osrt on the tiny preset (tests this
#                         script on a machine without a GPU)
#   --only A,B            run only these captures of the plan (names below), in plan order
#   --wheels DIR          pip-install DIR/*.whl into a private folder when `import nvtx` fails
#                         (the GPU image has no nvtx module; carry nvtx==0.2.11's wheel)
#   --python PY           the interpreter with torch (default $PYTHON, else python3)
#   --deadline-s N        start no capture after N s (default 330); --capture-timeout-s N:
#                         SIGINT a capture still running after N s (default 120)
#   --stream-budget-mib N start no capture once the packed stream holds N MiB (default 40)
#   --gpu-metrics auto|on|off  auto (default): on when the cuda plan's nsys lists GPU 0 for
#                         --gpu-metrics-device; on: always try (a capture that fails with them
#                         is retried without); off: never
#   --part-mib N          size of the stream's parts (default 15: the tool returns 16 MiB files)
#   --xz-preset N         xz preset of the stream (default 6; 1 is twice as fast and 3% larger
#                         on two CPU captures; the window is 192 MiB either way)
#
# What comes back under OUT (the device tool returns at most 8 files, 16 MiB each, 64 MiB in
# all, hence one stream in 15 MiB parts):
#   manifest.json         environment (nsys, driver, CUDA, GPU, torch), and per capture: name,
#                         command, status, exit status, last output lines when it failed,
#                         .qdstrm size and sha256 and its place in the stream; the parts' sizes
#                         and sha256 once the stream is complete. Rewritten after every capture,
#                         so a run cut short still leaves an accurate one.
#   captures.xz.part-NN   `split -b 15M` of ONE xz stream: the .qdstrm files back to back, in
#                         manifest order. One stream, not one file per capture, because every
#                         .qdstrm carries ~23 MB of the same fixed content: xz of one is ~18 MB,
#                         xz -9 of two back to back is still ~18 MB (measured on 2022.4 CPU
#                         captures), so the 64 MiB that come back hold a dozen captures, not three.
#                         The stream is written while the next capture runs; a cut-off stream
#                         still yields every capture before the cut.
#   make_gpu.log          this script's own output
#
# Time (cuda plan, estimated for an H200 machine with 16 cores; nothing here has measured it):
# per capture ~3 s nsys start and injection, ~5 s python + torch import, ~5 s CUDA context and
# cuBLAS, 1b model build and noised draft ~5-10 s (CPU randn over 1.26B weights, 8 threads),
# the traced run (8 requests x 48-96 tokens, ~330 kernels per forward) a few seconds, ~5 s for
# nsys to write the stream: 20-40 s each, so the 330 s deadline fits 8-14 of the 14 planned, the
# most important first; the worst case (a capture started at 330 s running into its 120 s
# timeout) ends by ~480 s including packing, inside an 8-minute budget. Captures that did not
# start are recorded as skipped, not dropped.
#
# Failure handling: set -euo pipefail for the script's own steps; each capture runs with its
# exit status caught, and a failed capture is recorded (exit status, last lines) while the
# script goes on. A capture whose workload failed but left a .qdstrm (nsys 2022.4 passes the
# application's exit status on) is streamed too, as failed_with_stream: its diagnostics are in it.
# The script exits 0 when at least one capture succeeded, 1 when none did, 2 on bad usage or an
# unusable TARGET/python (with manifest.json saying why).
set -euo pipefail

prog=make_gpu.sh
die() { echo "$prog: error: $*" >&2; exit 2; }

device=cuda only="" wheels="" py=${PYTHON:-python3}
deadline_s=330 capture_timeout_s=120 stream_budget_mib=40 xz_preset=6 gm_mode=auto part_mib=15
invocation=$(printf '%q ' "$0" "$@")
args=()
while (($#)); do
    case $1 in
        --device) device=${2:?}; shift 2 ;;
        --only) only=${2:?}; shift 2 ;;
        --wheels) wheels=${2:?}; shift 2 ;;
        --python) py=${2:?}; shift 2 ;;
        --deadline-s) deadline_s=${2:?}; shift 2 ;;
        --capture-timeout-s) capture_timeout_s=${2:?}; shift 2 ;;
        --stream-budget-mib) stream_budget_mib=${2:?}; shift 2 ;;
        --xz-preset) xz_preset=${2:?}; shift 2 ;;
        --gpu-metrics) gm_mode=${2:?}; shift 2 ;;
        --part-mib) part_mib=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) args+=("$1"); shift ;;
    esac
done
((${#args[@]} >= 1 && ${#args[@]} <= 2)) || die "usage: $prog [options] TARGET [OUT] (see --help)"
[[ $device == cuda || $device == cpu ]] || die "--device must be cuda or cpu, not $device"
[[ $gm_mode =~ ^(auto|on|off)$ ]] || die "--gpu-metrics must be auto, on or off, not $gm_mode"
target=${args[0]}
out=${args[1]:-${OUT:-./gpu-captures}}

repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/make_gpu.XXXXXX")
packer_pid="" feeder_pid=""
cleanup() {
    [[ -n $feeder_pid ]] && kill "$feeder_pid" 2>/dev/null || true
    [[ -n $packer_pid ]] && kill "$packer_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
log=$out/make_gpu.log
: >"$log"
say() { echo "$prog: $*" | tee -a "$log"; }  # progress: stdout and the log that comes back
started=$SECONDS
command -v "$py" >/dev/null || die "no python interpreter '$py' (use --python)"
for tool in xz split sha256sum timeout; do
    command -v $tool >/dev/null || die "$tool is missing"
done

# ---- the plan: name|instrument.run arguments, most important first -------------------------
common=(--seed 0 --requests 8 --max-new-tokens 48 --warmup 1 --profile chat --draft noised
        --noise 0.1)
if [[ $device == cuda ]]; then
    trace=(-t cuda,nvtx,osrt --sample=none --cpuctxsw=none --cuda-memory-usage=true)
    common+=(--device cuda --threads 8)
    plan=(  # spec/baseline pairs at c4 first: they alone answer p, r, predicted vs measured
        "spec_1b_c4_k4|--preset 1b --mode spec --k 4 --concurrency 4"
        "baseline_1b_c4|--preset 1b --mode baseline --concurrency 4"
        "spec_1b_c4_k2|--preset 1b --mode spec --k 2 --concurrency 4"
        "spec_1b_c1_k4|--preset 1b --mode spec --k 4 --concurrency 1"
        "baseline_1b_c1|--preset 1b --mode baseline --concurrency 1"
        "spec_1b_c8_k4|--preset 1b --mode spec --k 4 --concurrency 8"
        "baseline_1b_c8|--preset 1b --mode baseline --concurrency 8"
        "spec_small_c4_k4|--preset small --mode spec --k 4 --concurrency 4"
        "baseline_small_c4|--preset small --mode baseline --concurrency 4"
        "spec_small_c4_k2|--preset small --mode spec --k 2 --concurrency 4"
        "spec_1b_c8_k2|--preset 1b --mode spec --k 2 --concurrency 8"
        "spec_1b_c1_k2|--preset 1b --mode spec --k 2 --concurrency 1"
        "spec_small_c1_k4|--preset small --mode spec --k 4 --concurrency 1"
        "baseline_small_c1|--preset small --mode baseline --concurrency 1"
    )
else
    trace=(-t nvtx,osrt --sample=none --cpuctxsw=none)
    common=(--seed 0 --requests 4 --max-new-tokens 16 --warmup 1 --profile chat --draft noised
            --noise 0.1 --device cpu --threads 1)
    plan=(
        "spec_tiny_c4_k4|--preset tiny --mode spec --k 4 --concurrency 4"
        "baseline_tiny_c4|--preset tiny --mode baseline --concurrency 4"
    )
fi
if [[ -n $only ]]; then
    selected=()
    for entry in "${plan[@]}"; do
        [[ ",$only," == *",${entry%%|*},"* ]] && selected+=("$entry")
    done
    ((${#selected[@]})) || die "--only $only names no capture of the $device plan"
    plan=("${selected[@]}")
fi

# ---- manifest: records appended as JSON lines, manifest.json rebuilt from them ---------------
records=$work/records.jsonl
: >"$records"
# record KIND key=value... : one JSON object per line; values that look like JSON (numbers,
# objects) are kept as such, "@file" reads a file's text
record() {
    "$py" - "$records" "$@" <<'EOF'
import json, sys
path, kind, *pairs = sys.argv[1:]
rec = {"kind": kind}
for pair in pairs:
    key, _, value = pair.partition("=")
    if value.startswith("@"):
        try:
            with open(value[1:], errors="replace") as f:
                value = f.read().strip()
        except OSError:
            value = None
    else:
        try:
            value = json.loads(value)
        except ValueError:
            pass
    rec[key] = value
with open(path, "a") as f:
    f.write(json.dumps(rec) + "\n")
EOF
}
write_manifest() {
    "$py" - "$records" "$out/manifest.json" <<'EOF'
import json, os, sys
src, dst = sys.argv[1:]
manifest = {"format": "specnsys-gpu-captures/1", "environment": {}, "captures": [],
            "stream": None, "notes": []}
with open(src) as f:
    for line in f:
        rec = json.loads(line)
        kind = rec.pop("kind")
        if kind == "env":
            manifest["environment"].update(rec)
        elif kind == "capture":
            manifest["captures"].append(rec)
        elif kind == "stream":
            manifest["stream"] = rec
        else:
            manifest["notes"].append(rec.get("text"))
tmp = dst + ".tmp"
with open(tmp, "w") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
os.replace(tmp, dst)
EOF
}
note() { record note "text=$*"; }
fail_setup() {
    note "error: $*"; write_manifest
    echo "$prog: error: $*" | tee -a "$log" >&2; exit 2
}

record env "device=$device" "invocation=$invocation" \
    "started_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)" "host_uname=$(uname -srm)"

# ---- TARGET: a .deb, a dpkg -x root, or the target-linux-x64 folder --------------------------
if [[ -f $target && $target == *.deb ]]; then
    unpacked=$work/target
    mkdir -p "$unpacked"
    if command -v dpkg >/dev/null; then
        dpkg -x "$target" "$unpacked" || fail_setup "dpkg -x $target failed"
    else  # a .deb is an ar archive holding data.tar.*: read it with the standard library
        "$py" - "$target" "$unpacked" <<'EOF' || fail_setup "could not unpack $target"
import io, sys, tarfile
deb, dest = sys.argv[1:]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
pos = 8
while pos + 60 <= len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    pos += 60
    if name.startswith("data.tar"):
        with tarfile.open(fileobj=io.BytesIO(data[pos:pos + size])) as tar:
            kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
            tar.extractall(dest, **kw)
        break
    pos += size + (size & 1)
else:
    sys.exit("no data.tar member")
EOF
    fi
    target=$unpacked
fi
[[ -d $target ]] || fail_setup "TARGET $target is neither a .deb nor a folder"
nsys=""
for candidate in "$target/nsys" \
        "$target/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys"; do
    [[ -x $candidate && -f $candidate ]] && { nsys=$candidate; break; }
done
if [[ -z $nsys ]]; then
    nsys=$(find "$target" -path '*target-linux-x64/nsys' -type f -perm -u+x 2>/dev/null | head -1)
fi
[[ -n $nsys ]] || fail_setup "no target-linux-x64/nsys under $target"
nsys_version=$("$nsys" --version 2>&1 | tail -1) || fail_setup "$nsys --version failed: $nsys_version"
say "nsys $nsys ($nsys_version)"

# ---- the workload's Python: torch, and nvtx (carried as a wheel when the image lacks it) -----
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH}
if ! "$py" -c 'import nvtx' 2>/dev/null; then
    [[ -n $wheels ]] || fail_setup "'$py' cannot import nvtx; carry nvtx==0.2.11's wheel and pass --wheels DIR"
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$work/site" "$wheels"/*.whl >"$work/pip.log" 2>&1 \
        || fail_setup "pip install of $wheels/*.whl failed: $(tail -1 "$work/pip.log")"
    export PYTHONPATH=$PYTHONPATH:$work/site
    "$py" -c 'import nvtx' 2>/dev/null || fail_setup "nvtx still not importable after --wheels"
fi
"$py" -c 'import instrument.run, torch; print("torch", torch.__version__, "cuda",
          torch.version.cuda, "available", torch.cuda.is_available())' \
    >"$work/torch.txt" 2>"$work/import.log" \
    || fail_setup "the workload does not import: $(tail -1 "$work/import.log")"

# ---- environment: versions from whatever is there (nvidia-smi only on a GPU machine) ---------
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
        >"$work/gpu.txt" 2>&1 || true
    nvidia-smi 2>&1 | grep -o 'CUDA Version: *[0-9.]*' | head -1 >"$work/cuda.txt" || true
fi
gpu_metrics=off
if [[ $gm_mode == on ]]; then
    gpu_metrics=on
    echo "forced on with --gpu-metrics on" >"$work/gpu_metrics.txt"
elif [[ $device == cuda && $gm_mode == auto ]]; then
    # --gpu-metrics-device is how 2022.4 samples DRAM bandwidth and SM activity (the GPU_METRICS
    # table specnsys reads for bandwidth per phase). Use it only when this nsys both knows the
    # switch and lists GPU 0 as supported: an unknown switch or unsupported GPU fails the whole
    # capture. On the machine it may still fail (it needs the GPU's performance counters, which
    # a sandboxed runtime may refuse), so a capture that fails with it is retried without it.
    if "$nsys" profile --help 2>&1 | grep -q -- '--gpu-metrics-device'; then
        timeout 60 "$nsys" profile --gpu-metrics-device=help >"$work/gpu_metrics.txt" 2>&1 || true
        # 2022.4 prints "NVIDIA GPUs not found, feature is not available" when it has none
        if ! grep -qiE 'not found|not available' "$work/gpu_metrics.txt" \
                && grep -Eq '(^|[^0-9.])0([^0-9.]|$)' "$work/gpu_metrics.txt"; then
            gpu_metrics=on
        fi
    else
        echo "this nsys has no --gpu-metrics-device switch" >"$work/gpu_metrics.txt"
    fi
fi
record env "nsys=$nsys" "nsys_version=$nsys_version" "python=$py" "torch=@$work/torch.txt" \
    "nvidia_smi_gpu=@$work/gpu.txt" "nvidia_smi_cuda=@$work/cuda.txt" \
    "gpu_metrics_probe=@$work/gpu_metrics.txt" "gpu_metrics=\"$gpu_metrics\"" \
    "trace=${trace[*]}" "deadline_s=$deadline_s" "capture_timeout_s=$capture_timeout_s"
write_manifest
say "gpu metrics $gpu_metrics; ${#plan[@]} captures planned; output $out"

# ---- the packer: one xz stream of the .qdstrm files, split into 15 MiB parts as it grows -----
# dict 192 MiB: the next capture's shared content stays in xz's window even for big streams.
mkfifo "$work/stream"
rm -f "$out"/captures.xz.part-*
(xz -T1 --lzma2=preset="$xz_preset",dict=192MiB -c <"$work/stream" \
    | split -b "${part_mib}M" -d -a 2 - "$out/captures.xz.part-") &
packer_pid=$!
exec 3>"$work/stream"
stream_offset=0

parts_bytes() { local n=0 f; for f in "$out"/captures.xz.part-*; do
    [[ -f $f ]] && n=$((n + $(stat -c %s "$f"))); done; echo $n; }

# end_marked MARK RC: end what a capture started and left running: nsys's daemonized agent, or
# after a timeout the program in its own session, which `timeout`'s process group misses. Found
# by the capture's mark in their environment (processes of our uid only, each held by a pidfd
# before its environment is read, so a reused pid is never hit), never by name. After a
# successful capture they get 5 s to exit on their own. What it did goes to ended.txt, and
# from there into the capture's record ("ended").
end_marked() {
    "$py" - "$1" "$2" >"$work/ended.txt" 2>&1 <<'PY' || true
import os, signal, sys, time
name, rc = sys.argv[1:]
mark = b"MAKE_GPU_CAPTURE=" + name.encode()

def marked():
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            fd = os.pidfd_open(int(entry))
        except OSError:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if os.stat(f"/proc/{entry}").st_uid == os.geteuid() and mark in env:
                found[int(entry)] = fd
                continue
        except OSError:
            pass
        os.close(fd)
    return found

def wait_gone(seconds):
    end = time.monotonic() + seconds
    while True:
        left = marked()
        if not left or time.monotonic() >= end:
            return left
        for fd in left.values():
            os.close(fd)
        time.sleep(0.2)

left = wait_gone(5.0 if rc == "0" else 0.0)
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid, fd in left.items():
        try:
            signal.pidfd_send_signal(fd, sig)
            print(f"{name}: {sig.name} to pid {pid}")
        except OSError:
            pass
        os.close(fd)
    left = wait_gone(5.0) if left else {}
for pid, fd in left.items():
    print(f"{name}: pid {pid} still running")
    os.close(fd)
PY
}

# capture NAME ARGS...: one nsys run; its exit status, never the script's
capture() {
    local name=$1; shift
    local base=$work/$name log=$work/$name.log extra=()
    # 1 kHz: a 1b forward (~5-10 ms) still gets several samples, over hundreds of steps per
    # phase; the 10 kHz default would fill the 64 MiB that come back within ~3 captures
    [[ $gpu_metrics == on ]] && extra=(--gpu-metrics-device=0 --gpu-metrics-frequency=1000)
    rm -f "$base".*
    local cmd=("$nsys" profile "${trace[@]}" "${extra[@]}" --force-overwrite=true -o "$base"
               "$py" -m instrument.run "${common[@]}" "$@")
    local t0=$SECONDS rc=0 mark="$run_id-$((++capture_count))-$name"
    mkdir -p "$work/tmp/$mark"
    # 3>&-: no process of the capture holds the stream's pipe (nsys 2022.4's agent outlives nsys
    # with every descriptor it had, and xz would wait for it: the CI hang of 2026-12-01); nsys's
    # session files in a private TMPDIR; the mark, which every process the capture starts
    # inherits, to find them afterwards
    TMPDIR=$work/tmp/$mark MAKE_GPU_CAPTURE=$mark \
        timeout -s INT -k 20 "$capture_timeout_s" "${cmd[@]}" >"$log" 2>&1 </dev/null 3>&- \
        || rc=$?
    end_marked "$mark" "$rc" 3>&-
    last_rc=$rc last_wall=$((SECONDS - t0))
    last_cmd="nsys profile ${trace[*]}${extra[*]:+ ${extra[*]}} -o $name python -m instrument.run"
    last_cmd+=" ${common[*]} $*"
}

produced=0 succeeded=0 capture_count=0
run_id=make_gpu-$$-$(date +%s%N)
for entry in "${plan[@]}"; do
    name=${entry%%|*}
    read -r -a run_args <<<"${entry#*|}"
    if ((SECONDS - started >= deadline_s)); then
        record capture "name=$name" "status=\"skipped\"" "reason=deadline of ${deadline_s} s reached"
        write_manifest; continue
    fi
    if (($(parts_bytes) >= stream_budget_mib * 1048576)); then
        record capture "name=$name" "status=\"skipped\"" \
            "reason=packed stream already holds ${stream_budget_mib} MiB (return limit 64 MiB)"
        write_manifest; continue
    fi
    say "[$((SECONDS - started)) s] capturing $name"
    capture "$name" "${run_args[@]}"
    if [[ $gpu_metrics == on && ( $last_rc != 0 || ! -f $work/$name.qdstrm ) ]]; then
        tail -n 25 "$work/$name.log" >"$work/$name.metrics.log"
        record capture "name=$name.with_gpu_metrics" "status=\"failed\"" "exit_status=$last_rc" \
            "wall_s=$last_wall" "command=$last_cmd" "ended=@$work/ended.txt" \
            "output_tail=@$work/$name.metrics.log" \
            "reason=retried without --gpu-metrics-device, which stays off from here on"
        say "$name failed with GPU metrics (exit $last_rc); retrying without them"
        gpu_metrics=off
        capture "$name" "${run_args[@]}"
    fi
    tail -n 25 "$work/$name.log" >"$work/$name.tail"  # nsys's warnings (CUPTI...) land here
    stream=$work/$name.qdstrm
    if [[ -f $stream ]]; then
        size=$(stat -c %s "$stream")
        sha=$(sha256sum "$stream" | cut -d' ' -f1)
        status=ok; ((last_rc == 0)) || status=failed_with_stream
        record capture "name=$name" "status=\"$status\"" "exit_status=$last_rc" \
            "wall_s=$last_wall" "command=$last_cmd" "qdstrm_bytes=$size" "qdstrm_sha256=\"$sha\"" \
            "stream_offset=$stream_offset" "ended=@$work/ended.txt" "output_tail=@$work/$name.tail"
        stream_offset=$((stream_offset + size))
        produced=$((produced + 1))
        [[ $status == ok ]] && succeeded=$((succeeded + 1))
        # feed it to the packer while the next capture runs (in order: wait for the last one)
        [[ -n $feeder_pid ]] && { wait "$feeder_pid" || true; }
        (cat "$stream" >&3 && rm -f "$stream") &
        feeder_pid=$!
        say "$name: exit $last_rc, ${size} bytes, ${last_wall} s"
    else
        record capture "name=$name" "status=\"failed\"" "exit_status=$last_rc" \
            "wall_s=$last_wall" "command=$last_cmd" "ended=@$work/ended.txt" \
            "output_tail=@$work/$name.tail" \
            "reason=nsys wrote no .qdstrm"
        say "$name FAILED: exit $last_rc, no .qdstrm; last line: $(tail -1 "$work/$name.tail")"
    fi
    rm -f "$work/$name".{log,tail,metrics.log}
    write_manifest
done

# ---- finish the stream, then trim to what the device tool returns ---------------------------
[[ -n $feeder_pid ]] && { wait "$feeder_pid" || true; }
feeder_pid=""
exec 3>&-
packer_rc=0
wait "$packer_pid" || packer_rc=$?
packer_pid=""
shopt -s nullglob
parts=("$out"/captures.xz.part-*)
# 8 files and 64 MiB come back: keep manifest and log and as many leading parts as fit (the
# stream's prefix still yields every capture it holds whole)
kept=0 total=$((256 * 1024)) dropped=()
for part in "${parts[@]}"; do
    size=$(stat -c %s "$part")
    if ((${#dropped[@]} == 0 && kept < 6 && total + size <= 64 * 1048576)); then
        kept=$((kept + 1)) total=$((total + size))
    else
        dropped+=("$(basename "$part")"); rm -f "$part"
    fi
done
parts=("$out"/captures.xz.part-*)
part_json=$(for part in "${parts[@]}"; do
    printf '{"name":"%s","bytes":%s,"sha256":"%s"}\n' "$(basename "$part")" \
        "$(stat -c %s "$part")" "$(sha256sum "$part" | cut -d' ' -f1)"
done | "$py" -c 'import json,sys; print(json.dumps([json.loads(l) for l in sys.stdin]))')
record stream "xz_exit_status=$packer_rc" "complete=$([[ $packer_rc == 0 && ${#dropped[@]} == 0 ]] && echo true || echo false)" \
    "uncompressed_bytes=$stream_offset" "parts=$part_json" \
    "dropped_parts=$("$py" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${dropped[@]}")" \
    "elapsed_s=$((SECONDS - started))"
write_manifest
say "done in $((SECONDS - started)) s: $succeeded of ${#plan[@]} captures ok," \
     "$produced streamed," \
     "${#parts[@]} parts ($((total / 1048576)) MiB) in $out"
((${#dropped[@]} == 0)) || say "dropped ${dropped[*]} (over the device tool's return limit)"
((succeeded > 0)) || exit 1
