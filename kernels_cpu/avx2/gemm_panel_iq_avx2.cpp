// Panel GEMMs for the 256-element i-quants on AVX2 (IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_XS; scheme in
// avx2/gemm_panel_avx2.h), the bits of their scalar batch kernels
// (llama.cpp's tiled order, IqTiledOrder in runtime/quant/dot_order_iq.h):
// per row, token and block
//   total = sum over groups g of 16: mult_g * sum_{k in g} code_k * a_k
//   acc   = fma(d_a, float(total) * d_w', acc)
// Each half panel's blocks are decoded once per call (gemm_panel_iq_x86.h)
// and transposed so a register holds four codes of each of 8 rows. The
// integer sums come from vpmaddubsw (u8 x s8, pair sums saturating at
// int16) in one of two ways:
//   - grids and IQ1 (|code| <= B, B = 43 IQ2_*, 62 IQ3_XXS, 15 IQ3_S, 9
//     IQ1's 8 grid +- 1): unsigned u = code + B <= 2B, pairs u * a summed
//     in int16 over runs of kRun quads (kRun x 2B x 128 <= 32768 keeps them
//     exact for any a in [-128, 127]: kRun 4 for IQ3_S and IQ1, else 1),
//     widened and scaled by vpmaddwd against (mult_g, mult_g), and
//     B x sum mult_g x (the Q8_K block's 16-element sums) taken off once a
//     block, one vpmaddwd per two groups: sum u a - B sum a = sum code a;
//   - IQ4_XS (codes -127 .. 113, no bias fits a byte pair in int16): the
//     signed codes against the activations' magnitudes, |a| x (code with
//     a's sign), at most 2 x 128 x 127 a pair, widened by vpmaddwd at
//     every quad; the magnitudes |a| are appended to each activation row
//     by iq4_xs_panel_prepare_avx2 (computing them in the loop was a fifth
//     of its instructions). Its loop (iq4_xs_tiles) takes both half panels
//     of a token tile at once, so each broadcast of a and |a| serves 16
//     rows: 2048x2048 x 256 tokens, one thread, 16.1-16.4 -> 15.2-15.5 ms
//     (vpsignb, vpmaddubsw and vpmaddwd a quad remain; two multiplies a
//     quad in other forms measured no faster: int16 values times the
//     multipliers against int16 activations, two vpmaddwd a quad,
//     17.6-17.7 ms against 16.1-16.4 before; IQ4_NL's two nibble planes of
//     u = code + 128 run 16.9-17.2 in its panel).
#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cstddef>

#include "kernels_cpu/avx2/gemm_panel_avx2.h"
#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/gemm_panel_iq_x86.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
using namespace tandem::cpu::detail::iq_panel;
using panel_avx2::kHalf;
constexpr int NT = panel_avx2::kTokens;

// Per block of a half panel: codes [quad 64][row 8][4] (elements 4q ..
// 4q + 3, plus the bias), the group multipliers as int16 pairs (m, m), the
// bias terms of group pairs (B m_2k, B m_2k+1), d_w' per row.
struct HalfIq {
    alignas(32) uint8_t codes[kQK_K / 4][kHalf][4];
    alignas(32) int32_t mult2[16][kHalf];
    alignas(32) int32_t coef2[8][kHalf];
    alignas(32) float d[kHalf];
};

inline int32_t int16_pair(int32_t lo, int32_t hi) {
    return static_cast<int32_t>((static_cast<uint32_t>(lo) & 0xFFFFu) | static_cast<uint32_t>(hi) << 16);
}

// Block i of the 8 rows: each row decoded into its 256 bytes, then every 32
// bytes of the 8 rows transposed into the lanes.
template <class Dec, int kBias>
void unpack_iq(const panel_avx2::HalfRows& rows, int64_t i, HalfIq& p) {
    alignas(32) uint8_t tmp[kHalf][kQK_K];
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(kBias));
    for (int r = 0; r < kHalf; ++r) {
        const auto& b = *reinterpret_cast<const typename Dec::Block*>(rows.at(r, i, 0));
        int32_t mult[16];
        decode<Dec>(b, bias, tmp[r], mult);
        for (int g = 0; g < 16; ++g) p.mult2[g][r] = int16_pair(mult[g], mult[g]);
        for (int k = 0; k < 8; ++k) p.coef2[k][r] = int16_pair(kBias * mult[2 * k], kBias * mult[2 * k + 1]);
        p.d[r] = block_dw<Dec>(b);
    }
    for (int c = 0; c < kQK_K / 32; ++c) {
        __m256 v[kHalf];
        for (int r = 0; r < kHalf; ++r) v[r] = _mm256_load_ps(reinterpret_cast<const float*>(tmp[r] + 32 * c));
        transpose8x8_ps(v, v);
        for (int j = 0; j < 8; ++j) _mm256_store_ps(reinterpret_cast<float*>(p.codes[8 * c + j]), v[j]);
    }
}

