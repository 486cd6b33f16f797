#!/usr/bin/env bash
# One prepared run for a lent GPU machine (15 device minutes a session, 10
# a command): scripts/device-check.md gives the stages, their timings and
# how to carry what the machine lacks.
#   0. deps:   the libraries the build needs (fmt, nlohmann_json, CLI11, GTest,
#              hwloc, cpp-httplib with openssl, zlib and brotli, pkg-config);
#              missing ones are taken from .device-deps/*.deb when carried
#              there, else named and the run stops.
#   1. build:  tandem_tests and tandem only, CUDA for the detected GPU's
#              architecture (CPU-only where no nvidia-smi answers), benches off.
#   models:    the models and golden files below, carried in shared/
#              (--stage-models); a missing one fails, naming it.
#   2. tests:  the kernel tests, then the backend tests, each its own process
#              under `timeout` (an illegal address poisons a process's context).
#              With a GPU, a skipped Cuda* test fails its stage.
#   3. bench:  only if every test passed: the committed tiny model (nothing is
#              quantized here), whose rows must name DEVICE (a bench that fell
#              back to the CPU fails), and plans of header-only 8B/70B shapes.
# One budget (BUDGET, at most 540 s) bounds the whole run: each stage's
# timeout is what is left less the minimums kept for the stages after it.
# Logs go to $OUT (or build-device/logs) through tee; a table is printed last.
# Env: DEVICE (cuda0; cpu2 for a dry run on the stand-in), JOBS (nproc),
# BUDGET (540), STAGE_FROM (../shared, for --stage-models).
# Usage: scripts/device-check.sh [--fetch-deps | --stage-models]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# What the device run needs besides tests/data, within 40 MB
# (device-check.md gives the sizes and why these).
carried_models=(synth-qwen2-Q8_0.gguf synth-qwen3-Q8_0.gguf synth-gemma2-Q8_0.gguf synth-qwen3moe-Q8_0.gguf)
carried_golden=(tiny-llama-Q4_K_M.p1.tokens tiny-llama-Q4_K_M.p1.logits)
max_shared=40000000      # bytes of shared/ (40 MB)
max_tree=67108864        # bytes the device call sends at most (64 MiB)

# The build's -dev packages; their runtime libraries are added from apt-cache.
dev_pkgs=(pkgconf pkgconf-bin libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libhwloc-dev
          libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev)

