// attention_decode.h's kernel with AVX2, F16C and FMA: 8-lane halves of
// ggml's 16-lane accumulators.
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "kernels_cpu/attention_decode_body.h"
#include "kernels_cpu/avx2/legacy_blocks_avx2.h"
#include "kernels_cpu/attention_tiled.h"  // widen_f16_avx2
#include "kernels_cpu/expf_lanes.h"
#include "kernels_cpu/f16_accumulate.h"
#include "runtime/quant/iq_tables.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

// f16_dot_ggml over a widened key and a query already rounded to fp16 and
// widened (both exact), in the reference's order: steps of 64 into four
// 16-lane accumulators (two 8-lane halves each), (0+2) + (1+3), the 16
// lanes halved 8+8, 4+4, then (0+2) + (1+3); the n % 64 tail in double.
float dot_ggml_f32(const float* k, const float* q, int64_t n) {
    constexpr int64_t kStep = 64;
    const int64_t np = n - n % kStep;
    double sum = 0.0;
    if (np > 0) {
        __m256 acc[4][2];
        for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
        for (int64_t i = 0; i < np; i += kStep) {
            for (int j = 0; j < 4; ++j) {
                for (int h = 0; h < 2; ++h) {
                    const int64_t e = i + 16 * j + 8 * h;
                    acc[j][h] = _mm256_fmadd_ps(_mm256_loadu_ps(k + e), _mm256_loadu_ps(q + e), acc[j][h]);
                }
            }
        }
        // lanes 0..7 and 8..15 of the 16-lane total
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0][0], acc[2][0]), _mm256_add_ps(acc[1][0], acc[3][0]));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[0][1], acc[2][1]), _mm256_add_ps(acc[1][1], acc[3][1]));
        const __m256 t8 = _mm256_add_ps(hi, lo);
        const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
        const __m128 ab = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));  // [t4 0 + t4 2, t4 1 + t4 3]
        sum = _mm_cvtss_f32(_mm_add_ss(ab, _mm_shuffle_ps(ab, ab, 1)));
    }
    for (int64_t e = np; e < n; ++e) sum += static_cast<double>(k[e] * q[e]);
    return static_cast<float>(sum);
}

// y = half(fma(x, s, float(y))) with x already widened (f16_mad's bits).
void mad_f16_acc(uint16_t* y, const float* x, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        auto* p = reinterpret_cast<__m128i*>(y + i);
        const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), sv, _mm256_cvtph_ps(_mm_loadu_si128(p)));
        _mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; ++i) y[i] = quant::fp32_to_fp16(std::fma(x[i], s, quant::fp16_to_fp32(y[i])));
}

constexpr auto kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

