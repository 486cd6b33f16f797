// The sgemm path of blas_matmul.h.
#include "kernels_cpu/blas_matmul.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "kernels_cpu/attention_tiled.h"  // the F16 widening kernels
#include "kernels_cpu/vec_dot.h"         // activation_quantizer
#include "runtime/common/error.h"

#if defined(TANDEM_HAVE_BLAS)
#include <cblas.h>
#endif

#if defined(TANDEM_HAVE_BLAS)
// OpenBLAS starts a worker thread per core but the caller's when the
// library loads, and each spins (sched_yield) for about 2^28 cycles,
// ~0.1 s, before it sleeps. Tandem never gives them work (see the
// header), yet on a 2-core machine the spinning worker took one core from
// the pool's two for the first ~0.1 s of every process: the first pp32
// runs of the tiny model ran ~2,000 t/s instead of ~11,000. Setting
// OPENBLAS_NUM_THREADS from here is too late (the library reads it when
// it loads, before this executable's initializers), so this stops the
// workers: one thread first, then the shutdown OpenBLAS uses around
// fork(); a later sgemm at one thread starts none again. The shutdown is
// weak: a build of OpenBLAS without it (OpenMP) keeps its own threads.
extern "C" __attribute__((weak)) void blas_thread_shutdown_(void);
namespace {
__attribute__((constructor)) void stop_openblas_workers() {
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_) blas_thread_shutdown_();
}
}  // namespace
#endif

namespace tandem::cpu::detail {
namespace {

#if defined(TANDEM_HAVE_BLAS)
// f32 bytes of one widened tile (per thread). Each sgemm call packs the
// whole batch of activations again, so tiles must be large: on a 2-core
// Zen 4 (F16, 512 tokens) 512 KiB tiles ran 27-49 GFLOP/s, 2 MiB 43-53,
// 8 MiB 47-54, the whole matrix 45-52.
constexpr int64_t kTileBytes = 8 << 20;

void widen_bf16(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
        std::memcpy(dst + i, &bits, 4);
    }
}

// OpenBLAS runs single-threaded inside the pool's threads (see the header);
// checked on each call in case something else in the process changed it.
void hold_openblas_to_one_thread() {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}
#endif

}  // namespace

bool blas_available() {
#if defined(TANDEM_HAVE_BLAS)
    return true;
#else
    return false;
#endif
}

int blas_threads() {
#if defined(TANDEM_HAVE_BLAS)
    return openblas_get_num_threads();
#else
    return 0;
#endif
}

int64_t blas_min_tokens(quant::Type w_type) { return w_type == quant::Type::F32 ? 64 : 256; }

bool blas_wanted(quant::Type w_type, int64_t n_tokens) {
    return blas_available() && quant::is_float_weight(w_type) && n_tokens >= blas_min_tokens(w_type);
}

void blas_matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                 ThreadPool& pool, SimdLevel level) {
    TANDEM_CHECK(quant::is_float_weight(w.type), "blas_matmul: only F32, F16 and BF16 weights");
    TANDEM_CHECK(n_tokens >= 0 && w.n_rows >= 0 && w.n_cols > 0, "blas_matmul: bad size");
    TANDEM_CHECK(ldx >= w.n_cols && ldy >= w.n_rows, "blas_matmul: ldx/ldy shorter than a row");
    TANDEM_CHECK(w.row_stride_bytes >= *quant::row_bytes(w.type, w.n_cols), "blas_matmul: weight row stride shorter than a row");
    if (n_tokens == 0 || w.n_rows == 0) return;
#if defined(TANDEM_HAVE_BLAS)
    hold_openblas_to_one_thread();
    const int64_t k = w.n_cols;
    const bool is_f32 = w.type == quant::Type::F32;
    TANDEM_CHECK(!is_f32 || w.row_stride_bytes % sizeof(float) == 0, "blas_matmul: F32 row stride not whole floats");
    // Rows per tile: a multiple of 16, several tiles per thread so uneven
    // threads balance; F32 tiles need no buffer and are just row ranges.
    const int64_t per_thread = (w.n_rows + pool.size() - 1) / pool.size();
    int64_t tile = std::max<int64_t>(16, kTileBytes / (k * static_cast<int64_t>(sizeof(float))) / 16 * 16);
    tile = std::min(tile, std::max<int64_t>(16, (per_thread + 15) / 16 * 16));
    if (is_f32) tile = std::max<int64_t>(16, (per_thread / 2 + 15) / 16 * 16);
    const int64_t n_tiles = (w.n_rows + tile - 1) / tile;
    const size_t tile_floats = is_f32 ? 0 : static_cast<size_t>(tile * k);
    // Scratch: the widened tiles, one per thread; for F16/BF16 then the
    // activations rounded to the weights' 16-bit type (as Tandem's kernels
    // and ggml's CPU backend see them) and widened back to f32, so the two
    // paths multiply the same numbers and differ only in summation order.
    const size_t x_floats = is_f32 ? 0 : static_cast<size_t>(n_tokens * k);
    auto* scratch = static_cast<float*>(pool.scratch(
        (tile_floats * static_cast<size_t>(pool.size()) + x_floats) * sizeof(float) + x_floats * sizeof(uint16_t)));
    const auto widen = w.type == quant::Type::F16 ? tiled_attention_kernels(level).widen : widen_bf16;
    const auto* wbase = static_cast<const unsigned char*>(w.data);
    if (!is_f32) {
        float* xr = scratch + tile_floats * static_cast<size_t>(pool.size());
        auto* x16 = reinterpret_cast<uint16_t*>(xr + x_floats);
        const quant::QuantizeRowFn round = activation_quantizer(quant::dot_type(w.type), level);
        pool.parallel_for(n_tokens, 1, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                round(x + t * ldx, x16 + t * k, k);
                widen(x16 + t * k, xr + t * k, k);
            }
        });
        x = xr;
        ldx = k;
    }
    std::atomic<int64_t> next{0};
    pool.run([&](int thread, int) {
        float* buf = scratch + static_cast<size_t>(thread) * tile_floats;
        for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < n_tiles;
             t = next.fetch_add(1, std::memory_order_relaxed)) {
            const int64_t r0 = t * tile, nr = std::min(tile, w.n_rows - r0);
            const float* b = nullptr;
            int64_t ldb = k;
            if (is_f32) {
                b = reinterpret_cast<const float*>(wbase + static_cast<size_t>(r0) * w.row_stride_bytes);
                ldb = static_cast<int64_t>(w.row_stride_bytes / sizeof(float));
            } else {
                for (int64_t r = 0; r < nr; ++r) {
                    widen(reinterpret_cast<const uint16_t*>(wbase + static_cast<size_t>(r0 + r) * w.row_stride_bytes),
                          buf + r * k, k);
                }
                b = buf;
            }
            // Y[:, r0:r0+nr] = X (n_tokens x k) times B (nr x k) transposed.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_tokens), static_cast<int>(nr),
                        static_cast<int>(k), 1.0f, x, static_cast<int>(ldx), b, static_cast<int>(ldb), 0.0f, y + r0,
                        static_cast<int>(ldy));
        }
    });
#else
    (void)x, (void)y, (void)pool, (void)level;
    throw Error("blas_matmul: this build does not link OpenBLAS (TANDEM_BLAS)");
#endif
}

}  // namespace tandem::cpu::detail
