// The non-matmul ops of a transformer block on the CPU: RMSNorm, RoPE and
// the gated FFN activations. Each works on rows of floats; the numerics
// follow ggml's CPU backend (sums in double, RoPE angles advanced by
// repeated multiplication in float) so logits match llama.cpp closely.
#pragma once

#include <cstdint>

#include "kernels_cpu/matmul.h"

namespace tandem::cpu {

// y = x / sqrt(mean(x^2) + eps) * w, for n_rows rows of n. y may alias x.
// w may be nullptr (no weight). Level Avx2 and above: the same bits.
void rms_norm_rows(const float* x, const float* w, float* y, int64_t n, int64_t n_rows, float eps,
                   SimdLevel level = SimdLevel::Scalar);
namespace detail {
// sums[q] = sum over i in order of double(x[q n + i]^2 in float), q < 4.
void square_sums4_avx2(const float* x, int64_t n, double* sums);
}  // namespace detail

enum class RopeMode { Norm, Neox };

struct RopeParams {
    RopeMode mode = RopeMode::Norm;
    int64_t n_rot = 0;          // rotated dimensions of each head (even, <= head_dim)
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;    // context scaling (linear or YaRN): 1 / factor
    const float* freq_factors = nullptr;  // n_rot / 2 divisors of the angles, or nullptr
    // YaRN (ext_factor != 0), as ggml's rope_yarn: pair i's angle is the
    // interpolated freq_scale * theta mixed with the extrapolated theta by
    // ramp(i) * ext_factor (ramp 1 up to corr_dims[0], 0 from
    // corr_dims[1]), and cos and sin gain 1 + 0.1 ln(1 / freq_scale).
    // attn_factor multiplies cos and sin in every case.
    float ext_factor = 0.0f;
    float attn_factor = 1.0f;
    float corr_dims[2] = {0.0f, 0.0f};  // rope_yarn_corr_dims
};

// ggml_rope_yarn_corr_dims: the first and last pair YaRN blends, from the
// positions n_ctx_orig and the rotations beta_fast and beta_slow.
void rope_yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                         float dims[2]);

// Rotates in place the n_heads heads (each head_dim floats, contiguous) of
// one token at position pos. The AVX2 rotation (level Avx2 and above) gives
// the scalar one's bits: the same fused multiply-adds lane by lane.
void rope_heads(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const RopeParams& p,
                SimdLevel level = SimdLevel::Scalar);
namespace detail {
// The rotation of rope_heads with the angles' cosines and sines given
// (half = n_rot / 2 of each); the scalar one from pair `first` on.
void rope_rotate_scalar(float* x, int64_t n_heads, int64_t head_dim, int64_t half, bool neox, const float* cos_v,
                        const float* sin_v, int64_t first = 0);
void rope_rotate_avx2(float* x, int64_t n_heads, int64_t head_dim, int64_t half, bool neox, const float* cos_v,
                      const float* sin_v);
}  // namespace detail

// out[i] = silu(gate[i]) * up[i], with silu(x) = x / (1 + exp(-x)) where,
// for each full group of 16 elements, exp is the polynomial that ggml's
// AVX-512 CPU backend evaluates (exp2 split, degree-5 polynomial, exponent
// scaling); the tail uses expf, as ggml does. The scalar version and the
// AVX2 one (level Avx2 and above) give identical bits.
void swiglu(const float* gate, const float* up, float* out, int64_t n, SimdLevel level);
namespace detail {
float ggml_expf_poly(float x);  // the per-lane exp of the 16-element groups
void swiglu_scalar(const float* gate, const float* up, float* out, int64_t n);
void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n);
// y[i] = ggml_expf_poly(x[i] - shift), 8 lanes at a time (n a multiple of 8).
void expf_poly_shifted_avx2(const float* x, float shift, float* y, int64_t n);
}  // namespace detail
// out[i] = gelu_tanh(gate[i]) * up[i] as ggml's CPU backend computes it:
// GELU read from a table indexed by the fp16 of the input, holding fp16
// results (inputs at or beyond +-10 pass through or vanish). The table has
// one entry per fp16 value, so it is exactly the formula's two roundings,
// at a lookup per element instead of a tanhf (~40% of a Gemma 3 prefill).
// Scalar and AVX2 (level Avx2 and above) give the same bits.
void geglu(const float* gate, const float* up, float* out, int64_t n, SimdLevel level = SimdLevel::Scalar);
// gpt-oss's clamped SwiGLU, as ggml's swiglu_oai: x = min(gate, 7),
// y = clamp(up, -7, 7), out = x / (1 + exp(-1.702 x)) * (y + 1). Scalar
// expf at every level (ggml's loop is scalar). out may alias gate.
inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n);
namespace detail {
inline constexpr uint32_t kGeluTableSize = 65536;
// fp16(gelu_tanh(h)) for an fp16-representable h: the table's formula.
float gelu_tanh_f16(float h);
// kGeluTableSize fp16 entries, gelu_tanh_f16 of each fp16 value (by bits).
const uint16_t* gelu_f16_table();
void geglu_scalar(const float* gate, const float* up, float* out, int64_t n);
void geglu_avx2(const float* gate, const float* up, float* out, int64_t n);
}  // namespace detail
// x = cap * tanh(x / cap)
void softcap(float* x, int64_t n, float cap);
// x *= s
void scale(float* x, int64_t n, float s);
// y += x
void add(float* y, const float* x, int64_t n);

}  // namespace tandem::cpu
