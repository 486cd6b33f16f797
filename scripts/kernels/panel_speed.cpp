// One weight type's AVX2 panel GEMM alone (the kernel table's panel_avx2:
// its activation preparation, then the GEMM over 16-row panels), one
// thread, 2048 rows x COLS columns x TOKENS tokens of random codes, the
// best of RUNS; prints ms and cycles per unit of 8 rows x 4 tokens x 32
// elements at 3.6 GHz. Build against a Tandem build's static libraries:
//   g++ -std=c++20 -O2 -march=native -I. -o /tmp/panel_speed scripts/kernels/panel_speed.cpp \
//     -Wl,--start-group build/kernels_cpu/libtandem_kernels_cpu.a build/runtime/libtandem_runtime.a \
//     build/runtime/grammar/libtandem_grammar.a -Wl,--end-group -lfmt -lhwloc -lopenblas -ldl -lpthread
//   /tmp/panel_speed IQ2_XXS 2048 256 5
// Two builds of it (before and after a change) taking turns compare kernels.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "kernels_cpu/kernel_table.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_types.h"
#include "tests/random_blocks.h"
using namespace tandem;
int main(int argc, char** argv) {
    const std::string name = argv[1];
    const int64_t rows = 2048, cols = atoi(argv[2]), tokens = atoi(argv[3]);
    const int runs = atoi(argv[4]);
    const auto tt = quant::type_from_name(name);
    if (!tt) { fprintf(stderr, "type?\n"); return 1; }
    const quant::Type t = *tt;
    const auto& k = *cpu::detail::weight_kernels(t);
    const auto& p = k.panel_avx2;
    const size_t rb = static_cast<size_t>(*quant::row_bytes(t, cols));
    std::vector<uint8_t> w(rb * rows);
    for (int64_t r = 0; r < rows; ++r) tandem::testing::fill_random_blocks(t, cols, 1234 + r, w.data() + r * rb);
    const int64_t nb = cols / 256;
    const size_t astride = (sizeof(quant::block_q8_K) * nb + p.extra_bytes * nb + 63) / 64 * 64;
    std::vector<uint8_t> a(astride * tokens);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> c(-127, 127);
    for (int64_t tk = 0; tk < tokens; ++tk) {
        auto* b = reinterpret_cast<quant::block_q8_K*>(a.data() + tk * astride);
        for (int64_t i = 0; i < nb; ++i) {
            b[i].d = 0.01f;
            for (int g = 0; g < 16; ++g) { int s = 0; for (int j = 0; j < 16; ++j) s += b[i].qs[16 * g + j] = c(rng); b[i].bsums[g] = s; }
        }
        if (p.prepare) p.prepare(quant::Type::Q8_K, a.data() + tk * astride, cols);
    }
    std::vector<float> y(tokens * rows);
    void* buf = std::aligned_alloc(64, (p.bytes(cols) + 63) / 64 * 64);
    double best = 1e30;
    for (int r = 0; r < runs; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int64_t r0 = 0; r0 < rows; r0 += 16)
            p.gemm(w.data() + r0 * rb, rb, 16, cols, a.data(), astride, tokens, y.data() + r0, rows, buf);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (ms < best) best = ms;
    }
    double units = double(rows) / 8 * tokens / 4 * cols / 32;
    printf("%s %lldx%lld x %lld: %.3f ms, %.1f cycles/unit at 3.6 GHz (y0 %g)\n", name.c_str(), (long long)rows, (long long)cols, (long long)tokens, best, best * 3.6e6 / units, y[0]);
}
