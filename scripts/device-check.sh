#!/usr/bin/env bash
# For a machine with an NVIDIA GPU: build with CUDA for that GPU, run the GPU
# tests (CUDA kernels against the CPU reference), the GPU benchmarks
# (end to end at several ngl, and the CUDA kernel suite) and print a short
# table last.
# Needs nothing from the network. Usage: scripts/device-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."

arch=native
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  [ -n "$cc" ] && arch=$cc
fi

start=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DTANDEM_BUILD_BENCH=ON >/tmp/tandem-device-cmake.log 2>&1 \
  || { tail -30 /tmp/tandem-device-cmake.log; exit 1; }
cmake --build build-device -j "$(nproc)" >/tmp/tandem-device-build.log 2>&1 \
  || { tail -40 /tmp/tandem-device-build.log; exit 1; }
build_s=$(( $(date +%s) - start ))

results=build-device/gpu-tests.xml
./build-device/tests/tandem_tests --gtest_filter='Cuda*' --gtest_output="xml:$results" | tail -40
rc=${PIPESTATUS[0]}

# GPU benchmarks (the issue's measurements), each bounded by a timeout:
# a llama3-8b-shape Q4_K_M model at ngl 0, 16 and 33 (decode and pp512 as
# `tandem bench` reports them, GB/s of weights read), pp512 at ngl 16 with
# weight streaming on and off, and with DEVICE_CHECK_70B=1 the 70B shape
# under a 24 GiB cap (a 40 GB file: minutes to write). DEVICE and SHAPE
# override the device and the 8B shape (to try the script on the stand-in:
# DEVICE=cpu2 SHAPE=tiny CAPS=64MiB scripts/device-check.sh).
device=${DEVICE:-cuda0}
shape=${SHAPE:-llama3-8b}
bench_rows=()
cat > build-device/bench_rows.py <<'PY'
import json, sys
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    tps, gbps = r.get("tps_mean"), r.get("gbps")
    meas = f"{tps:.2f} t/s, {gbps:.1f} GB/s" if tps is not None else "does not fit"
    note = " " + sys.argv[1] if len(sys.argv) > 1 else ""
    print(f"| {r.get('model')} ngl {r.get('ngl')} {r.get('backend')} {r.get('test')}{note} | {meas} |")
PY
bench_json() {  # model, timeout, note, extra bench args...: one table row per result
  local model=$1 limit=$2 note=$3; shift 3
  timeout "$limit" ./build-device/tools/tandem bench -m "$model" --device "$device" -r 2 -o jsonl "$@" 2>/dev/null |
    python3 build-device/bench_rows.py "$note"
}
model=build-device/bench-$shape-q4_k_m.gguf
if [ ! -f "$model" ]; then
  timeout 300 ./build-device/tools/tandem synth --shape "$shape" --type Q4_K_M -o "$model" >/dev/null 2>&1 || rm -f "$model"
fi
if [ -f "$model" ]; then
  while IFS= read -r row; do bench_rows+=("$row"); done < <(bench_json "$model" 240 "" -p 512 -n 64 -ngl 0,16,33)
  while IFS= read -r row; do bench_rows+=("$row"); done < <(bench_json "$model" 120 "(--no-stream)" -p 512 -n 0 -ngl 16 --no-stream)
else
  bench_rows+=("| $shape Q4_K_M | synth failed or timed out |")