struct Avx2Ops {
    static void widen(const uint16_t* src, float* dst, int64_t n) { widen_f16_avx2(src, dst, n); }
    static float dot(const float* k, const float* q, int64_t n) { return dot_ggml_f32(k, q, n); }
    static void scale(uint16_t* y, float s, int64_t n) { f16_scale_avx2(y, s, n); }
    static void mad(uint16_t* y, const float* x, float s, int64_t n) { mad_f16_acc(y, x, s, n); }
    static void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n) {
        const auto* b = reinterpret_cast<const quant::block_q8_0*>(src);
        for (int64_t i = 0; i < n / quant::kQK8_0; ++i) {
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));  // F16C: the portable conversion is ~25 instructions a block
            for (int j = 0; j < quant::kQK8_0; j += 8) {
                const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + j)));
                _mm256_storeu_ps(dst + i * quant::kQK8_0 + j, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
    }
    // s[i] = dot(k + i * dk, q, dk) * scale for the tile's n cells: the
    // same bits, with the reductions of eight cells done together.
    static void dot_cells(const float* k, const float* q, int64_t n, int64_t dk, float scale, float* s);
    // s[i] = float_dot(k + i * dk, q, dk) * scale (quant::dot::float_dot,
    // a BF16 or F32 cache's order) for the tile's n cells: lanes 0-7 and
    // 8-15 of each cell in two chains, eight cells reduced together.
    static void float_dot_cells(const float* k, const float* q, int64_t n, int64_t dk, float scale, float* s);
    // A key's scores s[j][i] = dot(keys[i], query j) * scale for the first
    // queries in eights (their count returned; the rest take the block dot
    // kernel), for the legacy K types (Q8_0, Q5_0, Q4_1, Q5_1, Q4_0,
    // IQ4_NL; 0 for others): the dot kernel's bits (vec_dot_avx2.cpp's
    // LegacyDot), the key's blocks unpacked once for eight queries and
    // their eight sums reduced together.
    static size_t scores_legacy(quant::Type k_type, const uint8_t* const* keys, int64_t n, const uint8_t* q_act,
                                size_t q_bytes, size_t nq, int64_t dk, float scale, float (*s)[kTile]);
    // An F16 cache's V sums of a tile (accumulate_rows with scale and mad)
    // for heads of 64 or 128: false for other sizes, which take that loop.
    static bool accumulate_f16_in_registers(uint16_t* acc, size_t n_heads, const float* vt, int64_t n, int64_t dv,
                                            const SoftmaxSteps* st);
    // A block cache's V sums of a tile (accumulate_rows with scale_f32 and
    // mad_f32) for heads a multiple of 32: false for others.
    static bool accumulate_f32_in_registers(float* acc, size_t n_heads, const float* vt, int64_t n, int64_t dv,
                                            const SoftmaxSteps* st);
    // softmax_args_scalar's results eight cells at a time: the running
    // maximum before each cell as a prefix maximum (vmaxps keeps its
    // second operand on ties, here the earlier cell, as the scalar loop
    // keeps the old maximum when a score only equals it), then the same
    // comparison and subtractions. Chunks with a NaN, and a tile's last
    // few cells, take the scalar loop.
    static void softmax_args(const float* s, int64_t n, float& running_max, float* arg, bool* rescale);
    // The softmax steps' exps: eight per call where that gives std::exp's
    // bits (expf_lanes.h), else std::exp one by one.
    static void expf_lanes(const float* x, float* y, int64_t n) {
        static const bool agree = expf_lanes_agree(expf_lanes_avx2);
        if (agree) {
            expf_lanes_avx2(x, y, n);
            return;
        }
        for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
    }
    static void scale_f32(float* y, float s, int64_t n) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), _mm256_set1_ps(s)));
        for (; i < n; ++i) y[i] *= s;
    }
    static void mad_f32(float* y, const float* x, float s, int64_t n) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(s), _mm256_loadu_ps(y + i)));
        }
        for (; i < n; ++i) y[i] = std::fma(x[i], s, y[i]);
    }
};

// dot's 8 lanes of one cell before its last three halvings: lanes 0..7
// plus 8..15 of the (0+2) + (1+3) sum of the four 16-lane accumulators,
// over Steps steps of 64 (q: the query's 8-lane chunks, in registers when
// the compiler can keep them).
template <int Steps>
inline __m256 dot_lanes(const float* k, const __m256* q) {
    __m256 acc[4][2];
    for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
    for (int i = 0; i < Steps; ++i) {
        for (int j = 0; j < 4; ++j) {
            for (int h = 0; h < 2; ++h) {
                const int e = 8 * i + 2 * j + h;
                acc[j][h] = _mm256_fmadd_ps(_mm256_loadu_ps(k + 8 * e), q[e], acc[j][h]);
            }
        }
    }
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0][0], acc[2][0]), _mm256_add_ps(acc[1][0], acc[3][0]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[0][1], acc[2][1]), _mm256_add_ps(acc[1][1], acc[3][1]));
    return _mm256_add_ps(hi, lo);
}

