// An i-quant's AVX2 decode rows (one token): the plain AVX2 build against
// the BMI2 build (rows_avx2b, IQ1_S and IQ1_M), one thread, ROWS x COLS of
// random codes (512 x 2048 sits in L2), the two taking turns in one
// process, the best of RUNS each. Built as panel_speed.cpp is:
//   /tmp/rows_speed IQ1_S 512 2048 50
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
#include "kernels_cpu/kernel_table.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_types.h"
#include "tests/random_blocks.h"
using namespace tandem;
int main(int argc, char** argv) {
    const auto t = *quant::type_from_name(argv[1]);
    const int rows = atoi(argv[2]), cols = atoi(argv[3]), runs = atoi(argv[4]);
    const auto& k = *cpu::detail::weight_kernels(t);
    const size_t rb = static_cast<size_t>(*quant::row_bytes(t, cols));
    std::vector<uint8_t> w(rb * rows);
    for (int r = 0; r < rows; ++r) tandem::testing::fill_random_blocks(t, cols, 99 + r, w.data() + r * rb);
    std::vector<quant::block_q8_K> a(cols / 256);
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> c(-127, 127);
    for (auto& b : a) { b.d = 0.01f; for (int g = 0; g < 16; ++g) { int s = 0; for (int j = 0; j < 16; ++j) s += b.qs[16 * g + j] = c(rng); b.bsums[g] = s; } }
    std::vector<float> y(rows);
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < runs; ++r) {
        for (int v = 0; v < 2; ++v) {
            auto fn = v == 0 ? k.rows_avx2.fn : k.rows_avx2b.fn;
            if (!fn) continue;
            auto t0 = std::chrono::steady_clock::now();
            for (int r0 = 0; r0 < rows; r0 += 64) fn(cols, w.data() + r0 * rb, rb, 64, a.data(), y.data() + r0);
            double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
            if (us < best[v]) best[v] = us;
        }
    }
    printf("%s %dx%d: avx2 %.1f us, avx2b %.1f us (%.2fx)\n", argv[1], rows, cols, best[0], best[1], best[0] / best[1]);
}
