// IQ4_NL one-token decode, one thread: Tandem's AVX2 decode rows (prepare +
// rows passes of 16) against llama.cpp 0.3.36's repacked gemv
// (ggml_gemv_iq4_nl_8x8_q8_0 over block_iq4_nlx8) on the same blocks and
// the same Q8_0 activation (ggml's quantize_row_q8_0). Min of many runs,
// taking turns. Checks the outputs are bit-equal.
//
// Build against a Tandem build (its static libraries) and run with the
// llama.cpp build's libggml-cpu.so (README step 1; the AVX2 build for the
// AVX2 level), one thread:
//   B=build; g++ -std=c++20 -O2 -march=native -I. -o /tmp/speed scripts/llamacpp/iq4_decode_speed.cpp \
//     $B/kernels_cpu/libtandem_kernels_cpu.a $B/runtime/libtandem_runtime.a -lfmt -lhwloc -lopenblas -ldl -lpthread
//   GGML_CPU_LIB=$L/build/bin/libggml-cpu.so /tmp/speed ROWS COLS COPIES RUNS

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels_cpu/vec_dot.h"
#include "runtime/quant/quant_blocks.h"
#include "tests/random_blocks.h"

using namespace tandem;
using GemvFn = void (*)(int, float*, size_t, const void*, const void*, int, int);
using QuantFn = void (*)(const float*, void*, int64_t);

struct Iq4x8 {
    uint16_t d[8];
    uint8_t qs[128];
};

static void repack(const quant::block_iq4_nl* src, int64_t rows, int64_t nb, Iq4x8* dst) {
    for (int64_t b = 0; b < rows; b += 8) {
        for (int64_t x = 0; x < nb; ++x) {
            Iq4x8& o = *dst++;
            for (int i = 0; i < 8; ++i) std::memcpy(&o.d[i], &src[(b + i) * nb + x].d, 2);
            for (int i = 0; i < 16; ++i) std::memcpy(o.qs + 8 * i, src[(b + i % 8) * nb + x].qs + (i / 8) * 8, 8);
        }
    }
}

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
    const int64_t rows = argc > 1 ? atoll(argv[1]) : 8192, n = argc > 2 ? atoll(argv[2]) : 2048;
    const int copies = argc > 3 ? atoi(argv[3]) : 1;
    const int reps = argc > 4 ? atoi(argv[4]) : 50;
    const char* lib = std::getenv("GGML_CPU_LIB");  // libggml-cpu.so of the llama.cpp build
    void* h = dlopen(lib != nullptr ? lib : "libggml-cpu.so", RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    ((void (*)())dlsym(h, "ggml_cpu_init"))();
    auto gemv = (GemvFn)dlsym(h, "_ZN4ggml3cpu6repack4gemvI12block_iq4_nlLl8ELl8EL9ggml_type8EEEviPfmPKvS7_ii");
    auto q8 = (QuantFn)dlsym(h, "quantize_row_q8_0");
    if (!gemv || !q8) { fprintf(stderr, "symbols\n"); return 1; }

    const int64_t nb = n / 32;
    const size_t rb = nb * sizeof(quant::block_iq4_nl);
    std::vector<std::vector<uint8_t>> w(copies);
    std::vector<std::vector<Iq4x8>> wr(copies);
    for (int c = 0; c < copies; ++c) {
        w[c].resize(rb * rows);
        // 64 distinct random rows repeated (fill is slow)
        for (int64_t r = 0; r < rows; ++r) {
            if (r < 64) testing::fill_random_blocks(quant::Type::IQ4_NL, n, 1000 * c + r, w[c].data() + r * rb, 0.05f);
            else std::memcpy(w[c].data() + r * rb, w[c].data() + (r % 64) * rb, rb);
        }
        wr[c].resize(rows / 8 * nb);
        repack(reinterpret_cast<const quant::block_iq4_nl*>(w[c].data()), rows, nb, wr[c].data());
    }
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.f, 1.f);
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    std::vector<quant::block_q8_0> a(nb);
    q8(x.data(), a.data(), n);
    const size_t pb = cpu::detail::iq4_nl_rows_avx2_prepared_bytes(n);
    auto* prep = static_cast<uint8_t*>(std::aligned_alloc(64, (pb + 63) / 64 * 64));
    std::vector<float> y1(rows), y2(rows);
    double best_t = 1e9, best_g = 1e9;
    for (int it = 0; it < reps; ++it) {
        for (int c = 0; c < copies; ++c) {
            double t0 = now();
            cpu::detail::prepare_iq4_nl_rows_avx2(a.data(), n, prep);
            for (int64_t r0 = 0; r0 < rows; r0 += 16) {
                cpu::detail::dot_iq4_nl_rows_avx2(n, w[c].data() + r0 * rb, rb, static_cast<int>(std::min<int64_t>(16, rows - r0)), prep,
                                                  y1.data() + r0);
            }
            double t1 = now();
            best_t = std::min(best_t, t1 - t0);
        }
        for (int c = 0; c < copies; ++c) {
            double t0 = now();
            gemv(static_cast<int>(n), y2.data(), 0, wr[c].data(), a.data(), 1, static_cast<int>(rows));
            double t1 = now();
            best_g = std::min(best_g, t1 - t0);
        }
    }
    int diff = 0;
    for (int64_t r = 0; r < rows; ++r) diff += std::memcmp(&y1[r], &y2[r], 4) != 0;
    const double gb = rb * rows * 1e-9;
    printf("IQ4_NL %lldx%lld copies %d: tandem %.1f us (%.2f GB/s)  ggml %.1f us (%.2f GB/s)  ratio %.3f  bit-diff rows %d\n",
           (long long)rows, (long long)n, copies, best_t * 1e6, gb / best_t, best_g * 1e6, gb / best_g, best_g / best_t, diff);
    return 0;
}