// dot's last halvings of two cells' lanes a and b: [t4 of a | t4 of b],
// t4_i = lane i + lane i + 4 (addition commutes exactly).
inline __m256 halve_pair(__m256 a, __m256 b) {
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

// Per 128-bit half: [ab_0, ab_1] of x's cell (its high half: x's second
// cell), then of y's; ab_m = t4_m + t4_m+2.
inline __m256 halve_quad(__m256 x, __m256 y) {
    return _mm256_add_ps(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Eight cells' scores, their reductions done together, each sum formed
// from the same pairs as dot's: cells 2p and 2p + 1 halved as they come
// (few registers live beside the query's), then ab_0 + ab_1 for all eight,
// cells 0, 2, 4, 6 | 1, 3, 5, 7, put in order.
template <int Steps>
inline __m256 dot_8_cells(const float* k, const __m256* q, int64_t dk) {
    const auto pair = [&](int c) { return halve_pair(dot_lanes<Steps>(k + c * dk, q), dot_lanes<Steps>(k + (c + 1) * dk, q)); };
    const __m256 ab0 = halve_quad(pair(0), pair(2));
    const __m256 ab1 = halve_quad(pair(4), pair(6));
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(ab0, ab1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(ab0, ab1, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <int Steps>
int64_t dot_cells_steps(const float* k, const float* q, int64_t n, float scale, float* s) {
    constexpr int64_t dk = 64 * Steps;
    __m256 qv[8 * Steps];
    for (int e = 0; e < 8 * Steps; ++e) qv[e] = _mm256_loadu_ps(q + 8 * e);
    const __m256 sv = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(s + i, _mm256_mul_ps(dot_8_cells<Steps>(k + i * dk, qv, dk), sv));
    return i;
}

void Avx2Ops::dot_cells(const float* k, const float* q, int64_t n, int64_t dk, float scale, float* s) {
    int64_t i = 0;
    if (dk == 64) i = dot_cells_steps<1>(k, q, n, scale, s);
    if (dk == 128) i = dot_cells_steps<2>(k, q, n, scale, s);
    for (; i < n; ++i) s[i] = dot_ggml_f32(k + i * dk, q, dk) * scale;
}

// hsum (simd_x86.h) of eight 8-lane sums at once, in their order: the
// same pairs added as hsum adds them (lane i + lane i + 4, then m + m + 2,
// then 0 + 1).
inline __m256 hsum_8(const __m256* x) {
    const __m256 ab0 = halve_quad(halve_pair(x[0], x[1]), halve_pair(x[2], x[3]));
    const __m256 ab1 = halve_quad(halve_pair(x[4], x[5]), halve_pair(x[6], x[7]));
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(ab0, ab1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(ab0, ab1, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// vec_dot_avx2.cpp's LegacyDot for one key and eight queries, its chain
// types (Q8_0, Q5_0, Q4_1, Q5_1: codes by legacy_blocks_avx2.h): per query
// one 8-lane chain, block after block, acc = fma(dx * dy, float(the
// block's pairwise integer sums), acc), and for the types with a minimum a
// second chain accm = fma(m, the activation block's sum, accm) (lane r:
// query r, the same operation); the result hsum(acc) + accm (+ 0 without
// a minimum), then times the scale as BlockKeys's.
template <class U>
size_t scores_chains(const uint8_t* const* keys, int64_t n, const uint8_t* q_act, size_t q_bytes, size_t nq, int64_t dk,
                     float scale, float (*s)[kTile]) {
    using W = typename U::W;
    using A = typename U::A;
    const int64_t nb = dk / quant::kQK8_0;
    const __m256 sv = _mm256_set1_ps(scale);
    size_t j0 = 0;
    for (; j0 + 8 <= nq; j0 += 8) {
        const A* y[8];
        for (size_t r = 0; r < 8; ++r) y[r] = reinterpret_cast<const A*>(q_act + (j0 + r) * q_bytes);
        for (int64_t i = 0; i < n; ++i) {
            const auto* x = reinterpret_cast<const W*>(keys[i]);
            __m256 acc[8];
            for (auto& a : acc) a = _mm256_setzero_ps();
            __m256 accm = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                const __m256i q = U::unpack(x[b]);
                const __m256i qu = legacy_avx2::abs_codes<U>(q);
                const float dx = _cvtsh_ss(x[b].d);
                for (size_t r = 0; r < 8; ++r) {
                    const __m256i si = legacy_avx2::block_sums<U>(q, qu, y[r][b].qs);
                    const __m256 d = _mm256_set1_ps(dx * _cvtsh_ss(y[r][b].d));
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(si), acc[r]);
                }
                if constexpr (legacy_avx2::kHasMin<U>) {
                    const __m128i sy = _mm_setr_epi16(static_cast<short>(y[0][b].s), static_cast<short>(y[1][b].s),
                                                      static_cast<short>(y[2][b].s), static_cast<short>(y[3][b].s),
                                                      static_cast<short>(y[4][b].s), static_cast<short>(y[5][b].s),
                                                      static_cast<short>(y[6][b].s), static_cast<short>(y[7][b].s));
                    accm = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(x[b].m)), _mm256_cvtph_ps(sy), accm);
                }
            }
            alignas(32) float out[8];
            _mm256_store_ps(out, _mm256_mul_ps(_mm256_add_ps(hsum_8(acc), accm), sv));
            for (size_t r = 0; r < 8; ++r) s[j0 + r][i] = out[r];
        }
    }
    return j0;
}

void Avx2Ops::float_dot_cells(const float* k, const float* q, int64_t n, int64_t dk, float scale, float* s) {
    int64_t i = 0;
    if (dk % 16 == 0) {
        const __m256 sv = _mm256_set1_ps(scale);
        for (; i + 8 <= n; i += 8) {
            // float_dot's lanes l and l + 8 of each 16-element step in two
            // chains, added lane by lane; hsum_8 is its tree of eight.
            __m256 v[8];
            for (int c = 0; c < 8; ++c) {
                const float* kc = k + (i + c) * dk;
                __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
                for (int64_t j = 0; j < dk; j += 16) {
                    lo = _mm256_fmadd_ps(_mm256_loadu_ps(kc + j), _mm256_loadu_ps(q + j), lo);
                    hi = _mm256_fmadd_ps(_mm256_loadu_ps(kc + j + 8), _mm256_loadu_ps(q + j + 8), hi);
                }
                v[c] = _mm256_add_ps(lo, hi);
            }
            _mm256_storeu_ps(s + i, _mm256_mul_ps(hsum_8(v), sv));
        }
    }
    for (; i < n; ++i) s[i] = quant::dot::float_dot<float>(dk, k + i * dk, q) * scale;
}

// The integer totals of eight 8-lane sums (exact: any order).
inline __m256i hsum_8_i32(const __m256i* x) {
    const __m256i g0 = _mm256_hadd_epi32(_mm256_hadd_epi32(x[0], x[1]), _mm256_hadd_epi32(x[2], x[3]));
    const __m256i g1 = _mm256_hadd_epi32(_mm256_hadd_epi32(x[4], x[5]), _mm256_hadd_epi32(x[6], x[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

// LegacyDot for one key and eight queries, its block-total types (Q4_0,
// IQ4_NL: Q8_0 activations): per query a float chain, block after block,
// total = fma(float(the block's integer total), dw * dy, total), eight
// lanes at once.
template <class U>
size_t scores_block_totals(const uint8_t* const* keys, int64_t n, const uint8_t* q_act, size_t q_bytes, size_t nq,
                           int64_t dk, float scale, float (*s)[kTile]) {
    using W = typename U::W;
    const int64_t nb = dk / quant::kQK8_0;
    const __m256 sv = _mm256_set1_ps(scale);
    size_t j0 = 0;
    for (; j0 + 8 <= nq; j0 += 8) {
        const quant::block_q8_0* y[8];
        for (size_t r = 0; r < 8; ++r) y[r] = reinterpret_cast<const quant::block_q8_0*>(q_act + (j0 + r) * q_bytes);
        for (int64_t i = 0; i < n; ++i) {
            const auto* x = reinterpret_cast<const W*>(keys[i]);
            __m256 total = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                const __m256i q = U::unpack(x[b]);
                const __m256i qu = legacy_avx2::abs_codes<U>(q);
                __m256i si[8];
                for (size_t r = 0; r < 8; ++r) si[r] = legacy_avx2::block_sums<U>(q, qu, y[r][b].qs);
                const __m128i dy16 = _mm_setr_epi16(static_cast<short>(y[0][b].d), static_cast<short>(y[1][b].d),
                                                    static_cast<short>(y[2][b].d), static_cast<short>(y[3][b].d),
                                                    static_cast<short>(y[4][b].d), static_cast<short>(y[5][b].d),
                                                    static_cast<short>(y[6][b].d), static_cast<short>(y[7][b].d));
                const __m256 dd = _mm256_mul_ps(_mm256_set1_ps(U::weight_scale(x[b])), _mm256_cvtph_ps(dy16));
                total = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum_8_i32(si)), dd, total);
            }
            alignas(32) float out[8];
            _mm256_store_ps(out, _mm256_mul_ps(total, sv));
            for (size_t r = 0; r < 8; ++r) s[j0 + r][i] = out[r];
        }
    }
    return j0;
}

size_t Avx2Ops::scores_legacy(quant::Type k_type, const uint8_t* const* keys, int64_t n, const uint8_t* q_act,
                              size_t q_bytes, size_t nq, int64_t dk, float scale, float (*s)[kTile]) {
    using namespace legacy_avx2;
    const auto run = [&]<class U>() {
        if constexpr (U::kBlockTotal) {
            return scores_block_totals<U>(keys, n, q_act, q_bytes, nq, dk, scale, s);
        } else {
            return scores_chains<U>(keys, n, q_act, q_bytes, nq, dk, scale, s);
        }
    };
    switch (k_type) {
        case quant::Type::Q8_0: return run.template operator()<UQ8_0>();
        case quant::Type::Q5_0: return run.template operator()<UQ5_0>();
        case quant::Type::Q4_1: return run.template operator()<UQ4_1>();
        case quant::Type::Q5_1: return run.template operator()<UQ5_1>();
        case quant::Type::Q4_0: return run.template operator()<UQ4_0>();
        case quant::Type::IQ4_NL: return run.template operator()<UIQ4_NL>();
        default: return 0;
    }
}

// Lane i: x's lane i - k, fill below k.
template <int k>
inline __m256 shift_lanes_up(__m256 x, __m256 fill) {
    const __m256i idx = _mm256_max_epi32(_mm256_sub_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(k)),
                                         _mm256_setzero_si256());
    return _mm256_blend_ps(_mm256_permutevar8x32_ps(x, idx), fill, (1 << k) - 1);
}

void Avx2Ops::softmax_args(const float* s, int64_t n, float& running_max, float* arg, bool* rescale) {
    const __m256 minus_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    float m = running_max;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(s + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
            softmax_args_scalar(s + i, 8, m, arg + i, rescale + i);
            continue;
        }
        // Inclusive prefix maximum, the later cells always first operand.
        __m256 p = x;
        p = _mm256_max_ps(p, shift_lanes_up<1>(p, minus_inf));
        p = _mm256_max_ps(p, shift_lanes_up<2>(p, minus_inf));
        p = _mm256_max_ps(p, shift_lanes_up<4>(p, minus_inf));
        const __m256 before = _mm256_set1_ps(m);
        p = _mm256_max_ps(p, before);
        const __m256 met = shift_lanes_up<1>(p, before);  // the maximum each cell meets
        const __m256 up = _mm256_cmp_ps(x, met, _CMP_GT_OQ);
        _mm256_storeu_ps(arg + i, _mm256_blendv_ps(_mm256_sub_ps(x, met), _mm256_sub_ps(met, x), up));
        const __m256i one = _mm256_and_si256(_mm256_castps_si256(up), _mm256_set1_epi32(1));
        const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(one), _mm256_extracti128_si256(one, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(rescale + i), _mm_packs_epi16(words, words));
        m = _mm_cvtss_f32(_mm256_extractf128_ps(_mm256_permute_ps(p, _MM_SHUFFLE(3, 3, 3, 3)), 1));
    }
    softmax_args_scalar(s + i, n - i, m, arg + i, rescale + i);
    running_max = m;
}

// An accumulator of 8 lanes held in a register: fp16 (rounded after every
// step, as scale and mad store it) or f32 (as scale_f32 and mad_f32).
template <class Acc>
struct Lanes;

template <>
struct Lanes<uint16_t> {
    static __m256 load(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static void store(uint16_t* p, __m256 x) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, kRound)); }
    static __m256 round(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, kRound)); }
};

