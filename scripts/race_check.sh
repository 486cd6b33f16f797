#!/usr/bin/env bash
# The CUDA emulator's shared-memory race detector under ThreadSanitizer
# (kernels_cuda/emulator/race_check.cpp): a block reduction with its
# barriers must run without a report, the same without the barrier after
# its writes must be reported as a data race. Builds only that program, in
# build-tsan/ (~20 s).
set -uo pipefail
cd "$(dirname "$0")/.."
dir=build-tsan
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_SANITIZE=thread -DTANDEM_CUDA_EMULATE=ON \
  -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF >/dev/null || exit 1
cmake --build "$dir" --target tandem_emu_race_check >/dev/null || exit 1
bin=$dir/kernels_cuda/emulator/tandem_emu_race_check
passed=0 failed=0
out=$("$bin" clean 2>&1); code=$?
if [ $code -eq 0 ] && ! grep -q "ThreadSanitizer" <<<"$out"; then
  passed=$((passed + 1)); echo "race check: barriered reduction, no report: ok"
else
  failed=$((failed + 1)); echo "race check: barriered reduction reported (exit $code):"; echo "$out" | head -40
fi
out=$("$bin" racy 2>&1); code=$?
if grep -q "WARNING: ThreadSanitizer: data race" <<<"$out" && grep -q "race_check.cpp" <<<"$out"; then
  passed=$((passed + 1)); echo "race check: missing barrier reported: ok ($(grep -m1 SUMMARY <<<"$out"))"
else
  failed=$((failed + 1)); echo "race check: missing barrier NOT reported (exit $code):"; echo "$out" | head -40
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
