// Attention for batches of 64 or more query tokens over an F16 cache, in
// the order llama.cpp's CPU backend uses for them (its tiled flash
// attention): queries stay f32, keys and values are widened to f32 in
// tiles of 64 cells, scores are sequential fused multiply-add chains, the
// softmax of each tile uses the vector exp polynomial and a double sum,
// and V is accumulated in f32. Smaller batches use the single-pass kernel
// in attention.cpp (llama.cpp's other path). Internal to kernels_cpu.
#pragma once

#include <cstdint>

#include "kernels_cpu/attention.h"

namespace tandem::cpu::detail {

inline constexpr int64_t kTiledAttentionMinTokens = 64;
inline constexpr int64_t kAttentionTile = 64;  // cells per KV tile

// The three inner loops, scalar reference and AVX2 twins (bit-identical).
// kt: dk rows of kAttentionTile keys (transposed); s[t] = sum_k q[k] * kt[k][t]
// as one fused multiply-add chain over k.
struct TiledAttentionKernels {
    void (*scores)(const float* q, const float* kt, int64_t dk, float* s);
    // p[t] = exp(s[t] - max) (polynomial); returns the sum as llama.cpp forms it.
    double (*softmax)(const float* s, float max, float* p);
    // acc[d] = fma chain over t of p[t] * v[t][d].
    void (*accumulate)(const float* p, const float* v, int64_t dv, float* acc);
    // n halves to floats (exact in any order).
    void (*widen)(const uint16_t* src, float* dst, int64_t n);
};
TiledAttentionKernels tiled_attention_kernels(SimdLevel level);

void tiled_scores_scalar(const float* q, const float* kt, int64_t dk, float* s);
double tiled_softmax_scalar(const float* s, float max, float* p);
void tiled_accumulate_scalar(const float* p, const float* v, int64_t dv, float* acc);
void tiled_scores_avx2(const float* q, const float* kt, int64_t dk, float* s);
double tiled_softmax_avx2(const float* s, float max, float* p);
void tiled_accumulate_avx2(const float* p, const float* v, int64_t dv, float* acc);
void widen_f16_scalar(const uint16_t* src, float* dst, int64_t n);
void widen_f16_avx2(const uint16_t* src, float* dst, int64_t n);

void attention_tiled(const float* q, const int32_t* q_pos, int64_t n_tokens, const AttentionShape& shape,
                     const KvCacheView& kv, float* out, ThreadPool& pool, SimdLevel level);

}  // namespace tandem::cpu::detail