// IQ4_XS's block i of the 8 rows straight into the lanes: unpack_iq's
// codes, multipliers and d for bias 0 (coef2 is left unset: iq4_xs_tiles
// takes no bias off) without its per-row decode, scalar multipliers and
// byte transposes, which took 1.6% of an IQ4_XS llama-1b pp512 step. The
// dword j < 4 of each 16-byte chunk c of qs holds elements 32c + 4j ..
// (its low nibbles, quad 8c + j) and 32c + 16 + 4j .. (its high ones,
// quad 8c + 4 + j); the header dwords are d | scales_h << 16 and
// scales_l, whose bits 4c .. 4c + 3 are chunk c's low scale bits.
void unpack_iq4_xs(const panel_avx2::HalfRows& rows, int64_t i, HalfIq& p) {
    const __m256i table = _mm256_broadcastsi128_si256(load128(iq::kIq4nlValues));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int k = 0; k < kQK_K / 64; ++k) {  // 32 bytes of qs: chunks 2k and 2k + 1
        __m256i q[8];
        rows.lanes32(i, offsetof(block_iq4_xs, qs) + 32 * static_cast<size_t>(k), q);
        for (int j = 0; j < 8; ++j) {
            const int quad = 16 * k + (j < 4 ? j : 4 + j);
            const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(q[j], low4));
            const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q[j], 4), low4));
            _mm256_store_si256(reinterpret_cast<__m256i*>(p.codes[quad]), lo);
            _mm256_store_si256(reinterpret_cast<__m256i*>(p.codes[quad + 4]), hi);
        }
    }
    __m256i head[4];
    rows.lanes16(i, 0, head);
    const __m256i high = _mm256_srli_epi32(head[0], 16), low = head[1];
    for (int c = 0; c < kQK_K / 32; ++c) {
        const __m256i lo4 = _mm256_and_si256(_mm256_srli_epi32(low, 4 * c), _mm256_set1_epi32(0xF));
        const __m256i hi2 = _mm256_and_si256(_mm256_srli_epi32(high, 2 * c), _mm256_set1_epi32(3));
        const __m256i m = _mm256_sub_epi32(_mm256_or_si256(lo4, _mm256_slli_epi32(hi2, 4)), _mm256_set1_epi32(32));
        const __m256i pair = panel_avx2::int_as_pair(m);
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.mult2[2 * c]), pair);
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.mult2[2 * c + 1]), pair);
    }
    // d_w' = half_to_float(d) x factor (1), as block_dw<Iq4xsDec> takes it.
    using O = typename dot::OrderOf<Type::IQ4_XS, dot::Form::Batch>::type;
    panel_avx2::header_floats(head[0], p.d, nullptr);
    _mm256_store_ps(p.d, _mm256_mul_ps(_mm256_load_ps(p.d), _mm256_set1_ps(O::factor())));
}

