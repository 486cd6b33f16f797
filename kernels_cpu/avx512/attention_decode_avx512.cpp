// attention_decode.h's kernel with AVX-512: ggml's 16-lane accumulators are
// one register each, and V rows go 16 halves at a time.
#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels_cpu/attention_decode_body.h"
#include "kernels_cpu/expf_lanes.h"
#include "kernels_cpu/f16_accumulate.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::cpu::detail {
namespace {

constexpr auto kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

struct Avx512Ops {
    // A row's loads before its conversions and stores: a slice not yet in
    // L1 then costs one wait, not one a conversion (16384 cells from
    // memory, ms a layer as in attention_decode_body.h: 3.14-3.66 ->
    // 2.98-3.46).
    static void widen(const uint16_t* src, float* dst, int64_t n) {
        int64_t i = 0;
        for (; i + 64 <= n; i += 64) {
            __m256i h[4];
            for (int j = 0; j < 4; ++j) h[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 16 * j));
            for (int j = 0; j < 4; ++j) _mm512_storeu_ps(dst + i + 16 * j, _mm512_cvtph_ps(h[j]));
        }
        for (; i + 16 <= n; i += 16) {
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
        }
        for (; i < n; ++i) dst[i] = quant::fp16_to_fp32(src[i]);
    }
    // f16_dot_ggml's order: four 16-lane accumulators over steps of 64,
    // (0+2) + (1+3), lanes halved 8+8, 4+4, (0+2) + (1+3); tail in double.
    static float dot(const float* k, const float* q, int64_t n) {
        constexpr int64_t kStep = 64;
        const int64_t np = n - n % kStep;
        double sum = 0.0;
        if (np > 0) {
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (int64_t i = 0; i < np; i += kStep) {
                for (int j = 0; j < 4; ++j) {
                    acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 16 * j), _mm512_loadu_ps(q + i + 16 * j), acc[j]);
                }
            }
            const __m512 lanes = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
            const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lanes), 1));  // AVX512F only
            const __m256 t8 = _mm256_add_ps(high, _mm512_castps512_ps256(lanes));
            const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
            const __m128 ab = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
            sum = _mm_cvtss_f32(_mm_add_ss(ab, _mm_shuffle_ps(ab, ab, 1)));
        }
        for (int64_t e = np; e < n; ++e) sum += static_cast<double>(k[e] * q[e]);
        return static_cast<float>(sum);
    }
    // s[i] = dot(k + i * dk, q, dk) * scale for the tile's n cells: the
    // same bits, with the lanes of sixteen cells reduced together (one
    // cell's reduction alone is eight dependent shuffles and adds, about a
    // tenth of the kernel's time).
    static void dot_cells(const float* k, const float* q, int64_t n, int64_t dk, float scale, float* s);
    // s[i] = float_dot(k + i * dk, q, dk) * scale (quant::dot::float_dot,
    // a BF16 or F32 cache's order) for the tile's n cells: one 16-lane
    // chain a cell, sixteen cells reduced together as dot_cells does.
    static void float_dot_cells(const float* k, const float* q, int64_t n, int64_t dk, float scale, float* s);
    static void scale(uint16_t* y, float s, int64_t n) {
        const __m512 sv = _mm512_set1_ps(s);
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            auto* p = reinterpret_cast<__m256i*>(y + i);
            _mm256_storeu_si256(p, _mm512_cvtps_ph(_mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(p)), sv), kRound));
        }
        f16_scale_scalar(y + i, s, n - i);
    }
    static void mad(uint16_t* y, const float* x, float s, int64_t n) {
        const __m512 sv = _mm512_set1_ps(s);
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            auto* p = reinterpret_cast<__m256i*>(y + i);
            const __m512 v = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), sv, _mm512_cvtph_ps(_mm256_loadu_si256(p)));
            _mm256_storeu_si256(p, _mm512_cvtps_ph(v, kRound));
        }
        for (; i < n; ++i) y[i] = quant::fp32_to_fp16(std::fma(x[i], s, quant::fp16_to_fp32(y[i])));
    }
    static void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n) {
        const auto* b = reinterpret_cast<const quant::block_q8_0*>(src);
        for (int64_t i = 0; i < n / quant::kQK8_0; ++i) {
            const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));  // F16C: the portable conversion is ~25 instructions a block
            for (int j = 0; j < quant::kQK8_0; j += 16) {
                const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + j)));
                _mm512_storeu_ps(dst + i * quant::kQK8_0 + j, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
            }
        }
    }
    static void scale_f32(float* y, float s, int64_t n) {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), _mm512_set1_ps(s)));
        for (; i < n; ++i) y[i] *= s;
    }
    static void mad_f32(float* y, const float* x, float s, int64_t n) {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(s), _mm512_loadu_ps(y + i)));
        }
        for (; i < n; ++i) y[i] = std::fma(x[i], s, y[i]);
    }
    // softmax_args_scalar's results sixteen cells at a time: the running
    // maximum before each cell as a prefix maximum (vmaxps keeps its
    // second operand on ties, here the earlier cell, as the scalar loop
    // keeps the old maximum when a score only equals it), then the same
    // comparison and subtractions. Chunks with a NaN take the scalar loop.
    static void softmax_args(const float* s, int64_t n, float& running_max, float* arg, bool* rescale);
    // The softmax steps' exps: eight per instruction where that gives
    // std::exp's bits (expf_lanes.h), else std::exp one by one.
    static void expf_lanes(const float* x, float* y, int64_t n) {
        static const bool agree = expf_lanes_agree(expf_lanes_avx512);
        if (agree) {
            expf_lanes_avx512(x, y, n);
            return;
        }
        for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
    }
    // An F16 cache's V sums of a tile (accumulate_rows with scale and mad)
    // for heads of 64 or 128: false for other sizes, which take that loop.
    static bool accumulate_f16_in_registers(uint16_t* acc, size_t n_heads, const float* vt, int64_t n, int64_t dv,
                                            const SoftmaxSteps* st);
};

