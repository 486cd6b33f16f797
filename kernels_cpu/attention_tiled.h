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

// Queries per call of the score and accumulate kernels. Each query keeps
// its own fused multiply-add chains (so the bits do not depend on the
// blocking); a block of four shares every load of a K or V row across four
// queries' accumulators, which is what lets the AVX-512 twins run at the
// FMA rate instead of waiting on one chain's latency (64 keys are four
// zmm chains per query; four queries make sixteen independent chains).
inline constexpr int kQueryBlock = 4;

// The inner loops, scalar reference and SIMD twins (bit-identical).
struct TiledAttentionKernels {
    // kt: dk rows of kAttentionTile keys (transposed). For each query j < nq
    // (nq <= kQueryBlock): s[j * kAttentionTile + t] =
    // (sum_k q[j][k] * kt[k][t], one fused multiply-add chain over k) * scale,
    // and smax[j] = the largest of query j's kAttentionTile scores (exact in
    // any order: the driver's unmasked tiles need no second pass for it).
    void (*scores)(const float* const* q, int nq, const float* kt, int64_t dk, float scale, float* s, float* smax);
    // s[t] = -inf where cell t is not visible from position pos (cell_pos[t]
    // < 0, > pos, or pos - cell_pos[t] >= window when window > 0); returns
    // the largest s[t] left.
    float (*mask)(const int32_t* cell_pos, int32_t pos, int64_t window, float* s);
    // p[t] = exp(s[t] - max) (polynomial); returns the sum as llama.cpp forms it.
    double (*softmax)(const float* s, float max, float* p);
    // For each query j < nq: acc[j][d] = acc[j][d] * rescale[j] (the online
    // softmax's correction for a new maximum, 1 when none), then its fma
    // chain over t of p[j * kAttentionTile + t] * v[t][d].
    void (*accumulate)(const float* p, int nq, const float* v, int64_t dv, const float* rescale, float* const* acc);
    // kt[k][c] = key c's element k for c < nc, 0 for nc <= c < kAttentionTile;
    // key c's dk halves start at keys + c * row_bytes.
    void (*widen_keys)(const uint8_t* keys, uint64_t row_bytes, int64_t nc, int64_t dk, float* kt);
    // n halves to floats (exact in any order).
    void (*widen)(const uint16_t* src, float* dst, int64_t n);
};
TiledAttentionKernels tiled_attention_kernels(SimdLevel level);

void tiled_scores_scalar(const float* const* q, int nq, const float* kt, int64_t dk, float scale, float* s, float* smax);
float tiled_mask_scalar(const int32_t* cell_pos, int32_t pos, int64_t window, float* s);
double tiled_softmax_scalar(const float* s, float max, float* p);
void tiled_accumulate_scalar(const float* p, int nq, const float* v, int64_t dv, const float* rescale, float* const* acc);
void widen_keys_scalar(const uint8_t* keys, uint64_t row_bytes, int64_t nc, int64_t dk, float* kt);
void widen_f16_scalar(const uint16_t* src, float* dst, int64_t n);

void tiled_scores_avx2(const float* const* q, int nq, const float* kt, int64_t dk, float scale, float* s, float* smax);
float tiled_mask_avx2(const int32_t* cell_pos, int32_t pos, int64_t window, float* s);
double tiled_softmax_avx2(const float* s, float max, float* p);
void tiled_accumulate_avx2(const float* p, int nq, const float* v, int64_t dv, const float* rescale, float* const* acc);
void widen_keys_avx2(const uint8_t* keys, uint64_t row_bytes, int64_t nc, int64_t dk, float* kt);
void widen_f16_avx2(const uint16_t* src, float* dst, int64_t n);

void tiled_scores_avx512(const float* const* q, int nq, const float* kt, int64_t dk, float scale, float* s, float* smax);
double tiled_softmax_avx512(const float* s, float max, float* p);
void tiled_accumulate_avx512(const float* p, int nq, const float* v, int64_t dv, const float* rescale, float* const* acc);

void attention_tiled(const float* q, const int32_t* q_pos, int64_t n_tokens, const AttentionShape& shape,
                     const KvCacheView& kv, float* out, ThreadPool& pool, SimdLevel level);

}  // namespace tandem::cpu::detail
