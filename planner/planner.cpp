#include "planner/planner.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "runtime/engine/memory_ledger.h"
#include "runtime/common/error.h"
#include "runtime/quant/quant_types.h"

namespace tandem::planner {
namespace {

using model::GlobalTensor;

// Everything about the model that a split needs, computed once per plan so
// that trying every ngl is O(n_layer) in total, not O(n_layer^2): a 70B
// plan over a grid of capacities must stay well under 100 ms.
struct Tables {
    int64_t n_layer = 0;
    int64_t n_ctx = 0;
    int64_t n_ubatch = 0;
    // Prefix sums over layers: [il] is the sum over layers [0, il).
    // weights: all of a layer's bytes (what it occupies); read: what one
    // token's decode reads of them; params: the weights it multiplies (for
    // a mixture of experts, only the experts used).
    std::vector<uint64_t> weights, read, kv, kv_read, params;
    // Per token, the floats a streamed layer's products send to the
    // accelerator and back (each matrix's input and output rows).
    std::vector<uint64_t> stream_io;
    // [d]: what streaming layers [d, n_layer) reserves on the accelerator.
    std::vector<uint64_t> stream;
    uint64_t gemm_tile = 0;  // the accelerator's GEMM tile, once it is used
    uint64_t output_bytes = 0;       // output norm + head, head counted once
    uint64_t tied_head_bytes = 0;    // the head's bytes when it is token_embd (already on the host)
    uint64_t rope_bytes = 0;         // RoPE factors: every backend in use keeps its own copy
    uint64_t host_fixed = 0;         // token_embd + RoPE factors: always on the host
    uint64_t embd_row_bytes = 0;     // one embedding row, read per token
    uint64_t head_params = 0;
    double attn_flops_per_token = 0; // per layer, at the average prompt position
    uint64_t hidden_bytes = 0;       // one token's hidden state as floats
    uint64_t logits_bytes = 0;       // one token's logits as floats
    model::CacheType cache_type = model::CacheType::F16;
};

uint64_t sum(const std::vector<uint64_t>& prefix, int64_t from, int64_t to) { return prefix[to] - prefix[from]; }

// Session's defaults and clamps, so the plan describes the same run.
int64_t effective_ctx(const model::ModelSpec& spec, int64_t n_ctx) {
    if (n_ctx < 0) throw Error(fmt::format("context size: expected a value >= 0 (0: the model's), found {}", n_ctx));
    return n_ctx > 0 ? n_ctx : std::min<int64_t>(spec.hp.n_ctx_train, 4096);
}

Tables make_tables(const model::ModelSpec& spec, int64_t n_ctx_in, int64_t n_ubatch, model::CacheType cache_type) {
    const model::HParams& hp = spec.hp;
    if (n_ubatch <= 0) throw Error(fmt::format("micro-batch size: expected a positive value, found {}", n_ubatch));
    const quant::Type qt = model::cache_quant_type(cache_type);
    if (!quant::row_bytes(qt, hp.head_dim_k) || !quant::row_bytes(qt, hp.head_dim_v)) {
        throw Error(fmt::format("cache type {} needs head sizes that are multiples of {}, the model has {}",
                                cache_type_name(cache_type), quant::traits(qt).block_elems, hp.head_dim_k));
    }
    Tables t;
    t.n_layer = hp.n_layer;
    t.n_ctx = effective_ctx(spec, n_ctx_in);
    t.n_ubatch = std::min(n_ubatch, t.n_ctx);
    t.cache_type = cache_type;
    const auto n = static_cast<size_t>(hp.n_layer);
    t.weights.assign(n + 1, 0);
    t.read.assign(n + 1, 0);
    t.kv.assign(n + 1, 0);
    t.kv_read.assign(n + 1, 0);
    t.params.assign(n + 1, 0);
    t.stream_io.assign(n + 1, 0);
    // Decode reads the cache up to the current position; at the average
    // position of a full context that is half of it.
    const int64_t avg_ctx = std::max<int64_t>(1, t.n_ctx / 2);
    for (size_t il = 0; il < n; ++il) {
        const auto i = static_cast<int64_t>(il);
        t.weights[il + 1] = t.weights[il] + model::layer_weight_bytes(spec, i);
        t.read[il + 1] = t.read[il] + model::layer_decode_bytes(spec, i);
        t.kv[il + 1] = t.kv[il] + model::kv_bytes_for_layer(spec, i, t.n_ctx, t.n_ubatch, cache_type);
        t.kv_read[il + 1] = t.kv_read[il] + model::kv_bytes_for_layer(spec, i, avg_ctx, t.n_ubatch, cache_type);
        t.params[il + 1] = t.params[il] + model::layer_active_params(spec, i);
        uint64_t io = 0;
        for (const model::LayerTensor role : model::kStreamedMatrices) {
            const auto* m = spec.layers[il].get(role);
            if (!m) continue;
            io += static_cast<uint64_t>(m->row_length() + m->n_rows()) * sizeof(float);
        }
        t.stream_io[il + 1] = t.stream_io[il] + io;
    }
    const std::vector<model::StreamShape> shapes = model::stream_shapes(spec);
    for (const model::StreamShape& shape : shapes) t.stream.push_back(model::stream_bytes(shape, t.n_ubatch));
    t.gemm_tile = model::gemm_tile_bytes(spec);
    t.output_bytes = model::output_weight_bytes(spec);
    if (spec.tied_output()) t.tied_head_bytes = spec.output_head().n_bytes;
    if (const auto* rf = spec.get(GlobalTensor::RopeFreqs)) t.rope_bytes = rf->n_bytes;
    t.host_fixed = model::token_embd_bytes(spec) + t.rope_bytes;
    if (const auto* te = spec.get(GlobalTensor::TokenEmbd)) {
        t.embd_row_bytes = quant::row_bytes(te->type, hp.n_embd).value_or(0);
    }
    t.head_params = static_cast<uint64_t>(spec.output_head().n_elements);
    // QK^T and the weighted sum of V: 2 FLOPs each per head dimension per
    // cached position, at the average prompt position.
    t.attn_flops_per_token = 2.0 * static_cast<double>(hp.q_dim() + hp.out_dim()) * static_cast<double>(avg_ctx);
    t.hidden_bytes = static_cast<uint64_t>(hp.n_embd) * sizeof(float);
    t.logits_bytes = static_cast<uint64_t>(hp.n_vocab) * sizeof(float);
    return t;
}

struct Split {
    int64_t device_layers = 0;
    bool output_on_device = false;
};

Split split_of(const Tables& t, int64_t ngl) {
    const int64_t g = std::clamp<int64_t>(ngl, 0, t.n_layer + 1);
    return {std::min(g, t.n_layer), g > t.n_layer};
}

// As Session: an accelerator is used only when it holds something or
// streams (ngl 0 without streaming costs it nothing); then it holds its
// RoPE factors, layers [0, d), their KV cache, the head when it runs there
// (a tied head as its own copy), one micro-batch of activations (with logits
// when it runs the head) when it runs anything itself, the stream's slots
// and buffers when layers are left on the host to stream, and in any case
// the GEMM tile its batched products dequantize into.
DeviceBytes device_bytes(const model::ModelSpec& spec, const Tables& t, int64_t ngl, bool stream) {
    const Split s = split_of(t, ngl);
    const bool holds = s.device_layers > 0 || s.output_on_device;
    const bool streams = stream && s.device_layers < t.n_layer;
    DeviceBytes b;
    if (!holds && !streams) return b;
    b.weights = t.rope_bytes + sum(t.weights, 0, s.device_layers) + (s.output_on_device ? t.output_bytes : 0);
    b.kv = sum(t.kv, 0, s.device_layers);
    b.compute = (holds ? model::compute_bytes(spec, t.n_ubatch, s.output_on_device) : 0) +
                (streams ? t.stream[static_cast<size_t>(s.device_layers)] : 0) + t.gemm_tile;
    return b;
}

// The host holds the embeddings (the lookup runs there), the RoPE factors,
// the remaining layers, and the head when it stays (a tied head is the
// embedding itself, counted once).
DeviceBytes host_bytes(const model::ModelSpec& spec, const Tables& t, int64_t ngl, bool has_device) {
    const Split s = has_device ? split_of(t, ngl) : Split{};
    DeviceBytes b;
    b.weights = t.host_fixed + sum(t.weights, s.device_layers, t.n_layer) +
                (s.output_on_device ? 0 : t.output_bytes - t.tied_head_bytes);
    b.kv = sum(t.kv, s.device_layers, t.n_layer);
    b.compute = model::compute_bytes(spec, t.n_ubatch, !s.output_on_device);
    return b;
}

double value_or_default(const std::optional<double>& v, double fallback, const char* name,
                        std::vector<Assumption>& out) {
    if (v && !(*v > 0.0)) throw Error(fmt::format("{}: expected a positive number, found {}", name, *v));
    out.push_back({name, v ? *v : fallback, !v});
    return v ? *v : fallback;
}

struct Speeds {
    double cpu_gbps, gpu_gbps, pcie_gbps, cpu_gflops, gpu_gflops;
};

// Decode: an additive roofline. Each device streams its weights and its
// share of the KV cache once per token at its memory bandwidth; the hidden
// state crosses to the device and back (or the logits come back) over PCIe,
// each crossing costing a fixed latency. Devices run one after the other,
// so the times add.
// Prefill: compute-bound. 2 FLOPs per weight per token plus attention at
// the average position, at each device's assumed GEMM rate; the head runs
// once per micro-batch; the hand-overs happen once per micro-batch.
// With weight streaming, the host layers' products run on the accelerator
// instead: each micro-batch brings their weights over PCIe once (or is
// bound by the accelerator's arithmetic, whichever is slower) and sends
// every product's input and output across; attention stays on the CPU.
Prediction predict(const Tables& t, const Split& s, const Speeds& v, bool stream) {
    const int64_t d = s.device_layers, n = t.n_layer;
    const double head_bytes = static_cast<double>(t.output_bytes);
    const double host_read = static_cast<double>(sum(t.read, d, n) + sum(t.kv_read, d, n) + t.embd_row_bytes) +
                             (s.output_on_device ? 0.0 : head_bytes);
    const double dev_read =
        static_cast<double>(sum(t.read, 0, d) + sum(t.kv_read, 0, d)) + (s.output_on_device ? head_bytes : 0.0);
    const bool crosses = d > 0 || s.output_on_device;
    const double xfer_bytes =
        crosses ? static_cast<double>(t.hidden_bytes + (s.output_on_device ? t.logits_bytes : t.hidden_bytes)) : 0.0;
    const double xfer_s = crosses ? xfer_bytes / (v.pcie_gbps * 1e9) + 2 * kHandOverLatencyS : 0.0;
    const double tg_s = host_read / (v.cpu_gbps * 1e9) + dev_read / (v.gpu_gbps * 1e9) + xfer_s;

    const double ub = static_cast<double>(t.n_ubatch);
    const double head_flops = 2.0 * static_cast<double>(t.head_params) / ub;
    const double host_mm_flops = 2.0 * static_cast<double>(sum(t.params, d, n));
    const double host_flops = (stream ? 0.0 : host_mm_flops) + t.attn_flops_per_token * static_cast<double>(n - d) +
                              (s.output_on_device ? 0.0 : head_flops);
    const double stream_s =
        stream ? std::max(static_cast<double>(sum(t.weights, d, n)) / ub / (v.pcie_gbps * 1e9),
                          host_mm_flops / (v.gpu_gflops * 1e9)) +
                     static_cast<double>(sum(t.stream_io, d, n)) / (v.pcie_gbps * 1e9)
               : 0.0;
    const double dev_flops = 2.0 * static_cast<double>(sum(t.params, 0, d)) +
                             t.attn_flops_per_token * static_cast<double>(d) + (s.output_on_device ? head_flops : 0.0);
    const double pp_s = host_flops / (v.cpu_gflops * 1e9) + dev_flops / (v.gpu_gflops * 1e9) + stream_s +
                        (crosses ? (2.0 * static_cast<double>(t.hidden_bytes)) / (v.pcie_gbps * 1e9) +
                                       2 * kHandOverLatencyS / ub
                                 : 0.0);
    return {tg_s > 0 ? 1.0 / tg_s : 0.0, pp_s > 0 ? 1.0 / pp_s : 0.0};
}

std::string layers_text(int64_t d, int64_t n) {
    if (d == 0) return "no layer";
    if (d == n) return fmt::format("all {} layers", n);
    return fmt::format("layers [0, {})", d);
}

// Why this ngl and not one more: names what the next step would add and
// by how much it would overflow.
void explain_choice(const model::ModelSpec& spec, const Tables& t, const Plan& p, std::vector<std::string>& out) {
    const uint64_t cap = *p.capacity;
    const uint64_t used = p.vram.total() + p.margin;
    const Split s = split_of(t, p.ngl);
    if (p.forced) {
        if (p.fits) {
            out.push_back(fmt::format("--ngl {} was given: it fits, {} + margin {} of {}", p.ngl,
                                      format_bytes(p.vram.total()), format_bytes(p.margin), format_bytes(cap)));
        } else {
            out.push_back(fmt::format("--ngl {} was given: it does not fit, {} + margin {} exceeds {} by {}", p.ngl,
                                      format_bytes(p.vram.total()), format_bytes(p.margin), format_bytes(cap),
                                      format_bytes(used - cap)));
        }
        return;
    }
    if (p.ngl == t.n_layer + 1) {
        out.push_back(fmt::format("all {} layers and the output head fit on the accelerator: {} + margin {} of {}",
                                  t.n_layer, format_bytes(p.vram.total()), format_bytes(p.margin), format_bytes(cap)));
        return;
    }
    const DeviceBytes next = device_bytes(spec, t, p.ngl + 1, p.weight_stream);
    const uint64_t over = next.total() + p.margin - cap;
    if (s.device_layers == t.n_layer) {
        out.push_back(fmt::format("all {} layers fit ({} + margin {} of {}); the output head ({}) would overflow by "
                                  "{}, so it runs on the CPU",
                                  t.n_layer, format_bytes(p.vram.total()), format_bytes(p.margin), format_bytes(cap),
                                  format_bytes(t.output_bytes), format_bytes(over)));
        return;
    }
    const int64_t il = s.device_layers;
    if (il == 0) {
        out.push_back(fmt::format("not even layer 0 fits: with its KV cache and the device's scratch it needs {} + "
                                  "margin {} of {}, over by {}; every layer runs on the CPU",
                                  format_bytes(next.total()), format_bytes(p.margin), format_bytes(cap),
                                  format_bytes(over)));
        return;
    }
    out.push_back(fmt::format("{} fit on the accelerator ({} + margin {} of {}); layer {} ({} weights + {} KV) would "
                              "overflow by {}",
                              layers_text(il, t.n_layer), format_bytes(p.vram.total()), format_bytes(p.margin),
                              format_bytes(cap), il, format_bytes(sum(t.weights, il, il + 1)),
                              format_bytes(sum(t.kv, il, il + 1)), format_bytes(over)));
}

}  // namespace

uint64_t default_margin(uint64_t capacity) {
    const auto pct = static_cast<uint64_t>(static_cast<double>(capacity) * kDefaultMarginFraction);
    return std::min(std::max(pct, kDefaultMarginFloor), capacity / 8);
}

DeviceBytes device_bytes(const model::ModelSpec& spec, int64_t ngl, int64_t n_ctx, int64_t n_ubatch,
                         model::CacheType cache_type, bool weight_stream) {
    return device_bytes(spec, make_tables(spec, n_ctx, n_ubatch, cache_type), ngl, weight_stream);
}

DeviceBytes host_bytes(const model::ModelSpec& spec, int64_t ngl, bool has_device, int64_t n_ctx, int64_t n_ubatch,
                       model::CacheType cache_type) {
    return host_bytes(spec, make_tables(spec, n_ctx, n_ubatch, cache_type), ngl, has_device);
}

Plan plan(const model::ModelSpec& spec, const PlanInputs& in) {
    const Tables t = make_tables(spec, in.n_ctx, in.n_ubatch, in.cache_type);
    Plan p;
    p.n_layer = t.n_layer;
    p.n_ctx = t.n_ctx;
    p.n_ubatch = t.n_ubatch;
    p.cache_type = in.cache_type;
    p.has_device = in.device_capacity.has_value();
    p.capacity = in.device_capacity;
    Speeds v{};
    v.cpu_gbps = value_or_default(in.cpu_gbps, kDefaultCpuGBps, "cpu_gbps", p.assumptions);
    v.gpu_gbps = value_or_default(in.gpu_gbps, kDefaultGpuGBps, "gpu_gbps", p.assumptions);
    v.pcie_gbps = value_or_default(in.pcie_gbps, kDefaultPcieGBps, "pcie_gbps", p.assumptions);
    v.cpu_gflops = value_or_default(in.cpu_gflops, kDefaultCpuGflops, "cpu_gflops", p.assumptions);
    v.gpu_gflops = value_or_default(in.gpu_gflops, kDefaultGpuGflops, "gpu_gflops", p.assumptions);
    if (in.ngl && *in.ngl < 0) throw Error(fmt::format("--ngl: expected a value >= 0, found {}", *in.ngl));

    if (!p.has_device) {
        if (in.ngl && *in.ngl > 0) {
            throw Error(fmt::format("--ngl {} asks for layers on an accelerator, but there is none; give --vram SIZE "
                                    "to plan for one",
                                    *in.ngl));
        }
        p.forced = in.ngl.has_value();
        p.reasons.push_back(fmt::format("no accelerator: all {} layers and the output head run on the CPU", t.n_layer));
    } else {
        const uint64_t cap = *in.device_capacity;
        p.margin = in.margin ? *in.margin : default_margin(cap);
        if (in.stream_min_batch <= 0) {
            throw Error(fmt::format("--stream-min-batch: expected a positive value, found {}", in.stream_min_batch));
        }
        const bool wants_stream = in.weight_stream && t.n_ubatch >= in.stream_min_batch;
        const auto fits = [&](int64_t ngl, bool stream) {
            return device_bytes(spec, t, ngl, stream).total() + p.margin <= cap;
        };
        // The largest ngl that fits, from the top (with streaming the total
        // need not grow with every layer); -1 if none.
        const auto largest = [&](bool stream) {
            int64_t ngl = t.n_layer + 1;
            while (ngl >= 0 && !fits(ngl, stream)) --ngl;
            return ngl;
        };
        // Streaming is kept when some split leaves room for its slots;
        // otherwise the layers get the room (the Session drops it the same way).
        bool stream = wants_stream;
        if (in.ngl) {
            p.forced = true;
            p.ngl = std::min(*in.ngl, t.n_layer + 1);
            stream = stream && fits(p.ngl, true);
        } else {
            p.ngl = stream ? largest(true) : -1;
            if (p.ngl < 0) {
                stream = false;
                p.ngl = std::max<int64_t>(largest(false), 0);
            }
        }
        p.fits = fits(p.ngl, stream);
        p.vram = device_bytes(spec, t, p.ngl, stream);
        p.output_on_gpu = split_of(t, p.ngl).output_on_device;
        p.weight_stream = stream && split_of(t, p.ngl).device_layers < t.n_layer;
        p.stream_min_batch = in.stream_min_batch;
        p.stream_bytes = p.weight_stream ? t.stream[static_cast<size_t>(split_of(t, p.ngl).device_layers)] : 0;
        explain_choice(spec, t, p, p.reasons);
        if (p.weight_stream) {
            p.reasons.push_back(fmt::format("weight streaming: prompts of {}+ tokens multiply the CPU layers' matrices "
                                            "on the accelerator, which reserves {} for it (--no-stream gives that "
                                            "room to layers)",
                                            in.stream_min_batch, format_bytes(p.stream_bytes)));
        } else if (wants_stream && split_of(t, p.ngl).device_layers < t.n_layer) {
            p.reasons.push_back("weight streaming off: its slots do not fit beside the layers");
        }
    }
    p.ram = host_bytes(spec, t, p.ngl, p.has_device);
    if (in.host_ram) {
        p.ram_fits = p.ram.total() <= *in.host_ram;
        p.reasons.push_back(p.ram_fits ? fmt::format("host RAM: {} of {}", format_bytes(p.ram.total()),
                                                     format_bytes(*in.host_ram))
                                       : fmt::format("host RAM: {} needed but {} given; the weights are mapped, so "
                                                     "they page from disk and decoding slows down",
                                                     format_bytes(p.ram.total()), format_bytes(*in.host_ram)));
    }
    p.reasons.push_back(fmt::format("KV cache: context {}, {}, {} in all ({} on the accelerator)", t.n_ctx,
                                    cache_type_name(in.cache_type), format_bytes(t.kv[static_cast<size_t>(t.n_layer)]),
                                    format_bytes(p.vram.kv)));
    const Split s = split_of(t, p.ngl);
    p.predicted = predict(t, p.has_device ? s : Split{}, v, p.weight_stream);
    const uint64_t dev_read = sum(t.read, 0, s.device_layers) + (s.output_on_device ? t.output_bytes : 0);
    const uint64_t host_read = t.read[static_cast<size_t>(t.n_layer)] + t.output_bytes - dev_read;
    const double host_ms = static_cast<double>(host_read) / (v.cpu_gbps * 1e6);
    const double dev_ms = static_cast<double>(dev_read) / (v.gpu_gbps * 1e6);
    p.reasons.push_back(fmt::format("decode reads {} of weights per token on the CPU ({:.2f} ms at {:g} GB/s) and {} "
                                    "on the accelerator ({:.2f} ms at {:g} GB/s)",
                                    format_bytes(host_read), host_ms, v.cpu_gbps, format_bytes(dev_read), dev_ms,
                                    v.gpu_gbps));
    return p;
}

std::string cache_type_name(model::CacheType t) { return t == model::CacheType::F16 ? "f16" : "q8_0"; }

model::CacheType parse_cache_type(const std::string& text) {
    if (text == "f16") return model::CacheType::F16;
    if (text == "q8_0") return model::CacheType::Q8_0;
    throw Error(fmt::format("--cache-type: expected f16 or q8_0, found '{}'", text));
}

nlohmann::json to_json(const Plan& p) {
    const auto bytes = [](const DeviceBytes& b) {
        return nlohmann::json{{"weights", b.weights}, {"kv", b.kv},           {"compute", b.compute},
                              {"staging", b.staging}, {"overhead", b.overhead}, {"total", b.total()}};
    };
    nlohmann::json assumptions = nlohmann::json::object();
    for (const Assumption& a : p.assumptions) {
        assumptions[a.name] = {{"value", a.value}, {"default", a.is_default}};
    }
    nlohmann::json j{
        {"ngl", p.ngl},
        {"n_layer", p.n_layer},
        {"output_on_gpu", p.output_on_gpu},
        {"fits", p.fits},
        {"ram_fits", p.ram_fits},
        {"forced", p.forced},
        {"has_device", p.has_device},
        {"capacity", p.capacity ? nlohmann::json(*p.capacity) : nlohmann::json(nullptr)},
        {"margin", p.margin},
        {"n_ctx", p.n_ctx},
        {"n_ubatch", p.n_ubatch},
        {"cache_type", cache_type_name(p.cache_type)},
        {"weight_stream",
         {{"enabled", p.weight_stream}, {"min_batch", p.stream_min_batch}, {"bytes", p.stream_bytes}}},
        {"vram", bytes(p.vram)},
        {"ram", bytes(p.ram)},
        {"predicted", {{"tg_tps", p.predicted.tg_tps}, {"pp_tps", p.predicted.pp_tps}}},
        {"assumptions", assumptions},
        {"reasons", p.reasons},
    };
    return j;
}

}  // namespace tandem::planner
