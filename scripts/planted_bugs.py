#!/usr/bin/env python3
"""Plants known bugs in the CUDA sources one at a time and checks that the
emulated tests catch each: for every bug, the source is changed, the build
rebuilt, the named tests run (they must fail), and the source restored.
The build is rebuilt clean at the end, and the same tests must pass there.

    scripts/planted_bugs.py [BUILD_DIR]   (default build-asan: an emulated build)

Prints a markdown table: bug, test, how it was caught (the first line of
the emulator's, a sanitizer's or the test's own report)."""
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build-asan")

# (bug, file, text, replacement, gtest filter)
BUGS = [
    ("off-by-one in a loop bound (rms_norm's sum of squares runs to i <= n)",
     "kernels_cuda/elementwise.cu",
     "for (int64_t i = threadIdx.x; i < n; i += kThreads) sum +=",
     "for (int64_t i = threadIdx.x; i <= n; i += kThreads) sum +=",
     "CudaElementwise.RmsNormRopeGluMatchCpu"),
    ("missing __syncthreads (rms_norm, before the tree reduction)",
     "kernels_cuda/elementwise.cu",
     "    partial[threadIdx.x] = sum;\n    __syncthreads();\n",
     "    partial[threadIdx.x] = sum;\n",
     "CudaElementwise.RmsNormRopeGluMatchCpu"),
    ("wrong shuffle offset (matmul's warp_sum starts at 32)",
     "kernels_cuda/matmul.cu",
     "for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync",
     "for (int off = 32; off > 0; off >>= 1) v += __shfl_xor_sync",
     "CudaMatmul/CudaMatmulTokens.EveryWeightTypeMatchesCpu/7_tokens"),
    ("wrong leading dimension in the cuBLAS call (ldb n_cols + 1)",
     "kernels_cuda/device_matmul.cpp",
     "CUDA_R_32F, static_cast<int>(n_cols), &zero,",
     "CUDA_R_32F, static_cast<int>(n_cols) + 1, &zero,",
     "CudaMatmul.BatchesThroughCublasMatchDequantizedReference"),
    ("pinned staging buffer reused before its async copy completes (no event wait)",
     "runtime/engine_cuda/cuda_staging.cpp",
     "        TANDEM_CUDA_CHECK(cudaEventSynchronize(done_[next_]));\n",
     "",
     "CudaBackend/EveryNgl.MatchesCpu/tiny_llama_F16_gguf"),
    ("KV cell index computed with int on a large offset (kv_store_f16_kernel)",
     "kernels_cuda/attention.cu",
     "    const int64_t cell = cells[t];\n    if (e < kv.k_dim) {\n        reinterpret_cast<uint16_t*>(kv.k + cell * kv.k_row_bytes())",
     "    const int cell = cells[t];\n    if (e < kv.k_dim) {\n        reinterpret_cast<uint16_t*>(kv.k + cell * static_cast<int>(kv.k_row_bytes()))",
     "CudaAttention.KvStoreReachesCellsPastTwoGiB"),
]

REPORT = re.compile(r"(CUDA emulator: .*|ERROR: AddressSanitizer: [^\n]*|runtime error: [^\n]*|"
                    r"Expected[^\n]*|Value of: [^\n]*|unknown file: Failure[^\n]*|C\+\+ exception[^\n]*|"
                    r"Which is: [^\n]*|of \d+ outputs|Segmentation fault|SEGV[^\n]*)")


def build():
    r = subprocess.run(["ninja", "-C", str(BUILD), "tandem_tests", "tandem"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"build failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")


def run(filter_):
    env = dict(os.environ, TANDEM_CUDA_EMULATE="1", ASAN_OPTIONS="detect_leaks=0:abort_on_error=1")
    r = subprocess.run([str(BUILD / "tests" / "tandem_tests"), f"--gtest_filter={filter_}"], capture_output=True,
                       text=True, env=env, timeout=900)
    out = r.stdout + r.stderr
    m = REPORT.findall(out)
    how = "; ".join(dict.fromkeys(x.strip() for x in m[:3])) if m else out.strip().splitlines()[-1:]
    return r.returncode, how if isinstance(how, str) else " ".join(how)


def main():
    rows = []
    for bug, path, old, new, filter_ in BUGS:
        f = ROOT / path
        text = f.read_text()
        if text.count(old) != 1:
            sys.exit(f"{path}: the text to change for '{bug}' is not there exactly once")
        try:
            f.write_text(text.replace(old, new))
            build()
            code, how = run(filter_)
        finally:
            f.write_text(text)
        caught = code != 0
        rows.append((bug, filter_, "caught" if caught else "NOT CAUGHT", how.replace("|", "\\|")[:300]))
        print(f"{'caught' if caught else 'NOT CAUGHT'}: {bug}", flush=True)
    build()
    clean = [run(f)[0] == 0 for _, _, _, _, f in BUGS]
    print("\n| bug | test | result | how |\n| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r[0]} | `{r[1]}` | {r[2]} | {r[3]} |")
    print(f"\nreverted: {sum(clean)} of {len(clean)} tests pass again")
    sys.exit(0 if all(r[2] == "caught" for r in rows) and all(clean) else 1)


if __name__ == "__main__":
    main()
