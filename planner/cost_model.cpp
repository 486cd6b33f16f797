// The planner's time model: what one evaluated batch costs on a layout.
// Each device's time is its products (per weight type, at the rate its
// kernels reach for that many tokens), its attention, and the fixed costs
// of handing work to the threads (a call per product group for one token,
// per matrix and expert used for a batch; an op per norm, RoPE, add...,
// which for a batch also costs a part per element it passes over; a
// decode step runs the ops over one row on the calling thread); then each
// batch's own fixed cost and the activations crossing between the
// devices. The devices take turns (the recipe runs
// the layers in order), so the times add. Rates and fixed costs come from
// bench --calibrate (KernelCosts); without them, products are a roofline
// of the device's GB/s and GFLOP/s speeds and the fixed costs the
// defaults of planner.h.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "planner/layout.h"

namespace tandem::planner::detail {
namespace {

double bytes_per_weight(quant::Type type) {
    const quant::TypeTraits& tr = quant::traits(type);
    return static_cast<double>(tr.block_bytes) / static_cast<double>(tr.block_elems);
}

std::optional<double> find_rate(const std::map<quant::Type, double>& m, quant::Type type) {
    const auto it = m.find(type);
    return it == m.end() ? std::nullopt : std::optional<double>(it->second);
}

// One device's speeds, resolved.
struct Rates {
    const KernelCosts* k = nullptr;
    double gbps = 0, gflops = 0;
    bool cached = false;  // a token's weights fit in the last-level cache

    // The rate at row width `cols` as a share of the wide rate: narrow /
    // wide at kNarrowCols, 1 at kWideCols, on log2 between, clamped.
    double width_factor(const std::map<quant::Type, double>& narrow, const std::map<quant::Type, double>& wide,
                        quant::Type type, int64_t cols) const {
        const auto n = find_rate(narrow, type), w = find_rate(wide, type);
        if (!n || !w || cols >= kWideCols) return 1.0;
        const double span = std::log2(static_cast<double>(kWideCols) / static_cast<double>(kNarrowCols));
        const double x = std::min(1.0, std::log2(static_cast<double>(kWideCols) /
                                                 static_cast<double>(std::max<int64_t>(cols, 1))) / span);
        return 1.0 + x * (*n / *w - 1.0);
    }

    std::optional<double> matvec_gbps(quant::Type type, int64_t cols) const {
        const double f = width_factor(k->matvec_narrow_gbps, k->matvec_cached_gbps, type, cols);
        if (cached) {
            if (const auto r = find_rate(k->matvec_cached_gbps, type)) return *r * f;
        }
        if (const auto r = find_rate(k->matvec_gbps, type)) return *r * f;
        return std::nullopt;
    }

    // The kGemmSmallBatch rate at row width `cols`: from the rates by width
    // where measured (on log2 of the width between them, flat past either
    // end), else the narrow/wide factor on the wide rate.
    std::optional<double> small_gflops(quant::Type type, int64_t cols) const {
        const auto by = k->gemm_small_by_cols.find(type);
        if (by == k->gemm_small_by_cols.end() || by->second.empty()) {
            const auto small = find_rate(k->gemm_small_gflops, type);
            if (!small) return std::nullopt;
            return *small * width_factor(k->gemm_small_narrow_gflops, k->gemm_small_gflops, type, cols);
        }
        const std::map<int64_t, double>& m = by->second;
        const auto lerp = [](double x0, double r0, double x1, double r1, double x) {
            return x1 > x0 ? r0 + (x - x0) / (x1 - x0) * (r1 - r0) : r0;
        };
        const double x = std::log2(static_cast<double>(std::max<int64_t>(cols, 1)));
        const auto hi = m.lower_bound(cols);
        if (hi == m.end()) return std::prev(hi)->second;
        if (hi->first == cols) return hi->second;
        if (hi == m.begin()) return hi->second;
        const auto lo = std::prev(hi);
        return lerp(std::log2(static_cast<double>(lo->first)), lo->second, std::log2(static_cast<double>(hi->first)),
                    hi->second, x);
    }

