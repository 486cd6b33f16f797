// The integer block sums of every quantized dot product, and the float
// order that combines them, written once for the host and the device. The
// CPU's scalar reference (kernels_cpu/vec_dot_scalar.cpp) is these
// functions run in a loop, every SIMD kernel is tested bit for bit against
// that reference, and the CUDA kernels (block_dot_kernel in
// kernels_cuda/matmul.cu, the i-quants' in matmul_iq.cu) run the same
// functions spread over a warp: so a GPU product gives the CPU's bits.
//
// The math, per weight row w and activation row a (the weight type's
// partner: Q8_0, Q8_1 or Q8_K), over the row's blocks i in order:
//   part(w_i, a_i)         exact integers (sums of code products, 4 at a
//                          time: dot4) and the block's float scales;
//   step(acc_l, acc2_l, p, l) for each float lane l < kLanes: one fused
//                          multiply-add into lane l's accumulator; lane 0
//                          also steps the second chain acc2_0 (minimum
//                          terms; IQ1_M steps a second set of lanes);
//   finish(acc, acc2)      the lanes summed as ((0+4)+(2+6)) + ((1+5)+(3+7))
//                          (or the one lane), then acc2 added or subtracted.
// The integers may be summed in any order; the float steps may not. Each
// lane is a chain of its own, so lanes (and rows, and tokens) run in
// parallel while each chain runs its blocks in order.
//
// The orders are llama.cpp's CPU backend's on x86: Q4_0 one total per
// block; the other 32-element formats eight lanes of four consecutive
// elements; Q3_K/Q5_K/Q6_K eight lanes of
// elements 4l..4l+3 of each 32-element chunk; Q2_K/Q4_K spans of whole
// chunks. A batch (Form::Batch, see cpu BatchForm) multiplies some K types
// in another order: spans of 4 (Q2_K) or 2 (Q4_K) chunks, or one
// multiply-add per super-block (Q3_K, Q5_K, Q6_K: "tiled").
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/quant/quant_blocks.h"
#include "runtime/quant/quant_element.h"
#include "runtime/quant/quant_types.h"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace tandem::quant::dot {

