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
//     IQ1's 8 grid +- 1): unsigned u = code + B <= 2B, pairs u * a
//     (never saturating: 2 x 2B x 128 <= 32768) added in int16 over a run
//     of R quads with wrapping adds, then B x the run's pair sums of the
//     activation (which iq_bias_prepare appends, an int16 pair a run)
//     subtracted, also wrapping: what is left is sum code * a over 2R
//     elements a lane, exact in int16 while 2R x 128 x B <= 32767 (so the
//     wraps cancel), and one vpmaddwd against (mult_g, mult_g) widens and
//     scales the run. R (kIq*PanelRunAvx2 in gemm_panel.h): 2 for IQ2_*, 4
//     IQ3_XXS and IQ1_M, 8 IQ3_S and IQ1_S (runs span a 16-element group
//     only where the multiplier is per 32 elements). IQ3_XXS's grid values
//     (4, 12, .., 52, 62) are all even, so its u (even, <= 124) is stored
//     halved (B' = 31) and the multipliers doubled: B m = (B / 2) (2 m).
//     Per quad and token one vpmaddubsw, and per run one vpmaddwd. Taking
//     the bias off as int32 after widening instead (B x sum mult_g x the
//     Q8_K block's 16-element sums, once a block) keeps u * a in int16
//     only while 2R x 2B x 128 <= 32768: one vpmaddwd a quad for IQ2_*
//     (timings at iq_gemm);
//   - IQ4_XS (codes -127 .. 113: no bias keeps a byte pair's sum in
//     int16): u = code + 128 = 16 h + l split into two planes of nibbles
//     (as IQ4_NL's panel, avx2/gemm_panel_legacy_avx2.cpp), each pair sum
//     at most 2 x 15 x 128, so a group's eight quads add in int16 and two
//     vpmaddwd a group widen and scale them, against (16 m, 16 m) and
//     (m, m); -128 x sum m_g x (the Q8_K block's sums) starts each total.
//     Per four elements two vpmaddubsw, where signed codes took vpsignb,
//     vpmaddubsw and vpmaddwd: all of these issue only on Zen 4's two
//     multiply pipes (a microbenchmark: 2 a cycle, any mix of them, where
//     vpaddd/vpaddw issue 4; the signed-code loop ran at 91% of that
//     bound). Timings at iq4_xs_tiles.
#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>

#include "kernels_cpu/avx2/gemm_panel_avx2.h"
#include "kernels_cpu/gemm_panel.h"
#include "kernels_cpu/gemm_panel_iq_x86.h"
#include "kernels_cpu/nibble_formats.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

using namespace tandem::quant;
using namespace tandem::cpu::detail::iq_panel;
using panel_avx2::kHalf;
constexpr int NT = panel_avx2::kTokens;

// Per block of a half panel: codes [quad 64][row 8][4] (elements 4q ..
// 4q + 3, plus the bias), the group multipliers as int16 pairs (m, m),
// d_w' per row.
struct HalfIq {
    alignas(32) uint8_t codes[kQK_K / 4][kHalf][4];
    alignas(32) int32_t mult2[16][kHalf];
    alignas(32) float d[kHalf];
};

inline int32_t int16_pair(int32_t lo, int32_t hi) {
    return static_cast<int32_t>((static_cast<uint32_t>(lo) & 0xFFFFu) | static_cast<uint32_t>(hi) << 16);
}

