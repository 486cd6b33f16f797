#include "runtime/model/model_spec.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/model/device_layout.h"

namespace tandem::model {
namespace {

// Checks a bound tensor's shape against its rule. Trailing 1s are allowed
// (some writers store vectors as [n, 1]).
void check_shape(const gguf::TensorInfo& t, const TensorRule& rule, const HParams& hp) {
    const int64_t ne[3] = {dim_value(hp, rule.ne0), dim_value(hp, rule.ne1), dim_value(hp, rule.ne2)};
    bool ok = true;
    for (size_t i = 0; i < std::max<size_t>(3, t.shape.size()); ++i) {
        const int64_t got = i < t.shape.size() ? t.shape[i] : 1;
        ok &= got == (i < 3 ? ne[i] : 1);
    }
    if (!ok) {
        const std::string want = rule.ne2 == Dim::One ? fmt::format("[{}, {}]", ne[0], ne[1])
                                                      : fmt::format("[{}, {}, {}]", ne[0], ne[1], ne[2]);
        throw Error(fmt::format("model: tensor '{}': expected shape {}, found {}", t.name, want, gguf::shape_string(t.shape)));
    }
    const quant::TypeTraits& tr = quant::traits(t.type);
    if (tr.is_activation_only) {
        throw Error(fmt::format("model: tensor '{}' has type {}, which is an activation format, not a weight format",
                                t.name, tr.name));
    }
}

const gguf::TensorInfo* bind(const gguf::File& file, const std::string& name, Presence presence,
                             const TensorRule& rule, const HParams& hp, const ArchSpec& arch, bool has_experts) {
    presence = resolve_presence(presence, has_experts);
    if (presence == Presence::Absent) return nullptr;
    const gguf::TensorInfo* t = file.find_tensor(name);
    if (!t) {
        if (presence == Presence::Required) {
            throw Error(fmt::format("model: architecture {} needs tensor '{}', which the file does not have", arch.name,
                                    name));
        }
        return nullptr;
    }
    check_shape(*t, rule, hp);
    return t;
}

}  // namespace

const gguf::TensorInfo& ModelSpec::output_head() const {
    const gguf::TensorInfo* head = get(GlobalTensor::Output);
    if (!head) head = get(GlobalTensor::TokenEmbd);
    TANDEM_CHECK(head != nullptr, "model spec without token embedding");
    return *head;
}

ModelSpec load_model_spec(const gguf::File& file) {
    const std::string& arch_name = file.architecture();
    if (arch_name.empty()) {
        throw Error(fmt::format("{}: an importance matrix (general.type imatrix), not a model; pass it with --imatrix",
                                file.name()));
    }
    const ArchSpec* arch = find_arch(arch_name);
    if (!arch) {
        throw Error(fmt::format("model: architecture '{}' is not supported; supported: {}", arch_name,
                                supported_arch_names()));
    }
    ModelSpec spec;
    spec.arch = arch;
    spec.hp = read_hparams(file, *arch);
    HParams& hp = spec.hp;
    const auto wants = [&](LayerTensor t) { return arch->layer[static_cast<size_t>(t)] != Presence::Absent; };
    if (arch->layer[static_cast<size_t>(LayerTensor::FfnGateExps)] == Presence::Required && hp.n_expert == 0) {
        throw Error(fmt::format("model: architecture {} is a mixture of experts but {}.expert_count is missing or 0",
                                arch->name, arch->name));
    }
    if (wants(LayerTensor::AttnQkv)) hp.fused_width = std::max(hp.fused_width, hp.qkv_dim());
    if (wants(LayerTensor::FfnGateUp)) hp.fused_width = std::max(hp.fused_width, 2 * hp.n_ff);
    for (int g = 0; g < kGlobalTensorCount; ++g) {
        const auto role = static_cast<GlobalTensor>(g);
        spec.globals[static_cast<size_t>(g)] =
            bind(file, global_tensor_name(role), arch->global[g], global_tensor_rule(role), hp, *arch, hp.n_expert > 0);
    }
    // Expert tensors in a file whose header says no experts: say that, not
    // which dense tensor is then missing.
    if (hp.n_expert == 0) {
        for (int r = 0; r < kLayerTensorCount; ++r) {
            const auto role = static_cast<LayerTensor>(r);
            if (layer_tensor_rule(role).ne2 != Dim::NExpert) continue;
            const std::string name = layer_tensor_name(0, role);
            if (file.find_tensor(name)) {
                throw Error(fmt::format("model: the file has expert tensor '{}' but {}.expert_count is 0 or missing",
                                        name, arch->name));
            }
        }
    }
    spec.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        LayerSpec& layer = spec.layers[static_cast<size_t>(il)];
        for (int r = 0; r < kLayerTensorCount; ++r) {
            const auto role = static_cast<LayerTensor>(r);
            layer.tensors[static_cast<size_t>(r)] = bind(file, layer_tensor_name(il, role, *arch), arch->layer[r],
                                                         layer_tensor_rule(role), hp, *arch, hp.layer_has_experts(il));
        }
        // The last layer of each period is global; the others slide.
        layer.sliding_window = arch->swa_period > 0 && (il + 1) % arch->swa_period != 0;
        layer.rope_base = layer.sliding_window ? hp.rope_base_swa : hp.rope_base;
    }
    for (int64_t il = 0; il < hp.n_layer; ++il) spec.layers[static_cast<size_t>(il)].ops = layer_ops(spec, il);
    return spec;
}

