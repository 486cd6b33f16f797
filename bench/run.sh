#!/usr/bin/env bash
# The standard benchmark set, written as a markdown report (default
# bench/report.md, or the path given as $1):
#   - the machine (CPU, cores, calibrated bandwidths: tandem bench --calibrate)
#   - end to end on the CPU: a llama-1b-shape Q4_K_M synth model (made once,
#     cached in $TANDEM_BENCH_DIR, default ~/.cache/tandem/bench), pp512 and
#     tg128 with `tandem bench --calibrate-each` (% bw against the bandwidth
#     measured around each test), 2 threads and the physical-core count; the
#     same after 1536 cached tokens (-d) with F16 and Q8_0 KV caches
#   - the CPU kernel benchmarks (Google Benchmark) for the matvec and matmul
#     of every type (and Q4_K/Q6_K over the Llama-1B decode shapes) and the
#     AVX-512 attention (prefill and decode): GB/s and
#     GFLOP/s
#   - with a GPU (nvidia-smi finds one): llama3-8b Q4_K_M at ngl 0/16/33 and
#     llama3-70b Q4_K_M under a 24 GiB cap, streaming on and off
# Build first (cmake -S . -B build -G Ninja && cmake --build build) or set
# BUILD_DIR. Run on a quiet machine: every number is a rate.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
TANDEM=$BUILD_DIR/tools/tandem
KERNELS=$BUILD_DIR/bench/tandem_bench_kernels
OUT=${1:-bench/report.md}
MODELS=${TANDEM_BENCH_DIR:-$HOME/.cache/tandem/bench}
REPS=${REPS:-3}
[ -x "$TANDEM" ] || { echo "bench/run.sh: $TANDEM not built (set BUILD_DIR)" >&2; exit 1; }
mkdir -p "$MODELS"

model() {  # model SHAPE TYPE -> path, synthesized once
    local path="$MODELS/$1-$2.gguf"
    if [ ! -f "$path" ]; then
        echo "bench/run.sh: synthesizing $1 $2 (once; minutes for the larger shapes)" >&2
        "$TANDEM" synth --shape "$1" --type "$2" -o "$path" >&2
    fi
    echo "$path"
}

cores=$(nproc)
calib=$("$TANDEM" bench --calibrate --json)
cpu_gbps=$(echo "$calib" | python3 -c 'import json,sys; print(round(json.load(sys.stdin).get("cpu_gbps") or 0, 1))')
cpu_name=$(echo "$calib" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("cpu_model","?"))')
phys=$(echo "$calib" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("physical_cores",0))')

m1b=$(model llama-1b Q4_K_M)
threads="2"
[ "$phys" != "2" ] && threads="2,$phys"

{
    echo "# Tandem benchmark report"
    echo
    echo "$(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), made by \`bench/run.sh\`."
    echo
    echo "Machine: $cpu_name, $phys physical cores ($cores logical), CPU read bandwidth $cpu_gbps GB/s (\`tandem bench --calibrate\`)."
    echo
    echo "## End to end, CPU ($(basename "$m1b"), \`tandem bench -p 512 -n 128 -t $threads -r $REPS --calibrate-each\`)"
    echo
    echo "bw now: the CPU read bandwidth (GB/s) measured right before and right after the test; % bw is against their mean (hosts whose bandwidth moves)."
    echo
    "$TANDEM" bench -m "$m1b" -p 512 -n 128 -t "$threads" -r "$REPS" --calibrate-each -o md
    echo
    echo "## Long context, CPU (after 1536 cached tokens, both cache types, \`-d 1536 --cache-type f16,q8_0\`)"
    echo
    "$TANDEM" bench -m "$m1b" -p 512 -n 128 -d 1536 --cache-type f16,q8_0 -t 2 -r "$REPS" -o md
    echo
    if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
        m8b=$(model llama3-8b Q4_K_M)
        echo "## End to end, GPU split ($(basename "$m8b"))"
        echo
        "$TANDEM" bench -m "$m8b" --device cuda -p 512 -n 128 -ngl 0,16,33 -r "$REPS" -o md
        echo
        m70=$(model llama3-70b Q4_K_M)
        echo "## llama3-70b Q4_K_M under a 24 GiB cap"
        echo
        "$TANDEM" bench -m "$m70" --device cuda --vram 24GiB -p 512 -n 32 -r 1 -o md
        echo
    fi
    if [ -x "$KERNELS" ]; then
        echo "## CPU kernels (Google Benchmark, \`$KERNELS\`)"
        echo
        echo "| benchmark | time | GB/s | GFLOP/s |"
        echo "| --- | --- | --- | --- |"
        "$KERNELS" --benchmark_filter='matvec/.*/dram/threads:2|matvec/(Q4_K|Q6_K)/avx512/dram-.*/threads:2|matmul/.*/512tok/threads:2|attention/avx512/' --benchmark_format=json 2> /dev/null |
            python3 -c 'import json, sys
for b in json.load(sys.stdin)["benchmarks"]:
    print("| %s | %.3g %s | %.2f | %.1f |" % (b["name"], b["real_time"], b["time_unit"], b.get("GB/s", 0), b.get("GFLOP/s", 0)))'
        echo
    fi
} > "$OUT"
echo "bench/run.sh: wrote $OUT" >&2