fi
# Planner checks (issue 5), under each cap in CAPS (default 12GiB): `tandem
# tune`'s choice against the best decode rate (32 tokens, the tune's
# threads) of a sweep over ngl (every SWEEP_STEP-th split, plus the tune's
# choice and its neighbours), and, where nvidia-smi is present, the peak
# memory of the GPU processes during a run at the planned split (pp512,
# tg32) against the plan's VRAM total.
plan_rows=()
if [ -f "$model" ]; then
  for cap in ${CAPS:-12GiB}; do
    # The plan under this cap: layer count (for the sweep), split and VRAM total.
    read -r n_layer p_ngl p_bytes < <(timeout 60 ./build-device/tools/tandem plan -m "$model" --vram "$cap" --json 2>/dev/null |
      python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["n_layer"], d["ngl"], d["vram"]["total"])' 2>/dev/null ||
      echo "0 - 0")
    tune_json=$(timeout 300 ./build-device/tools/tandem tune -m "$model" --device "$device" --vram "$cap" --json 2>/dev/null)
    read -r t_ngl t_tps t_threads < <(echo "$tune_json" | python3 -c '
import json, sys
try:
    b = json.load(sys.stdin)["best"]
    print(b["ngl"], b["tg_tps"], b["threads"])
except Exception:
    print("- 0 0")')
    if [ "$t_ngl" = "-" ] || [ "$n_layer" = 0 ]; then plan_rows+=("| tune ($cap) | plan or tune failed or timed out |"); continue; fi
    ngls=$(python3 -c "
step, n, t = ${SWEEP_STEP:-4}, $n_layer, $t_ngl
s = set(range(0, n + 2, step)) | {n + 1} | {v for v in (t - 1, t, t + 1) if 0 <= v <= n + 1}
print(','.join(map(str, sorted(s))))")
    sweep=$(timeout 600 ./build-device/tools/tandem bench -m "$model" --device "$device" --vram "$cap" -p 0 -n 32 -r 2 \
      -t "$t_threads" -ngl "$ngls" -o jsonl 2>/dev/null | python3 -c '
import json, sys
best = None
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("tps_mean") and (best is None or r["tps_mean"] > best[1]):
        best = (r["ngl"], r["tps_mean"])
print(f"{best[0]} {best[1]}" if best else "- 0")')
    read -r s_ngl s_tps <<< "$sweep"
    plan_rows+=("$(python3 -c "
t, s = float('$t_tps'), float('$s_tps')
ratio = f'{t / s:.3f}' if s > 0 else '-'
print(f'| tune vs sweep ($cap, ngl $ngls) | tune ngl $t_ngl: {t:.2f} t/s; sweep best ngl $s_ngl: {s:.2f} t/s; ratio {ratio} (want >= 0.97) |')")")
    if command -v nvidia-smi >/dev/null 2>&1; then
      smi_log=build-device/vram-$cap.csv
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 100 > "$smi_log" 2>/dev/null &
      smi=$!
      timeout 300 ./build-device/tools/tandem bench -m "$model" --device "$device" --vram "$cap" -p 512 -n 32 -r 1 >/dev/null 2>&1
      bench_rc=$?
      kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
      peak_mib=$(awk -F', *' '$2 + 0 > m { m = $2 + 0 } END { print m + 0 }' "$smi_log")
      plan_rows+=("$(python3 -c "
peak, planned = $peak_mib * 2**20, $p_bytes
ratio = f'{peak / planned:.3f}' if planned else '-'
print(f'| peak VRAM vs plan ($cap, ngl $p_ngl) | measured {peak / 2**30:.2f} GiB, planned {planned / 2**30:.2f} GiB, ratio {ratio} (want 0.97-1.03); bench exit $bench_rc |')")")
    fi
  done
fi
if [ "${DEVICE_CHECK_70B:-0}" = 1 ]; then
  big=build-device/bench-llama3-70b-q4_k_m.gguf
  [ -f "$big" ] || timeout 900 ./build-device/tools/tandem synth --shape llama3-70b --type Q4_K_M -o "$big" >/dev/null 2>&1 || rm -f "$big"
  if [ -f "$big" ]; then
    while IFS= read -r row; do bench_rows+=("$row"); done < <(bench_json "$big" 400 "(24 GiB cap)" -p 512 -n 16 --vram 24GiB)
    while IFS= read -r row; do bench_rows+=("$row"); done < <(bench_json "$big" 300 "(--no-stream)" -p 512 -n 0 --vram 24GiB --no-stream)
  fi
fi

echo
echo "| check | result |"
echo "| --- | --- |"
echo "| build (sm_$arch) | ${build_s} s |"
python3 - "$results" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
for case in root.iter("testcase"):
    name = f"{case.get('classname')}.{case.get('name')}"
    if case.find("failure") is not None: status = "FAIL"
    elif case.find("skipped") is not None or case.get("result") == "skipped": status = "skipped"
    else: status = f"pass ({float(case.get('time', 0)):.2f} s)"
    print(f"| {name} | {status} |")
PY
for row in "${bench_rows[@]}" "${plan_rows[@]}"; do echo "$row"; done
# CUDA kernel benchmarks (bench/bench_cuda.cpp): device GB/s for one token,
# GFLOP/s for a 512-token batch, on 4096x4096 weights.
if [ -x build-device/bench/tandem_bench_kernels ]; then
  timeout 180 ./build-device/bench/tandem_bench_kernels --benchmark_filter='cuda_' --benchmark_format=json \
    2>/dev/null > build-device/cuda-bench.json || true
  python3 - build-device/cuda-bench.json <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["benchmarks"]
except Exception:
    rows = []
for b in rows:
    unit = "GB/s" if b["name"].startswith("cuda_matvec") else "GFLOP/s"
    print(f"| {b['name']} | {b.get(unit, 0):.1f} {unit} |")
PY
fi
exit "$rc"
