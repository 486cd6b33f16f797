#!/usr/bin/env bash
# One prepared run for a lent GPU machine (15 device minutes a session, 10
# a command): scripts/device-check.md gives the stages, their timings and
# how to carry what the machine lacks.
#   0. deps:   the libraries the build needs (fmt, nlohmann_json, CLI11,
#              GTest, hwloc, pkg-config); missing ones are taken from
#              .device-deps/*.deb when carried there, else named and the run stops.
#   1. build:  tandem_tests and tandem only, CUDA for the detected GPU's
#              architecture (CPU-only where no nvidia-smi answers), benches off.
#   2. tests:  the kernel tests, then the backend tests, each its own process
#              under `timeout` (an illegal address poisons a process's context).
#   3. bench:  only if every test passed, within BENCH_BUDGET seconds: the
#              committed tiny model (nothing is quantized here) and plans of
#              header-only 8B/70B shapes.
# Logs go to $OUT (or build-device/logs) through tee; a table is printed last.
# Env: DEVICE (cuda0; cpu2 for a dry run on the stand-in), JOBS (nproc),
# BUILD_TIMEOUT (360), KERNEL_TIMEOUT (120), BACKEND_TIMEOUT (180),
# BENCH_BUDGET (90). Usage: scripts/device-check.sh [--fetch-deps]
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--fetch-deps" ]; then
  # Run here, where apt works: the .deb files of the build's libraries, to
  # carry (name .device-deps in `carry`; add /.device-deps/ to .git/info/exclude).
  mkdir -p .device-deps && cd .device-deps &&
    apt-get download libfmt-dev "$(apt-cache depends libfmt-dev | awk '/Depends: libfmt[0-9]/ {print $2}')" \
      nlohmann-json3-dev libcli11-dev libgtest-dev libhwloc-dev libhwloc15 libnuma1 pkgconf pkgconf-bin libpkgconf3 &&
    ls -l
  exit $?
fi

device=${DEVICE:-cuda0}
jobs=${JOBS:-$(nproc)}
logs=${OUT:-build-device/logs}
mkdir -p "$logs" build-device
rows=()
row() { rows+=("| $1 | $2 | $3 |"); echo "== $1: $2 ($3)"; }
now() { date +%s.%N; }
since() { python3 -c "print(f'{$(now) - $1:.1f} s')"; }
finish() {
  echo
  echo "| stage | result | time |"
  echo "| --- | --- | --- |"
  for r in "${rows[@]}"; do echo "$r"; done
  exit "$1"
}

