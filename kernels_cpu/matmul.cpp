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
#include "kernels_cpu/matmul_path.h"
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

namespace {

// Quantized activations: where each token's row is and, for the decode
// rows' small batches, its prepared row.
struct Activations {
    const unsigned char* act = nullptr;  // token t's row at act + t * a_stride
    size_t a_stride = 0;
    const unsigned char* rows_act = nullptr;  // decode rows: token t's at rows_act + t * rows_stride
    size_t rows_stride = 0;
};

// Rows padded to 64 bytes so each token starts on its own line.
size_t act_stride(const detail::MatmulPath& path) { return (path.a_row_bytes + path.panel_row_extra + 63) / 64 * 64; }
size_t prepared_row_stride(const detail::MatmulPath& path, int64_t n) {
    return path.rows.prepare != nullptr ? (path.rows.prepared_bytes(n) + 63) / 64 * 64 : 0;
}
// The bytes prepare_activations writes (0: float weights read X itself).
size_t activation_bytes(const detail::MatmulPath& path, int64_t n_tokens, int64_t n) {
    if (path.quantize == nullptr) return 0;
    return (act_stride(path) + prepared_row_stride(path, n)) * static_cast<size_t>(n_tokens);
}

// The activations as the path's kernels read them: X itself for float
// weights, else each row quantized (and prepared for the panel or the
// decode rows while it is in cache) into buf (activation_bytes of it, a
// multiple of 64 from a 64-byte boundary).
Activations prepare_activations(const detail::MatmulPath& path, const float* x, int64_t ldx, int64_t n_tokens,
                                int64_t n, unsigned char* buf, ThreadPool& pool) {
    Activations a;
    a.act = reinterpret_cast<const unsigned char*>(x);
    a.a_stride = static_cast<size_t>(ldx) * sizeof(float);
    if (path.quantize == nullptr) return a;
    const detail::DecodeRows& rows = path.rows;
    const size_t prepared_stride = prepared_row_stride(path, n);
    const size_t a_stride = act_stride(path);
    unsigned char* prepared = buf + a_stride * static_cast<size_t>(n_tokens);
    a.a_stride = a_stride;
    a.rows_act = rows.prepare != nullptr ? prepared : buf;
    a.rows_stride = rows.prepare != nullptr ? prepared_stride : a_stride;
    auto quantize_rows = [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            unsigned char* row = buf + static_cast<size_t>(t) * a_stride;
            path.quantize(x + t * ldx, row, n);
            // The panel's preparation while the row is in cache.
            if (t < path.panel_end && path.panel->prepare != nullptr) path.panel->prepare(path.a_type, row, n);
            // Likewise a small batch's decode-rows preparation.
            if (n_tokens > 1 && t >= path.rows_first && rows.prepare != nullptr) {
                rows.prepare(row, n, prepared + static_cast<size_t>(t) * prepared_stride);
            }
        }
    };
    // A single row is a few microseconds of work: cheaper inline than a
    // second hand-off to the pool.
    if (n_tokens == 1) {
        quantize_rows(0, 1);
        if (rows.prepare != nullptr) {
            // After the row, at a 64-byte boundary (a_stride is one).
            rows.prepare(buf, n, buf + a_stride);
            buf += a_stride;
        }
    } else if (n_tokens * n <= kInlineQuantizeElems) {
        // A serving step's few rows likewise: a hand-off per matmul (six a
        // layer) cost more than the rows.
        quantize_rows(0, n_tokens);
    } else {
        pool.parallel_for(n_tokens, 1, quantize_rows);
    }
    a.act = buf;
    return a;
}