namespace {
constexpr quant::Type kCacheElements[] = {quant::Type::F32,  quant::Type::F16,  quant::Type::BF16,
                                          quant::Type::Q8_0, quant::Type::Q4_0, quant::Type::Q4_1,
                                          quant::Type::IQ4_NL, quant::Type::Q5_0, quant::Type::Q5_1};
}  // namespace

std::span<const quant::Type> cache_element_types() { return kCacheElements; }

std::string cache_element_name(quant::Type t) {
    std::string name(quant::traits(t).name);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return name;
}

quant::Type parse_cache_element(std::string_view flag, std::string_view name) {
    std::string names;
    for (const quant::Type t : kCacheElements) {
        if (cache_element_name(t) == name) return t;
        names += (names.empty() ? "" : ", ") + cache_element_name(t);
    }
    throw Error(fmt::format("{}: expected a KV cache type ({}), found '{}'", flag, names, name));
}

std::string cache_type_name(CacheType t) {
    return t.k == t.v ? cache_element_name(t.k) : cache_element_name(t.k) + "/" + cache_element_name(t.v);
}

uint32_t cache_type_code(CacheType t) {
    const auto k = static_cast<uint32_t>(t.k), v = static_cast<uint32_t>(t.v);
    return k == v ? k : k | (v + 1) << 16;
}

std::string cache_type_code_name(uint32_t code) {
    const auto name = [](uint32_t id) {
        for (const quant::Type e : kCacheElements) {
            if (static_cast<uint32_t>(e) == id) return cache_element_name(e);
        }
        return fmt::format("type {}", id);
    };
    return code >> 16 ? name(code & 0xffff) + "/" + name((code >> 16) - 1) : name(code);
}

void check_cache_type(const HParams& hp, CacheType type) {
    const auto fits = [](quant::Type t, int64_t dim, const char* side) {
        if (!quant::row_bytes(t, dim)) {
            throw Error(fmt::format("cache type {} ({}): needs head sizes that are multiples of {}, the model's is {}",
                                    cache_element_name(t), side, quant::traits(t).block_elems, dim));
        }
    };
    fits(type.k, hp.head_dim_k, "K");
    if (hp.mla()) {
        if (type.k != type.v) {
            throw Error(fmt::format("-ctk {} with -ctv {}: this model's attention is latent (MLA), whose cache holds V "
                                    "inside K; give K and V the same type",
                                    cache_element_name(type.k), cache_element_name(type.v)));
        }
        return;
    }
    fits(type.v, hp.head_dim_v, "V");
}

KvRotation kv_rotation(const HParams& hp, CacheType type) {
    KvRotation r;
    if (hp.mla()) return r;
    if (quant::traits(type.k).is_quantized && hp.head_dim_k % 64 == 0) {
        r.k = 64;
        while (hp.head_dim_k % (r.k * 2) == 0) r.k *= 2;
    }
    if (quant::traits(type.v).is_quantized && hp.head_dim_v % 64 == 0) r.v = 64;
    return r;
}

uint64_t layer_weight_bytes(const ModelSpec& spec, int64_t il) {
    uint64_t total = 0;
    for (const auto* t : spec.layers.at(static_cast<size_t>(il)).tensors) {
        if (t) total += t->n_bytes;
    }
    return total;
}

uint64_t token_share(const ModelSpec& spec, LayerTensor role, uint64_t all) {
    const bool expert = layer_tensor_rule(role).ne2 == Dim::NExpert;
    return expert ? all / static_cast<uint64_t>(spec.hp.n_expert) * static_cast<uint64_t>(spec.hp.n_expert_used) : all;
}

namespace {
constexpr auto kEveryTensor = [](const gguf::TensorInfo&) { return true; };
}  // namespace

uint64_t layer_decode_bytes(const ModelSpec& spec, int64_t il) { return layer_decode_bytes_if(spec, il, kEveryTensor); }

uint64_t layer_active_params(const ModelSpec& spec, int64_t il) {
    return used_by_a_token_if(spec, il, [](const gguf::TensorInfo& t) { return t.n_elements; }, kEveryTensor);
}

uint64_t output_weight_bytes(const ModelSpec& spec) {
    uint64_t total = spec.output_head().n_bytes;
    if (const auto* norm = spec.get(GlobalTensor::OutputNorm)) total += norm->n_bytes;
    return total;
}

uint64_t token_embd_bytes(const ModelSpec& spec) {
    const auto* t = spec.get(GlobalTensor::TokenEmbd);
    return t ? t->n_bytes : 0;
}