# ---- 0. deps
t0=$(now)
cmake_args=()
prefix=""
if [ -d .device-deps ] && ls .device-deps/*.deb >/dev/null 2>&1; then
  # Unpacked beside the system, not over it.
  prefix=/tmp/tandem-deps/usr
  mkdir -p /tmp/tandem-deps
  for f in .device-deps/*.deb; do dpkg -x "$f" /tmp/tandem-deps; done
  export PATH="$prefix/bin:$PATH"
  export PKG_CONFIG_PATH="$prefix/lib/x86_64-linux-gnu/pkgconfig:$prefix/share/pkgconfig:${PKG_CONFIG_PATH:-}"
  export LD_LIBRARY_PATH="$prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  [ -x "$prefix/bin/pkgconf" ] && [ ! -e "$prefix/bin/pkg-config" ] && ln -s pkgconf "$prefix/bin/pkg-config"
  cmake_args+=("-DCMAKE_PREFIX_PATH=$prefix")
  # The .pc files name /usr: point them at the prefix.
  find /tmp/tandem-deps -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$prefix|" {} +
fi
missing=()
command -v pkg-config >/dev/null || missing+=("pkg-config (pkgconf)")
pkg-config --exists hwloc 2>/dev/null || missing+=("hwloc (libhwloc-dev)")
for pkg in fmt nlohmann_json CLI11 GTest; do
  found=0
  for d in /usr /usr/local $prefix; do
    for pat in "$d"/lib/*/cmake/"$pkg"* "$d"/lib/cmake/"$pkg"* "$d"/share/cmake/"$pkg"* "$d"/share/"$pkg"*; do
      [ -e "$pat" ] && found=1
    done
  done
  [ $found = 1 ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  row deps "missing: ${missing[*]}; run scripts/device-check.sh --fetch-deps where apt works and carry .device-deps" "$(since "$t0")"
  finish 2
fi
row deps "fmt, nlohmann_json, CLI11, GTest, hwloc, pkg-config found" "$(since "$t0")"

# ---- 1. build
t0=$(now)
cuda=OFF
arch=75
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  [ -n "$cc" ] && arch=$cc
  cuda=ON
fi
label="CPU only"
[ $cuda = ON ] && label="CUDA sm_$arch"
timeout "${BUILD_TIMEOUT:-360}" bash -c "
  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=$cuda \
    -DCMAKE_CUDA_ARCHITECTURES=$arch -DTANDEM_BUILD_BENCH=OFF ${cmake_args[*]:-} &&
  cmake --build build-device -j $jobs --target tandem_tests tandem" 2>&1 | tee "$logs/build.log" >/dev/null
build_rc=$?
if [ $build_rc -ne 0 ]; then
  tail -30 "$logs/build.log"
  row "build ($label, -j $jobs)" "FAILED (exit $build_rc; 124: timeout), see build.log" "$(since "$t0")"
  finish 1
fi
row "build ($label, -j $jobs)" ok "$(since "$t0")"

# ---- 2. tests, two processes
tests_ok=1
run_tests() {  # name, timeout, gtest filter
  local name=$1 limit=$2 filter=$3 t0 rc summary
  t0=$(now)
  timeout "$limit" ./build-device/tests/tandem_tests --gtest_filter="$filter" --gtest_output="xml:$logs/$name.xml" \
    2>&1 | tee "$logs/$name.log" >/dev/null
  rc=$?
  summary=$(python3 - "$logs/$name.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print("no report"); sys.exit()
p = f = s = 0
bad = []
for c in root.iter("testcase"):
    if c.find("failure") is not None:
        f += 1; bad.append(c.get("classname") + "." + c.get("name"))
    elif c.find("skipped") is not None or c.get("result") == "skipped":
        s += 1
    else:
        p += 1
print(f"{p} passed, {f} failed, {s} skipped" + (": " + ", ".join(bad[:6]) if bad else ""))
PY
)
  [ $rc -eq 0 ] || tests_ok=0
  [ $rc -eq 124 ] && summary="TIMEOUT after $limit s; $summary"
  row "$name tests" "exit $rc: $summary" "$(since "$t0")"
  grep -h "SKIPPED\|\[ batch" "$logs/$name.log" | head -12
}
run_tests kernel "${KERNEL_TIMEOUT:-120}" \
  'CudaMatmul.*:CudaElementwise.*:CudaAttention.*:CudaExperts.*:CudaExpertsHost.*:CudaDequant*.*:CudaMathHost.*:CudaKernelsHost.*:TinyLlama/CudaBatchPathHost.*'
run_tests backend "${BACKEND_TIMEOUT:-180}" 'CudaBackend.*:CudaBackend/*.*:CudaPlugin.*'

# ---- 3. benchmarks, only after passing tests
if [ $tests_ok -ne 1 ]; then
  row bench "not run: tests failed" "0 s"
  finish 1
fi
budget=${BENCH_BUDGET:-90}
bench_start=$(now)
left() { python3 -c "print(max(0, int($budget - ($(now) - $bench_start))))"; }
t0=$(now)
timeout "$(left)" ./build-device/tools/tandem bench -m tests/data/tiny-llama-Q4_K_M.gguf --device "$device" \
  -p 512 -n 64 -r 2 -ngl 0,2,5 -o jsonl 2>"$logs/bench.err" | tee "$logs/bench.jsonl" >/dev/null
rc=$?
while IFS= read -r r; do rows+=("$r"); done < <(python3 - "$logs/bench.jsonl" "$(since "$t0")" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    tps, gbps = r.get("tps_mean"), r.get("gbps")
    meas = f"{tps:.1f} t/s, {gbps:.1f} GB/s" if tps is not None else "does not fit"
    print(f"| bench tiny-llama Q4_K_M ngl {r.get('ngl')} {r.get('backend')} {r.get('test')} | {meas} | |")
PY
)
[ $rc -eq 124 ] && rc="124, budget spent"
row "bench tiny-llama (committed)" "exit $rc" "$(since "$t0")"
for shape in llama3-8b llama3-70b; do
  t0=$(now)
  [ "$(left)" -gt 2 ] || { row "plan $shape" "not run: bench budget spent" "0 s"; continue; }
  hdr=build-device/$shape-header.gguf
  plan=$(timeout "$(left)" ./build-device/tools/tandem synth --shape "$shape" --type Q4_K_M --header-only -o "$hdr" \
           >/dev/null 2>&1 &&
         timeout "$(left)" ./build-device/tools/tandem plan -m "$hdr" --vram 24GiB --json 2>/dev/null |
         python3 -c 'import json, sys; d = json.load(sys.stdin); print("ngl %d of %d, VRAM %.2f GiB" % (d["ngl"], d["n_layer"], d["vram"]["total"] / 2**30))' 2>/dev/null)
  row "plan $shape Q4_K_M, 24 GiB (header only)" "${plan:-failed}" "$(since "$t0")"
done
finish 0
