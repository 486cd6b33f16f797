// The dot orders of the i-quants and MXFP4 (the rest of dot_order.h, which
// includes this file at its end): the integers and float steps llama.cpp's
// CPU backend gives them on x86, so that Tandem's products are its bits.
//
// The 256-element i-quants against Q8_K (IqLanesOrder): llama.cpp's AVX2
// kernels (used by its AVX-512 builds too) keep eight 32-bit integer
// lanes per block, lane l holding elements 4l..4l+3 of every 32-element
// chunk, each four-element sum times its sub-block's integer multiplier
// (2s + 1, 1 + 2s or s - 32). Per block, d = d_w * d_a and
//   acc[l] = fma(d, lane[l], acc[l]),
// and at the end a constant factor times the lanes summed by tree8
// (1/8 for IQ2_*, 1/4 for IQ3_XXS, 1 for IQ3_S and IQ4_XS). IQ1_S and
// IQ1_M add their +-1/8 shifts through the activation sums: IQ1_S as one
// integer a block in a scalar chain, acc2 = fma(d, shift, acc2), IQ1_M in
// eight lanes of their own; then tree8(acc) + 1/8 * (acc2, or tree8 of its
// lanes).
//
// Batches of 8 tokens or more (IqTiledOrder): llama.cpp multiplies the
// 256-element i-quants with its tiled kernels, as it does Q3_K/Q5_K/Q6_K
// (KTiledOrder): per block one integer total, the sub-block multipliers
// applied to the integer sums, then v = total * d_w', acc = fma(d_a, v, acc),
// where d_w' is the fp16 scale times the type's factor (1/8 for IQ2_* and
// IQ1_*, 1/4 for IQ3_XXS, 1 for IQ3_S and IQ4_XS); IQ1_S/IQ1_M enter as
// 8 * grid +- 1, their shift in the integers.
//
// IQ4_NL and MXFP4 against Q8_0 (BlockTotalOrder): llama.cpp repacks
// these (rows a multiple of 8, as every model's are) and multiplies them
// as Q4_0: one integer total a block, acc = fma(total, d_w * d_a, acc).
#pragma once

#include "runtime/quant/dot_order.h"
#include "runtime/quant/quant_element_iq.h"

