// Scale searches for the K-quant reference quantizers (see the header).
// The candidate grids (±0.9 around nmax in steps of 0.1 for the symmetric
// search; rmin + rdelta*i for the asymmetric one) are ggml's, which is what
// makes our files' quality comparable to llama.cpp's.
#include "runtime/quant/quant_ref_kquants_scales.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "runtime/common/error.h"
#include "runtime/quant/quant_blocks.h"

namespace tandem::quant::ref::detail {
namespace {

// The value of largest magnitude, sign kept: symmetric formats map it to
// -nmax, the code with no positive twin, so it is represented exactly.
float signed_absmax(int n, const float* x, float* amax_out) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    *amax_out = amax;
    return max;
}

}  // namespace

float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* w) {
    float max = 0.0f;
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        std::fill(L, L + n, static_cast<int8_t>(0));
        return 0.0f;
    }
    auto code = [&](float iscale, int i) { return std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1); };
    auto sums = [&](float iscale, float* sumlx, float* suml2) {
        float slx = 0.0f;
        float sl2 = 0.0f;
        for (int i = 0; i < n; ++i) {
            const float l = static_cast<float>(code(iscale, i));
            slx += w[i] * x[i] * l;
            sl2 += w[i] * l * l;
        }
        *sumlx = slx;
        *suml2 = sl2;
    };
    auto assign = [&](float iscale) {
        for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(code(iscale, i) + nmax);
    };
    float iscale = static_cast<float>(-nmax) / max;
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    sums(iscale, &sumlx, &suml2);
    assign(iscale);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
        sums(iscale, &sumlx, &suml2);
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            assign(iscale);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
    std::array<float, kMaxGroup> w{};
    TANDEM_CHECK(n <= kMaxGroup, "make_qx_quants: group larger than a super-block");
    for (int i = 0; i < n; ++i) w[static_cast<size_t>(i)] = x[i] * x[i];
    return make_qx_quants(n, nmax, x, L, w.data());
}

float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
    float amax = 0.0f;
    const float max = signed_absmax(n, x, &amax);
    if (amax < kGroupMaxEps) {
        std::fill(L, L + n, static_cast<int8_t>(0));
        return 0.0f;
    }
    const float iscale = -static_cast<float>(nmax) / max;
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(l);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * static_cast<float>(l);
        suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    // With only 8 levels the rounding of the naive scale is often not the
    // optimum; move one code at a time to the value that the least-squares
    // scale of the others suggests, keeping the change only if the
    // objective sumlx^2/suml2 improves. A few sweeps converge.
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            const float li = static_cast<float>(L[i]);
            float slx = sumlx - w * x[i] * li;
            if (slx > 0.0f) {
                float sl2 = suml2 - w * li * li;
                const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    const float nl = static_cast<float>(new_l);
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<int8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* aux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        min = std::min(min, x[i]);
        max = std::max(max, x[i]);
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    // The format subtracts a non-negative minimum, so the offset can only
    // shift the grid down to include 0, never up.
    if (min > 0.0f) min = 0.0f;
    if (max == min) {
        std::fill(L, L + n, static_cast<uint8_t>(0));
        *the_min = -min;
        return 0.0f;
    }
    auto error_of = [&](float scale, float mn, const uint8_t* codes) {
        float err = 0.0f;
        for (int i = 0; i < n; ++i) {
            const float diff = scale * static_cast<float>(codes[i]) + mn - x[i];
            err += weights[i] * (use_mad ? std::fabs(diff) : diff * diff);
        }
        return err;
    };
    const float fnmax = static_cast<float>(nmax);
    float iscale = fnmax / (max - min);
    float scale = 1.0f / iscale;
    for (int i = 0; i < n; ++i) {
        L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
    }
    float best_error = error_of(scale, min, L);
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + fnmax) / (max - min);
        float sum_l = 0.0f;
        float sum_l2 = 0.0f;
        float sum_xl = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
            aux[i] = static_cast<uint8_t>(l);
            const float w = weights[i];
            const float fl = static_cast<float>(l);
            sum_l += w * fl;
            sum_l2 += w * fl * fl;
            sum_xl += w * fl * x[i];
        }
        // Closed-form weighted least squares for (scale, min) given codes.
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0.0f) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0.0f) {
                this_min = 0.0f;
                this_scale = sum_xl / sum_l2;
            }
            const float cur_error = error_of(this_scale, this_min, aux);
            if (cur_error < best_error) {
                std::copy(aux, aux + n, L);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

void set_scale_mins_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
    for (int j = 0; j < 12; ++j) q[j] = 0;
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = static_cast<uint8_t>((ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4));
            q[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
            q[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
        }
    }
}