    // GFLOP/s of a product that multiplies each weight with n tokens, over
    // rows of `cols`. Measured: on log2(n) between a one-token product
    // (its GB/s as 2 FLOPs per weight), kGemmFewBatch tokens (weights from
    // memory only), kGemmSmallBatch and kGemmLargeBatch tokens, flat past
    // the last point. Not measured: the roofline of GB/s and GFLOP/s.
    double gflops_at(quant::Type type, double n, int64_t cols) const {
        const double per_weight = bytes_per_weight(type);
        const std::optional<double> mv = matvec_gbps(type, cols);
        const double one = 2.0 * mv.value_or(gbps) / per_weight;
        const std::optional<double> small = small_gflops(type, cols);
        const std::optional<double> large = find_rate(k->gemm_large_gflops, type);
        if (!small && !large) return std::min(gflops, one * n);
        struct Point {
            double log_n, rate;
        };
        Point pts[4];
        int count = 0;
        pts[count++] = {0.0, one};
        if (!cached) {
            if (const auto few = find_rate(k->gemm_few_gflops, type)) {
                const double f = width_factor(k->matvec_narrow_gbps, k->matvec_cached_gbps, type, cols);
                pts[count++] = {std::log2(static_cast<double>(kGemmFewBatch)), *few * f};
            }
        }
        if (small) pts[count++] = {std::log2(static_cast<double>(kGemmSmallBatch)), *small};
        if (large) pts[count++] = {std::log2(static_cast<double>(kGemmLargeBatch)), *large};
        const double x = std::log2(std::max(n, 1.0));
        if (x >= pts[count - 1].log_n) return pts[count - 1].rate;
        for (int i = 1; i < count; ++i) {
            if (x > pts[i].log_n) continue;
            const double f = (x - pts[i - 1].log_n) / (pts[i].log_n - pts[i - 1].log_n);
            return pts[i - 1].rate + f * (pts[i].rate - pts[i - 1].rate);
        }
        return pts[count - 1].rate;
    }

    // Seconds to multiply `weights` weights of `type`, in rows of `cols`,
    // with n tokens each.
    double product_s(quant::Type type, double weights, double n, int64_t cols) const {
        if (weights <= 0) return 0.0;
        return 2.0 * weights * n / (gflops_at(type, n, cols) * 1e9);
    }

