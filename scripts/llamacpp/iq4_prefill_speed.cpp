// Prefill, one thread: Tandem's cpu::matmul (AVX2 level, Fastest order:
// the panels) against llama.cpp 0.3.36 on the same blocks, both including
// the activation quantization:
//   IQ4_NL: the repacked gemm (ggml_quantize_mat_q8_0 4x8 + ggml_gemm_iq4_nl_8x8_q8_0)
//   IQ4_XS: quantize_row_q8_K + ggml_vec_dot_iq4_xs_q8_K over 16x16 tiles
//           (ggml_compute_forward_mul_mat's non-repacked loop), and the
//           ggml_mul_mat op itself (one thread), which is what llama-bench
//           runs: in 0.3.36 its tiled GEMM (ggml-cpu/tiled/,
//           tiled_run_microtile_avx2), about 2.7x the vec_dot loop
//           (perf of llama-bench pp512: 71% of the samples there), so the
//           vec_dot ratio overstates Tandem's lead several times over.
// Min of runs, taking turns; prints max |diff| relative to the output scale.
//
// Build against a Tandem build (its static libraries) and run with the
// llama.cpp build's libggml-cpu.so (README step 1; the AVX2 build for the
// AVX2 level), one thread:
//   B=build; g++ -std=c++20 -O2 -march=native -I. -I$L/ggml/include -o /tmp/speed scripts/llamacpp/iq4_prefill_speed.cpp \
//     $B/kernels_cpu/libtandem_kernels_cpu.a $B/runtime/libtandem_runtime.a -lfmt -lhwloc -lopenblas -ldl -lpthread \
//     -L$L/build/bin -Wl,-rpath,$L/build/bin -lggml-base -lggml-cpu
//   GGML_CPU_LIB=$L/build/bin/libggml-cpu.so /tmp/speed IQ4_NL|IQ4_XS ROWS COLS TOKENS RUNS [tandem]

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/thread_pool.h"
#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_types.h"
#include "tests/random_blocks.h"

using namespace tandem;
using GemmFn = void (*)(int, float*, size_t, const void*, const void*, int, int);
using QmatFn = void (*)(const float*, void*, int64_t, int64_t);
using QuantFn = void (*)(const float*, void*, int64_t);
using VecDotFn = void (*)(int, float*, size_t, const void*, size_t, const void*, size_t, int);

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
static double now() { timespec ts; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }

int main(int argc, char** argv) {
    const std::string type = argc > 1 ? argv[1] : "IQ4_NL";
    const int64_t rows = argc > 2 ? atoll(argv[2]) : 2048, n = argc > 3 ? atoll(argv[3]) : 2048;
    const int64_t tokens = argc > 4 ? atoll(argv[4]) : 256;
    const int reps = argc > 5 ? atoi(argv[5]) : 5;
    const bool only_tandem = argc > 6 && std::string(argv[6]) == "tandem";
    const char* lib = std::getenv("GGML_CPU_LIB");  // libggml-cpu.so of the llama.cpp build
    void* h = dlopen(lib != nullptr ? lib : "libggml-cpu.so", RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    ((void (*)())dlsym(h, "ggml_cpu_init"))();
    const bool nl = type == "IQ4_NL";
    const quant::Type t = nl ? quant::Type::IQ4_NL : quant::Type::IQ4_XS;
    const size_t rb = *quant::row_bytes(t, n);
    std::vector<uint8_t> w(rb * rows);
    for (int64_t r = 0; r < rows; ++r) {
        if (r < 64) testing::fill_random_blocks(t, n, 1000 + r, w.data() + r * rb, 0.05f);
        else std::memcpy(w.data() + r * rb, w.data() + (r % 64) * rb, rb);
    }
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.f, 1.f);
    std::vector<float> x(n * tokens);
    for (float& v : x) v = dist(rng);
    std::vector<float> y1(rows * tokens), y2(rows * tokens);
    cpu::ThreadPool pool(1, false);
    const cpu::WeightView view{t, w.data(), rows, n, rb};

    std::vector<Iq4x8> wr;
    const size_t arow = nl ? *quant::row_bytes(quant::Type::Q8_0, n) : *quant::row_bytes(quant::Type::Q8_K, n);
    std::vector<uint8_t> act(arow * tokens);
    auto gemm = (GemmFn)dlsym(h, "ggml_gemm_iq4_nl_8x8_q8_0");
    auto qmat = (QmatFn)dlsym(h, "_Z19ggml_quantize_mat_tILl8EL9ggml_type8EEvPKfPvll");
    auto q8k = (QuantFn)dlsym(h, "quantize_row_q8_K");
    auto vdot = (VecDotFn)dlsym(h, "ggml_vec_dot_iq4_xs_q8_K");
    if (!gemm || !qmat || !q8k || !vdot) { fprintf(stderr, "symbols\n"); return 1; }
    if (nl) {
        wr.resize(rows / 8 * (n / 32));
        repack(reinterpret_cast<const quant::block_iq4_nl*>(w.data()), rows, n / 32, wr.data());
    }
    auto run_ggml = [&] {
        if (nl) {
            for (int64_t i = 0; i < tokens; i += 4) qmat(x.data() + i * n, act.data() + i * arow, 4, n);
            gemm(static_cast<int>(n), y2.data(), rows, wr.data(), act.data(), static_cast<int>(tokens), static_cast<int>(rows));
        } else {
            for (int64_t i = 0; i < tokens; ++i) q8k(x.data() + i * n, act.data() + i * arow, n);
            for (int64_t t0 = 0; t0 < tokens; t0 += 16)
                for (int64_t r0 = 0; r0 < rows; r0 += 16)
                    for (int64_t tt = t0; tt < std::min(tokens, t0 + 16); ++tt)
                        for (int64_t r = r0; r < std::min(rows, r0 + 16); ++r)
                            vdot(static_cast<int>(n), &y2[tt * rows + r], 0, w.data() + r * rb, 0, act.data() + tt * arow, 0, 1);
        }
    };
    // The mul_mat op as a graph (IQ4_XS): W [n, rows] x X [n, tokens].
    const size_t op_bytes = rb * rows + (n + rows) * tokens * sizeof(float) + arow * tokens + (size_t{256} << 20);
    ggml_init_params ip{op_bytes, nullptr, false};
    ggml_context* ctx = nl ? nullptr : ggml_init(ip);
    ggml_cgraph* gf = nullptr;
    ggml_tensor* op_y = nullptr;
    if (ctx != nullptr) {
        ggml_tensor* W = ggml_new_tensor_2d(ctx, GGML_TYPE_IQ4_XS, n, rows);
        ggml_tensor* X = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, tokens);
        std::memcpy(W->data, w.data(), rb * rows);
        std::memcpy(X->data, x.data(), x.size() * sizeof(float));
        op_y = ggml_mul_mat(ctx, W, X);
        gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, op_y);
    }
    double best_t = 1e9, best_g = 1e9, best_op = 1e9;
    for (int it = 0; it < reps; ++it) {
        if (gf != nullptr && !only_tandem) {
            const double o0 = now();
            ggml_graph_compute_with_ctx(ctx, gf, 1);
            best_op = std::min(best_op, now() - o0);
        }
        double t0 = now();
        cpu::matmul(view, x.data(), n, tokens, y1.data(), rows, pool, cpu::SimdLevel::Avx2);
        double t1 = now();
        best_t = std::min(best_t, t1 - t0);
        if (only_tandem) continue;
        t0 = now();
        run_ggml();
        t1 = now();
        best_g = std::min(best_g, t1 - t0);
    }
    if (only_tandem) {
        printf("%s %lldx%lld x %lld tokens: tandem %.2f ms\n", type.c_str(), (long long)rows, (long long)n, (long long)tokens,
               best_t * 1e3);
        return 0;
    }
    double maxd = 0, maxv = 0;
    int diff = 0;
    for (size_t i = 0; i < y1.size(); ++i) {
        maxd = std::max(maxd, (double)std::fabs(y1[i] - y2[i]));
        maxv = std::max(maxv, (double)std::fabs(y2[i]));
        diff += std::memcmp(&y1[i], &y2[i], 4) != 0;
    }
    printf("%s %lldx%lld x %lld tokens: tandem %.2f ms  ggml %.2f ms  ratio %.3f  (bit-diff %d of %zu, max|d| %.2g of %.2g)\n",
           type.c_str(), (long long)rows, (long long)n, (long long)tokens, best_t * 1e3, best_g * 1e3, best_g / best_t, diff,
           y1.size(), maxd, maxv);
    if (gf != nullptr) {
        double opd = 0;
        const auto* yo = static_cast<const float*>(op_y->data);
        for (size_t i = 0; i < y1.size(); ++i) opd = std::max(opd, (double)std::fabs(y1[i] - yo[i]));
        printf("  ggml_mul_mat op (llama-bench's path) %.2f ms  ratio %.3f  (max|d| %.2g)\n", best_op * 1e3, best_op / best_t, opd);
        ggml_free(ctx);
    }
    return 0;
}
