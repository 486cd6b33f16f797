#include "kernels_cpu/elementwise.h"

#include "runtime/quant/fp16.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

namespace tandem::cpu {

namespace {

// y = x / sqrt(sum / n + eps) * w for one row whose square sum is given.
void normalize_row(const float* xr, const float* w, float* yr, int64_t n, double sum, float eps) {
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float s = 1.0f / std::sqrt(mean + eps);
    if (w) {
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * s) * w[i];
    } else {
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * s;
    }
}

}  // namespace

void rms_norm_rows(const float* x, const float* w, float* y, int64_t n, int64_t n_rows, float eps, SimdLevel level) {
    // As ggml: float squares summed in double, in order. That chain is
    // latency-bound, so with AVX2 four rows' chains run side by side (each
    // in its own order: the same bits).
    int64_t r = 0;
#if defined(__x86_64__)
    if (level != SimdLevel::Scalar) {
        for (; r + 4 <= n_rows; r += 4) {
            double sums[4];
            detail::square_sums4_avx2(x + r * n, n, sums);
            for (int64_t q = 0; q < 4; ++q) normalize_row(x + (r + q) * n, w, y + (r + q) * n, n, sums[q], eps);
        }
    }
#endif
    (void)level;
    for (; r < n_rows; ++r) {
        const float* xr = x + r * n;
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);
        normalize_row(xr, w, y + r * n, n, sum, eps);
    }
}

void rope_yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                         float dims[2]) {
    const auto corr_dim = [&](float n_rotations) {
        return static_cast<float>(n_rot) *
               std::log(static_cast<float>(n_ctx_orig) / (n_rotations * 2 * static_cast<float>(M_PI))) /
               (2 * std::log(freq_base));
    };
    dims[0] = std::max(0.0f, std::floor(corr_dim(beta_fast)));
    dims[1] = std::min(static_cast<float>(n_rot - 1), std::ceil(corr_dim(beta_slow)));
}

void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float x = std::min(gate[i], kSwigluOaiLimit);
        const float y = std::clamp(up[i], -kSwigluOaiLimit, kSwigluOaiLimit);
        out[i] = x / (1.0f + std::exp(kSwigluOaiAlpha * (-x))) * (y + 1.0f);
    }
}

void rope_heads(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const RopeParams& p, SimdLevel level) {
    // Angles for pair i are pos * base^(-2i/n_rot); advancing theta by a
    // constant factor per pair (as ggml does) instead of calling pow for
    // each keeps the same float rounding as the reference.
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    const int64_t half = p.n_rot / 2;
    float cache[2 * 2048];
    float* cos_v = cache;
    std::unique_ptr<float[]> heap;
    if (half > 2048) {
        heap = std::make_unique<float[]>(static_cast<size_t>(2 * half));
        cos_v = heap.get();
    }
    float* sin_v = cos_v + half;
    float theta = static_cast<float>(pos);
    // ggml's rope_yarn, its compiled contractions written out as fma.
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) mscale *= std::fma(0.1f, std::log(1.0f / p.freq_scale), 1.0f);
    const float span = std::max(0.001f, p.corr_dims[1] - p.corr_dims[0]);
    for (int64_t i = 0; i < half; ++i) {
        const float ff = p.freq_factors ? p.freq_factors[i] : 1.0f;
        const float extrap = theta / ff;
        float angle = p.freq_scale * extrap;
        if (p.ext_factor != 0.0f) {
            const float y = (static_cast<float>(i) - p.corr_dims[0]) / span;
            const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
            angle = std::fma(angle, 1.0f - mix, extrap * mix);
        }
        cos_v[i] = std::cos(angle) * mscale;
        sin_v[i] = std::sin(angle) * mscale;
        theta *= theta_scale;
    }
#if defined(__x86_64__)
    if (level != SimdLevel::Scalar) {
        return detail::rope_rotate_avx2(x, n_heads, head_dim, half, p.mode == RopeMode::Neox, cos_v, sin_v);
    }