float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* w) {
    float max = 0.0f;
    for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
    if (max < kGroupMaxEps) {
        std::fill(L, L + n, static_cast<uint8_t>(0));
        return 0.0f;
    }
    const float fnmax = static_cast<float>(nmax);
    // Coarse pass: the inverse scale (nmax + 0.1 t) / max, t = -4..4, with
    // the least weighted squared error (t = 0 unclamped, as ggml).
    float iscale = fnmax / max;
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
    float best_mse = 0.0f;
    {
        const float scale = 1.0f / iscale;
        for (int i = 0; i < n; ++i) {
            const float diff = x[i] - scale * static_cast<float>(L[i]);
            best_mse += w[i] * diff * diff;
        }
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * static_cast<float>(is) + fnmax) / max;
        const float scale_is = 1.0f / iscale_is;
        float mse = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * static_cast<float>(l);
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = static_cast<uint8_t>(l);
        sumlx += w[i] * x[i] * static_cast<float>(l);
        suml2 += w[i] * static_cast<float>(l) * static_cast<float>(l);
    }
    // Refinement: move one code to round(x_i * sl2 / slx), the value the
    // least-squares scale of the others suggests, when sumlx^2 / suml2
    // improves; at most 5 sweeps.
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float li = static_cast<float>(L[i]);
            float slx = sumlx - w[i] * x[i] * li;
            float sl2 = suml2 - w[i] * li * li;
            if (slx > 0.0f && sl2 > 0.0f) {
                const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    const float nl = static_cast<float>(new_l);
                    slx += w[i] * x[i] * nl;
                    sl2 += w[i] * nl * nl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<uint8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}


void requantize_k4(const float* x, const uint8_t* scales, float d, float dmin, int nmax, uint8_t* L) {
    for (int j = 0; j < 8; ++j) {
        uint8_t sc = 0;
        uint8_t m = 0;
        get_scale_min_k4(j, scales, &sc, &m);
        const float dl = d * static_cast<float>(sc);
        if (dl == 0.0f) continue;
        const float dm = dmin * static_cast<float>(m);
        for (int i = 32 * j; i < 32 * j + 32; ++i) {
            L[i] = static_cast<uint8_t>(std::clamp(nearest_int((x[i] + dm) / dl), 0, nmax));
        }
    }
}

void pack_q3_K(const int8_t* L, block_q3_K& y) {
    std::memset(y.hmask, 0, sizeof(y.hmask));
    uint8_t low[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
        if (L[j] > 3) y.hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
        low[j] = static_cast<uint8_t>(L[j] & 3);
    }
    pack_2bit(low, y.qs);
}

void pack_q4_K(const uint8_t* L, block_q4_K& y) {
    for (int j = 0; j < kQK_K; j += 64) {
        for (int l = 0; l < 32; ++l) y.qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
}

void pack_q5_K(const uint8_t* L, block_q5_K& y) {
    std::memset(y.qh, 0, sizeof(y.qh));
    for (int p = 0; p < 4; ++p) {
        for (int l = 0; l < 32; ++l) {
            const int l1 = L[64 * p + l];
            const int l2 = L[64 * p + 32 + l];
            y.qh[l] |= static_cast<uint8_t>(((l1 >> 4) << (2 * p)) | ((l2 >> 4) << (2 * p + 1)));
            y.qs[32 * p + l] = static_cast<uint8_t>((l1 & 0x0f) | ((l2 & 0x0f) << 4));
        }
    }
}

void pack_q6_K(const int8_t* L, block_q6_K& y) {
    for (int h = 0; h < 2; ++h) {
        const int8_t* Lh = L + 128 * h;
        uint8_t* ql = y.ql + 64 * h;
        uint8_t* qh = y.qh + 32 * h;
        for (int l = 0; l < 32; ++l) {
            const int q1 = Lh[l];
            const int q2 = Lh[l + 32];
            const int q3 = Lh[l + 64];
            const int q4 = Lh[l + 96];
            ql[l] = static_cast<uint8_t>((q1 & 0x0f) | ((q3 & 0x0f) << 4));
            ql[l + 32] = static_cast<uint8_t>((q2 & 0x0f) | ((q4 & 0x0f) << 4));
            qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
    }
}

void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < kQK_K; j += 128) {
        for (int l = 0; l < 32; ++l) {
            qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                                 (L[j + l + 96] << 6));
        }
    }
}


}  // namespace tandem::quant::ref::detail