// Block i of the 8 rows: each row decoded into its 256 bytes, then every 32
// bytes of the 8 rows transposed into the lanes.
// kHalve: the codes are all even; u / 2 is stored and the multipliers
// doubled.
template <class Dec, int kBias, bool kHalve>
void unpack_iq(const panel_avx2::HalfRows& rows, int64_t i, HalfIq& p) {
    alignas(32) uint8_t tmp[kHalf][kQK_K];
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(kBias));
    constexpr int32_t kScale = kHalve ? 2 : 1;
    for (int r = 0; r < kHalf; ++r) {
        const auto& b = *reinterpret_cast<const typename Dec::Block*>(rows.at(r, i, 0));
        int32_t mult[16];
        decode<Dec>(b, bias, tmp[r], mult);
        if constexpr (kHalve) {
            for (int c = 0; c < kQK_K / 32; ++c) {
                auto* v = reinterpret_cast<__m256i*>(tmp[r] + 32 * c);
                _mm256_store_si256(v, _mm256_and_si256(_mm256_srli_epi16(_mm256_load_si256(v), 1), _mm256_set1_epi8(0x7F)));
            }
        }
        for (int g = 0; g < 16; ++g) p.mult2[g][r] = int16_pair(kScale * mult[g], kScale * mult[g]);
        p.d[r] = block_dw<Dec>(b);
    }
    for (int c = 0; c < kQK_K / 32; ++c) {
        __m256 v[kHalf];
        for (int r = 0; r < kHalf; ++r) v[r] = _mm256_load_ps(reinterpret_cast<const float*>(tmp[r] + 32 * c));
        transpose8x8_ps(v, v);
        for (int j = 0; j < 8; ++j) _mm256_store_ps(reinterpret_cast<float*>(p.codes[8 * c + j]), v[j]);
    }
}

// IQ4_XS per block of a half panel: the nibble planes h and l of u = code
// + 128 = 16 h + l [quad 64][row 8][4], the group multipliers as int16
// pairs (16 m, 16 m) and (m, m), the starts' coefficients as pairs
// (-128 m_2k, -128 m_2k+1) against the pairs of the activation's
// 32-element sums that iq4_xs_panel_prepare_avx2 appends, d_w' per row.
struct HalfIq4xs {
    alignas(32) uint8_t hi[kQK_K / 4][kHalf][4];
    alignas(32) uint8_t lo[kQK_K / 4][kHalf][4];
    alignas(32) int32_t mult16[8][kHalf];
    alignas(32) int32_t mult[8][kHalf];
    alignas(32) int32_t start[4][kHalf];
    alignas(32) float d[kHalf];
};

// u = IQ4_NL's value + 128 (NibbleFormat's table), split into its nibbles.
constexpr std::array<uint8_t, 16> u_nibbles(int shift) {
    std::array<uint8_t, 16> out{};
    for (int q = 0; q < 16; ++q) out[q] = static_cast<uint8_t>((NibbleFormat<block_iq4_nl>::kUnsigned[q] >> shift) & 15);
    return out;
}
constexpr std::array<uint8_t, 16> kUHigh = u_nibbles(4), kULow = u_nibbles(0);