// dot's 16 lanes of one cell before its reduction: (0+2) + (1+3) of the
// four accumulators, for dk a multiple of 64.
inline __m512 dot_lanes(const float* k, const __m512* q, int64_t dk) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < dk; i += 64) {
        for (int j = 0; j < 4; ++j) acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 16 * j), q[i / 16 + j], acc[j]);
    }
    return _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
}

// dot's reduction of the lanes of sixteen cells at once, each sum formed
// from the same pairs as there (lane i with i + 8, then with i + 4, then
// with i + 2, then 0 with 1; addition commutes exactly): cell c's result
// in lane c.
inline __m512 reduce_16_cells(const __m512* lanes) {
    // [s_a 0..7 | s_b 0..7] per pair of cells, s_i = lane i + lane i + 8.
    __m512 s8[8];
    for (int p = 0; p < 8; ++p) {
        s8[p] = _mm512_add_ps(_mm512_shuffle_f32x4(lanes[2 * p], lanes[2 * p + 1], 0x44),
                              _mm512_shuffle_f32x4(lanes[2 * p], lanes[2 * p + 1], 0xEE));
    }
    // [t_a | t_b | t_c | t_d] per four cells, t_j = s_j + s_j + 4.
    __m512 t4[4];
    for (int p = 0; p < 4; ++p) {
        t4[p] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[2 * p], s8[2 * p + 1], 0x88),
                              _mm512_shuffle_f32x4(s8[2 * p], s8[2 * p + 1], 0xDD));
    }
    // 128-bit lane k: [u(k), u(4 + k)] of cells 0..7, then of 8..15, with
    // u_m = t_m + t_m + 2 (two words each).
    __m512 u2[2];
    for (int p = 0; p < 2; ++p) {
        u2[p] = _mm512_add_ps(_mm512_shuffle_ps(t4[2 * p], t4[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(t4[2 * p], t4[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    // Lane 4 k + m: cell k + 4 m, = u_0 + u_1; then cells in order.
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(u2[0], u2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(u2[0], u2[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

// s[i] = (cell i's dot with q) * scale for the tile's n cells: sixteen at a
// time where `vector` holds (dk <= 256 besides), each cell's 16 lanes by
// lanes_of(key, q's registers) and their reductions together
// (reduce_16_cells), the other cells one by one through one(key).
template <class LanesOf, class One>
void scores_16_cells(const float* k, const float* q, int64_t n, int64_t dk, float scale, float* s, bool vector,
                     LanesOf lanes_of, One one) {
    constexpr int64_t kMaxDk = 256;  // Gemma's heads; q on the stack (in registers up to 128)
    int64_t i = 0;
    if (vector && dk <= kMaxDk) {
        __m512 qv[kMaxDk / 16];
        for (int64_t j = 0; j < dk / 16; ++j) qv[j] = _mm512_loadu_ps(q + 16 * j);
        const __m512 sv = _mm512_set1_ps(scale);
        for (; i + 16 <= n; i += 16) {
            __m512 lanes[16];
            for (int c = 0; c < 16; ++c) lanes[c] = lanes_of(k + (i + c) * dk, qv);
            _mm512_storeu_ps(s + i, _mm512_mul_ps(reduce_16_cells(lanes), sv));
        }
    }
    for (; i < n; ++i) s[i] = one(k + i * dk) * scale;
}

void Avx512Ops::dot_cells(const float* k, const float* q, int64_t n, int64_t dk, float scale, float* s) {
    scores_16_cells(
        k, q, n, dk, scale, s, dk % 64 == 0, [dk](const float* kc, const __m512* qv) { return dot_lanes(kc, qv, dk); },
        [q, dk](const float* kc) { return dot(kc, q, dk); });
}

void Avx512Ops::float_dot_cells(const float* k, const float* q, int64_t n, int64_t dk, float scale, float* s) {
    // float_dot's lane l: elements 16 j + l, one chain over j; its finish
    // (l + l + 8, then the tree of eight) is reduce_16_cells's.
    const auto lanes_of = [dk](const float* kc, const __m512* qv) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < dk / 16; ++j) acc = _mm512_fmadd_ps(_mm512_loadu_ps(kc + 16 * j), qv[j], acc);
        return acc;
    };
    scores_16_cells(k, q, n, dk, scale, s, dk % 16 == 0, lanes_of,
                    [q, dk](const float* kc) { return quant::dot::float_dot<float>(dk, kc, q); });
}

// Lane i: x's lane i - k, fill below k.
template <int k>
inline __m512 shift_lanes_up(__m512 x, __m512 fill) {
    return _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(x), _mm512_castps_si512(fill), 16 - k));
}

void Avx512Ops::softmax_args(const float* s, int64_t n, float& running_max, float* arg, bool* rescale) {
    const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t i = 0; i < n; i += 16) {
        const int len = static_cast<int>(std::min<int64_t>(16, n - i));
        const auto live = static_cast<__mmask16>((1u << len) - 1u);
        // Lanes past the tile hold -inf: after every live lane, they
        // change no live lane's maximum.
        const __m512 x = _mm512_mask_loadu_ps(minus_inf, live, s + i);
        if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0) {
            softmax_args_scalar(s + i, len, running_max, arg + i, rescale + i);
            continue;
        }
        // Inclusive prefix maximum, the later cells always first operand.
        __m512 p = x;
        p = _mm512_max_ps(p, shift_lanes_up<1>(p, minus_inf));
        p = _mm512_max_ps(p, shift_lanes_up<2>(p, minus_inf));
        p = _mm512_max_ps(p, shift_lanes_up<4>(p, minus_inf));
        p = _mm512_max_ps(p, shift_lanes_up<8>(p, minus_inf));
        const __m512 before = _mm512_set1_ps(running_max);
        p = _mm512_max_ps(p, before);
        const __m512 m = shift_lanes_up<1>(p, before);  // the maximum each cell meets
        const __mmask16 up = _mm512_mask_cmp_ps_mask(live, x, m, _CMP_GT_OQ);
        _mm512_mask_storeu_ps(arg + i, live, _mm512_mask_blend_ps(up, _mm512_sub_ps(x, m), _mm512_sub_ps(m, x)));
        _mm_mask_storeu_epi8(rescale + i, live, _mm_maskz_set1_epi8(up, 1));
        running_max = _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32(len - 1), p));
    }
}

// x rounded to fp16 and widened back: the value an fp16 accumulator keeps.
inline __m512 round_to_f16(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, kRound)); }