// Tokens [first_token, n_tokens) through the row kernels and the decode
// rows, in items of (rows) x (tokens) spread over the pool.
void run_row_items(const detail::MatmulPath& path, const WeightView& w, size_t w_row_bytes, const Activations& a,
                   int64_t first_token, int64_t n_tokens, float* y, int64_t ldy, ThreadPool& pool) {
    const int64_t n = w.n_cols;
    const detail::DecodeRows& rows = path.rows;
    const int64_t k_chunk = path.k_chunk;
    const quant::TypeTraits& wt = quant::traits(w.type);
    // Every token through the decode rows: items and their split as for a
    // single token.
    const bool decode_all = path.decode_all();
    const int64_t rows_item = rows_per_item(w.n_rows, n_tokens - first_token, pool.size(), decode_all);
    const int64_t row_items = (w.n_rows + rows_item - 1) / rows_item;
    const int64_t tok_items = (n_tokens - first_token + kTokensPerItem - 1) / kTokensPerItem;
    const int64_t n_items = row_items * tok_items;
    const auto* wbase = static_cast<const unsigned char*>(w.data);
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
            const auto a_off = static_cast<size_t>(static_cast<double>(k0) * path.a_bytes_per_elem);
            for (int64_t t = t0; t < t1; t += detail::kMaxTileTokens) {
                const int nt = static_cast<int>(std::min<int64_t>(detail::kMaxTileTokens, t1 - t));
                // Tiles are 4 tokens from a multiple of 4 and batch_end is one
                // too, so no tile straddles it.
                const detail::DotFn tile_fn = t < path.batch_end ? path.batch_fn : path.fn;
                const unsigned char* a_t = a.act + static_cast<size_t>(t) * a.a_stride + a_off;
                if (nt == 1 && n_tokens == 1 && rows.fn != nullptr && kn == n) {
                    decode_rows_range(w, rows, r0, r1, a_t, y + t * ldy);
                    continue;
                }
                if (n_tokens > 1 && t >= path.rows_first && rows.fn != nullptr && kn == n) {
                    // The rest of the item's tokens at once (t1 - t <= kMaxSmallBatch).
                    decode_rows_tokens(w, rows, r0, r1, a.rows_act + static_cast<size_t>(t) * a.rows_stride,
                                       a.rows_stride, static_cast<int>(t1 - t),
                                       static_cast<int>(std::max<int64_t>(0, path.batch_end - t)), y + t * ldy, ldy);
                    break;
                }
                for (int64_t r = r0; r < r1; ++r) {
                    const unsigned char* w_r = wbase + static_cast<size_t>(r) * w.row_stride_bytes + w_off;
                    if (path.prefetch_rows && r + kPrefetchRowsAhead < w.n_rows) {
                        prefetch_l2(w_r + kPrefetchRowsAhead * w.row_stride_bytes, w_row_bytes);
                    }
                    float* y_tr = y + t * ldy + r;
                    if (k0 == 0) {
                        tile_fn(kn, w_r, a_t, a.a_stride, nt, y_tr, ldy);
                    } else {
                        float part[detail::kMaxTileTokens];
                        tile_fn(kn, w_r, a_t, a.a_stride, nt, part, 1);
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

}  // namespace

namespace {

// matmul()'s argument checks; false: an empty product, nothing to do.
bool check_matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, const float* y, int64_t ldy) {
    (void)activation_type(w.type);  // throws for a type without CPU kernels
    const auto w_row_bytes = quant::row_bytes(w.type, w.n_cols);
    TANDEM_CHECK(w_row_bytes.has_value() && w.n_cols > 0, "matmul: n_cols not a positive multiple of the block size");
    TANDEM_CHECK(w.row_stride_bytes >= *w_row_bytes, "matmul: weight row stride shorter than a row");
    TANDEM_CHECK(n_tokens >= 0 && w.n_rows >= 0, "matmul: negative size");
    TANDEM_CHECK(ldx >= w.n_cols && ldy >= w.n_rows, "matmul: ldx/ldy shorter than a row");
    if (n_tokens == 0 || w.n_rows == 0) return false;
    TANDEM_CHECK(w.data != nullptr && x != nullptr && y != nullptr, "matmul: null pointer");
    return true;
}

// The products of prepared activations: the panel tokens, then the row
// kernels and decode rows the rest.
void run_path(const detail::MatmulPath& path, const WeightView& w, const Activations& a, int64_t n_tokens, float* y,
              int64_t ldy, ThreadPool& pool) {
    if (path.panel_end > 0) {
        run_panels(w, path.panel->gemm, path.panel->bytes(w.n_cols), a.act, a.a_stride, path.panel_end, y, ldy, pool);
        if (path.panel_end == n_tokens) return;
    }
    run_row_items(path, w, *quant::row_bytes(w.type, w.n_cols), a, path.panel_end, n_tokens, y, ldy, pool);
}

// Whether two paths read the activations of one input as the same bytes,
// so that one quantization (and preparation) serves both.
bool same_activations(const detail::MatmulPath& a, const detail::MatmulPath& b) {
    const auto panel_prepare = [](const detail::MatmulPath& p) { return p.panel != nullptr ? p.panel->prepare : nullptr; };
    return a.quantize == b.quantize && a.a_type == b.a_type && a.a_row_bytes == b.a_row_bytes &&
           a.panel_row_extra == b.panel_row_extra && panel_prepare(a) == panel_prepare(b) && a.panel_end == b.panel_end &&
           a.rows.prepare == b.rows.prepare && a.rows.prepared_bytes == b.rows.prepared_bytes && a.rows_first == b.rows_first;
}

// A batch's products of one input (matmul_shared_input, several tokens):
// the targets whose kernels read the same activation bytes share one
// quantization (a prefill's Q and K, gate and up; quantizing took 1% of an
// IQ4_XS llama-1b pp512 step, a third of it repeated), then each product
// runs as matmul() runs it. Products that read no quantized rows (float
// weights, empty ones) go through matmul() first, as its scratch would
// move the shared rows.
void batch_shared_input(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool,
                        SimdLevel level, MatmulOrder order) {
    struct Job {
        const WeightView* w;
        const float* x;
        float* y;
        detail::MatmulPath path;
        size_t owner;   // the job whose activations it reads (itself: it quantizes them)
        size_t offset;  // of the owner's activations in the scratch
    };
    std::array<Job, 32> jobs;
    size_t n_jobs = 0;
    size_t bytes = 0;
    for (const MatmulTarget& t : targets) {
        const WeightView& w = *t.w;
        const float* in = t.x != nullptr ? t.x : x;
        const int64_t n = w.n_cols;
        const bool direct = !check_matmul(w, in, n, n_tokens, t.y, w.n_rows) ||
                            (order == MatmulOrder::Fastest && detail::blas_wanted(w.type, n_tokens));
        if (direct || n_jobs == jobs.size()) {
            matmul(w, in, n, n_tokens, t.y, w.n_rows, pool, level, order);
            continue;
        }
        const detail::MatmulPath path = detail::choose_matmul_path({w.type, n, n_tokens, level, order});
        if (path.quantize == nullptr) {
            matmul(w, in, n, n_tokens, t.y, w.n_rows, pool, level, order);
            continue;
        }
        Job& j = jobs[n_jobs];
        j = Job{&w, in, t.y, path, n_jobs, bytes};
        for (size_t k = 0; k < n_jobs; ++k) {
            if (jobs[k].owner == k && jobs[k].x == in && jobs[k].w->n_cols == n && same_activations(jobs[k].path, path)) {
                j.owner = k;
                j.offset = jobs[k].offset;
                break;
            }
        }
        if (j.owner == n_jobs) bytes += activation_bytes(path, n_tokens, n);
        ++n_jobs;
    }
    if (n_jobs == 0) return;
    auto* buf = static_cast<unsigned char*>(pool.scratch(bytes));
    std::array<Activations, 32> acts;
    for (size_t i = 0; i < n_jobs; ++i) {
        const Job& j = jobs[i];
        if (j.owner == i) acts[i] = prepare_activations(j.path, j.x, j.w->n_cols, n_tokens, j.w->n_cols, buf + j.offset, pool);
        run_path(j.path, *j.w, acts[j.owner], n_tokens, j.y, j.w->n_rows, pool);
    }
}

}  // namespace

void detail::native_matmul(const WeightView& w, const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                           ThreadPool& pool, SimdLevel level, MatmulOrder order) {
    if (!check_matmul(w, x, ldx, n_tokens, y, ldy)) return;
    const detail::MatmulPath path = detail::choose_matmul_path({w.type, w.n_cols, n_tokens, level, order});
    unsigned char* buf =
        path.quantize != nullptr ? static_cast<unsigned char*>(pool.scratch(activation_bytes(path, n_tokens, w.n_cols))) : nullptr;
    run_path(path, w, prepare_activations(path, x, ldx, n_tokens, w.n_cols, buf, pool), n_tokens, y, ldy, pool);
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
    // A batch: each product as matmul() runs it, one quantization per input
    // and activation layout.
    if (n_tokens > 1) return batch_shared_input(targets, x, n_tokens, pool, level, order);
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