// IQ4_XS's block i of the 8 rows straight into the lanes (no per-row
// decode). The dword j < 4 of each 16-byte chunk c of qs holds elements
// 32c + 4j .. (its low nibbles, quad 8c + j) and 32c + 16 + 4j .. (its
// high ones, quad 8c + 4 + j); the header dwords are d | scales_h << 16
// and scales_l, whose bits 4c .. 4c + 3 are chunk c's low scale bits.
void unpack_iq4_xs(const panel_avx2::HalfRows& rows, int64_t i, HalfIq4xs& p) {
    const __m256i tab_hi = _mm256_broadcastsi128_si256(load128(kUHigh.data()));
    const __m256i tab_lo = _mm256_broadcastsi128_si256(load128(kULow.data()));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const auto store = [](uint8_t (*dst)[4], __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(dst), v); };
    for (int k = 0; k < kQK_K / 64; ++k) {  // 32 bytes of qs: chunks 2k and 2k + 1
        __m256i q[8];
        rows.lanes32(i, offsetof(block_iq4_xs, qs) + 32 * static_cast<size_t>(k), q);
        for (int j = 0; j < 8; ++j) {
            const int quad = 16 * k + (j < 4 ? j : 4 + j);
            const __m256i idx_lo = _mm256_and_si256(q[j], low4), idx_hi = _mm256_and_si256(_mm256_srli_epi16(q[j], 4), low4);
            store(p.hi[quad], _mm256_shuffle_epi8(tab_hi, idx_lo));
            store(p.lo[quad], _mm256_shuffle_epi8(tab_lo, idx_lo));
            store(p.hi[quad + 4], _mm256_shuffle_epi8(tab_hi, idx_hi));
            store(p.lo[quad + 4], _mm256_shuffle_epi8(tab_lo, idx_hi));
        }
    }
    __m256i head[4];
    rows.lanes16(i, 0, head);
    const __m256i high = _mm256_srli_epi32(head[0], 16), low = head[1];
    const auto put = [](int32_t* dst, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(dst), v); };
    __m256i m[kQK_K / 32];
    for (int c = 0; c < kQK_K / 32; ++c) {
        m[c] = std::bit_cast<__m256i>(iq::iq4_xs_scale_bits(std::bit_cast<U32x8>(low), std::bit_cast<U32x8>(high), c));
        put(p.mult[c], panel_avx2::int_as_pair(m[c]));
        put(p.mult16[c], panel_avx2::int_as_pair(_mm256_slli_epi32(m[c], 4)));
    }
    const __m256i neg128 = _mm256_set1_epi32(-128);  // |128 m| <= 4096
    for (int k = 0; k < 4; ++k) {
        put(p.start[k], panel_avx2::ints_as_pair(_mm256_mullo_epi32(m[2 * k], neg128), _mm256_mullo_epi32(m[2 * k + 1], neg128)));
    }
    // d_w' = half_to_float(d) x factor (1), as block_dw<Iq4xsDec> takes it.
    using O = typename dot::OrderOf<Type::IQ4_XS, dot::Form::Batch>::type;
    panel_avx2::header_floats(head[0], p.d, nullptr);
    _mm256_store_ps(p.d, _mm256_mul_ps(_mm256_load_ps(p.d), _mm256_set1_ps(O::factor())));
}

template <class Dec>
constexpr bool even_codes() {
    if constexpr (requires { Dec::kEvenCodes; }) {
        return Dec::kEvenCodes;
    } else {
        return false;
    }
}

// The stored bias B' (B, or B / 2 where halved) and its bounds for runs of
// kRun quads.
template <class Dec, bool kHalve, int kRun>
struct IqRun {
    static constexpr int kStored = kHalve ? Dec::kMaxCode / 2 : Dec::kMaxCode;
    static_assert(!kHalve || (Dec::kMaxCode % 2 == 0 && even_codes<Dec>()), "halving needs even codes and bias");
    // u' <= 2B': a pair of products never saturates vpmaddubsw.
    static_assert(2 * 2 * kStored * 128 <= 32767, "vpmaddubsw pair sums would saturate");
    // The run's exact sum (|code'| <= B') and B' x its activation sums in int16.
    static_assert(2 * kRun * 128 * kStored <= 32767, "a run's int16 lanes would not hold its exact sum");
    static_assert(kRun <= 4 || Dec::kMultPer32, "a run past a 16-element group needs one multiplier for both");
    static_assert((kQK_K / 4) % kRun == 0 && (kRun <= 4 ? 4 % kRun == 0 : kRun == 8), "runs tile the groups");
    static constexpr int kQuads = kRun;  // a run's
    static constexpr int kRuns = kQK_K / 4 / kRun;
    static constexpr size_t kExtraBytes = iq_panel_extra_bytes_avx2(kRun);  // an int16 pair a run
};

