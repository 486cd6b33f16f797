// matmul(): activation quantization, the kernel tables, and the split of
// the work over the pool.
//
// Work decomposition. The activations are quantized once into the pool's
// scratch buffer (in parallel over tokens when there are many; for batches
// with F16/BF16 weights they are rounded to 16 bits but kept as f32, see
// WideDot in vec_dot.h). The output is then cut into items of (a block of
// weight rows) x (a block of tokens), handed out through an atomic counter
// so a thread that was descheduled or is slower does not hold the others
// up. A single token (decode) instead gives each thread one contiguous run
// of 16-row items and lets threads that finish steal from the others' ends
// (RangeStealer): its weights come from DRAM, where each thread reading
// one stream beat items handed out in turn (Q4_K 2048x2048 from DRAM, two
// threads: 66.6 against 72.3 us; 512x2048 18.9 against 23.7). Inside an
// item the kernel is called for one weight row and up to kMaxTileTokens
// tokens at a time, so each unpacked weight block is reused
// across that many tokens from registers; token groups are the outer loop
// so the group's activation rows stay in L1 while the item's weight rows
// stream from L2, and rows too wide for that are split into column chunks.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <cstdlib>
#include <array>
#include <atomic>
#include <string>

#include "kernels_cpu/matmul.h"
#include "kernels_cpu/blas_matmul.h"
#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/kernel_table.h"
#include "kernels_cpu/range_stealer.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/common/error.h"

#if defined(__x86_64__)
#include <xmmintrin.h>  // _mm_prefetch
#endif

