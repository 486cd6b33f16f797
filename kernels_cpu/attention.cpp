#include "kernels_cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/common/error.h"

namespace tandem::cpu {

void attention(const float* q, const int32_t* q_pos, int64_t n_tokens, const AttentionShape& shape,
               const KvCacheView& kv, float* out, ThreadPool& pool, SimdLevel level) {
    TANDEM_CHECK(shape.n_head % shape.n_head_kv == 0, "attention: n_head not a multiple of n_head_kv");
    const int64_t gqa = shape.n_head / shape.n_head_kv;
    const quant::Type act_type = activation_type(kv.type);
    const auto k_head_bytes = quant::row_bytes(kv.type, shape.head_dim_k);
    const auto v_head_bytes = quant::row_bytes(kv.type, shape.head_dim_v);
    const auto q_act_bytes = quant::row_bytes(act_type, shape.head_dim_k);
    TANDEM_CHECK(k_head_bytes && v_head_bytes && q_act_bytes, "attention: head size not a multiple of the cache block");

    const int64_t n_tasks = n_tokens * shape.n_head;
    pool.parallel_for(n_tasks, 1, [&](int64_t begin, int64_t end) {
        std::vector<uint8_t> q_act(*q_act_bytes);
        std::vector<float> scores(static_cast<size_t>(kv.n_cells));
        std::vector<float> v_row(static_cast<size_t>(shape.head_dim_v));
        std::vector<double> acc(static_cast<size_t>(shape.head_dim_v));
        for (int64_t task = begin; task < end; ++task) {
            const int64_t t = task / shape.n_head;
            const int64_t h = task % shape.n_head;
            const int64_t g = h / gqa;  // the KV head this query head shares
            const int32_t pos = q_pos[t];
            const float* qh = q + (t * shape.n_head + h) * shape.head_dim_k;
            quant::quantize_row(act_type, qh, q_act.data(), shape.head_dim_k);

            float max_score = -std::numeric_limits<float>::infinity();
            for (int64_t c = 0; c < kv.n_cells; ++c) {
                const int32_t kp = kv.cell_pos[c];
                const bool visible = kp >= 0 && kp <= pos && (shape.window == 0 || pos - kp < shape.window);
                if (!visible) {
                    scores[static_cast<size_t>(c)] = -std::numeric_limits<float>::infinity();
                    continue;
                }
                const uint8_t* k_head = kv.k + c * kv.k_row_bytes + g * *k_head_bytes;
                const float s = vec_dot(kv.type, k_head, q_act.data(), shape.head_dim_k, level) * shape.scale;
                scores[static_cast<size_t>(c)] = s;
                max_score = std::max(max_score, s);
            }
            float* oh = out + (t * shape.n_head + h) * shape.head_dim_v;
            if (max_score == -std::numeric_limits<float>::infinity()) {
                std::fill(oh, oh + shape.head_dim_v, 0.0f);  // nothing visible (cannot happen for a causal self-token)
                continue;
            }
            double sum = 0.0;
            for (auto& s : scores) {
                s = s == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(s - max_score);
                sum += s;
            }
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t c = 0; c < kv.n_cells; ++c) {
                const float p = scores[static_cast<size_t>(c)];
                if (p == 0.0f) continue;
                const uint8_t* v_head = kv.v + c * kv.v_row_bytes + g * *v_head_bytes;
                quant::dequantize_row(kv.type, v_head, v_row.data(), shape.head_dim_v);
                for (int64_t d = 0; d < shape.head_dim_v; ++d) acc[static_cast<size_t>(d)] += p * v_row[static_cast<size_t>(d)];
            }
            const double inv = 1.0 / sum;
            for (int64_t d = 0; d < shape.head_dim_v; ++d) oh[d] = static_cast<float>(acc[static_cast<size_t>(d)] * inv);
        }
    });
}

}  // namespace tandem::cpu
