// Decode rows of the 256-element i-quants at the AVX2 level (built again
// with AVX-512VL for the AVX-512 levels, as the row kernels are): one
// token over n_rows rows (fn), and up to kMaxDecodeTokens tokens of a small
// batch in the single-row order (multi). Each row goes through the row
// kernels' body (iq_dot_avx2.h) with all the tokens at once, so each weight
// chunk is decoded once for every token (the row kernels take at most
// kMaxTileTokens: 5-8 tokens decoded every chunk twice), and each token
// gets the bits the row kernel gives it alone. The rows are read one after
// another as one stream, prefetched ahead (prefetch_row_stream).
// 2048x2048 from DRAM, one thread, Zen 4, against the row kernels:
// 8 tokens 1.10-1.34x, 2-4 tokens 0.97-1.07x, one token 0.99-1.06x.
//
// No several-tokens kernel in the batch form's order (IqTiledOrder): the
// batch form starts at 8 tokens, where the panels take the tokens, and the
// body run that way (IqDotAvx2<..., Form::Batch>) lost to them at 8 tokens
// for most types at the AVX-512 VNNI level (0.67-1.14x) and from 12 at
// every level (0.50-0.98x); at the AVX2 level it won at 8-10 tokens for the
// grid types but IQ1_S and IQ1_M (1.02-1.42x; 0.87-0.97x). Measured with
// the AVX2 build at every level, 2048x2048 from DRAM, one thread, Zen 4.
#include "kernels_cpu/avx2/iq_dot_avx2.h"
#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail {
namespace {

using namespace iq_avx2;

template <class Dot>
struct IqRows {
    using B = typename Dot::B;
    static const B* row_at(const void* w, size_t row_stride, int r) {
        return reinterpret_cast<const B*>(static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * row_stride);
    }
    static void one(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, float* y) {
        const block_q8_K* ya = static_cast<const block_q8_K*>(a);
        for (int r = 0; r < n_rows; ++r) Dot::template row<1, true>(n, row_at(w, row_stride, r), &ya, y + r);
    }
    static void multi(TANDEM_DECODE_MULTI_ARGS) {
        in_passes<kMaxDecodeTokens>(a, a_stride, nt, y, ldy, [&](auto nt_pass, const uint8_t* const* acts, float* const* ys) {
            constexpr int NT = decltype(nt_pass)::value;
            const block_q8_K* ya[NT];
            for (int t = 0; t < NT; ++t) ya[t] = reinterpret_cast<const block_q8_K*>(acts[t]);
            for (int r = 0; r < n_rows; ++r) {
                float out[NT];
                Dot::template row<NT, true>(n, row_at(w, row_stride, r), ya, out);
                for (int t = 0; t < NT; ++t) ys[t][r] = out[t];
            }
        });
    }
};

}  // namespace

#define TANDEM_IQ_DECODE_ROWS(name, D, Order)                                                                      \
    void TANDEM_AVX2_FN(dot_##name##_rows)(int64_t n, const void* w, size_t row_stride, int n_rows, const void* a, \
                                           float* y) {                                                         \
        IqRows<IqDotAvx2<D, Order>>::one(n, w, row_stride, n_rows, a, y);                                          \
    }                                                                                                              \
    void TANDEM_AVX2_FN(dot_##name##_rows_multi)(TANDEM_DECODE_MULTI_ARGS) {                                       \
        IqRows<IqDotAvx2<D, Order>>::multi(n, w, row_stride, n_rows, a, a_stride, nt, y, ldy);                     \
    }
TANDEM_IQ_AVX2_TYPES(TANDEM_IQ_DECODE_ROWS)
#undef TANDEM_IQ_DECODE_ROWS

}  // namespace tandem::cpu::detail