int64_t kv_cells_for_layer(const ModelSpec& spec, int64_t il, int64_t n_ctx, int64_t n_ubatch, int64_t n_seq) {
    const LayerSpec& layer = spec.layers.at(static_cast<size_t>(il));
    if (!layer.sliding_window) return n_ctx;
    return std::min(n_ctx, std::max<int64_t>(n_seq, 1) * (spec.hp.sliding_window + n_ubatch));
}

int64_t kv_ring_span(const ModelSpec& spec, int64_t il, int64_t n_ctx, int64_t n_ubatch) {
    if (!spec.layers.at(static_cast<size_t>(il)).sliding_window) return 0;
    return std::min(n_ctx, spec.hp.sliding_window + n_ubatch);
}

uint64_t kv_bytes_for_cells(const ModelSpec& spec, int64_t n_cells, int64_t n_ubatch, CacheType type) {
    const auto k_row = quant::row_bytes(type.k, spec.hp.k_dim());
    const auto v_row = quant::row_bytes(type.v, spec.hp.kv_v_dim());
    TANDEM_CHECK(k_row && v_row, "KV row not a multiple of the cache type's block");
    return kv_layout(*k_row, *v_row, n_cells, n_ubatch).bytes;
}

uint64_t kv_bytes_for_layer(const ModelSpec& spec, int64_t il, int64_t n_ctx, int64_t n_ubatch, CacheType type,
                            int64_t n_seq) {
    return kv_bytes_for_cells(spec, kv_cells_for_layer(spec, il, n_ctx, n_ubatch, n_seq), n_ubatch, type);
}

uint64_t compute_bytes(const ModelSpec& spec, int64_t n_ubatch, bool with_logits) {
    return static_cast<uint64_t>(n_ubatch) * static_cast<uint64_t>(workspace_widths(spec.hp).per_token(with_logits)) *
           sizeof(float);
}

uint64_t gemm_tile_bytes(const ModelSpec& spec) {
    uint64_t largest = 0;
    for (int64_t il = 0; il < spec.hp.n_layer; ++il) {
        const LayerSpec& layer = spec.layers[static_cast<size_t>(il)];
        for (const LayerTensor role : kStreamedMatrices) {
            if (const gguf::TensorInfo* t = layer.get(role)) {
                largest = std::max(largest, static_cast<uint64_t>(t->n_elements) * sizeof(float));
            }
        }
        // One expert's matrix: experts are multiplied one at a time.
        for (const LayerTensor role : {LayerTensor::FfnGateExps, LayerTensor::FfnUpExps, LayerTensor::FfnDownExps}) {
            if (const gguf::TensorInfo* t = layer.get(role)) {
                largest = std::max(largest, static_cast<uint64_t>(t->n_elements / spec.hp.n_expert) * sizeof(float));
            }
        }
    }
    // At least one row of the head, which is tiled too.
    const uint64_t head_row = static_cast<uint64_t>(spec.output_head().row_length()) * sizeof(float);
    return std::max(std::min(largest, kMaxGemmTileBytes), head_row);
}

std::vector<StreamShape> stream_shapes(const ModelSpec& spec) {
    std::vector<StreamShape> shapes(static_cast<size_t>(spec.hp.n_layer) + 1);
    for (int64_t il = spec.hp.n_layer - 1; il >= 0; --il) {
        StreamShape shape = shapes[static_cast<size_t>(il) + 1];
        for (const LayerTensor role : kStreamedMatrices) {
            const gguf::TensorInfo* t = spec.layers[static_cast<size_t>(il)].get(role);
            if (!t) continue;
            shape.slot_bytes = std::max(shape.slot_bytes, t->n_bytes);
            shape.max_cols = std::max(shape.max_cols, t->row_length());
            shape.max_rows = std::max(shape.max_rows, t->n_rows());
        }
        shapes[static_cast<size_t>(il)] = shape;
    }
    return shapes;
}

StreamShape stream_shape(const ModelSpec& spec, int64_t first_layer) {
    const int64_t il = std::clamp<int64_t>(first_layer, 0, spec.hp.n_layer);
    return stream_shapes(spec)[static_cast<size_t>(il)];
}

StreamLayout stream_layout(const StreamShape& shape, int64_t n_ubatch) {
    const auto ub = static_cast<uint64_t>(n_ubatch);
    const uint64_t in = ub * static_cast<uint64_t>(shape.max_cols) * sizeof(float);
    const uint64_t out = ub * static_cast<uint64_t>(shape.max_rows) * sizeof(float);
    StreamLayout l;
    l.slot1 = device_aligned(shape.slot_bytes);
    l.x = 2 * l.slot1;
    l.y = l.x + device_aligned(in);
    l.scratch = l.y + device_aligned(out);
    l.scratch_bytes = in;
    l.bytes = l.scratch + in;
    return l;
}

uint64_t stream_bytes(const StreamShape& shape, int64_t n_ubatch) { return stream_layout(shape, n_ubatch).bytes; }

uint64_t stream_bytes(const ModelSpec& spec, int64_t first_layer, int64_t n_ubatch) {
    return stream_bytes(stream_shape(spec, first_layer), n_ubatch);
}

}  // namespace tandem::model