namespace tandem::quant::dot {

enum class IqShift { None, Chain, Lanes };

template <class Decoder, IqShift kShiftKind = IqShift::None>
struct IqDot {
    using D = Decoder;
    static constexpr IqShift kShift = kShiftKind;
};

template <class T>
struct IqLanesOrder {
    using D = typename T::D;
    static constexpr IqShift kShift = T::kShift;
    using WBlock = typename D::Block;
    using ABlock = block_q8_K;
    static constexpr int kElems = kQK_K;
    static constexpr int kLanes = 8;
    struct Part {
        int lane[8];
        int shift[8];  // IqShift::Chain: shift[0] the block's; Lanes: lane l's
        float d;
    };
    TANDEM_HOST_DEVICE static float weight_scale(const WBlock& w) {
        if constexpr (std::is_same_v<D, iq::Iq1m>) {
            return D::block_scale(w);
        } else {
            return element::half_to_float(w.d);
        }
    }
    // The factor of the lanes' sum.
    TANDEM_HOST_DEVICE static float lanes_factor() {
        if constexpr (std::is_same_v<D, iq::Iq3xxs>) return 0.25f;
        if constexpr (std::is_same_v<D, iq::Iq2xxs> || std::is_same_v<D, iq::Iq2xs> || std::is_same_v<D, iq::Iq2s>) {
            return 0.125f;
        }
        return 1.0f;
    }
    // Lanes 2g and 2g + 1 of a block are elements 8g..8g+7 of each chunk c:
    // one grid group (one row or two, one sign set) and one multiplier
    // (the 16-element sub-blocks are lanes 0-3 and 4-7). part() sums its
    // lanes group by group; the CUDA kernel (kernels_cuda/matmul_iq.cu)
    // gives each group position g a thread, which decodes group (c, g) once
    // for all its tokens, its grid rows read from `grid` (D's table, or a
    // copy in shared memory).
    struct Group {
        iq::Codes8 codes;
        int mult;
        uint32_t shift;  // IqShift::Lanes: the shift's sign, four bytes of +1 or -1
    };
    TANDEM_HOST_DEVICE static Group group(const WBlock& w, int c, int g, const iq::GridRow<D>* grid) {
        const int k = 32 * c + 8 * g;
        Group q{iq::codes8<D>(w, k, grid), D::mult(w, k), 0u};
        if constexpr (T::kShift == IqShift::Lanes) q.shift = D::shift_negative(w, k) ? 0xFFFFFFFFu : 0x01010101u;
        return q;
    }
    // Group (c, g)'s share of lanes 2g, 2g + 1 (and of IQ1_M's shift
    // lanes), a0 and a1 the activation's codes 32c + 8g.. (four each).
    TANDEM_HOST_DEVICE static void add_group(const Group& q, uint32_t a0, uint32_t a1, int* lane2, int* shift2) {
        lane2[0] += q.mult * dot4(q.codes.lo, a0, 0);
        lane2[1] += q.mult * dot4(q.codes.hi, a1, 0);
        if constexpr (T::kShift == IqShift::Lanes) {
            shift2[0] += q.mult * dot4(q.shift, a0, 0);
            shift2[1] += q.mult * dot4(q.shift, a1, 0);
        }
    }
    // IqShift::Chain: chunk c's share of the block's shift integer.
    TANDEM_HOST_DEVICE static int chunk_shift(const WBlock& w, const ABlock& a, int c) {
        const int sum = a.bsums[2 * c] + a.bsums[2 * c + 1];
        return D::mult(w, 32 * c) * (D::shift_negative(w, 32 * c) ? -sum : sum);
    }
    TANDEM_HOST_DEVICE static Part part(const WBlock& w, const ABlock& a) {
        Part p{};
        for (int c = 0; c < 8; ++c) {
            for (int g = 0; g < 4; ++g) {
                const int k = 32 * c + 8 * g;
                add_group(group(w, c, g, iq::grid_of<D>()), load4(a.qs + k), load4(a.qs + k + 4), p.lane + 2 * g,
                          p.shift + 2 * g);
            }
        }
        if constexpr (T::kShift == IqShift::Chain) {
            for (int c = 0; c < 8; ++c) p.shift[0] += chunk_shift(w, a, c);
        }
        p.d = weight_scale(w) * a.d;
        return p;
    }
    // Lane l's step with its block scale d = weight_scale * a.d, its integer
    // and its shift's (Chain: the block's, stepped by lane 0).
    TANDEM_HOST_DEVICE static void step_lane(float& acc, float& acc2, float d, int lane, int shift, int l) {
        acc = fma_f(d, static_cast<float>(lane), acc);
        if constexpr (T::kShift == IqShift::Chain) {
            if (l == 0) acc2 = fma_f(d, static_cast<float>(shift), acc2);
        } else if constexpr (T::kShift == IqShift::Lanes) {
            acc2 = fma_f(d, static_cast<float>(shift), acc2);
        }
    }
    TANDEM_HOST_DEVICE static void step(float& acc, float& acc2, const Part& p, int l) {
        step_lane(acc, acc2, p.d, p.lane[l], T::kShift == IqShift::Chain ? p.shift[0] : p.shift[l], l);
    }
    TANDEM_HOST_DEVICE static float finish(const float* acc, const float* acc2) {
        if constexpr (T::kShift == IqShift::Chain) return tree8(acc) + iq::kIq1Delta * acc2[0];
        if constexpr (T::kShift == IqShift::Lanes) return tree8(acc) + iq::kIq1Delta * tree8(acc2);
        return lanes_factor() * tree8(acc);
    }
};

template <class T>
struct IqTiledOrder {
    using D = typename T::D;
    using WBlock = typename D::Block;
    using ABlock = block_q8_K;
    using Lanes = IqLanesOrder<T>;  // the same groups (the CUDA kernel decodes them once)
    static constexpr IqShift kShift = T::kShift;
    static constexpr int kElems = kQK_K;
    static constexpr int kLanes = 1;
    static constexpr int kGroups = kQK_K / 16;
    struct Part {
        int total;
        float dw, da;
    };
    // The block total from lanes' integers (Lanes::add_group): lane_sum of
    // some lanes and shift_sum of the same shift lanes (IQ1_M). IQ1 codes
    // enter as 8 * grid +- 1, so 8 lane + shift; IQ1_S's shift is the
    // block's chain integer (Lanes::chunk_shift summed), added once to the
    // whole block's.
    TANDEM_HOST_DEVICE static int total_of(int lane_sum, int shift_sum) {
        if constexpr (kShift == IqShift::None) {
            return lane_sum;
        } else if constexpr (kShift == IqShift::Lanes) {
            return 8 * lane_sum + shift_sum;
        } else {
            return 8 * lane_sum;
        }
    }
    TANDEM_HOST_DEVICE static float weight_scale(const WBlock& w) { return Lanes::weight_scale(w) * factor(); }
    // Four codes as the integers carry them (IQ1: with the shift, times 8).
    TANDEM_HOST_DEVICE static uint32_t group_codes4(const WBlock& w, int k) {
        if constexpr (T::kShift == IqShift::None) {
            return iq::codes4<D>(w, k);
        } else {
            uint32_t r = 0;
            for (int e = 0; e < 4; ++e) r |= (static_cast<uint32_t>(D::shifted_code(w, k + e)) & 0xFFu) << (8 * e);
            return r;
        }
    }
    TANDEM_HOST_DEVICE static float factor() {
        if constexpr (std::is_same_v<D, iq::Iq3s> || std::is_same_v<D, iq::Iq4xs>) return 1.0f;
        if constexpr (std::is_same_v<D, iq::Iq3xxs>) return 0.25f;
        return 0.125f;
    }
    TANDEM_HOST_DEVICE static Part part_of_groups(const WBlock& w, const ABlock& a, const int* r) {
        int total = 0;
        for (int g = 0; g < kGroups; ++g) total += D::mult(w, 16 * g) * r[g];
        return {total, weight_scale(w), a.d};
    }
    TANDEM_HOST_DEVICE static Part part(const WBlock& w, const ABlock& a) {
        int r[kGroups];
        group_sums<IqTiledOrder>(w, a, r);
        return part_of_groups(w, a, r);
    }
    TANDEM_HOST_DEVICE static void step_total(float& acc, float dw, float da, int total) {
        acc = fma_f(da, static_cast<float>(total) * dw, acc);
    }
    TANDEM_HOST_DEVICE static void step(float& acc, float&, const Part& p, int) { step_total(acc, p.dw, p.da, p.total); }
    TANDEM_HOST_DEVICE static float finish(const float* acc, const float*) { return acc[0]; }
};

// IQ4_NL, MXFP4 (against Q8_0): one total a block, as Q4_0Order.
template <class D>
struct BlockTotalOrder {
    using WBlock = typename D::Block;
    using ABlock = block_q8_0;
    static constexpr int kElems = 32;
    static constexpr int kLanes = 1;
    static constexpr int kGroups = 2;
    struct Part {
        int total;
        float d;
    };
    TANDEM_HOST_DEVICE static float weight_scale(const WBlock& w) {
        if constexpr (std::is_same_v<D, iq::Mxfp4>) {
            return D::scale(w);
        } else {
            return element::half_to_float(w.d);
        }
    }
    TANDEM_HOST_DEVICE static uint32_t group_codes4(const WBlock& w, int k) { return iq::codes4<D>(w, k); }
    TANDEM_HOST_DEVICE static Part part_of_groups(const WBlock& w, const ABlock& a, const int* r) {
        return {r[0] + r[1], weight_scale(w) * element::half_to_float(a.d)};
    }
    TANDEM_HOST_DEVICE static Part part(const WBlock& w, const ABlock& a) {
        int r[kGroups];
        group_sums<BlockTotalOrder>(w, a, r);
        return part_of_groups(w, a, r);
    }
    TANDEM_HOST_DEVICE static void step(float& acc, float&, const Part& p, int) {
        acc = fma_f(static_cast<float>(p.total), p.d, acc);
    }
    TANDEM_HOST_DEVICE static float finish(const float* acc, const float*) { return acc[0]; }
};

#define TANDEM_IQ_ORDER_OF(T, O)  \
    template <Form F>             \
    struct OrderOf<Type::T, F> {  \
        using type = O;           \
    };
// The 256-element types: lanes for single rows, tiled in batches.
#define TANDEM_IQ_ORDERS_OF(T, Dot)                                                                   \
    template <Form F>                                                                                 \
    struct OrderOf<Type::T, F> {                                                                      \
        using type = std::conditional_t<F == Form::Batch, IqTiledOrder<Dot>, IqLanesOrder<Dot>>;     \
    };
using Iq1sDot = IqDot<iq::Iq1s, IqShift::Chain>;
using Iq1mDot = IqDot<iq::Iq1m, IqShift::Lanes>;
TANDEM_IQ_ORDERS_OF(IQ2_XXS, IqDot<iq::Iq2xxs>)
TANDEM_IQ_ORDERS_OF(IQ2_XS, IqDot<iq::Iq2xs>)
TANDEM_IQ_ORDERS_OF(IQ2_S, IqDot<iq::Iq2s>)
TANDEM_IQ_ORDERS_OF(IQ3_XXS, IqDot<iq::Iq3xxs>)
TANDEM_IQ_ORDERS_OF(IQ3_S, IqDot<iq::Iq3s>)
TANDEM_IQ_ORDERS_OF(IQ1_S, Iq1sDot)
TANDEM_IQ_ORDERS_OF(IQ1_M, Iq1mDot)
TANDEM_IQ_ORDERS_OF(IQ4_XS, IqDot<iq::Iq4xs>)
TANDEM_IQ_ORDER_OF(IQ4_NL, BlockTotalOrder<iq::Iq4nl>)
TANDEM_IQ_ORDER_OF(MXFP4, BlockTotalOrder<iq::Mxfp4>)
#undef TANDEM_IQ_ORDER_OF
#undef TANDEM_IQ_ORDERS_OF

}  // namespace tandem::quant::dot