template <>
struct Lanes<float> {
    static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, __m256 x) { _mm256_storeu_ps(p, x); }
    static __m256 round(__m256 x) { return x; }
};

// The V sums of a tile for NH heads over C 8-lane chunks of their rows
// (from chunk j0), the accumulators held in registers across the tile's
// cells: the roundings of scale and mad, one cell after another per head
// and lane, so the same bits, without a store and reload of every
// accumulator every cell (for fp16 a convert each way too).
template <int C, int NH, class Acc>
void accumulate_heads(Acc* acc, int64_t dv, int64_t j0, const float* vt, int64_t n, const SoftmaxSteps* st) {
    using L = Lanes<Acc>;
    __m256 a[NH][C];
    for (int h = 0; h < NH; ++h) {
        for (int j = 0; j < C; ++j) a[h][j] = L::load(acc + h * dv + 8 * (j0 + j));
    }
    for (int64_t i = 0; i < n; ++i) {
        const float* v = vt + i * dv + 8 * j0;
        for (int h = 0; h < NH; ++h) {
            if (st[h].rescale[i]) {
                const __m256 f = _mm256_set1_ps(st[h].factor[i]);
                for (int j = 0; j < C; ++j) a[h][j] = L::round(_mm256_mul_ps(a[h][j], f));
            }
            const __m256 w = _mm256_set1_ps(st[h].weight[i]);
            for (int j = 0; j < C; ++j) a[h][j] = L::round(_mm256_fmadd_ps(_mm256_loadu_ps(v + 8 * j), w, a[h][j]));
        }
    }
    for (int h = 0; h < NH; ++h) {
        for (int j = 0; j < C; ++j) L::store(acc + h * dv + 8 * (j0 + j), a[h][j]);
    }
}