// Appends to each Q8_K block of an activation row B' x the pair sums of
// every run of R quads (Run: an IqRun), as the lanes of a run see them:
// (B' x sum of elements 4q, 4q + 1, B' x sum of 4q + 2, 4q + 3) over the
// run's quads q.
template <class Run>
void iq_bias_prepare(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_K, "i-quant panel: activations not Q8_K");
    panel_avx2::for_each_row_block<block_q8_K>(row, n_cols / kQK_K, Run::kExtraBytes, [](const block_q8_K& b, uint8_t* out) {
        for (int j = 0; j < Run::kRuns; ++j) {
            int even = 0, odd = 0;
            for (int q = Run::kQuads * j; q < Run::kQuads * (j + 1); ++q) {
                even += b.qs[4 * q] + b.qs[4 * q + 1];
                odd += b.qs[4 * q + 2] + b.qs[4 * q + 3];
            }
            const int16_t pair[2] = {static_cast<int16_t>(Run::kStored * even), static_cast<int16_t>(Run::kStored * odd)};
            std::memcpy(out + 4 * j, pair, sizeof(pair));
        }
    });
}

// Per token tile, half panel and block: per run the int16 chain of its
// quads' vpmaddubsw (wrapping adds), less the prepared bias pair, one
// vpmaddwd by the multiplier into the int32 total; then the float step.
// 2048 rows x 2048 columns x 256 tokens, one Zen 4 thread, the bias taken
// off per block in int32 against these runs, ms (two runs each, taking
// turns): IQ2_XXS 12.26-12.49 -> 11.88-12.08, IQ2_XS 12.37-12.44 -> 11.92-
// 11.96, IQ2_S 12.44-12.49 -> 11.94-11.95, IQ3_XXS 11.24-11.36 -> 10.42-
// 10.59, IQ3_S 10.34-10.83 -> 9.18-9.63, IQ1_S 10.57-10.83 -> 9.75, IQ1_M
// 10.94-11.13 -> 10.45-10.81. Less than the multiply ops fell (IQ2_*: 69
// -> 48 a unit of 8 rows x 4 tokens x 32 elements): a unit now issues 56
// loads, two a cycle, and ~150 instructions at ~4.5 a cycle (a standalone
// copy of the loop: 33 cycles a unit, 28 without the bias's broadcast and
// vpsubw). Both halves against two tokens (one broadcast, two vpmaddubsw)
// ran no faster; unrolling the runs, GCC spilled and ran slower.
template <class Dec, int kRun, bool kHalve = false>
void iq_gemm(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a, size_t a_stride,
             int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    using Run = IqRun<Dec, kHalve, kRun>;
    const int64_t nb = n_cols / kQK_K;
    const HalfIq* blocks = panel_avx2::unpack_panel<HalfIq, typename Dec::Block>(w, row_stride, n_rows, nb, buf,
                                                                                 unpack_iq<Dec, Dec::kMaxCode, kHalve>);
    panel_avx2::for_token_tiles<block_q8_K>(a, a_stride, n_tokens, n_rows, y, ldy, [&](int h, const block_q8_K* const* act, __m256* out) {
        const HalfIq* half = blocks + h * nb;
        const uint8_t* bias[NT];
        for (int t = 0; t < NT; ++t) bias[t] = panel_avx2::extras(act[t], nb);
        __m256 acc[NT];
        for (auto& v : acc) v = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const HalfIq& p = half[i];
            const size_t bias_at = Run::kExtraBytes * static_cast<size_t>(i);
            __m256i total[NT];
            for (auto& v : total) v = _mm256_setzero_si256();
            // Runs unrolled with their quads as constants: GCC otherwise kept
            // a loop of one quad (and the index arithmetic) inside each run.
            for (int j = 0; j < Run::kRuns; ++j) {
                const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.mult2[j * kRun / 4]));
                __m256i dot[NT];
                unroll<kRun>([&](auto k) {
                    const int q = kRun * j + k;
                    const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.codes[q]));
                    for (int t = 0; t < NT; ++t) {
                        const __m256i pr = _mm256_maddubs_epi16(wv, panel_avx2::bcast4(act[t][i].qs + 4 * q));
                        dot[t] = k == 0 ? pr : panel_avx2::add16(dot[t], pr);
                    }
                });
                for (int t = 0; t < NT; ++t) {
                    const __m256i exact = _mm256_sub_epi16(dot[t], panel_avx2::bcast4(bias[t] + bias_at + 4 * j));
                    total[t] = _mm256_add_epi32(total[t], _mm256_madd_epi16(exact, sc));
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

// IQ4_XS over token tiles, one half panel at a time: per token a block's
// total, starting from -128 x sum m_g x (its 32-element sums S_g, two
// groups a vpmaddwd), then per group g the planes' pair sums added in
// int16 over the group's eight quads (8 x 2 x 15 x 128 = 30720), widened
// and scaled by one vpmaddwd each. The four totals, eight int16 sums, two
// code registers and the broadcast take 15 of the 16 registers; the float
// sums wait in memory. Never inlined, as the signed-code loop before it
// (inside the caller GCC 12 spilled that loop's totals). One 16-row panel
// of 2048 columns x 512 tokens, one Zen 4 thread: 234.5 us with that
// loop, 221.6 with the planes and eight starts a block, 208.6 with these
// four.
[[gnu::noinline]] void iq4_xs_tiles(const HalfIq4xs* blocks, int64_t nb, const void* a, size_t a_stride,
                                    int64_t n_tokens, int64_t n_rows, float* y, int64_t ldy) {
    static_assert(8 * 2 * 15 * 128 <= 32767, "a group's nibble pair sums within int16");
    const auto* abase = static_cast<const uint8_t*>(a);
    const int n_halves = n_rows > kHalf ? 2 : 1;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += NT) {
        const block_q8_K* act[NT];
        const uint8_t* sums[NT];  // the pairs (S_2k, S_2k+1) iq4_xs_panel_prepare_avx2 appended
        for (int t = 0; t < NT; ++t) {
            act[t] = reinterpret_cast<const block_q8_K*>(abase + (t0 + t) * a_stride);
            sums[t] = panel_avx2::extras(act[t], nb);
        }
        for (int h = 0; h < n_halves; ++h) {
            alignas(32) float acc[NT][kHalf] = {};
            for (int64_t i = 0; i < nb; ++i) {
                const HalfIq4xs& p = blocks[h * nb + i];
                __m256i total[NT];
                const size_t pairs_at = kIq4xsPanelExtraBytesAvx2 * static_cast<size_t>(i);
                for (int k = 0; k < 4; ++k) {
                    const __m256i coef = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.start[k]));
                    for (int t = 0; t < NT; ++t) {
                        const __m256i s = _mm256_madd_epi16(coef, panel_avx2::bcast4(sums[t] + pairs_at + 4 * k));
                        total[t] = k == 0 ? s : _mm256_add_epi32(total[t], s);
                    }
                }
                for (int g = 0; g < 8; ++g) {
                    __m256i sum_hi[NT], sum_lo[NT];
#pragma GCC unroll 8
                    for (int q = 0; q < 8; ++q) {
                        const __m256i wh = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.hi[8 * g + q]));
                        const __m256i wl = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.lo[8 * g + q]));
                        for (int t = 0; t < NT; ++t) {
                            const __m256i av = panel_avx2::bcast4(act[t][i].qs + 32 * g + 4 * q);
                            const __m256i ph = _mm256_maddubs_epi16(wh, av), pl = _mm256_maddubs_epi16(wl, av);
                            sum_hi[t] = q == 0 ? ph : panel_avx2::add16(sum_hi[t], ph);
                            sum_lo[t] = q == 0 ? pl : panel_avx2::add16(sum_lo[t], pl);
                        }
                    }
                    const __m256i m16 = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.mult16[g]));
                    const __m256i m1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.mult[g]));
                    for (int t = 0; t < NT; ++t) {
                        total[t] = _mm256_add_epi32(total[t], _mm256_add_epi32(_mm256_madd_epi16(sum_hi[t], m16),
                                                                               _mm256_madd_epi16(sum_lo[t], m1)));
                    }
                }
                const __m256 d = _mm256_load_ps(p.d);
                for (int t = 0; t < NT; ++t) {
                    const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(total[t]), d);
                    _mm256_store_ps(acc[t], _mm256_fmadd_ps(_mm256_set1_ps(act[t][i].d), v, _mm256_load_ps(acc[t])));
                }
            }
            for (int t = 0; t < NT; ++t) {
                panel_avx2::store_rows(y + (t0 + t) * ldy + kHalf * h, _mm256_load_ps(acc[t]), static_cast<int>(n_rows - kHalf * h));
            }
        }
    }
}

}  // namespace