namespace tandem::cpu {
namespace detail {
namespace {

struct ActQuantizer {
    quant::Type a_type;
    quant::QuantizeRowFn avx2;  // also used at Avx512: the quantizer is not the bottleneck
};
constexpr std::array kActQuantizers = {
    ActQuantizer{quant::Type::Q8_0, TANDEM_X86(quantize_row_q8_0_avx2)},
    ActQuantizer{quant::Type::Q8_1, TANDEM_X86(quantize_row_q8_1_avx2)},
    ActQuantizer{quant::Type::Q8_K, TANDEM_X86(quantize_row_q8_K_avx2)},
    ActQuantizer{quant::Type::F16, TANDEM_X86(quantize_row_f16_avx2)},
    ActQuantizer{quant::Type::BF16, TANDEM_X86(quantize_row_bf16_avx2)},
};

}  // namespace

quant::QuantizeRowFn activation_quantizer(quant::Type a_type, SimdLevel level) {
    if (level != SimdLevel::Scalar) {
        TANDEM_CHECK(simd_level_supported(level), "quantizer requested at a SIMD level this CPU lacks");
        for (const ActQuantizer& q : kActQuantizers) {
            if (q.a_type == a_type && q.avx2 != nullptr) return q.avx2;
        }
    }
    return scalar_activation_quantizer(a_type);
}

}  // namespace detail

quant::Type activation_type(quant::Type weight_type) {
    if (detail::weight_kernels(weight_type) == nullptr) {
        throw Error("no CPU matmul kernel for weight type " + std::string(quant::traits(weight_type).name));
    }
    return quant::dot_type(weight_type);
}

float vec_dot(quant::Type w_type, const void* w_row, const void* a_row, int64_t n, SimdLevel level) {
    const auto bytes = quant::row_bytes(w_type, n);
    TANDEM_CHECK(bytes.has_value(), "vec_dot: row length not a multiple of the block size");
    float out = 0.0f;
    detail::dot_kernel(w_type, level)(n, w_row, a_row, 0, 1, &out, 0);
    return out;
}

namespace {

// Decode items are 16 rows, taken in contiguous chunks of up to
// kDecodeChunkItems through a RangeStealer (one weight stream per thread).
constexpr int64_t kDecodeChunkItems = 4;

// Rows per work item: 16 for a single token (see above) and for large
// batches; for small batches small enough that the rows of an item stay in
// L2 while the token groups pass over them, and that every thread gets
// several items to balance with. A multiple of 16 so that (with a 64-byte
// aligned Y) two threads never write one cache line.
int64_t rows_per_item(int64_t n_rows, int64_t n_tokens, int n_threads, bool decode = false) {
    if (n_tokens > detail::kMaxTileTokens || n_tokens == 1 || decode) return 16;
    const int64_t target = n_rows / (static_cast<int64_t>(n_threads) * 8);
    return std::clamp<int64_t>(target / 16 * 16, 16, 256);
}

constexpr int64_t kTokensPerItem = 64;  // quantized activations of a token block stay in L2
// Up to this many activation elements are quantized on the calling thread.
constexpr int64_t kInlineQuantizeElems = 32 * 1024;

constexpr int64_t kPrefetchRowsAhead = 8;
// Asks for bytes [p, p + n) in L2 (a hint: no effect off x86).
void prefetch_l2(const unsigned char* p, size_t n) {
#if defined(__x86_64__)
    for (size_t o = 0; o < n; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T1);
#else
    (void)p, (void)n;
#endif
}

// Rows [r0, r1) of w against one activation row through a decode-rows
// kernel, kDecodeRows rows a pass; y[r] for each row r.
void decode_rows_range(const WeightView& w, const detail::DecodeRows& rows, int64_t r0, int64_t r1, const void* act,
                       float* y) {
    const auto* wbase = static_cast<const unsigned char*>(w.data);
    for (int64_t r = r0; r < r1; r += detail::kDecodeRows) {
        const int nr = static_cast<int>(std::min<int64_t>(detail::kDecodeRows, r1 - r));
        rows.fn(w.n_cols, wbase + static_cast<size_t>(r) * w.row_stride_bytes, w.row_stride_bytes, nr, act, y + r);
    }
}

// The same for nt tokens of a small batch (token t's activation at act +
// t * a_stride, its outputs at y + t * ldy) through the several-tokens
// kernels, tokens [0, n_batch) in the order of the type's batch form
// (rows.multi_batch), the rest in the single-token order (rows.multi).
void decode_rows_tokens(const WeightView& w, const detail::DecodeRows& rows, int64_t r0, int64_t r1,
                        const unsigned char* act, size_t a_stride, int nt, int n_batch, float* y, int64_t ldy) {
    const auto* wbase = static_cast<const unsigned char*>(w.data);
    // The kernels take up to kMaxDecodeTokens tokens; a larger small batch
    // (a speculative verification) goes in chunks over the same rows,
    // which are in L1 by then.
    const auto run = [&](detail::DecodeRowsMultiFn fn, const unsigned char* wr, int nr, int t0, int t1, float* yr) {
        for (int t = t0; t < t1; t += detail::kMaxDecodeTokens) {
            const int n = std::min(detail::kMaxDecodeTokens, t1 - t);
            fn(w.n_cols, wr, w.row_stride_bytes, nr, act + static_cast<size_t>(t) * a_stride, a_stride, n, yr + t * ldy, ldy);
        }
    };
    for (int64_t r = r0; r < r1; r += detail::kDecodeRows) {
        const int nr = static_cast<int>(std::min<int64_t>(detail::kDecodeRows, r1 - r));
        const unsigned char* wr = wbase + static_cast<size_t>(r) * w.row_stride_bytes;
        if (n_batch > 0) run(rows.multi_batch, wr, nr, 0, n_batch, y + r);
        if (n_batch < nt) run(rows.multi, wr, nr, n_batch, nt, y + r);
    }
}

}  // namespace

namespace {

// Panels of 16 rows (kernel_table.h) handed out through an atomic counter;
// each thread unpacks into its own buffer.
using detail::PanelGemm;
using detail::PanelKernel;

// AVX-512 VNNI's panel where the level and the CPU have it, else AVX2's
// (at AVX-512 without VNNI too; its AVX-VNNI build where there is one and
// the CPU has it); none at Scalar.
const PanelKernel* find_panel_kernel(quant::Type type, SimdLevel level) {
    const detail::WeightKernels* k = detail::weight_kernels(type);
    if (k == nullptr || level == SimdLevel::Scalar) return nullptr;
    if (level == SimdLevel::Avx512 && detail::avx512_vnni_available()) return k->panel.gemm != nullptr ? &k->panel : nullptr;
    if (k->panel_avxvnni.gemm != nullptr && detail::avx_vnni_available()) return &k->panel_avxvnni;
    return k->panel_avx2.gemm != nullptr ? &k->panel_avx2 : nullptr;
}

void run_panels(const WeightView& w, PanelGemm gemm, size_t buf_bytes, const void* act, size_t a_stride,
                int64_t n_tokens, float* y, int64_t ldy, ThreadPool& pool) {
    const int64_t n_panels = (w.n_rows + detail::kPanelRows - 1) / detail::kPanelRows;
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
        std::unique_ptr<std::byte, decltype(&std::free)> buf(
            static_cast<std::byte*>(std::aligned_alloc(64, (buf_bytes + 63) / 64 * 64)), &std::free);
        TANDEM_CHECK(buf != nullptr, "matmul: out of memory for a weight panel");
        for (int64_t p = next.fetch_add(1, std::memory_order_relaxed); p < n_panels;
             p = next.fetch_add(1, std::memory_order_relaxed)) {
            const int64_t r0 = p * detail::kPanelRows;
            const int64_t nr = std::min(detail::kPanelRows, w.n_rows - r0);
            gemm(static_cast<const unsigned char*>(w.data) + r0 * w.row_stride_bytes, w.row_stride_bytes, nr,
                 w.n_cols, act, a_stride, n_tokens, y + r0, ldy, buf.get());
        }
    });
}

}  // namespace

void matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
            ThreadPool& pool, SimdLevel level, MatmulOrder order) {
    // Prompt batches of float weights through OpenBLAS where the build links
    // it (blas_matmul.h).
    if (order == MatmulOrder::Fastest && detail::blas_wanted(w.type, n_tokens)) {
        return detail::blas_matmul(w, x, ldx, n_tokens, y, ldy, pool, level);
    }
    detail::native_matmul(w, x, ldx, n_tokens, y, ldy, pool, level, order);
}

void detail::native_matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                           ThreadPool& pool, SimdLevel level, MatmulOrder order) {
    const quant::Type a_type = activation_type(w.type);  // throws for a type without CPU kernels
    const auto w_row_bytes = quant::row_bytes(w.type, w.n_cols);
    TANDEM_CHECK(w_row_bytes.has_value() && w.n_cols > 0, "matmul: n_cols not a positive multiple of the block size");
    TANDEM_CHECK(w.row_stride_bytes >= *w_row_bytes, "matmul: weight row stride shorter than a row");
    TANDEM_CHECK(n_tokens >= 0 && w.n_rows >= 0, "matmul: negative size");
    TANDEM_CHECK(ldx >= w.n_cols && ldy >= w.n_rows, "matmul: ldx/ldy shorter than a row");
    if (n_tokens == 0 || w.n_rows == 0) return;
    TANDEM_CHECK(w.data != nullptr && x != nullptr && y != nullptr, "matmul: null pointer");
    const int64_t n = w.n_cols;
    detail::DotFn fn = detail::dot_kernel(w.type, level);
    // Tokens [0, batch_end) of a batch go through the batch form where a
    // type has one (llama.cpp's rows taken four at a time).
    // (None in the single-token order: every token takes the one-row kernel's.)
    const detail::BatchForm batch =
        order == MatmulOrder::Fastest ? detail::batch_form(w.type, level) : detail::BatchForm{};
    const detail::DotFn batch_fn = batch.fn;
    const int64_t batch_end = batch_fn != nullptr && n_tokens >= batch.min_tokens ? n_tokens - n_tokens % batch.group : 0;
    // Activations in the kernel's format, quantized once per token row.
    quant::QuantizeRowFn quantize = nullptr;  // null: F32 weights read X as it is
    size_t a_row_bytes = 0;
    if (a_type != quant::Type::F32) {
        const auto bytes = quant::row_bytes(a_type, n);
        TANDEM_CHECK(bytes.has_value(), "matmul: activation row not a whole number of blocks");
        a_row_bytes = *bytes;
        quantize = detail::activation_quantizer(a_type, level);
    }
    if (n_tokens > 1 && order == MatmulOrder::Fastest) {
        if (const detail::WideDot wide = detail::wide_dot_kernel(w.type, level); wide.fn != nullptr) {
            fn = wide.fn;
            quantize = wide.round_row;
            a_row_bytes = static_cast<size_t>(n) * sizeof(float);
        }
    }

    // Batch rows on AVX-512 VNNI or AVX2 as panel GEMMs (gemm_panel.h): same bits as
    // the row kernels they replace (batch_fn, or fn for Q4_0, whose single-row
    // and batch orders are one), a fraction of the integer work. They take
    // tokens [0, panel_end), four at a time. Unpacking a panel costs about
    // what 16 tokens of its work do, so short batches stay on the row kernels.
    // AVX2's row kernels are slower against a similar unpacking cost: its
    // panels were faster from 8 tokens for every type (Zen 4 at the AVX2
    // level, 4096x4096, 8-24 tokens).
    constexpr int64_t kPanelMinTokens = 32, kPanelMinTokensAvx2 = 8;
    const PanelKernel* panel = find_panel_kernel(w.type, level);
    const int64_t panel_min_tokens =
        level == SimdLevel::Avx512 && detail::avx512_vnni_available() ? kPanelMinTokens : kPanelMinTokensAvx2;
    // Types without a batch form keep their single-row order for every
    // token, so every token can go through the panel; those with one only
    // for the tokens their batch form takes (none in the single-token order).
    const bool has_batch_form = detail::weight_kernels(w.type)->batch.scalar != nullptr;
    const int64_t panel_tokens = panel == nullptr ? 0 : has_batch_form ? batch_end : n_tokens;
    int64_t panel_end = 0;
    if (panel_tokens >= panel_min_tokens) {
        panel_end = panel_tokens - panel_tokens % 4;
    }
    const size_t panel_row_extra =
        panel_end > 0 ? panel->extra_bytes * static_cast<size_t>(n / quant::traits(a_type).block_elems) : 0;

    // Single tokens, and small batches (a serving step: one token per
    // stream), of types with a several-rows decode kernel, which gives each
    // token the bits of the path it replaces: the single-row kernel's, or
    // for tokens [0, batch_end) the batch form's (the batch kernels took
    // them before).
    // Up to three kernel calls' worth of tokens: a speculative verification
    // (16 drafts and the last token) included.
    constexpr int64_t kMaxSmallBatch = 3 * detail::kMaxDecodeTokens;
    const bool small_batch = n_tokens >= 2 && n_tokens <= kMaxSmallBatch && panel_end == 0;
    // Small batches only where the type has a several-tokens kernel
    // (calling the single-token kernel once per token measured slower than
    // the token tiles for Q4_1).
    detail::DecodeRows rows = (n_tokens == 1 || small_batch) && quantize != nullptr
                                  ? detail::decode_rows_kernel(w.type, level, n_tokens > 1)
                                  : detail::DecodeRows{};
    if (n_tokens > 1 && rows.multi == nullptr) rows = {};
    const size_t prepared_bytes = rows.prepare != nullptr ? rows.prepared_bytes(n) : 0;
    // Small batches: token t's prepared row at rows_act + t * rows_stride.
    // Tokens [rows_first, n_tokens) go through the decode-rows kernels:
    // those the single-row kernel takes, and the batch form's too where the
    // type has a several-tokens kernel in its order.
    const int64_t rows_first = n_tokens > 1 && rows.multi_batch != nullptr ? 0 : batch_end;
    const size_t prepared_stride = (prepared_bytes + 63) / 64 * 64;
    const unsigned char* rows_act = nullptr;
    size_t rows_stride = 0;

    const void* act = x;
    size_t a_stride = static_cast<size_t>(ldx) * sizeof(float);
    if (quantize != nullptr) {
        // Rows padded to 64 bytes so each token starts on its own line.
        a_stride = (a_row_bytes + panel_row_extra + 63) / 64 * 64;
        auto* buf = static_cast<unsigned char*>(
            pool.scratch(a_stride * static_cast<size_t>(n_tokens) + prepared_stride * static_cast<size_t>(n_tokens)));
        unsigned char* prepared = buf + a_stride * static_cast<size_t>(n_tokens);
        rows_act = rows.prepare != nullptr ? prepared : buf;
        rows_stride = rows.prepare != nullptr ? prepared_stride : a_stride;
        auto quantize_rows = [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) {
                unsigned char* row = buf + static_cast<size_t>(t) * a_stride;
                quantize(x + t * ldx, row, n);
                // The panel's preparation while the row is in cache.
                if (t < panel_end && panel->prepare != nullptr) panel->prepare(a_type, row, n);
                // Likewise a small batch's decode-rows preparation.
                if (n_tokens > 1 && t >= rows_first && rows.prepare != nullptr) {
                    rows.prepare(row, n, prepared + static_cast<size_t>(t) * prepared_stride);
                }
            }
        };
        // A single row is a few microseconds of work: cheaper inline than
        // a second hand-off to the pool.
        if (n_tokens == 1) {
            quantize_rows(0, 1);
            if (rows.prepare != nullptr) {
                // After the row, at a 64-byte boundary (a_stride is one).
                rows.prepare(buf, n, buf + a_stride);
                buf += a_stride;
            }
        } else if (n_tokens * n <= kInlineQuantizeElems) {
            // A serving step's few rows likewise: a hand-off per matmul
            // (six a layer) cost more than the rows.
            quantize_rows(0, n_tokens);
        } else {
            pool.parallel_for(n_tokens, 1, quantize_rows);
        }
        act = buf;
    }

    // The panel tokens, then the row kernels below take the rest.
    int64_t first_token = 0;
    if (panel_end > 0) {
        run_panels(w, panel->gemm, panel->bytes(w.n_cols), act, a_stride, panel_end, y, ldy, pool);
        first_token = panel_end;
        if (first_token == n_tokens) return;
    }

    // Every token through the decode-rows kernels: items and their split as
    // for a single token.
    const bool decode_all = rows.fn != nullptr && rows_first == 0;
    const int64_t rows_item = rows_per_item(w.n_rows, n_tokens - first_token, pool.size(), decode_all);
    const int64_t row_items = (w.n_rows + rows_item - 1) / rows_item;
    const int64_t tok_items = (n_tokens - first_token + kTokensPerItem - 1) / kTokensPerItem;
    const int64_t n_items = row_items * tok_items;
    const auto* wbase = static_cast<const unsigned char*>(w.data);
    const auto* abase = static_cast<const unsigned char*>(act);

    // Column blocking for batches: when the activation rows of one token
    // group are too big for L1 (f32 activations of float weights, very wide
    // rows), the dot products are split into column chunks that keep the
    // group's activations in L1 while the item's rows pass over them; the
    // partial sums are added in a fixed order, so results do not depend on
    // the thread count.
    const quant::TypeTraits& wt = quant::traits(w.type);
    const double a_bytes_per_elem = static_cast<double>(quantize ? a_row_bytes : n * sizeof(float)) / static_cast<double>(n);
    int64_t k_chunk = n;
    // Measured on Zen 4 (32 KiB L1D): a token group that fits L1 (Q8_K rows
    // of 4096 columns, 19 KiB) runs best unsplit; f32 rows (64 KiB per group
    // at 4096 columns) best in chunks of about 16 KiB.
    constexpr double kL1Bytes = 32 * 1024;
    constexpr double kChunkBytes = 16 * 1024;
    const double group_bytes = detail::kMaxTileTokens * a_bytes_per_elem * static_cast<double>(n);
    // Types in llama.cpp's float order keep one accumulation chain per
    // output, which column chunks would split.
    if (n_tokens > 1 && group_bytes > kL1Bytes && !detail::follows_llama_order(w.type)) {
        const auto fit = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / (detail::kMaxTileTokens * a_bytes_per_elem)));
        const int64_t step = std::max<int64_t>(wt.block_elems, 64);  // whole blocks, whole SIMD vectors
        // Equal chunks rather than full ones plus a sliver.
        const int64_t chunks = (n + fit - 1) / fit;
        k_chunk = std::min(n, ((n + chunks - 1) / chunks + step - 1) / step * step);
    }

    // A few tokens through the row kernels read each row once, one row at
    // a time, which the out-of-order window cannot cover from DRAM: each
    // row is prefetched into L2 kPrefetchRowsAhead rows ahead. 2048x2048
    // from DRAM at the AVX2 level, one thread: Q6_K one token (no rows
    // kernel there) 363-391 -> 230-268 us, four tokens 553-601 -> 417-445;
    // Q4_K four tokens 610-653 -> 403-426 (4, 16 rows ahead and T0 about
    // the same or slower).
    const bool prefetch_rows = n_tokens - first_token <= detail::kMaxTileTokens && k_chunk == n;
    auto do_item = [&](int64_t item) {
        // Consecutive items share a token block, so its activations are
        // reused (from L2/L3) by whichever threads take them.
        const int64_t tb = item / row_items;
        const int64_t rb = item % row_items;
        const int64_t r0 = rb * rows_item, r1 = std::min(w.n_rows, r0 + rows_item);
        const int64_t t0 = first_token + tb * kTokensPerItem, t1 = std::min(n_tokens, t0 + kTokensPerItem);
        for (int64_t k0 = 0; k0 < n; k0 += k_chunk) {
            const int64_t kn = std::min(k_chunk, n - k0);
            const size_t w_off = static_cast<size_t>(k0 / wt.block_elems) * wt.block_bytes;
            const auto a_off = static_cast<size_t>(static_cast<double>(k0) * a_bytes_per_elem);
            for (int64_t t = t0; t < t1; t += detail::kMaxTileTokens) {
                const int nt = static_cast<int>(std::min<int64_t>(detail::kMaxTileTokens, t1 - t));
                // Tiles are 4 tokens from a multiple of 4 and batch_end is one
                // too, so no tile straddles it.
                const detail::DotFn tile_fn = t < batch_end ? batch_fn : fn;
                const unsigned char* a_t = abase + static_cast<size_t>(t) * a_stride + a_off;
                if (nt == 1 && n_tokens == 1 && rows.fn != nullptr && kn == n) {
                    decode_rows_range(w, rows, r0, r1, a_t, y + t * ldy);
                    continue;
                }
                if (n_tokens > 1 && t >= rows_first && rows.fn != nullptr && kn == n) {
                    // The rest of the item's tokens at once (t1 - t <= kMaxSmallBatch).
                    decode_rows_tokens(w, rows, r0, r1, rows_act + static_cast<size_t>(t) * rows_stride, rows_stride,
                                       static_cast<int>(t1 - t), static_cast<int>(std::max<int64_t>(0, batch_end - t)),
                                       y + t * ldy, ldy);
                    break;
                }
                for (int64_t r = r0; r < r1; ++r) {
                    const unsigned char* w_r = wbase + static_cast<size_t>(r) * w.row_stride_bytes + w_off;
                    if (prefetch_rows && r + kPrefetchRowsAhead < w.n_rows) {
                        prefetch_l2(w_r + kPrefetchRowsAhead * w.row_stride_bytes, *w_row_bytes);
                    }
                    float* y_tr = y + t * ldy + r;
                    if (k0 == 0) {
                        tile_fn(kn, w_r, a_t, a_stride, nt, y_tr, ldy);
                    } else {
                        float part[detail::kMaxTileTokens];
                        tile_fn(kn, w_r, a_t, a_stride, nt, part, 1);
                        for (int i = 0; i < nt; ++i) y_tr[i * ldy] += part[i];
                    }
                }
            }
        }
    };

    if (pool.size() == 1 || n_items == 1) {
        for (int64_t i = 0; i < n_items; ++i) do_item(i);
        return;
    }
    if (n_tokens - first_token == 1 || (decode_all && k_chunk == n)) {
        RangeStealer split(n_items, pool.size());
        pool.run([&](int thread, int) {
            int64_t begin = 0, end = 0;
            while (split.next(thread, kDecodeChunkItems, begin, end)) {
                for (int64_t i = begin; i < end; ++i) do_item(i);
            }
        });
        return;
    }
    std::atomic<int64_t> next{0};
    pool.run([&](int, int) {
        for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n_items;
             i = next.fetch_add(1, std::memory_order_relaxed)) {
            do_item(i);
        }
    });
}

void matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool,
                         SimdLevel level, MatmulOrder order) {
    TANDEM_CHECK(!targets.empty(), "matmul_shared_input: no targets");
    const int64_t n = targets[0].w->n_cols;
    for (const MatmulTarget& t : targets) {
        TANDEM_CHECK(t.w != nullptr && t.y != nullptr && t.w->n_cols == n, "matmul_shared_input: targets of different widths");
        TANDEM_CHECK(t.x != nullptr || x != nullptr, "matmul_shared_input: a target without an input");
    }
    const auto input = [&](const MatmulTarget& t) { return t.x != nullptr ? t.x : x; };
    const auto separately = [&] {
        for (const MatmulTarget& t : targets) matmul(*t.w, input(t), n, n_tokens, t.y, t.w->n_rows, pool, level, order);
    };
    // The fused path: one token, several threads, one activation type.
    const quant::Type first_a = quant::dot_type(targets[0].w->type);
    bool fusable = n_tokens == 1 && targets.size() > 1 && pool.size() > 1;
    for (const MatmulTarget& t : targets) {
        fusable = fusable && detail::weight_kernels(t.w->type) != nullptr && quant::dot_type(t.w->type) == first_a &&
                  t.w->n_rows > 0 && t.w->data != nullptr;
    }
    // Up to 32: a decode step's gate and up products of 16 experts.
    struct Part {
        const WeightView* w;
        float* y;
        detail::DotFn fn;
        detail::DecodeRows rows;
        size_t src;       // index of its input among the distinct inputs
        const void* act;  // the row this target's kernel reads
        int64_t rows_item, first_item;
        size_t w_row_bytes;
    };
    std::array<Part, 32> parts{};
    if (!fusable || targets.size() > parts.size()) return separately();

    // The distinct inputs, each quantized once.
    std::array<const float*, 32> srcs{};
    size_t n_srcs = 0;
    quant::QuantizeRowFn quantize = nullptr;
    size_t a_row_bytes = 0;
    if (first_a != quant::Type::F32) {
        const auto bytes = quant::row_bytes(first_a, n);
        TANDEM_CHECK(bytes.has_value(), "matmul: activation row not a whole number of blocks");
        a_row_bytes = (*bytes + 63) / 64 * 64;
        quantize = detail::activation_quantizer(first_a, level);
    }
    // Scratch: the quantized rows, then room for a prepared copy per target
    // (only distinct preparations of one input are made: Q4_K's and Q2_K's
    // differ, most sets share one).
    size_t scratch_bytes = 0;
    int64_t n_items = 0;
    for (size_t j = 0; j < targets.size(); ++j) {
        const WeightView& w = *targets[j].w;
        const auto w_row_bytes = quant::row_bytes(w.type, n);
        TANDEM_CHECK(w_row_bytes.has_value() && w.row_stride_bytes >= *w_row_bytes, "matmul: bad weight row stride");
        Part& p = parts[j];
        p.w = &w;
        p.y = targets[j].y;
        p.fn = detail::dot_kernel(w.type, level);
        p.w_row_bytes = *w_row_bytes;
        p.rows = quantize != nullptr ? detail::decode_rows_kernel(w.type, level) : detail::DecodeRows{};
        p.rows_item = rows_per_item(w.n_rows, 1, pool.size());
        p.first_item = n_items;
        n_items += (w.n_rows + p.rows_item - 1) / p.rows_item;
        const float* src = input(targets[j]);
        p.src = static_cast<size_t>(std::find(srcs.begin(), srcs.begin() + n_srcs, src) - srcs.begin());
        if (p.src == n_srcs) srcs[n_srcs++] = src;
        if (p.rows.prepare != nullptr) scratch_bytes += (p.rows.prepared_bytes(n) + 63) / 64 * 64;
    }
    scratch_bytes += n_srcs * a_row_bytes;
    auto* buf = static_cast<unsigned char*>(pool.scratch(scratch_bytes));
    std::array<const void*, 32> acts{};
    for (size_t i = 0; i < n_srcs; ++i) {
        if (quantize != nullptr) quantize(srcs[i], buf + i * a_row_bytes, n);
        acts[i] = quantize != nullptr ? static_cast<const void*>(buf + i * a_row_bytes) : srcs[i];
    }
    size_t offset = n_srcs * a_row_bytes;
    for (size_t j = 0; j < targets.size(); ++j) {
        Part& p = parts[j];
        p.act = acts[p.src];
        if (p.rows.prepare == nullptr) continue;
        const Part* same = std::find_if(parts.data(), &p, [&](const Part& q) {
            return q.rows.prepare == p.rows.prepare && q.src == p.src;
        });
        if (same != &p) {
            p.act = same->act;
            continue;
        }
        p.rows.prepare(static_cast<const unsigned char*>(acts[p.src]), n, buf + offset);
        p.act = buf + offset;
        offset += (p.rows.prepared_bytes(n) + 63) / 64 * 64;
    }

    // The targets' items one after another, split as one range: a thread's
    // chunk may run from the end of one target into the next.
    const size_t n_parts = targets.size();
    RangeStealer split(n_items, pool.size());
    pool.run([&](int thread, int) {
        int64_t begin = 0, end = 0;
        while (split.next(thread, kDecodeChunkItems, begin, end)) {
            for (int64_t item = begin; item < end;) {
                size_t j = 0;
                while (j + 1 < n_parts && item >= parts[j + 1].first_item) ++j;
                const Part& p = parts[j];
                const int64_t part_end = j + 1 < n_parts ? parts[j + 1].first_item : n_items;
                const int64_t last = std::min(end, part_end);
                const int64_t r0 = (item - p.first_item) * p.rows_item;
                const int64_t r1 = std::min(p.w->n_rows, (last - p.first_item) * p.rows_item);
                if (p.rows.fn != nullptr) {
                    decode_rows_range(*p.w, p.rows, r0, r1, p.act, p.y);
                } else {
                    const auto* wbase = static_cast<const unsigned char*>(p.w->data);
                    const size_t stride = p.w->row_stride_bytes;
                    for (int64_t r = r0; r < r1; ++r) {
                        const unsigned char* w_r = wbase + static_cast<size_t>(r) * stride;
                        if (r + kPrefetchRowsAhead < p.w->n_rows) prefetch_l2(w_r + kPrefetchRowsAhead * stride, p.w_row_bytes);
                        p.fn(n, w_r, p.act, a_row_bytes, 1, p.y + r, 1);
                    }
                }
                item = last;
            }
        }
    });
}

}  // namespace tandem::cpu
