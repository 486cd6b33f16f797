// The driver of attention_decode.h's kernel, shared by its AVX2 and
// AVX-512 files (each includes it once, compiled with its own flags).
// Ops: widen(halves, floats, n) exact; dot(key, query, n) in
// f16_dot_ggml's order over widened rows; scale(acc, s, n) and mad(acc, x,
// s, n) with f16_scale's and f16_mad's roundings.
#pragma once

#include "kernels_cpu/simd_x86.h"  // immintrin.h without GCC 12's false -Wmaybe-uninitialized

#include <cmath>
#include <limits>
#include <vector>

#include "kernels_cpu/attention_decode.h"
#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"

namespace tandem::cpu::detail {
namespace {

template <class Ops>
void shared_kv_attention(const float* q, int64_t n_q, int32_t pos, int64_t kv_head, const AttentionShape& shape,
                         const KvCacheView& kv, float* out) {
    TANDEM_CHECK(n_q > 0 && n_q <= kMaxSharedHeads, "attention: query heads per KV head out of range");
    TANDEM_CHECK(kv.type == quant::Type::F16, "attention: shared-KV kernel needs an F16 cache");
    const int64_t dk = shape.head_dim_k, dv = shape.head_dim_v;
    const auto nq = static_cast<size_t>(n_q);
    // The queries rounded to fp16 (ggml's K.Q partner) and widened back.
    std::vector<float> qf(nq * static_cast<size_t>(dk));
    for (size_t i = 0; i < qf.size(); ++i) qf[i] = quant::fp16_to_fp32(quant::fp32_to_fp16(q[i]));
    std::vector<float> kf(static_cast<size_t>(dk)), vf(static_cast<size_t>(dv));
    std::vector<uint16_t> acc(nq * static_cast<size_t>(dv), 0);
    float running_max[kMaxSharedHeads], running_sum[kMaxSharedHeads], v_weight[kMaxSharedHeads];
    for (size_t h = 0; h < nq; ++h) {
        running_max[h] = -std::numeric_limits<float>::infinity();
        running_sum[h] = 0.0f;
    }
    const uint64_t k_offset = static_cast<uint64_t>(kv_head * dk) * sizeof(uint16_t);
    const uint64_t v_offset = static_cast<uint64_t>(kv_head * dv) * sizeof(uint16_t);
    // The group's slice of a cell is a few lines at a stride of the whole
    // row, a new 4 KiB page every few cells: the hardware prefetchers miss
    // most of them, so the slices kAhead cells on are requested here.
    constexpr int64_t kAhead = 8;
    const auto prefetch_slice = [](const uint8_t* p, int64_t bytes) {
        for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + b), _MM_HINT_T0);
    };
    for (int64_t c = 0; c < kv.n_cells; ++c) {
        if (c + kAhead < kv.n_cells) {
            prefetch_slice(kv.k + static_cast<uint64_t>(c + kAhead) * kv.k_row_bytes + k_offset, dk * 2);
            prefetch_slice(kv.v + static_cast<uint64_t>(c + kAhead) * kv.v_row_bytes + v_offset, dv * 2);
        }
        const int32_t kp = kv.cell_pos[c];
        if (kp < 0 || kp > pos || (shape.window > 0 && pos - kp >= shape.window)) continue;
        Ops::widen(reinterpret_cast<const uint16_t*>(kv.k + static_cast<uint64_t>(c) * kv.k_row_bytes + k_offset),
                       kf.data(), dk);
        for (size_t h = 0; h < nq; ++h) {
            const float s = Ops::dot(kf.data(), qf.data() + h * static_cast<size_t>(dk), dk) * shape.scale;
            float ms = 1.0f, vs = 1.0f;  // as attention.cpp's per-head loop
            if (s > running_max[h]) {
                ms = std::exp(running_max[h] - s);
                running_max[h] = s;
                Ops::scale(acc.data() + h * static_cast<size_t>(dv), ms, dv);
            } else {
                vs = std::exp(s - running_max[h]);
            }
            v_weight[h] = vs;
            running_sum[h] = std::fma(running_sum[h], ms, vs);
        }
        Ops::widen(reinterpret_cast<const uint16_t*>(kv.v + static_cast<uint64_t>(c) * kv.v_row_bytes + v_offset),
                       vf.data(), dv);
        for (size_t h = 0; h < nq; ++h) Ops::mad(acc.data() + h * static_cast<size_t>(dv), vf.data(), v_weight[h], dv);
    }
    for (size_t h = 0; h < nq; ++h) {
        const float inv = running_sum[h] > 0.0f ? 1.0f / running_sum[h] : 0.0f;
        for (int64_t d = 0; d < dv; ++d) {
            out[h * static_cast<size_t>(dv) + static_cast<size_t>(d)] =
                quant::fp16_to_fp32(acc[h * static_cast<size_t>(dv) + static_cast<size_t>(d)]) * inv;
        }
    }
}

}  // namespace
}  // namespace tandem::cpu::detail