size_t iq_panel_bytes_avx2(int64_t n_cols) {
    return 2 * std::max(sizeof(HalfIq), sizeof(HalfIq4xs)) * static_cast<size_t>(n_cols / kQK_K);
}

void iq4_xs_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols) {
    TANDEM_CHECK(a_type == quant::Type::Q8_K, "iq4_xs panel: activations not Q8_K");
    static_assert(kIq4xsPanelExtraBytesAvx2 == 4 * sizeof(int32_t), "four pairs of 32-element sums");
    panel_avx2::for_each_row_block<block_q8_K>(row, n_cols / kQK_K, kIq4xsPanelExtraBytesAvx2, [](const block_q8_K& b, uint8_t* out) {
        // S_g = bsums 2g + 2g + 1 (|S_g| <= 32 x 128: an int16), as pairs.
        const __m256i s = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.bsums)), _mm256_set1_epi16(1));
        const __m128i packed = _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
    });
}

#define TANDEM_IQ_PANEL(name, Dec, run, halve)                                                                        \
    void name##_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,       \
                                size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {                \
        iq_gemm<Dec, run, halve>(w, row_stride, n_rows, n_cols, a, a_stride, n_tokens, y, ldy, buf);                   \
    }                                                                                                                  \
    void name##_panel_prepare_avx2(quant::Type a_type, void* row, int64_t n_cols) {                                    \
        iq_bias_prepare<IqRun<Dec, halve, run>>(a_type, row, n_cols);                                                  \
    }