#endif
    (void)level;
    detail::rope_rotate_scalar(x, n_heads, head_dim, half, p.mode == RopeMode::Neox, cos_v, sin_v);
}

namespace detail {

void rope_rotate_scalar(float* x, int64_t n_heads, int64_t head_dim, int64_t half, bool neox, const float* cos_v,
                        const float* sin_v, int64_t first) {
    for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + h * head_dim;
        for (int64_t i = first; i < half; ++i) {
            // NORM rotates neighbours; NEOX rotates element i with i + n_rot/2.
            const int64_t a = neox ? i : 2 * i;
            const int64_t b = neox ? i + half : 2 * i + 1;
            const float x0 = v[a];
            const float x1 = v[b];
            v[a] = std::fma(x0, cos_v[i], -(x1 * sin_v[i]));
            v[b] = std::fma(x0, sin_v[i], x1 * cos_v[i]);
        }
    }
}

float ggml_expf_poly(float x) {
    // exp(x) = 2^n * p(b): n = round(x / ln 2) by the 1.5 * 2^23 trick, b =
    // x - n ln 2 in two parts, p a degree-5 polynomial in Horner pairs.
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : std::numeric_limits<float>::infinity();
    const float u = b * b;
    const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                             u, std::fma(0x1.ffffecp-1f, b, 1.0f));
    return std::ldexp(j, static_cast<int>(n));
}

void swiglu_scalar(const float* gate, const float* up, float* out, int64_t n) {
    const int64_t full = n - n % 16;  // ggml's vector loop covers whole groups of 16
    for (int64_t i = 0; i < full; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + ggml_expf_poly(0.0f - g)) * up[i];
    }
    for (int64_t i = full; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

}  // namespace detail

void swiglu(const float* gate, const float* up, float* out, int64_t n, SimdLevel level) {
#if defined(__x86_64__)
    if (level != SimdLevel::Scalar) return detail::swiglu_avx2(gate, up, out, n);
#endif
    (void)level;
    detail::swiglu_scalar(gate, up, out, n);
}

namespace detail {

float gelu_tanh_f16(float h) {
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    constexpr float kCoef = 0.044715f;
    // 1 + c x^2 in one rounding: ggml builds its table with the multiply-add
    // contracted into an fma.
    const float exact = 0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * std::fma(kCoef * h, h, 1.0f)));
    return quant::fp16_to_fp32(quant::fp32_to_fp16(exact));
}

const uint16_t* gelu_f16_table() {
    // Built once on first use, read-only after (a function-local static: its
    // initialization is thread-safe). One entry past the end so a 32-bit
    // gather of the last one stays inside.
    static const std::unique_ptr<uint16_t[]> table = [] {
        auto t = std::make_unique<uint16_t[]>(kGeluTableSize + 1);
        for (uint32_t i = 0; i < kGeluTableSize; ++i) {
            t[i] = quant::fp32_to_fp16(gelu_tanh_f16(quant::fp16_to_fp32(static_cast<quant::fp16_bits>(i))));
        }
        t[kGeluTableSize] = 0;
        return t;
    }();
    return table.get();
}

void geglu_scalar(const float* gate, const float* up, float* out, int64_t n) {
    const uint16_t* table = gelu_f16_table();
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        float gelu;
        if (g <= -10.0f) {
            gelu = 0.0f;
        } else if (g >= 10.0f) {
            gelu = g;
        } else {
            gelu = quant::fp16_to_fp32(table[quant::fp32_to_fp16(g)]);
        }
        out[i] = gelu * up[i];
    }
}

}  // namespace detail

void geglu(const float* gate, const float* up, float* out, int64_t n, SimdLevel level) {
#if defined(__x86_64__)
    if (level != SimdLevel::Scalar) return detail::geglu_avx2(gate, up, out, n);
#endif
    (void)level;
    detail::geglu_scalar(gate, up, out, n);
}

void softcap(float* x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void scale(float* x, int64_t n, float s) {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace tandem::cpu