template <class Dec, int kBias, int kRun>
void iq_gemm(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, size_t a_stride,
             int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    // A run of kRun quads: 2 kRun products of at most 128 x 2 B in an int16.
    static_assert(kBias >= Dec::kMaxCode && kRun * 2 * 2 * kBias * 128 <= 32768, "int16 pair sums would saturate");
    static_assert(4 % kRun == 0, "runs inside a group");
    const int64_t nb = n_cols / kQK_K;
    const HalfIq* blocks =
        panel_avx2::unpack_panel<HalfIq, typename Dec::Block>(w, row_stride, n_rows, nb, buf, unpack_iq<Dec, kBias>);
    panel_avx2::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](int h, const block_q8_K* const* act, __m256* out) {
        const HalfIq* half = blocks + h * nb;
        __m256 acc[NT];
        for (auto& v : acc) v = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const HalfIq& p = half[i];
            __m256i total[NT];
            for (int g = 0; g < 16; ++g) {
                const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.mult2[g]));
                for (int q0 = 0; q0 < 4; q0 += kRun) {
                    __m256i dot[NT];
                    for (int q = q0; q < q0 + kRun; ++q) {
                        const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.codes[4 * g + q]));
                        for (int t = 0; t < NT; ++t) {
                            const __m256i pr = _mm256_maddubs_epi16(wv, panel_avx2::bcast4(act[t][i].qs + 16 * g + 4 * q));
                            dot[t] = q == q0 ? pr : panel_avx2::add16(dot[t], pr);
                        }
                    }
                    for (int t = 0; t < NT; ++t) {
                        const __m256i m = _mm256_madd_epi16(dot[t], sc);
                        total[t] = g == 0 && q0 == 0 ? m : _mm256_add_epi32(total[t], m);
                    }
                }
            }
            // B x sum_g mult_g x bsum_g, two groups a vpmaddwd (|B mult| <= 62 x 31).
            for (int k = 0; k < 8; ++k) {
                const __m256i coef = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.coef2[k]));
                for (int t = 0; t < NT; ++t) {
                    total[t] = _mm256_sub_epi32(total[t], _mm256_madd_epi16(coef, panel_avx2::bcast4(act[t][i].bsums + 2 * k)));
                }
            }
            const __m256 d = _mm256_load_ps(p.d);
            for (int t = 0; t < NT; ++t) {
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(act[t][i].d), _mm256_mul_ps(_mm256_cvtepi32_ps(total[t]), d), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t] = acc[t];
    });
}

// total + sc x (|a| x (w with a's sign)) (the pair sums widened and scaled
// by vpmaddwd), as an asm GCC cannot look into: it otherwise computes a
// group's products first and adds them as a tree, spilling totals inside
// the loop; here each total is one chain and the four steps share one
// scratch register.
inline __m256i add_quad(__m256i total, __m256i w, __m256i av, __m256i mag, __m256i sc) {
    __m256i p;
    asm("vpsignb %[av], %[w], %[p]\n\tvpmaddubsw %[p], %[mag], %[p]\n\tvpmaddwd %[sc], %[p], %[p]\n\tvpaddd %[p], %[t], %[t]"
        : [t] "+x"(total), [p] "=&x"(p)
        : [w] "x"(w), [av] "x"(av), [mag] "x"(mag), [sc] "x"(sc));
    return total;
}

// IQ4_XS over token tiles, both half panels (kHalves of them, 2 where
// there are more than 8 rows) per activation broadcast: the block totals
// as iq_gemm's, each quad's pair sums |a| x (code with a's sign) widened
// and scaled at once by vpmaddwd against (mult, mult). The 8 totals, two
// code and two multiplier registers, a, |a| and the scratch take 15 of
// the 16 registers: the totals start at zero (no first-quad branch) and the
// float sums wait in memory. 2048x2048 x 512 tokens, one Zen 3 thread
// (min of 15, three rounds): 34.0-36.0 -> 32.1-33.1 ms.
// Never inlined: inside iq4_xs_panel_gemm_avx2 GCC 12 spilled four of the
// totals to the stack in the loop (seen in the disassembly once
// unpack_iq4_xs made the caller small enough to take it in).
template <int kHalves>
[[gnu::noinline]] void iq4_xs_tiles(const HalfIq* blocks, int64_t nb, const void* a, size_t a_stride,
                                    int64_t n_tokens, int64_t n_rows, float* y, int64_t ldy) {
    static_assert(Iq4xsDec::kMaxCode <= 127, "|code| x 128 x 2 within an int16 pair sum");
    const auto* abase = static_cast<const uint8_t*>(a);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += NT) {
        const block_q8_K* act[NT];
        const uint8_t* abs_a[NT];  // the magnitudes iq4_xs_panel_prepare_avx2 appended
        for (int t = 0; t < NT; ++t) {
            act[t] = reinterpret_cast<const block_q8_K*>(abase + (t0 + t) * a_stride);
            abs_a[t] = panel_avx2::extras(act[t], nb);
        }
        alignas(32) float acc[NT][kHalves][kHalf] = {};
        for (int64_t i = 0; i < nb; ++i) {
            const HalfIq* half[kHalves];
            for (int h = 0; h < kHalves; ++h) half[h] = blocks + h * nb + i;
            __m256i total[NT][kHalves];
            for (auto& token : total) {
                for (__m256i& v : token) v = _mm256_setzero_si256();
            }
            for (int g = 0; g < 16; ++g) {
                __m256i sc[kHalves];
                for (int h = 0; h < kHalves; ++h) sc[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(half[h]->mult2[g]));
#pragma GCC unroll 4
                for (int q = 0; q < 4; ++q) {
                    __m256i wv[kHalves];
                    for (int h = 0; h < kHalves; ++h) {
                        wv[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(half[h]->codes[4 * g + q]));
                    }
                    const size_t k = static_cast<size_t>(16 * g + 4 * q);
                    for (int t = 0; t < NT; ++t) {
                        const __m256i av = panel_avx2::bcast4(act[t][i].qs + k);
                        const __m256i mag = panel_avx2::bcast4(abs_a[t] + kQK_K * static_cast<size_t>(i) + k);
                        for (int h = 0; h < kHalves; ++h) total[t][h] = add_quad(total[t][h], wv[h], av, mag, sc[h]);
                    }
                }
            }
            for (int h = 0; h < kHalves; ++h) {
                const __m256 d = _mm256_load_ps(half[h]->d);
                for (int t = 0; t < NT; ++t) {
                    const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(total[t][h]), d);
                    _mm256_store_ps(acc[t][h], _mm256_fmadd_ps(_mm256_set1_ps(act[t][i].d), v, _mm256_load_ps(acc[t][h])));
                }
            }
        }
        for (int h = 0; h < kHalves; ++h) {
            for (int t = 0; t < NT; ++t) {
                panel_avx2::store_rows(y + (t0 + t) * ldy + kHalf * h, _mm256_load_ps(acc[t][h]),
                                       static_cast<int>(n_rows - kHalf * h));
            }
        }
    }
}

}  // namespace

