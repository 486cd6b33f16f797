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

# GPU benchmark: a llama-1b-shape Q8_0 model (quick to synthesize) at
# ngl 0, half and all, decode and prefill tok/s as tandem run prints them.
bench_rows=()
model=build-device/bench-llama-1b-q8_0.gguf
if [ ! -f "$model" ]; then
  ./build-device/tools/tandem synth --shape llama-1b --type Q8_0 -o "$model" >/dev/null 2>&1 || true
fi
if [ -f "$model" ]; then
  python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog.'] * 50))" > build-device/prompt.txt
  for ngl in 0 11 23; do
    out=$(timeout 120 ./build-device/tools/tandem run -m "$model" -f build-device/prompt.txt -n 64 --temp 0 \
          --device cuda0 --vram 16GiB -ngl $ngl 2>&1 >/dev/null | tail -3)
    pp=$(echo "$out" | sed -n 's/^prompt: .* \([0-9.]*\) tok\/s.*/\1/p')
    tg=$(echo "$out" | sed -n 's/^generation: .* \([0-9.]*\) tok\/s, \([0-9.]*\) GB\/s.*/\1 tok\/s, \2 GB\/s/p')
    bench_rows+=("| llama-1b Q8_0, ngl $ngl | pp ${pp:-?} tok/s, tg ${tg:-failed: $(echo "$out" | tail -1)} |")
  done
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
for row in "${bench_rows[@]}"; do echo "$row"; done
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