TANDEM_IQ_PANEL(iq2_xxs, Iq2xxsDec, kIq2PanelRunAvx2, false)
TANDEM_IQ_PANEL(iq2_xs, Iq2xsDec, kIq2PanelRunAvx2, false)
TANDEM_IQ_PANEL(iq2_s, Iq2sDec, kIq2PanelRunAvx2, false)
TANDEM_IQ_PANEL(iq3_xxs, Iq3xxsDec, kIq3xxsPanelRunAvx2, true)
TANDEM_IQ_PANEL(iq3_s, Iq3sDec, kIq3sPanelRunAvx2, false)
TANDEM_IQ_PANEL(iq1_s, Iq1sDec, kIq1sPanelRunAvx2, false)
TANDEM_IQ_PANEL(iq1_m, Iq1mDec, kIq1mPanelRunAvx2, false)
#undef TANDEM_IQ_PANEL
void iq4_xs_panel_gemm_avx2(const void* w, size_t row_stride, int64_t n_rows, int64_t n_cols, const void* a,
                            size_t a_stride, int64_t n_tokens, float* y, int64_t ldy, void* buf) {
    const int64_t nb = n_cols / kQK_K;
    const HalfIq4xs* blocks = panel_avx2::unpack_panel<HalfIq4xs, block_iq4_xs>(w, row_stride, n_rows, nb, buf, unpack_iq4_xs);
    iq4_xs_tiles(blocks, nb, a, a_stride, n_tokens, n_rows, y, ldy);
}

}  // namespace tandem::cpu::detail
