// Panel GEMMs for the 256-element i-quants on AVX-512 VNNI (IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_XS; see gemm_panel.h),
// the bits of their scalar batch kernels (llama.cpp's tiled order,
// IqTiledOrder in runtime/quant/dot_order_iq.h), in the scheme of the Q6_K
// panel. Each of the 16 rows' blocks is decoded once per call
// (gemm_panel_iq_x86.h) into unsigned codes u = code + 128 (every code is
// a signed byte: |code| <= 62 for the grids, 9 for IQ1's 8 grid +- 1, 127
// for IQ4_XS), transposed so a register holds four codes of each row, and
// per group g of elements sharing a multiplier (16 for IQ2_XS, IQ2_S,
// IQ1_M; 32 for the others):
//   dot_g = -128 * sum_{k in g} a_k + sum_{k in g} u_k * a_k   (= sum code_k * a_k)
//   total = sum_g mult_g * dot_g
//   acc   = fma(d_a, float(total) * d_w', acc)
// The starts -128 * sum a_k come from iq_panel_prepare; vpdpbusd adds four
// u8 x s8 products at full precision (no saturation), so with |a_k| <= 128
// every integer is exact and equal to the reference's.
#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <bit>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels_cpu/avx512/gemm_panel_avx512.h"
#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/gemm_panel_iq_x86.h"
#include "kernels_cpu/nibble_formats.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
using namespace tandem::cpu::detail::iq_panel;
constexpr int NT = panel::kTokens;

// Where the starts of each group size sit in an activation block's extras.
constexpr size_t kStarts16 = 0, kStarts32 = 16 * sizeof(int32_t);

// Per block of a panel: codes [quad 64][row 16][4] (elements 4q .. 4q + 3
// plus 128), the multipliers [group][row] (group of the type's size: 16
// or 8 of them), d_w' [row].
struct PanelIq {
    alignas(64) uint8_t codes[kQK_K / 4][kPanelRows][4];
    alignas(64) int32_t mult[16][kPanelRows];
    alignas(64) float d[kPanelRows];
};

// Block i of all 16 rows (rows past n_rows decode row 0; their outputs are
// never stored): each row decoded into its 256 bytes, then every 32 bytes
// of the 16 rows transposed into the lanes.
template <class Dec, int kGroup>
void unpack_iq(const panel::PanelRows& rows, int64_t i, PanelIq& p) {
    alignas(64) uint8_t tmp[kPanelRows][kQK_K];
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int r = 0; r < kPanelRows; ++r) {
        const auto& b = *reinterpret_cast<const typename Dec::Block*>(rows.at(r, i, 0));
        int32_t mult[16];
        decode<Dec>(b, bias, tmp[r], mult);
        for (int g = 0; g < kQK_K / kGroup; ++g) p.mult[g][r] = mult[g * kGroup / 16];
        p.d[r] = block_dw<Dec>(b);
    }
    for (int c = 0; c < kQK_K / 32; ++c) {
        __m512i v[8];
        panel::rows_to_lanes32([&](int r) { return tmp[r] + 32 * c; }, v);
        for (int j = 0; j < 8; ++j) _mm512_store_si512(p.codes[8 * c + j], v[j]);
    }
}

// IQ4_XS's block i of the 16 rows straight into the lanes, without
// unpack_iq's per-row decode and its transposes of the decoded bytes
// (2.5% of an IQ4_XS llama-1b pp512 step's samples against 70% in the
// product): qs transposed as it is stored, then each nibble looked up as u =
// value + 128. The dword j < 4 of each 16-byte chunk c of qs holds elements
// 32c + 4j .. (its low nibbles, quad 8c + j) and 32c + 16 + 4j .. (its high
// ones, quad 8c + 4 + j); the header dwords are d | scales_h << 16 and
// scales_l, whose bits 4c .. 4c + 3 are chunk c's low scale bits.
void unpack_iq4_xs(const panel::PanelRows& rows, int64_t i, PanelIq& p) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(NibbleFormat<block_iq4_nl>::kUnsigned.data())));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < kQK_K / 64; ++k) {  // 32 bytes of qs: chunks 2k and 2k + 1
        __m512i q[8];
        rows.lanes32(i, offsetof(block_iq4_xs, qs) + 32 * static_cast<size_t>(k), q);
        for (int j = 0; j < 8; ++j) {
            const int quad = 16 * k + (j < 4 ? j : 4 + j);
            _mm512_store_si512(p.codes[quad], _mm512_shuffle_epi8(table, _mm512_and_si512(q[j], low4)));
            _mm512_store_si512(p.codes[quad + 4], _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q[j], 4), low4)));
        }
    }
    __m512i head[4];
    rows.lanes16(i, 0, head);
    const __m512i high = _mm512_srli_epi32(head[0], 16), low = head[1];
    for (int c = 0; c < kQK_K / 32; ++c) {
        _mm512_store_si512(p.mult[c], std::bit_cast<__m512i>(
                                          iq::iq4_xs_scale_bits(std::bit_cast<U32x16>(low), std::bit_cast<U32x16>(high), c)));
    }
    // d_w' = half_to_float(d) x factor (1), as block_dw<Iq4xsDec> takes it.
    using O = typename dot::OrderOf<Type::IQ4_XS, dot::Form::Batch>::type;
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head[0]));
    _mm512_store_ps(p.d, _mm512_mul_ps(d, _mm512_set1_ps(O::factor())));
}