size_t iq_panel_bytes_avx2(int64_t n_cols) { return 2 * sizeof(HalfIq) * static_cast<size_t>(n_cols / kQK_K); }

void iq4_xs_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_K, "iq4_xs panel: activations not Q8_K");
    static_assert(kIq4xsPanelExtraBytesAvx2 == kQK_K, "a magnitude byte per element");
    panel_avx2::for_each_row_block<block_q8_K>(row, n_cols / kQK_K, kIq4xsPanelExtraBytesAvx2, [](const block_q8_K& b, uint8_t* out) {
        // |-128| is 128 as the unsigned byte vpmaddubsw reads.
        for (int j = 0; j < kQK_K / 32; ++j) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * j), _mm256_abs_epi8(load256(b.qs + 32 * j)));
        }
    });
}

#define TANDEM_IQ_PANEL(name, Dec, bias, run)                                                                          \
    void name##_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,       \
                                size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {                \
        iq_gemm<Dec, bias, run>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);                    \
    }
TANDEM_IQ_PANEL(iq2_xxs, Iq2xxsDec, Iq2xxsDec::kMaxCode, 1)
TANDEM_IQ_PANEL(iq2_xs, Iq2xsDec, Iq2xsDec::kMaxCode, 1)
TANDEM_IQ_PANEL(iq2_s, Iq2sDec, Iq2sDec::kMaxCode, 1)
TANDEM_IQ_PANEL(iq3_xxs, Iq3xxsDec, Iq3xxsDec::kMaxCode, 1)
TANDEM_IQ_PANEL(iq3_s, Iq3sDec, Iq3sDec::kMaxCode, 4)
TANDEM_IQ_PANEL(iq1_s, Iq1sDec, Iq1sDec::kMaxCode, 4)
TANDEM_IQ_PANEL(iq1_m, Iq1mDec, Iq1mDec::kMaxCode, 4)
#undef TANDEM_IQ_PANEL
void iq4_xs_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    const HalfIq* blocks = panel_avx2::unpack_panel<HalfIq, block_iq4_xs>(w, row_stride, n_rows, nb, buf, unpack_iq4_xs);
    if (n_rows > kHalf) {
        iq4_xs_tiles<2>(blocks, nb, a, a_stride, n_tokens, n_rows, y, ldy);
    } else {
        iq4_xs_tiles<1>(blocks, nb, a, a_stride, n_tokens, n_rows, y, ldy);
    }
}

}  // namespace tandem::cpu::detail
