#!/usr/bin/env bash
# For a machine with an NVIDIA GPU: build with CUDA for that GPU, run the GPU
# tests (CUDA kernels against the CPU reference) and print a short table last.
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
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DTANDEM_BUILD_BENCH=OFF >/tmp/tandem-device-cmake.log 2>&1 \
  || { tail -30 /tmp/tandem-device-cmake.log; exit 1; }
cmake --build build-device -j "$(nproc)" >/tmp/tandem-device-build.log 2>&1 \
  || { tail -40 /tmp/tandem-device-build.log; exit 1; }
build_s=$(( $(date +%s) - start ))

results=build-device/gpu-tests.xml
./build-device/tests/tandem_tests --gtest_filter='Cuda*' --gtest_output="xml:$results" | tail -40
rc=${PIPESTATUS[0]}

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
exit "$rc"