// Heads in passes of C * NH accumulator registers, then the rest two and
// one at a time; rows of dv in chunks of C. Each fp16 accumulator's chain
// of fma, round, widen is ~20 cycles long: twelve chains (of 16 registers)
// keep the converts busy where eight wait (4 x 3 measured 3-5% faster
// than 8 x 1, 4 x 2 and 2 x 6 on Zen 3).
template <int C, int NH, class Acc>
void accumulate_in_registers(Acc* acc, size_t n_heads, const float* vt, int64_t n, int64_t dv, const SoftmaxSteps* st) {
    const auto udv = static_cast<size_t>(dv);
    for (int64_t j0 = 0; j0 < dv / 8; j0 += C) {
        size_t h = 0;
        for (; h + NH <= n_heads; h += NH) accumulate_heads<C, NH>(acc + h * udv, dv, j0, vt, n, st + h);
        if constexpr (NH > 2) {
            for (; h + 2 <= n_heads; h += 2) accumulate_heads<C, 2>(acc + h * udv, dv, j0, vt, n, st + h);
        }
        for (; h < n_heads; ++h) accumulate_heads<C, 1>(acc + h * udv, dv, j0, vt, n, st + h);
    }
}

bool Avx2Ops::accumulate_f16_in_registers(uint16_t* acc, size_t n_heads, const float* vt, int64_t n, int64_t dv,
                                          const SoftmaxSteps* st) {
    if (dv != 64 && dv != 128) return false;
    accumulate_in_registers<4, 3>(acc, n_heads, vt, n, dv, st);
    return true;
}

bool Avx2Ops::accumulate_f32_in_registers(float* acc, size_t n_heads, const float* vt, int64_t n, int64_t dv,
                                          const SoftmaxSteps* st) {
    if (dv % 32 != 0) return false;
    // Two heads of four registers: f32 sums need no rounding step, and
    // three heads' twelve plus the row's four spilled one accumulator (a
    // store and reload every cell on its chain).
    accumulate_in_registers<4, 2>(acc, n_heads, vt, n, dv, st);
    return true;
}

}  // namespace

void attention_shared_kv_avx2(const SharedQueries& qs, const AttentionShape& shape, const KvCacheView& kv,
                              DotFn block_dot, const ChunkRange& range) {
    shared_kv_attention_for<Avx2Ops>(qs, shape, kv, block_dot, range);
}

}  // namespace tandem::cpu::detail