exclude() {  # a line of .git/info/exclude (never .gitignore)
  local f
  f=$(git rev-parse --git-path info/exclude) || return 1
  mkdir -p "$(dirname "$f")"
  grep -qxF "$1" "$f" 2>/dev/null || echo "$1" >>"$f"
}
bytes() { du -sb "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
tree_bytes() {  # what a device call sends: tracked, untracked-not-ignored, shared/, .device-deps/
  local files
  files=$( { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 -r stat -c %s -- 2>/dev/null |
           awk '{s += $1} END {print s + 0}')
  echo $((files + $(bytes shared .device-deps)))
}

case "${1:-}" in
--fetch-deps)
  # Here, where apt works: the .deb files of the build's libraries, to carry
  # (name .device-deps in `carry`). Runtime packages: two levels of Depends,
  # less the C and C++ runtimes every machine has.
  runtime=$(apt-cache depends "${dev_pkgs[@]}" | awk '/^  Depends: [^<]/ {print $2}' |
            grep -E '^(lib.*[0-9]|zlib1g)$' | grep -vxE 'libc6|libgcc-s1|libstdc\+\+6' | sort -u)
  # shellcheck disable=SC2086  # one package name a word
  runtime=$( (echo "$runtime"; apt-cache depends $runtime | awk '/^  Depends: [^<]/ {print $2}') |
            grep -E '^(lib.*[0-9]|zlib1g)$' | grep -vxE 'libc6|libgcc-s1|libstdc\+\+6' | sort -u)
  exclude /.device-deps/ && mkdir -p .device-deps && rm -f .device-deps/*.deb || exit 1
  # shellcheck disable=SC2086
  (cd .device-deps && apt-get download "${dev_pkgs[@]}" $runtime) || exit 1
  ls -l .device-deps
  echo "$(bytes .device-deps) bytes in .device-deps; whole tree $(tree_bytes) of $max_tree"
  exit 0
  ;;
--stage-models)
  # Here: copy the carried models and golden files into <checkout>/shared,
  # which the device call sends (name shared in `carry` as well).
  from=${STAGE_FROM:-../shared}
  exclude /shared/ && mkdir -p shared/models shared/golden || exit 1
  total=0
  for sub in models golden; do
    if [ $sub = models ]; then names=("${carried_models[@]}"); else names=("${carried_golden[@]}"); fi
    for n in "${names[@]}"; do
      [ -f "$from/$sub/$n" ] || { echo "not found: $from/$sub/$n"; exit 1; }
      install -m 0644 "$from/$sub/$n" "shared/$sub/$n" || exit 1
      size=$(stat -c %s "shared/$sub/$n")
      total=$((total + size))
      printf '%10d  shared/%s/%s\n' "$size" "$sub" "$n"
    done
  done
  echo "$total bytes staged; shared/ holds $(bytes shared) (at most $max_shared)"
  [ "$(bytes shared)" -le $max_shared ] || { echo "shared/ is over $max_shared bytes: remove what is not listed"; exit 1; }
  tree=$(tree_bytes)
  echo "whole tree a device call sends: $tree bytes of $max_tree"
  [ "$tree" -le $max_tree ] || { echo "over the device call's limit: carry less"; exit 1; }
  exit 0
  ;;
"") ;;
*)
  echo "usage: scripts/device-check.sh [--fetch-deps | --stage-models]" >&2
  exit 2
  ;;
esac

device=${DEVICE:-cuda0}
jobs=${JOBS:-$(nproc)}
logs=${OUT:-build-device/logs}
mkdir -p "$logs" build-device
export TANDEM_CACHE_DIR=$PWD/build-device/test-cache  # never the user's ~/.cache/tandem

# ---- the budget: each stage's timeout is what is left less the minimums
# kept for the stages after it (kernel tests 40 s, backend tests 120 s,
# bench 30 s, and 10 s for the table and a killed command's grace).
budget=${BUDGET:-540}
[ "$budget" -le 540 ] 2>/dev/null || { echo "BUDGET is at most 540 s (a command gets 600)"; budget=540; }
start=$(date +%s)
keep_kernel=40 keep_backend=120 keep_bench=30 keep_end=10
left() { echo $((start + budget - $(date +%s))); }
limit() {  # seconds kept for later stages -> this stage's timeout (0: none left)
  local l=$(($(left) - $1))
  echo $((l > 0 ? l : 0))
}
stage_limit=0
begin() {  # stage name, seconds kept for later stages
  stage_left=$(left)
  stage_limit=$(limit "$2")
  echo "== $1: ${stage_left} s of the budget left, ${stage_limit} s for this stage"
}

rows=()
row() { rows+=("| $1 | $2 | $3 | ${4:-} |"); echo "== $1: $2 ($3)"; }
now() { date +%s.%N; }
since() { python3 -c "print(f'{$(now) - $1:.1f} s')"; }
budget_cell() { echo "${stage_limit} s of ${stage_left} s left"; }
finish() {
  echo
  echo "| stage | result | time | limit |"
  echo "| --- | --- | --- | --- |"
  for r in "${rows[@]}"; do echo "$r"; done
  echo
  echo "whole run: $(($(date +%s) - start)) s of the ${budget} s budget"
  exit "$1"
}

# ---- 0. deps
t0=$(now)
stage_left=$(left) stage_limit=$stage_left
cmake_args=()
prefix=""
if [ -d .device-deps ] && ls .device-deps/*.deb >/dev/null 2>&1; then
  # Unpacked beside the system, not over it.
  root=/tmp/tandem-deps
  prefix=$root/usr
  mkdir -p $root/run
  for f in .device-deps/*.deb; do dpkg -x "$f" $root; done
  [ -x "$prefix/bin/pkgconf" ] && [ ! -e "$prefix/bin/pkg-config" ] && ln -s pkgconf "$prefix/bin/pkg-config"
  export PATH="$PATH:$prefix/bin"  # the system's own tools first
  export PKG_CONFIG_PATH="$prefix/lib/x86_64-linux-gnu/pkgconfig:$prefix/share/pkgconfig:${PKG_CONFIG_PATH:-}"
  # Only the shared libraries the system lacks are put on the loader's path,
  # so that nothing the system runs (python3, nvcc) takes a carried library.
  have=$(ldconfig -p 2>/dev/null)
  for f in "$prefix"/lib/x86_64-linux-gnu/lib*.so.*; do
    [ -e "$f" ] || continue
    grep -q "[[:space:]]${f##*/} (" <<<"$have" || ln -sf "$f" $root/run/
  done
  export LD_LIBRARY_PATH="$root/run${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cmake_args+=("-DCMAKE_PREFIX_PATH=$prefix")
  # The .pc files name /usr: point them at the prefix.
  find $root -name '*.pc' -exec sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr(/|\$)#\1=$prefix\2#" {} +
fi
missing=()
for tool in cmake ninja; do command -v $tool >/dev/null || missing+=("$tool"); done
if command -v pkg-config >/dev/null; then
  # cpp-httplib's .pc requires openssl, zlib and brotli's three (Requires.private).
  for m in hwloc:libhwloc-dev cpp-httplib:libcpp-httplib-dev openssl:libssl-dev zlib:zlib1g-dev \
           libbrotlicommon:libbrotli-dev libbrotlidec:libbrotli-dev libbrotlienc:libbrotli-dev; do
    pkg-config --exists "${m%%:*}" 2>/dev/null || missing+=("${m%%:*} (${m#*:})")
  done
  # The libraries those link, and what each loads.
  for m in hwloc:hwloc cpp-httplib:cpp-httplib; do
    lib="$(pkg-config --variable=libdir "${m%%:*}" 2>/dev/null)/lib${m#*:}.so"
    [ -e "$lib" ] || continue
    for so in $(ldd "$lib" 2>/dev/null | awk '/not found/ {print $1}'); do missing+=("$so (loaded by ${lib##*/})"); done
  done
else
  missing+=("pkg-config (pkgconf)")
fi
for pkg in fmt nlohmann_json CLI11 GTest; do
  found=0
  for d in /usr /usr/local ${prefix:+"$prefix"}; do
    for pat in "$d"/lib/*/cmake/"$pkg"* "$d"/lib/cmake/"$pkg"* "$d"/share/cmake/"$pkg"* "$d"/share/"$pkg"*; do
      [ -e "$pat" ] && found=1
    done
  done
  [ $found = 1 ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  row deps "missing: $(printf '%s, ' "${missing[@]}" | sed 's/, $//'); run scripts/device-check.sh --fetch-deps where apt works and carry .device-deps" \
    "$(since "$t0")" "$(budget_cell)"
  finish 2
fi
row deps "fmt, nlohmann_json, CLI11, GTest, hwloc, cpp-httplib (openssl, zlib, brotli), pkg-config found" \
  "$(since "$t0")" "$(budget_cell)"

# ---- 1. build
cuda=OFF
gpu=0
arch=75
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  [ -n "$cc" ] && arch=$cc
  cuda=ON
  gpu=1
fi
# A GPU check: a skipped GPU test is a failure, not a pass.
strict=$gpu
case $device in cuda*) strict=1 ;; esac
label="CPU only"
[ $cuda = ON ] && label="CUDA sm_$arch"
t0=$(now)
begin build $((keep_kernel + keep_backend + keep_bench + keep_end))
if [ "$stage_limit" -lt 30 ]; then  # (timeout 0 would mean none)
  row "build ($label)" "FAILED: not run, BUDGET $budget s leaves ${stage_limit} s" "0 s" "$(budget_cell)"
  finish 1
fi
timeout -k 5 "$stage_limit" bash -c "
  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=$cuda \
    -DCMAKE_CUDA_ARCHITECTURES=$arch -DTANDEM_BUILD_BENCH=OFF ${cmake_args[*]:-} &&
  cmake --build build-device -j $jobs --target tandem_tests tandem" 2>&1 | tee "$logs/build.log" >/dev/null
build_rc=$?
if [ $build_rc -ne 0 ]; then
  tail -30 "$logs/build.log"
  row "build ($label, -j $jobs)" "FAILED (exit $build_rc; 124: timeout), see build.log" "$(since "$t0")" "$(budget_cell)"
  finish 1
fi
row "build ($label, -j $jobs)" ok "$(since "$t0")" "$(budget_cell)"

# ---- models: what the tests read beyond tests/data
tests_ok=1
t0=$(now)
if ! models=$(python3 scripts/device_check.py models "${carried_models[@]}" -- "${carried_golden[@]}"); then
  tests_ok=0
fi
row models "$models" "$(since "$t0")"

# ---- 2. tests, two processes
run_tests() {  # name, seconds kept for later stages, gtest filter
  local name=$1 keep=$2 filter=$3 t0 rc summary verdict exclude="" left_out="" k v
  t0=$(now)
  begin "$name tests" "$keep"
  if [ "$stage_limit" -lt 5 ]; then
    tests_ok=0
    row "$name tests" "FAILED: not run, the budget is spent" "0 s" "$(budget_cell)"
    return
  fi
  # A parameterized case whose model is neither carried nor found is left
  # out by name (and said so below); a carried one missing fails as a skip.
  ./build-device/tests/tandem_tests --gtest_list_tests --gtest_filter="$filter" >"build-device/$name.list" 2>&1
  while IFS='=' read -r k v; do
    case $k in exclude) exclude=$v ;; left_out) left_out=$v ;; esac
  done < <(python3 scripts/device_check.py plan "build-device/$name.list" "${carried_models[@]}" -- "${carried_golden[@]}")
  rm -f "$logs/$name.json"
  # TANDEM_EXPECT_GPU=1: tests that know it (tests/test_cuda_inputs.h) fail
  # instead of skipping for want of a GPU or a model.
  TANDEM_EXPECT_GPU=$strict timeout -k 5 "$stage_limit" ./build-device/tests/tandem_tests --gtest_filter="$filter${exclude:+-$exclude}" \
    --gtest_output="json:$logs/$name.json" 2>&1 | tee "$logs/$name.log" >/dev/null
  rc=$?
  if summary=$(python3 scripts/device_check.py summary "$logs/$name.json" "$logs/$name.log" "$strict") &&
     [ $rc -eq 0 ]; then
    verdict=ok
  else
    verdict=FAILED
    tests_ok=0
  fi
  [ $rc -eq 124 ] && rc="124, the timeout"
  row "$name tests" "$verdict (exit $rc): ${summary#*: }${left_out:+; left out, model not carried: $left_out}" \
    "$(since "$t0")" "$(budget_cell)"
  grep -h "SKIPPED\|\[ batch" "$logs/$name.log" | head -12
}
run_tests kernel $((keep_backend + keep_bench + keep_end)) \
  'CudaDevices.*:CudaMatmul.*:CudaElementwise.*:CudaAttention.*:CudaExperts.*:CudaExpertsHost.*:CudaDequant*.*:CudaMathHost.*:CudaKernelsHost.*:TinyLlama/CudaBatchPathHost.*'
run_tests backend $((keep_bench + keep_end)) 'CudaBackend.*:CudaBackend/*.*:CudaPlugin.*'

# ---- 3. benchmarks, only after passing tests
if [ $tests_ok -ne 1 ]; then
  row bench "not run: tests failed" "0 s"
  finish 1
fi
t0=$(now)
begin bench "$keep_end"
bench_end=$(($(date +%s) + stage_limit))
bench_left() { local l=$((bench_end - $(date +%s))); echo $((l > 1 ? l : 1)); }  # (never timeout 0: none)
bench_ok=1
if [ "$stage_limit" -lt 5 ]; then
  row bench "FAILED: not run, the budget is spent" "0 s" "$(budget_cell)"
  finish 1
fi
timeout -k 5 "$(bench_left)" ./build-device/tools/tandem bench -m tests/data/tiny-llama-Q4_K_M.gguf --device "$device" \
  -p 512 -n 64 -r 2 -ngl 0,2,5 -o jsonl 2>"$logs/bench.err" | tee "$logs/bench.jsonl" >/dev/null
rc=$?
# Its rows, then a line: every row on $device, or which fell back to the CPU.
if out=$(python3 scripts/device_check.py bench "$logs/bench.jsonl" "$logs/bench.err" "$device") && [ $rc -eq 0 ]; then
  verdict=ok
else
  verdict=FAILED
  bench_ok=0
fi
said=""
while IFS= read -r r; do
  case $r in "|"*) rows+=("$r") ;; *) said=$r ;; esac
done <<<"$out"
[ $rc -eq 124 ] && rc="124, the timeout"
row "bench tiny-llama (committed)" "$verdict (exit $rc): ${said#*: }" "$(since "$t0")" "$(budget_cell)"
for shape in llama3-8b llama3-70b; do
  t0=$(now)
  [ "$(bench_left)" -gt 2 ] || { row "plan $shape" "not run: budget spent" "0 s"; bench_ok=0; continue; }
  hdr=build-device/$shape-header.gguf
  plan=$(timeout "$(bench_left)" ./build-device/tools/tandem synth --shape "$shape" --type Q4_K_M --header-only -o "$hdr" \
           >/dev/null 2>&1 &&
         timeout "$(bench_left)" ./build-device/tools/tandem plan -m "$hdr" --vram 24GiB --json 2>/dev/null |
         python3 -c 'import json, sys; d = json.load(sys.stdin); print("ngl %d of %d, VRAM %.2f GiB" % (d["ngl"], d["n_layer"], d["vram"]["total"] / 2**30))' 2>/dev/null)
  [ -n "$plan" ] || bench_ok=0
  row "plan $shape Q4_K_M, 24 GiB (header only)" "${plan:-FAILED}" "$(since "$t0")"
done
[ $bench_ok -eq 1 ] || finish 1
finish 0