TANDEM_HOST_DEVICE float fma_f(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return fmaf(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}

// Sum of the products of four signed bytes packed in a and b.
TANDEM_HOST_DEVICE int dot4(uint32_t a, uint32_t b, int acc) {
#if defined(__CUDA_ARCH__)
    return __dp4a(static_cast<int>(a), static_cast<int>(b), acc);
#else
    for (int e = 0; e < 4; ++e) {
        acc += static_cast<int8_t>(a >> (8 * e)) * static_cast<int8_t>(b >> (8 * e));
    }
    return acc;
#endif
}

// Four bytes, each minus `off` (wrapping per byte: codes 0..63 minus an
// offset up to 32 stay in int8).
TANDEM_HOST_DEVICE uint32_t sub4(uint32_t v, uint32_t off) {
#if defined(__CUDA_ARCH__)
    return __vsub4(v, off * 0x01010101u);
#else
    uint32_t r = 0;
    for (int e = 0; e < 4; ++e) r |= ((((v >> (8 * e)) & 0xFFu) - off) & 0xFFu) << (8 * e);
    return r;
#endif
}

TANDEM_HOST_DEVICE uint32_t load4(const void* p) { return element::load_u32(static_cast<const uint8_t*>(p)); }

// Lanes summed as llama.cpp's x86 horizontal sum does.
TANDEM_HOST_DEVICE float tree8(const float* v) {
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

enum class Form { Single, Batch };

// Which tokens of an n-token product llama.cpp's CPU backend multiplies in
// the batch form: Q2_K and Q4_K through kernels that take rows four at a
// time (batches of 4 or more, tokens [0, n - n % 4)), Q3_K, Q5_K, Q6_K and
// the 256-element i-quants through tiled kernels (batches of 8 or more,
// every token). The other
// types have one order.
struct BatchRule {
    bool has = false;
    int64_t min_tokens = 0;
    int64_t group = 1;
};
constexpr BatchRule batch_rule(Type w) {
    if (w == Type::Q2_K || w == Type::Q4_K) return {true, 4, 4};
    if (w == Type::Q3_K || w == Type::Q5_K || w == Type::Q6_K) return {true, 8, 1};
    // The 256-element i-quants: llama.cpp's tiled kernels too (dot_order_iq.h).
    if (w == Type::IQ2_XXS || w == Type::IQ2_XS || w == Type::IQ2_S || w == Type::IQ3_XXS || w == Type::IQ3_S ||
        w == Type::IQ1_S || w == Type::IQ1_M || w == Type::IQ4_XS) {
        return {true, 8, 1};
    }
    return {};
}
// Tokens [0, batch_end) of an n-token product take Form::Batch.
constexpr int64_t batch_end(Type w, int64_t n_tokens) {
    const BatchRule r = batch_rule(w);
    return r.has && n_tokens >= r.min_tokens ? n_tokens - n_tokens % r.group : 0;
}

// ---- 32-element formats ------------------------------------------------------------------
// Weight codes of elements 4l..4l+3 (l < 8) of a block, as signed bytes:
// the offset subtracted (Q4_0, Q5_0), the unsigned code for Q4_1/Q5_1.
TANDEM_HOST_DEVICE uint32_t nibbles4(const uint8_t* qs, int l) {
    return (l < 4 ? load4(qs + 4 * l) : load4(qs + 4 * (l - 4)) >> 4) & 0x0F0F0F0Fu;
}
TANDEM_HOST_DEVICE uint32_t fifth_bits4(const uint8_t* qh, int l) {
    const uint32_t h = (load4(qh) >> (4 * l)) & 0xFu;
    return ((h & 1u) | (h & 2u) << 7 | (h & 4u) << 14 | (h & 8u) << 21) << 4;
}
TANDEM_HOST_DEVICE uint32_t codes4(const block_q4_0& b, int l) { return sub4(nibbles4(b.qs, l), 8); }
TANDEM_HOST_DEVICE uint32_t codes4(const block_q4_1& b, int l) { return nibbles4(b.qs, l); }
TANDEM_HOST_DEVICE uint32_t codes4(const block_q5_0& b, int l) {
    return sub4(nibbles4(b.qs, l) | fifth_bits4(b.qh, l), 16);
}
TANDEM_HOST_DEVICE uint32_t codes4(const block_q5_1& b, int l) { return nibbles4(b.qs, l) | fifth_bits4(b.qh, l); }
TANDEM_HOST_DEVICE uint32_t codes4(const block_q8_0& b, int l) { return load4(b.qs + 4 * l); }

TANDEM_HOST_DEVICE float min_of(const block_q4_1& b) { return element::half_to_float(b.m); }
TANDEM_HOST_DEVICE float min_of(const block_q5_1& b) { return element::half_to_float(b.m); }
template <class B>
TANDEM_HOST_DEVICE float min_of(const B&) {
    return 0.0f;
}

// ---- Integer sums by 16-element groups (the tensor-core kernels)
// The orders whose integers are weighted sums of whole 16-element groups
// (Q4_0, and the K orders with one chain: spans and tiled) say so with
// kGroups: their part is part_of_groups(w, a, R) over the raw group sums
// R[g] = sum over elements 16g..16g+15 of group_codes4 (four codes as
// signed bytes) times the activation's codes, which group_sums computes
// four at a time and matmul.cu's mma kernel a warp's 16 x 16 tile at a
// time: the same integers either way.
template <class O, class = void>
struct HasGroupSums : std::false_type {};
template <class O>
struct HasGroupSums<O, std::void_t<decltype(O::kGroups)>> : std::true_type {};

// The orders of eight lanes of four elements of a 32-element block
// (LegacyLanesOrder), whose lanes' integers mma_lanes_kernel takes from
// the tensor cores.
template <class O, class = void>
struct HasLaneSums : std::false_type {};
template <class O>
struct HasLaneSums<O, std::void_t<decltype(&O::lane_codes4)>> : std::true_type {};

template <class O>
TANDEM_HOST_DEVICE void group_sums(const typename O::WBlock& w, const typename O::ABlock& a, int* r) {
    for (int g = 0; g < O::kGroups; ++g) {
        int s = 0;
        for (int k = 16 * g; k < 16 * g + 16; k += 4) s = dot4(O::group_codes4(w, k), load4(a.qs + k), s);
        r[g] = s;
    }
}

// Q4_0 (against Q8_0): one total per block, acc = fma(total, d_w * d_a, acc).
struct Q4_0Order {
    using WBlock = block_q4_0;
    using ABlock = block_q8_0;
    static constexpr int kElems = 32;
    static constexpr int kLanes = 1;
    static constexpr int kGroups = 2;
    struct Part {
        int total;
        float d;
    };
    TANDEM_HOST_DEVICE static uint32_t group_codes4(const WBlock& w, int k) { return codes4(w, k / 4); }
    TANDEM_HOST_DEVICE static Part part_of_groups(const WBlock& w, const ABlock& a, const int* r) {
        return {r[0] + r[1], element::half_to_float(w.d) * element::half_to_float(a.d)};
    }
    TANDEM_HOST_DEVICE static Part part(const WBlock& w, const ABlock& a) {
        int r[kGroups];
        group_sums<Q4_0Order>(w, a, r);
        return part_of_groups(w, a, r);
    }
    TANDEM_HOST_DEVICE static void step(float& acc, float&, const Part& p, int) {
        acc = fma_f(static_cast<float>(p.total), p.d, acc);
    }
    TANDEM_HOST_DEVICE static float finish(const float* acc, const float*) { return acc[0]; }
};

// Q4_1, Q5_0, Q5_1, Q8_0: eight lanes of four elements, acc[l] = fma(d_w *
// d_a, lane, acc[l]); Q4_1/Q5_1 (against Q8_1) add m * s in a chain of
// their own, added last.
template <class W, class A>
struct LegacyLanesOrder {
    using WBlock = W;
    using ABlock = A;
    static constexpr int kElems = 32;
    static constexpr int kLanes = 8;
    static constexpr bool kMin = std::is_same_v<A, block_q8_1>;
    struct Part {
        int lane[8];
        float d;
        float m;  // weight minimum (kMin)
        float s;  // activation block's fp16 sum (kMin)
    };
    // Lane l's integer, the block's scale, lane l's step and the minimum's
    // (attention's Q8_0 cache runs these one lane a thread; matmul.cu's
    // mma_lanes_kernel takes the lanes' integers from the tensor cores).
    TANDEM_HOST_DEVICE static uint32_t lane_codes4(const WBlock& w, int l) { return codes4(w, l); }
    TANDEM_HOST_DEVICE static int lane(const WBlock& w, const ABlock& a, int l) {
        return dot4(lane_codes4(w, l), load4(a.qs + 4 * l), 0);
    }
    TANDEM_HOST_DEVICE static float scale(const WBlock& w, const ABlock& a) {
        return element::half_to_float(w.d) * element::half_to_float(a.d);
    }
    TANDEM_HOST_DEVICE static void step_lane(float& acc, float d, int lane_sum) {
        acc = fma_f(d, static_cast<float>(lane_sum), acc);
    }
    TANDEM_HOST_DEVICE static void step_min(float& acc2, float m, float s) {
        if constexpr (kMin) acc2 = fma_f(m, s, acc2);
    }
    TANDEM_HOST_DEVICE static float act_sum(const ABlock& a) {
        if constexpr (kMin) {
            return element::half_to_float(a.s);
        } else {
            return 0.0f;
        }
    }
    TANDEM_HOST_DEVICE static Part part(const WBlock& w, const ABlock& a) {
        Part p;
        for (int l = 0; l < 8; ++l) p.lane[l] = lane(w, a, l);
        p.d = scale(w, a);
        p.m = min_of(w);
        p.s = act_sum(a);
        return p;
    }
    TANDEM_HOST_DEVICE static void step(float& acc, float& acc2, const Part& p, int l) {
        step_lane(acc, p.d, p.lane[l]);
        if (l == 0) step_min(acc2, p.m, p.s);
    }
    TANDEM_HOST_DEVICE static float finish(const float* acc, const float* acc2) { return tree8(acc) + acc2[0]; }
};

// ---- K-quants (against Q8_K) ---------------------------------------------------------------
// Per type: codes4(b, k) the unsigned codes of elements k..k+3 (k a
// multiple of 4; the four share one 16-element group), scale(b, g) the
// signed scale of group g, coef(b, g) the coefficient of the activation's
// group sum bsums[g] (the minimum for Q2_K/Q4_K/Q5_K, offset * scale for
// Q3_K/Q6_K), kOffset, subtracted from each code inside the lanes (Q3_K,
// llama.cpp's order) or not at all, and kHasMin: whether coef is a
// minimum, subtracted with dmin.
struct KQ2 {
    using Block = block_q2_K;
    static constexpr int kOffset = 0;
    static constexpr bool kHasMin = true;
    TANDEM_HOST_DEVICE static uint32_t codes4(const Block& b, int k) {
        const element::KLowBitIndex ix = element::k_low_bit_index(k);
        return (load4(b.qs + ix.byte) >> ix.shift) & 0x03030303u;
    }
    TANDEM_HOST_DEVICE static int scale(const Block& b, int g) { return b.scales[g] & 0xF; }
    TANDEM_HOST_DEVICE static int coef(const Block& b, int g) { return b.scales[g] >> 4; }
    TANDEM_HOST_DEVICE static float dmin(const Block& b) { return element::half_to_float(b.dmin); }
};
struct KQ3 {
    using Block = block_q3_K;
    static constexpr int kOffset = 4;
    static constexpr bool kHasMin = false;
    TANDEM_HOST_DEVICE static uint32_t codes4(const Block& b, int k) {
        const element::KLowBitIndex ix = element::k_low_bit_index(k);
        const uint32_t low = (load4(b.qs + ix.byte) >> ix.shift) & 0x03030303u;
        const uint32_t high = (load4(b.hmask + ix.hbyte) >> ix.hbit) & 0x01010101u;
        return low | high << 2;
    }
    TANDEM_HOST_DEVICE static int scale(const Block& b, int g) { return element::q3_K_scale(b.scales, g); }
    TANDEM_HOST_DEVICE static int coef(const Block& b, int g) { return 4 * element::q3_K_scale(b.scales, g); }
    TANDEM_HOST_DEVICE static float dmin(const Block&) { return 0.0f; }
};
template <bool kFive>
struct KQ45 {
    using Block = std::conditional_t<kFive, block_q5_K, block_q4_K>;
    static constexpr int kOffset = 0;
    static constexpr bool kHasMin = true;
    TANDEM_HOST_DEVICE static uint32_t codes4(const Block& b, int k) {
        const int sb = k / 32, e = k % 32;
        uint32_t q = (load4(b.qs + 32 * (sb / 2) + e) >> (4 * (sb % 2))) & 0x0F0F0F0Fu;
        if constexpr (kFive) q |= ((load4(b.qh + e) >> sb) & 0x01010101u) << 4;
        return q;
    }
    TANDEM_HOST_DEVICE static int scale(const Block& b, int g) {
        int sc = 0, m = 0;
        element::q4_K_scale_min(b.scales, g / 2, sc, m);
        return sc;
    }
    TANDEM_HOST_DEVICE static int coef(const Block& b, int g) {
        int sc = 0, m = 0;
        element::q4_K_scale_min(b.scales, g / 2, sc, m);
        return m;
    }
    TANDEM_HOST_DEVICE static float dmin(const Block& b) { return element::half_to_float(b.dmin); }
};
struct KQ6 {
    using Block = block_q6_K;
    static constexpr int kOffset = 0;
    static constexpr bool kHasMin = false;
    TANDEM_HOST_DEVICE static uint32_t codes4(const Block& b, int k) {
        const int half = k / 128, r = k % 128, quarter = r / 32, e = r % 32;
        const uint32_t low = (load4(b.ql + half * 64 + e + (quarter & 1) * 32) >> (4 * (quarter / 2))) & 0x0F0F0F0Fu;
        const uint32_t high = (load4(b.qh + half * 32 + e) >> (2 * quarter)) & 0x03030303u;
        return low | high << 4;
    }
    TANDEM_HOST_DEVICE static int scale(const Block& b, int g) { return b.scales[g]; }
    TANDEM_HOST_DEVICE static int coef(const Block& b, int g) { return 32 * b.scales[g]; }
    TANDEM_HOST_DEVICE static float dmin(const Block&) { return 0.0f; }
};

// scale * (code - kOffset) * y over elements k..k+3 (the lanes orders;
// the others sum whole groups: group_sums), and coef * bsums over the
// groups of [k0, k1).
template <class K>
TANDEM_HOST_DEVICE int k_code_sum4(const typename K::Block& b, const block_q8_K& a, int k) {
    return K::scale(b, k / 16) * dot4(sub4(K::codes4(b, k), K::kOffset), load4(a.qs + k), 0);
}
template <class K>
TANDEM_HOST_DEVICE int k_coef_sum(const typename K::Block& b, const block_q8_K& a, int k0, int k1) {
    int s = 0;
    for (int g = k0 / 16; g < k1 / 16; ++g) s += K::coef(b, g) * a.bsums[g];
    return s;
}

// Q3_K (offset inside the lanes), Q5_K (minimum summed to one integer in
// a scalar chain) and Q6_K (offset through the bsums of groups 2l, 2l+1,
// inside lane l), single rows: lane l holds elements 4l..4l+3 of every
// 32-element chunk; acc[l] = fma(d_w * d_a, lane, acc[l]).
template <class K>
struct KLanesOrder {
    using WBlock = typename K::Block;
    using ABlock = block_q8_K;
    static constexpr int kElems = kQK_K;
    static constexpr int kLanes = 8;
    static constexpr bool kMinScalar = K::kHasMin;
    struct Part {
        int lane[8];
        int coef;  // kMinScalar: the whole block's minimum term
        float d, dmin;
    };
    TANDEM_HOST_DEVICE static Part part(const WBlock& w, const ABlock& a) {
        Part p;
        for (int l = 0; l < 8; ++l) {
            int s = 0;
            if constexpr (std::is_same_v<K, KQ6>) s = -k_coef_sum<K>(w, a, 32 * l, 32 * l + 32);
            for (int c = 0; c < 8; ++c) s += k_code_sum4<K>(w, a, 32 * c + 4 * l);
            p.lane[l] = s;
        }
        p.coef = kMinScalar ? k_coef_sum<K>(w, a, 0, kQK_K) : 0;
        p.d = element::half_to_float(w.d) * a.d;
        p.dmin = K::dmin(w) * a.d;
        return p;
    }
    TANDEM_HOST_DEVICE static void step(float& acc, float& acc2, const Part& p, int l) {
        if constexpr (kMinScalar) {
            if (l == 0) acc2 = fma_f(-p.dmin, static_cast<float>(p.coef), acc2);
        }
        acc = fma_f(p.d, static_cast<float>(p.lane[l]), acc);
    }
    TANDEM_HOST_DEVICE static float finish(const float* acc, const float* acc2) { return tree8(acc) + acc2[0]; }
};

// Q2_K, Q4_K: integer totals over spans of Span chunks, one multiply-add
// each for the scale and the minimum terms, in two chains subtracted at
// the end. Span 8 for single rows; 4 (Q2_K) or 2 (Q4_K) in batches.
template <class K, int Span>
struct KSpansOrder {
    using WBlock = typename K::Block;
    using ABlock = block_q8_K;
    static constexpr int kElems = kQK_K;
    static constexpr int kLanes = 1;
    static constexpr int kSpans = 8 / Span;
    static constexpr int kGroups = kQK_K / 16;
    static_assert(K::kOffset == 0, "a span's codes are the unsigned codes");
    struct Part {
        int code[kSpans];
        int coef[kSpans];
        float d, dmin;
    };
    TANDEM_HOST_DEVICE static uint32_t group_codes4(const WBlock& w, int k) { return K::codes4(w, k); }
    TANDEM_HOST_DEVICE static Part part_of_groups(const WBlock& w, const ABlock& a, const int* r) {
        Part p;
        constexpr int kSpanGroups = 2 * Span;
        for (int s = 0; s < kSpans; ++s) {
            int code = 0;
            for (int g = kSpanGroups * s; g < kSpanGroups * (s + 1); ++g) code += K::scale(w, g) * r[g];
            p.code[s] = code;
            p.coef[s] = k_coef_sum<K>(w, a, 32 * Span * s, 32 * Span * (s + 1));
        }
        p.d = element::half_to_float(w.d) * a.d;
        p.dmin = K::dmin(w) * a.d;
        return p;
    }
    TANDEM_HOST_DEVICE static Part part(const WBlock& w, const ABlock& a) {
        int r[kGroups];
        group_sums<KSpansOrder>(w, a, r);
        return part_of_groups(w, a, r);
    }
    TANDEM_HOST_DEVICE static void step(float& acc, float& acc2, const Part& p, int) {
        for (int s = 0; s < kSpans; ++s) {
            acc = fma_f(static_cast<float>(p.code[s]), p.d, acc);
            acc2 = fma_f(static_cast<float>(p.coef[s]), p.dmin, acc2);
        }
    }
    TANDEM_HOST_DEVICE static float finish(const float* acc, const float* acc2) { return acc[0] - acc2[0]; }
};

// Q3_K, Q5_K, Q6_K in batches: v = d_w * total (minus dmin * the minimum
// term with one multiply-add, Q5_K), then acc = fma(d_a, v, acc).
template <class K>
struct KTiledOrder {
    using WBlock = typename K::Block;
    using ABlock = block_q8_K;
    static constexpr int kElems = kQK_K;
    static constexpr int kLanes = 1;
    static constexpr bool kMin = K::kHasMin;
    static constexpr int kGroups = kQK_K / 16;
    struct Part {
        int code, coef;
        float dw, dmin, da;
    };
    // The unsigned codes: the offset goes through the bsums (coef).
    TANDEM_HOST_DEVICE static uint32_t group_codes4(const WBlock& w, int k) { return K::codes4(w, k); }
    TANDEM_HOST_DEVICE static Part part_of_groups(const WBlock& w, const ABlock& a, const int* r) {
        int code = 0;
        for (int g = 0; g < kGroups; ++g) code += K::scale(w, g) * r[g];
        return {code, k_coef_sum<K>(w, a, 0, kQK_K), element::half_to_float(w.d), K::dmin(w), a.d};
    }
    TANDEM_HOST_DEVICE static Part part(const WBlock& w, const ABlock& a) {
        int r[kGroups];
        group_sums<KTiledOrder>(w, a, r);
        return part_of_groups(w, a, r);
    }
    TANDEM_HOST_DEVICE static void step(float& acc, float&, const Part& p, int) {
        float v = 0.0f;
        if constexpr (kMin) {
            v = fma_f(-p.dmin, static_cast<float>(p.coef), static_cast<float>(p.code) * p.dw);
        } else {
            v = static_cast<float>(p.code - p.coef) * p.dw;
        }
        acc = fma_f(p.da, v, acc);
    }
    TANDEM_HOST_DEVICE static float finish(const float* acc, const float*) { return acc[0]; }
};

// The order of weight type W in form F: one row per type, its single-row
// order and its batch form's.
template <Type W, Form F>
struct OrderOf;
#define TANDEM_ORDER_OF(T, SingleO, BatchO)                                  \
    template <Form F>                                                       \
    struct OrderOf<Type::T, F> {                                            \
        using type = std::conditional_t<F == Form::Batch, BatchO, SingleO>; \
    };
using Q4_1Order = LegacyLanesOrder<block_q4_1, block_q8_1>;
using Q5_0Order = LegacyLanesOrder<block_q5_0, block_q8_0>;
using Q5_1Order = LegacyLanesOrder<block_q5_1, block_q8_1>;
using Q8_0Order = LegacyLanesOrder<block_q8_0, block_q8_0>;
using Q2_KSpans8 = KSpansOrder<KQ2, 8>;
using Q2_KSpans4 = KSpansOrder<KQ2, 4>;
using Q4_KSpans8 = KSpansOrder<KQ45<false>, 8>;
using Q4_KSpans2 = KSpansOrder<KQ45<false>, 2>;
TANDEM_ORDER_OF(Q4_0, Q4_0Order, Q4_0Order)
TANDEM_ORDER_OF(Q4_1, Q4_1Order, Q4_1Order)
TANDEM_ORDER_OF(Q5_0, Q5_0Order, Q5_0Order)
TANDEM_ORDER_OF(Q5_1, Q5_1Order, Q5_1Order)
TANDEM_ORDER_OF(Q8_0, Q8_0Order, Q8_0Order)
TANDEM_ORDER_OF(Q2_K, Q2_KSpans8, Q2_KSpans4)
TANDEM_ORDER_OF(Q4_K, Q4_KSpans8, Q4_KSpans2)
TANDEM_ORDER_OF(Q3_K, KLanesOrder<KQ3>, KTiledOrder<KQ3>)
TANDEM_ORDER_OF(Q5_K, KLanesOrder<KQ45<true>>, KTiledOrder<KQ45<true>>)
TANDEM_ORDER_OF(Q6_K, KLanesOrder<KQ6>, KTiledOrder<KQ6>)
#undef TANDEM_ORDER_OF

// One row's dot product in order O, as one thread runs it (the CPU's
// scalar reference); n a multiple of O::kElems.
template <class O>
TANDEM_HOST_DEVICE float row_dot(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const typename O::WBlock*>(w);
    const auto* y = static_cast<const typename O::ABlock*>(a);
    float acc[O::kLanes] = {};
    float acc2[O::kLanes] = {};
    for (int64_t i = 0; i < n / O::kElems; ++i) {
        const typename O::Part p = O::part(x[i], y[i]);
        for (int l = 0; l < O::kLanes; ++l) O::step(acc[l], acc2[l], p, l);
    }
    return O::finish(acc, acc2);
}

// ---- Float formats -------------------------------------------------------------------------
// F32/F16/BF16 against the same type: sixteen lanes, lane l < 8 holding
// elements i + l and lane 8 + l elements i + 8 + l of each 16-element step,
// one fused multiply-add per element; a last step of 8 into lanes 0-7; the
// two sets added lane by lane and summed by tree8; then the remaining
// elements one by one (a product, then a sum: not fused).
TANDEM_HOST_DEVICE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
template <class T>
TANDEM_HOST_DEVICE float widen(T v);
template <>
TANDEM_HOST_DEVICE float widen<float>(float v) {
    return v;
}
template <>
TANDEM_HOST_DEVICE float widen<uint16_t>(uint16_t v) {
    return element::half_to_float(v);
}
struct Bf16 {
    bf16_bits bits;
};
template <>
TANDEM_HOST_DEVICE float widen<Bf16>(Bf16 v) {
    return element::bf16_to_float(v.bits);
}
// The elements of lane l (< 16), in its chain's order: one per 16-element
// step, then the last 8-element step's for l < 8; step(e) is called for
// each (the CUDA kernel steps several tokens at once).
template <class Step>
TANDEM_HOST_DEVICE void for_lane_elements(int64_t n, int l, Step&& step) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) step(i + l);
    if (l < 8 && i + 8 <= n) step(i + l);
}
// ---- ggml's F16 dot (attention's Q.K over an F16 cache) ----------------------------------
// 64 fma chains over steps of 64 elements, chain (j, l) taking elements
// i + 16 j + l, held four to a lane l < 16 and combined as (0+2) + (1+3);
// the 16 lanes reduced as GCC's _mm512_reduce_add_ps (halves of 8, then 4,
// then 0+2 and 1+3, then the two); the last n % 64 elements added in
// double, each a rounded product. x, y: float or fp16 bits.
template <class X, class Y>
TANDEM_HOST_DEVICE float ggml16_lane(const X* x, const Y* y, int64_t n, int l) {
    const int64_t np = n - n % 64;
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < np; i += 64) {
        for (int j = 0; j < 4; ++j) a[j] = fma_f(widen(x[i + 16 * j + l]), widen(y[i + 16 * j + l]), a[j]);
    }
    a[0] += a[2];
    a[1] += a[3];
    return a[0] + a[1];
}
TANDEM_HOST_DEVICE float ggml16_reduce(const float* lanes) {
    float t8[8], t4[4];
    for (int i = 0; i < 8; ++i) t8[i] = lanes[i + 8] + lanes[i];
    for (int i = 0; i < 4; ++i) t4[i] = t8[i + 4] + t8[i];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}