// The V sums of a tile for NH heads of C 16-lane chunks, their fp16
// accumulators held widened in registers across the tile's cells: the
// roundings of scale and mad, one cell after another per head, so the same
// bits, without a store and reload of every accumulator every cell (mad
// from memory was a quarter of the decode attention's time, its fp16
// stores the hottest instruction).
template <int C, int NH>
void accumulate_heads(uint16_t* acc, const float* vt, int64_t n, const SoftmaxSteps* st) {
    constexpr int64_t dv = 16 * C;
    __m512 a[NH][C];
    for (int h = 0; h < NH; ++h) {
        for (int j = 0; j < C; ++j) a[h][j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + h * dv + 16 * j)));
    }
    for (int64_t i = 0; i < n; ++i) {
        const float* v = vt + i * dv;
        for (int h = 0; h < NH; ++h) {
            if (st[h].rescale[i]) {
                const __m512 f = _mm512_set1_ps(st[h].factor[i]);
                for (int j = 0; j < C; ++j) a[h][j] = round_to_f16(_mm512_mul_ps(a[h][j], f));
            }
            const __m512 w = _mm512_set1_ps(st[h].weight[i]);
            for (int j = 0; j < C; ++j) a[h][j] = round_to_f16(_mm512_fmadd_ps(_mm512_loadu_ps(v + 16 * j), w, a[h][j]));
        }
    }
    for (int h = 0; h < NH; ++h) {
        for (int j = 0; j < C; ++j) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + h * dv + 16 * j), _mm512_cvtps_ph(a[h][j], kRound));
        }
    }
}

