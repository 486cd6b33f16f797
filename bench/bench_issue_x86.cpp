// How many 256-bit integer ops the core issues a cycle in the mixes the
// AVX2 panel kernels are made of (avx2/gemm_panel_*.cpp): vpmaddubsw alone,
// beside vpaddw that does not read its result, and feeding a vpaddw chain
// as the kernels accumulate their pair sums. The counter ops_per_cycle
// divides by the clock measured with a chain of dependent scalar adds (one
// a cycle). What each mix shows on the machine at hand is the bound a
// kernel of that shape can reach there; on Zen 4 (docs/performance.md,
// "Why IQ4_NL prefill at AVX2 stays near 1.5x") vpmaddubsw issues 2 a
// cycle and vpaddw 4, an independent mix 4, and a vpmaddubsw -> vpaddw
// chain only about 3.2 (1.6 vpmaddubsw); with two vpmaddubsw per dependent
// add, 3.0: 2.0 vpmaddubsw again.
#include <benchmark/benchmark.h>

#if defined(__x86_64__)
#include <chrono>
#include <cstdint>

namespace {

constexpr int64_t kLoops = 1 << 20;

// Scalar cycles per second: a chain of dependent adds, one a cycle.
double clock_hz() {
    static const double hz = [] {
        const int64_t n = 200'000'000;
        const auto t0 = std::chrono::steady_clock::now();
        int64_t x = 0;
        for (int64_t i = 0; i < n; ++i) asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
        return 4.0 * static_cast<double>(n) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }();
    return hz;
}

#define TANDEM_M(d) "vpmaddubsw %%ymm0, %%ymm1, %%ymm" #d "\n\t"
#define TANDEM_A(d) "vpaddw %%ymm0, %%ymm1, %%ymm" #d "\n\t"
#define TANDEM_MA(p, acc) TANDEM_M(p) "vpaddw %%ymm" #p ", %%ymm" #acc ", %%ymm" #acc "\n\t"
#define TANDEM_LOOP(body)                                                                                       \
    asm volatile("mov %0, %%rcx\n1:\n\t" body "dec %%rcx\n\tjnz 1b" ::"r"(kLoops)                              \
                 : "rcx", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
                   "xmm13", "xmm14", "xmm15", "cc")

template <class Loop>
void run_mix(benchmark::State& state, int ops_per_loop, Loop loop) {
    if (!__builtin_cpu_supports("avx2")) {
        state.SkipWithError("no AVX2 on this CPU");
        return;
    }
    const double hz = clock_hz();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) loop();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double ops = static_cast<double>(state.iterations()) * static_cast<double>(kLoops) * ops_per_loop;
    state.counters["ops_per_cycle"] = ops / (s * hz);
    state.SetItemsProcessed(static_cast<int64_t>(ops));
}

void BM_issue_maddubs(benchmark::State& state) {
    run_mix(state, 8, [] { TANDEM_LOOP(TANDEM_M(2) TANDEM_M(3) TANDEM_M(4) TANDEM_M(5) TANDEM_M(6) TANDEM_M(7) TANDEM_M(8) TANDEM_M(9)); });
}
void BM_issue_paddw(benchmark::State& state) {
    run_mix(state, 8, [] { TANDEM_LOOP(TANDEM_A(2) TANDEM_A(3) TANDEM_A(4) TANDEM_A(5) TANDEM_A(6) TANDEM_A(7) TANDEM_A(8) TANDEM_A(9)); });
}
void BM_issue_maddubs_beside_paddw(benchmark::State& state) {
    run_mix(state, 8, [] { TANDEM_LOOP(TANDEM_M(2) TANDEM_A(3) TANDEM_M(4) TANDEM_A(5) TANDEM_M(6) TANDEM_A(7) TANDEM_M(8) TANDEM_A(9)); });
}
// One dependent add per vpmaddubsw (the panels' int16 chains).
void BM_issue_maddubs_into_paddw(benchmark::State& state) {
    run_mix(state, 16, [] {
        TANDEM_LOOP(TANDEM_MA(2, 10) TANDEM_MA(3, 11) TANDEM_MA(4, 12) TANDEM_MA(5, 13) TANDEM_MA(6, 14) TANDEM_MA(7, 15)
                        TANDEM_MA(8, 10) TANDEM_MA(9, 11));
    });
}
// One dependent add per two vpmaddubsw.
void BM_issue_two_maddubs_per_paddw(benchmark::State& state) {
    run_mix(state, 12, [] {
        TANDEM_LOOP(TANDEM_M(2) TANDEM_MA(3, 12) TANDEM_M(4) TANDEM_MA(5, 13) TANDEM_M(6) TANDEM_MA(7, 14) TANDEM_M(8)
                        TANDEM_MA(9, 15));
    });
}

}  // namespace

BENCHMARK(BM_issue_maddubs);
BENCHMARK(BM_issue_paddw);
BENCHMARK(BM_issue_maddubs_beside_paddw);
BENCHMARK(BM_issue_maddubs_into_paddw);
BENCHMARK(BM_issue_two_maddubs_per_paddw);
#endif