template <class X, class Y>
TANDEM_HOST_DEVICE float ggml16_finish(const X* x, const Y* y, int64_t n, const float* lanes) {
    const int64_t np = n - n % 64;
    double sum = np > 0 ? static_cast<double>(ggml16_reduce(lanes)) : 0.0;
    for (int64_t k = np; k < n; ++k) sum += static_cast<double>(mul_rn(widen(x[k]), widen(y[k])));
    return static_cast<float>(sum);
}

template <class T>
TANDEM_HOST_DEVICE float float_finish(int64_t n, const T* x, const T* y, const float* lanes) {
    float v[8];
    for (int l = 0; l < 8; ++l) v[l] = lanes[l] + lanes[8 + l];
    float sum = tree8(v);
    for (int64_t i = n - n % 8; i < n; ++i) sum += mul_rn(widen(x[i]), widen(y[i]));
    return sum;
}
template <class T>
TANDEM_HOST_DEVICE float float_dot(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const T*>(w);
    const auto* y = static_cast<const T*>(a);
    float lanes[16];
    for (int l = 0; l < 16; ++l) {
        float acc = 0.0f;
        for_lane_elements(n, l, [&](int64_t e) { acc = fma_f(widen(x[e]), widen(y[e]), acc); });
        lanes[l] = acc;
    }
    return float_finish(n, x, y, lanes);
}

}  // namespace tandem::quant::dot

// The i-quants and MXFP4.
#include "runtime/quant/dot_order_iq.h"