// Heads in passes of 16 accumulator registers, then the rest one by one.
template <int C>
void accumulate_in_registers(uint16_t* acc, size_t n_heads, const float* vt, int64_t n, const SoftmaxSteps* st) {
    constexpr size_t kHeads = 16 / C;
    constexpr size_t dv = 16 * C;
    size_t h = 0;
    for (; h + kHeads <= n_heads; h += kHeads) accumulate_heads<C, kHeads>(acc + h * dv, vt, n, st + h);
    for (; h < n_heads; ++h) accumulate_heads<C, 1>(acc + h * dv, vt, n, st + h);
}

bool Avx512Ops::accumulate_f16_in_registers(uint16_t* acc, size_t n_heads, const float* vt, int64_t n, int64_t dv,
                                            const SoftmaxSteps* st) {
    if (dv == 64) {
        accumulate_in_registers<4>(acc, n_heads, vt, n, st);
        return true;
    }
    if (dv == 128) {
        accumulate_in_registers<8>(acc, n_heads, vt, n, st);
        return true;
    }
    return false;
}

}  // namespace

void attention_shared_kv_avx512(const SharedQueries& qs, const AttentionShape& shape, const KvCacheView& kv,
                                DotFn block_dot, const ChunkRange& range) {
    shared_kv_attention_for<Avx512Ops>(qs, shape, kv, block_dot, range);
}

}  // namespace tandem::cpu::detail
