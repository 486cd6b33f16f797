#!/usr/bin/env bash
# Fuzzes the GGUF reader: builds tests/fuzz/fuzz_gguf with clang, libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz/, then runs
# it for SECONDS (default 60) on a scratch copy of the seed corpus, so the
# committed seeds stay as they are. Exits non-zero when the fuzzer finds a
# crash, a sanitizer report, a leak or a timeout; the input that caused it
# is kept in build-fuzz/findings/.
#
#   scripts/fuzz.sh [SECONDS]        FUZZ_JOBS=N runs N fuzzing processes
set -euo pipefail

seconds="${1:-60}"
jobs="${FUZZ_JOBS:-1}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"

# -O1 -g1 as scripts/test.sh --sanitize (line tables are enough for a report).
# TANDEM_FUZZ=ON instruments every library for coverage (fuzzer-no-link)
# and links fuzz_gguf with libFuzzer.
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DTANDEM_FUZZ=ON \
  -DTANDEM_SANITIZE='address;undefined' \
  -DTANDEM_CUDA=OFF \
  -DTANDEM_BUILD_BENCH=OFF -DTANDEM_UNITY_BUILD=ON >/dev/null
ninja -C "$build" fuzz_gguf

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$root/tests/fuzz/corpus" "$work/corpus"
findings="$build/findings"
mkdir -p "$findings"

parallel=()
if [ "$jobs" -gt 1 ]; then parallel=(-jobs="$jobs" -workers="$jobs"); fi

echo "fuzzing for ${seconds}s (log: build-fuzz/fuzz.log)"
status=0
(cd "$work" && "$build/tests/fuzz_gguf" "$work/corpus" \
  -dict="$root/tests/fuzz/gguf.dict" \
  -max_total_time="$seconds" \
  -max_len=65536 \
  -timeout=10 \
  -rss_limit_mb=2048 \
  "${parallel[@]}" \
  -artifact_prefix="$findings/" \
  -print_final_stats=1) >"$build/fuzz.log" 2>&1 || status=$?
if ls "$work"/fuzz-*.log >/dev/null 2>&1; then cat "$work"/fuzz-*.log >>"$build/fuzz.log"; fi
# A finding prints a sanitizer or libFuzzer error even where the exit
# status of a -jobs run does not carry it.
if grep -qE 'ERROR: libFuzzer|==ERROR|deadly signal|SUMMARY: [A-Za-z]+Sanitizer|runtime error:' "$build/fuzz.log"; then
  status=1
fi
grep -E '^#[0-9]+[[:space:]]+INITED' "$build/fuzz.log" | head -n 1 || true
grep -E '^stat::|^#[0-9]+[[:space:]]+DONE' "$build/fuzz.log" || true
echo "corpus after fuzzing: $(ls "$work/corpus" | wc -l) inputs"
if [ "$status" -ne 0 ]; then
  grep -E -A25 'ERROR|deadly signal|runtime error:' "$build/fuzz.log" | head -60 >&2 || true
  echo "fuzz_gguf found a problem; inputs in $findings:" >&2
  ls -l "$findings" >&2
  exit "$status"
fi
echo "fuzz_gguf: no findings in ${seconds}s"