template <class Dec, int kGroup>
void iq_gemm(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, size_t a_stride,
             int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    static_assert(Dec::kMaxCode <= 127, "codes + 128 must be unsigned bytes");
    static_assert(kGroup == 16 || kGroup == 32, "a multiplier per 16 or per 32 elements");
    constexpr int kQuads = kGroup / 4, kGroups = kQK_K / kGroup;
    const int64_t nb = n_cols / kQK_K;
    auto* blocks = static_cast<PanelIq*>(buf);
    const panel::PanelRows rows(w, row_stride, n_rows, sizeof(typename Dec::Block));
    for (int64_t i = 0; i < nb; ++i) {
        if constexpr (std::is_same_v<Dec, Iq4xsDec>) {
            unpack_iq4_xs(rows, i, blocks[i]);
        } else {
            unpack_iq<Dec, kGroup>(rows, i, blocks[i]);
        }
    }
    const size_t starts_offset = panel::extras_offset<block_q8_K>(nb) + (kGroup == 16 ? kStarts16 : kStarts32);
    panel::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](const block_q8_K* const* act, __m512* out) {
        const uint8_t* starts[NT];  // this group size's starts iq_panel_prepare appended
        for (int t = 0; t < NT; ++t) starts[t] = reinterpret_cast<const uint8_t*>(act[t]) + starts_offset;
        __m512 acc[NT];
        for (auto& v : acc) v = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const PanelIq& p = blocks[i];
            __m512i total[NT];
            for (auto& v : total) v = _mm512_setzero_si512();
            for (int g = 0; g < kGroups; ++g) {
                // From -128 times the group's activation sum: the dot
                // product of code + 128 comes out as that of code.
                // Groups of 32: two chains a token (even and odd quads),
                // eight in all (IQ4_XS 2048x2048 x 512 tokens, one thread:
                // 87.5 -> 85.2 us; groups of 16, two quads a chain: IQ2_XS
                // 97.9 -> 99.9, so one chain).
                constexpr int kChains = kQuads == 8 ? 2 : 1;
                __m512i dot[kChains][NT];
                for (int t = 0; t < NT; ++t) {
                    dot[0][t] = panel::bcast4(starts[t] + kIqPanelExtraBytes * static_cast<size_t>(i) + 4 * g);
                    if constexpr (kChains == 2) dot[1][t] = _mm512_setzero_si512();
                }
                for (int q = 0; q < kQuads; ++q) {
                    const __m512i wv = _mm512_load_si512(p.codes[kQuads * g + q]);
                    for (int t = 0; t < NT; ++t) {
                        dot[q % kChains][t] = panel::dpbusd_bcast(dot[q % kChains][t], wv, act[t][i].qs + kGroup * g + 4 * q);
                    }
                }
                const __m512i m = _mm512_load_si512(p.mult[g]);
                for (int t = 0; t < NT; ++t) {
                    __m512i sum = dot[0][t];
                    if constexpr (kChains == 2) sum = _mm512_add_epi32(sum, dot[1][t]);
                    total[t] = _mm512_add_epi32(total[t], _mm512_mullo_epi32(sum, m));
                }
            }
            const __m512 d = _mm512_load_ps(p.d);
            for (int t = 0; t < NT; ++t) {
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(act[t][i].d), _mm512_mul_ps(_mm512_cvtepi32_ps(total[t]), d), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

}  // namespace

size_t iq_panel_bytes(int64_t n_cols) { return sizeof(PanelIq) * static_cast<size_t>(n_cols / kQK_K); }

void iq_panel_prepare(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_K, "i-quant panel: activations not Q8_K");
    static_assert(kIqPanelExtraBytes == sizeof(__m512i) + sizeof(__m256i), "16 group starts, 8 chunk starts");
    panel::for_each_row_block<block_q8_K>(row, n_cols / kQK_K, kIqPanelExtraBytes, [](const block_q8_K& b, uint8_t* out) {
        // |bsum| <= 16 x 128: every product and pair sum fits int32.
        const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.bsums));
        _mm512_storeu_si512(out + kStarts16, _mm512_mullo_epi32(_mm512_cvtepi16_epi32(sums), _mm512_set1_epi32(-128)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + kStarts32), _mm256_madd_epi16(sums, _mm256_set1_epi16(-128)));
    });
}

#define TANDEM_IQ_PANEL(name, Dec, group)                                                                              \
    void name##_panel_gemm_avx512(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,     \
                                  size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {              \
        iq_gemm<Dec, group>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);                        \
    }
TANDEM_IQ_PANEL(iq2_xxs, Iq2xxsDec, 32)
TANDEM_IQ_PANEL(iq2_xs, Iq2xsDec, 16)
TANDEM_IQ_PANEL(iq2_s, Iq2sDec, 16)
TANDEM_IQ_PANEL(iq3_xxs, Iq3xxsDec, 32)
TANDEM_IQ_PANEL(iq3_s, Iq3sDec, 32)
TANDEM_IQ_PANEL(iq1_s, Iq1sDec, 32)
TANDEM_IQ_PANEL(iq1_m, Iq1mDec, 16)
TANDEM_IQ_PANEL(iq4_xs, Iq4xsDec, 32)
#undef TANDEM_IQ_PANEL

}  // namespace tandem::cpu::detail