    double call_s() const { return k->matmul_call_s.value_or(kDefaultMatmulCallS); }
    double batch_call_s() const { return k->batch_call_s.value_or(call_s()); }
    double pool_op_s() const { return k->pool_op_s.value_or(kDefaultPoolOpS); }
    double pool_op_elem_s() const { return k->pool_op_elem_s.value_or(0.0); }
    // An op over a row of `elems` on the calling thread.
    double inline_op_s(int64_t elems) const {
        return k->inline_op_s.value_or(kDefaultInlineOpS) +
               k->inline_op_elem_s.value_or(0.0) * static_cast<double>(elems);
    }
    // Seconds per query head and attended position of the per-token
    // attention kernel at head dimension hd, if measured.
    std::optional<double> attn_pos_s(int64_t hd) const {
        const auto& m = k->attn_pos_s;
        if (m.empty() || hd <= 0) return std::nullopt;
        const auto hi = m.lower_bound(hd);
        if (hi != m.end() && hi->first == hd) return hi->second;
        if (hi == m.begin()) return hi->second * static_cast<double>(hd) / static_cast<double>(hi->first);
        const auto lo = std::prev(hi);
        if (hi == m.end()) return lo->second * static_cast<double>(hd) / static_cast<double>(lo->first);
        const double f = static_cast<double>(hd - lo->first) / static_cast<double>(hi->first - lo->first);
        return lo->second + f * (hi->second - lo->second);
    }
    // The attention's arithmetic runs at the device's F16 batch rate, if measured.
    double attn_gflops() const { return find_rate(k->gemm_small_gflops, quant::Type::F16).value_or(gflops); }
};

// Seconds of the products of a share for n tokens: dense matrices multiply
// each weight with every token; of the experts, the tokens' choices spread
// over the experts (n_used of n_expert each, uniformly), so an expert met
// by the batch multiplies its weights with the tokens that chose it.
// How many of the experts a batch of n tokens uses, on average.
double experts_met(const Tables& t, double n) {
    const double e = static_cast<double>(std::max<int64_t>(t.n_expert, 1));
    const double u = static_cast<double>(std::max<int64_t>(t.n_expert_used, 1));
    return e * (1.0 - std::pow(1.0 - u / e, n));
}

double products_s(const Tables& t, const Share& s, const Rates& r, double n) {
    double sec = 0.0;
    const double e = static_cast<double>(std::max<int64_t>(t.n_expert, 1));
    const double u = static_cast<double>(std::max<int64_t>(t.n_expert_used, 1));
    const double met = experts_met(t, n);
    const double per_expert = n * u / std::max(met, 1.0);  // tokens each of them takes
    for (size_t i = 0; i < t.types.size(); ++i) {
        const quant::Type type = t.types[i];
        sec += r.product_s(type, static_cast<double>(s.dense_params_by[i]), n, t.cols[i]);
        const double experts = static_cast<double>(s.expert_params_by[i]) * met / e;
        sec += r.product_s(type, experts, per_expert, t.cols[i]);
    }
    return sec;
}

// Seconds of attention for layers holding `kv_layers` caches of `kv`
// bytes (at n_ctx cells): each token reads its cells and does
// attn_flops_per_pos per position it attends.
double attention_s(const Tables& t, const Share& s, const Rates& r, double n, double pos0) {
    if (s.kv_layers == 0) return 0.0;
    const double positions = n * pos0 + n * (n + 1) / 2;
    const double flops = t.attn_flops_per_pos * positions * static_cast<double>(s.kv_layers);
    const double cells = std::min(pos0 + n, static_cast<double>(std::max<int64_t>(t.n_ctx, 1)));
    const double read = static_cast<double>(s.kv) * cells / static_cast<double>(std::max<int64_t>(t.n_ctx, 1));
    double work = flops / (r.attn_gflops() * 1e9);
    if (const auto per_pos = r.attn_pos_s(t.head_dim); per_pos && n < static_cast<double>(kTiledAttentionMinTokens)) {
        work = *per_pos * static_cast<double>(t.n_head) * positions * static_cast<double>(s.kv_layers);
    }
    return std::max(read / (r.gbps * 1e9), work);
}

}  // namespace

double batch_seconds(const Tables& t, const Layout& l, const Footprint& f, const Speeds& v, int64_t n_tokens,
                     int64_t pos0_in, bool logits) {
    const double n = static_cast<double>(std::max<int64_t>(n_tokens, 1));
    const double pos0 = static_cast<double>(std::max<int64_t>(pos0_in, 0));
    const std::array<uint64_t, kDevices> reads = decode_reads(t, l);
    const double token_bytes = static_cast<double>(reads[kHostDevice] + reads[kAccelDevice]);
    const auto rates = [&](const KernelCosts& k, double gbps, double gflops) {
        Rates r{&k, gbps, gflops, false};
        r.cached = k.cache_bytes && token_bytes <= static_cast<double>(*k.cache_bytes);
        return r;
    };
    const std::array<Rates, kDevices> rate{rates(v.host, v.cpu_gbps, v.cpu_gflops),
                                           rates(v.dev, v.gpu_gbps, v.gpu_gflops)};
    const bool decode = n_tokens <= 1;
    const double met = experts_met(t, n);
    std::array<Share, kDevices> share{range_share(l, kHostDevice, 0, t.n_layer),
                                      range_share(l, kAccelDevice, 0, t.n_layer)};

    // Weight streaming: the host's streamed matrices multiply on the
    // accelerator, one call each, after their weights are copied there.
    double stream_s = 0.0;
    const bool stream = f.streams && n_tokens >= v.stream_min_batch;
    if (stream) {
        const Rates& dev = rate[kAccelDevice];
        Share moved = range_share(l, kHostDevice, f.stream_first, t.n_layer);
        Share dense;  // the streamed matrices' weights, now multiplied on the device
        dense.dense_params_by = moved.dense_params_by;
        share[kHostDevice].dense_params_by = (share[kHostDevice] - dense).dense_params_by;
        share[kHostDevice].batch_calls -= moved.streamed_mats;
        const double copy = v.dev.copy_gbps.value_or(v.pcie_gbps) * 1e9;
        const double weights_s = static_cast<double>(t.stream_weights[static_cast<size_t>(t.n_layer)] -
                                                     t.stream_weights[static_cast<size_t>(f.stream_first)]) /
                                 copy;
        const double io_s = static_cast<double>(t.stream_io[static_cast<size_t>(t.n_layer)] -
                                                t.stream_io[static_cast<size_t>(f.stream_first)]) *
                            n / copy;
        const double multiply_s =
            products_s(t, dense, dev, n) + static_cast<double>(moved.streamed_mats) * dev.batch_call_s();
        // The stand-in's cores do the copies themselves (copy_gbps is
        // measured); a GPU's copy engine runs beside its arithmetic.
        stream_s = (v.dev.copy_gbps ? weights_s + multiply_s : std::max(weights_s, multiply_s)) + io_s;
    }

    double sec = stream_s;
    for (int d = 0; d < kDevices; ++d) {
        const Share& s = share[static_cast<size_t>(d)];
        const Rates& r = rate[static_cast<size_t>(d)];
        sec += products_s(t, s, r, n) + attention_s(t, s, r, n, pos0);
        const double calls = decode ? static_cast<double>(s.calls)
                                    : static_cast<double>(s.batch_calls) + static_cast<double>(s.expert_mats) * met;
        sec += calls * (decode ? r.call_s() : r.batch_call_s());
        // Attention hands over to the threads; the ops over rows do for a
        // batch, and run on the calling thread for one token.
        sec += static_cast<double>(s.kv_layers) * r.pool_op_s();
        sec += static_cast<double>(s.row_ops) * (decode ? r.inline_op_s(t.n_embd) : r.pool_op_s());
        if (!decode) sec += n * static_cast<double>(s.row_op_elems) * r.pool_op_elem_s();
        // The output: the norm and the head's product for the last token.
        if (!logits) continue;
        if (l.norm == d) sec += decode ? r.inline_op_s(t.n_embd) : r.pool_op_s();
        if (l.head == d) {
            const auto head = static_cast<size_t>(t.head_slot);
            sec += r.product_s(t.types[head], static_cast<double>(t.head_params), 1.0, t.cols[head]) +
                   r.call_s();
        }
    }
    // The embedding lookup on the host (rows dequantized), the batch's own cost.
    const Rates& host = rate[kHostDevice];
    sec += static_cast<double>(t.embd_row_bytes) * n / (host.gbps * 1e9) +
           (decode ? host.inline_op_s(t.n_embd) : host.pool_op_s()) + v.host.batch_s.value_or(kDefaultBatchS);
    // Hand-overs: a fixed cost each, and the bytes (a hidden row per token,
    // the last token's logits).
    const Crossings c = crossings(t, l);
    const double copy = v.dev.copy_gbps.value_or(v.pcie_gbps) * 1e9;
    const int64_t logits_crossing = c.logits_bytes > 0 ? 1 : 0;
    sec += static_cast<double>(c.count - (logits ? 0 : logits_crossing)) *
               v.dev.crossing_s.value_or(kHandOverLatencyS) +
           (static_cast<double>(c.bytes) * n + (logits ? static_cast<double>(c.logits_bytes) : 0.0)) / copy;
    return sec;
}

// Decode at the average position of a full context; prefill as one
// micro-batch of n_ubatch tokens from an empty cache.
Prediction predict(const Tables& t, const Layout& l, const Footprint& f, const Speeds& v) {
    const double tg_s = batch_seconds(t, l, f, v, 1, t.n_ctx / 2);
    const double pp_s = batch_seconds(t, l, f, v, t.n_ubatch, 0);
    return {tg_s > 0 ? 1.0 / tg_s : 0.0, pp_s > 0 ? static_cast<double>(t.n_ubatch) / pp_s : 0.0};
}

}  // namespace tandem::planner::detail
