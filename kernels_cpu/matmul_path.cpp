#include "kernels_cpu/matmul_path.h"

#include <algorithm>

#include "kernels_cpu/gemm_panel.h"
#include "runtime/common/error.h"

namespace tandem::cpu::detail {
namespace {

// AVX-512 VNNI's panel at that level, AVX-VNNI's at Avx2Vnni where the
// type has one, else AVX2's (at AVX-512 without VNNI too); none at Scalar.
const PanelKernel* find_panel_kernel(quant::Type type, SimdLevel level) {
    const WeightKernels* k = weight_kernels(type);
    if (k == nullptr || level == SimdLevel::Scalar) return nullptr;
    if (level == SimdLevel::Avx512Vnni) return k->panel.gemm != nullptr ? &k->panel : nullptr;
    if (k->panel_avxvnni.gemm != nullptr && level == SimdLevel::Avx2Vnni) return &k->panel_avxvnni;
    return k->panel_avx2.gemm != nullptr ? &k->panel_avx2 : nullptr;
}

// Unpacking a panel costs about what 16 tokens of its work do, so short
// batches stay on the row kernels. AVX2's row kernels are slower against a
// similar unpacking cost: its panels were faster from 8 tokens for every
// type (Zen 4 at the AVX2 level, 4096x4096, 8-24 tokens).
constexpr int64_t kPanelMinTokens = 32, kPanelMinTokensAvx2 = 8;

// Up to three decode-rows kernel calls' worth of tokens count as a small
// batch: a speculative verification (16 drafts and the last token) included.
constexpr int64_t kMaxSmallBatch = 3 * kMaxDecodeTokens;

// Column chunks: a token group that fits L1 (Q8_K rows of 4096 columns,
// 19 KiB) runs best unsplit; f32 rows (64 KiB per group at 4096 columns)
// best in chunks of about 16 KiB (measured on Zen 4, 32 KiB L1D).
constexpr double kL1Bytes = 32 * 1024;
constexpr double kChunkBytes = 16 * 1024;

}  // namespace

MatmulPath choose_matmul_path(const MatmulQuery& q) {
    MatmulPath p;
    const int64_t n = q.n_cols;
    const int64_t n_tokens = q.n_tokens;
    const bool fastest = q.order != MatmulOrder::SingleToken;  // LlamaCpu: Fastest's kernels
    p.a_type = activation_type(q.type);  // throws for a type without CPU kernels
    p.fn = dot_kernel(q.type, q.level);
    // Tokens [0, batch_end) through the batch form where a type has one
    // (llama.cpp's rows taken four at a time); none in the single-token
    // order, where every token takes the one-row kernel's bits.
    const BatchForm batch = fastest ? batch_form(q.type, q.level) : BatchForm{};
    p.batch_fn = batch.fn;
    p.batch_end = p.batch_fn != nullptr && n_tokens >= batch.min_tokens ? n_tokens - n_tokens % batch.group : 0;
    if (p.a_type != quant::Type::F32) {
        const auto bytes = quant::row_bytes(p.a_type, n);
        TANDEM_CHECK(bytes.has_value(), "matmul: activation row not a whole number of blocks");
        p.a_row_bytes = *bytes;
        p.quantize = activation_quantizer(p.a_type, q.level);
    }
    if (n_tokens > 1 && fastest) {
        if (const WideDot wide = wide_dot_kernel(q.type, q.level); wide.fn != nullptr) {
            p.fn = wide.fn;
            p.quantize = wide.round_row;
            p.a_row_bytes = static_cast<size_t>(n) * sizeof(float);
        }
    }

    // Panels take the tokens in their type's batch order: a type without a
    // batch form keeps its one-row order for every token, so all of them;
    // one with a batch form only those it takes (none in the single-token
    // order).
    // A batch form that runs its AVX2 kernel at AVX-512 (the i-quants') is
    // slower than the AVX-512 panels from 8 tokens (2048x2048, 8 tokens, one
    // thread: 1.5-2.2x), so those panels start there as AVX2's do.
    const WeightKernels& kernels = *weight_kernels(q.type);
    const PanelKernel* panel = find_panel_kernel(q.type, q.level);
    const bool has_batch_form = kernels.batch.scalar != nullptr;
    const bool avx2_batch_form = has_batch_form && kernels.avx2_at_avx512;
    const int64_t panel_min =
        q.level == SimdLevel::Avx512Vnni && !avx2_batch_form ? kPanelMinTokens : kPanelMinTokensAvx2;
    const int64_t panel_tokens = panel == nullptr ? 0 : has_batch_form ? p.batch_end : n_tokens;
    if (panel_tokens >= panel_min) {
        p.panel = panel;
        p.panel_end = panel_tokens - panel_tokens % 4;
        p.panel_row_extra = panel->extra_bytes * static_cast<size_t>(n / quant::traits(p.a_type).block_elems);
    }

    // Decode rows: one token, or a small batch without panels of a type
    // with a several-tokens kernel (calling the one-token kernel per token
    // measured slower than the token tiles for Q4_1). They take the tokens
    // the one-row kernel takes, and the batch form's too where the type has
    // a several-tokens kernel in that order.
    const bool small_batch = n_tokens >= 2 && n_tokens <= kMaxSmallBatch && p.panel_end == 0;
    if ((n_tokens == 1 || small_batch) && p.quantize != nullptr) {
        p.rows = decode_rows_kernel(q.type, q.level, n_tokens > 1);
        if (n_tokens > 1 && p.rows.multi == nullptr) p.rows = {};
    }
    p.rows_first = n_tokens > 1 && p.rows.multi_batch != nullptr ? 0 : p.batch_end;

    // Column chunks keep a token group's activations in L1 while an item's
    // rows pass over them, where a group is too big for it (f32 rows of
    // float weights, very wide rows). Partial sums are added in a fixed
    // order, so results do not depend on the thread count; types in
    // llama.cpp's float order keep one accumulation chain per output.
    p.a_bytes_per_elem =
        static_cast<double>(p.quantize != nullptr ? p.a_row_bytes : n * sizeof(float)) / static_cast<double>(n);
    p.k_chunk = n;
    const double group_bytes = kMaxTileTokens * p.a_bytes_per_elem * static_cast<double>(n);
    if (n_tokens > 1 && group_bytes > kL1Bytes && !follows_llama_order(q.type)) {
        const auto fit =
            std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / (kMaxTileTokens * p.a_bytes_per_elem)));
        const int64_t step = std::max<int64_t>(quant::traits(q.type).block_elems, 64);  // whole blocks and vectors
        const int64_t chunks = (n + fit - 1) / fit;  // equal chunks rather than full ones plus a sliver
        p.k_chunk = std::min(n, ((n + chunks - 1) / chunks + step - 1) / step * step);
    }
    // A few tokens through the row kernels read each row once, one row at a
    // time, which the out-of-order window cannot cover from DRAM: each row
    // is prefetched into L2 a few rows ahead. 2048x2048 from DRAM at the
    // AVX2 level, one thread: Q6_K one token (no rows kernel there) 363-391
    // -> 230-268 us, four tokens 553-601 -> 417-445; Q4_K four tokens
    // 610-653 -> 403-426.
    p.prefetch_rows = n_tokens - p.panel_end <= kMaxTileTokens && p.k_chunk == n;
    return p;
}

}  // namespace tandem::cpu::detail
