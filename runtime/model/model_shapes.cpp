#include "runtime/model/model_shapes.h"

#include <charconv>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem::model {
namespace {

// Sizes from each model's Hugging Face config.json (hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, vocab_size, max_position_embeddings, rope_theta,
// rms_norm_eps, tie_word_embeddings). `tiny` is the model in ../shared.
const std::vector<LlamaShape>& preset_table() {
    static const std::vector<LlamaShape> presets = {
        //  name          embd   ff     layer head kv  vocab   ctx   rope      eps   tied
        {"tiny", 256, 768, 4, 8, 4, 32000, 2048, 10000.0, 1e-5, true},
        {"llama-1b", 2048, 5632, 22, 32, 4, 32000, 2048, 10000.0, 1e-5, false},  // TinyLlama 1.1B
        {"llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, 10000.0, 1e-5, false},
        {"llama3-8b", 4096, 14336, 32, 32, 8, 128256, 8192, 500000.0, 1e-5, false},
        {"llama2-13b", 5120, 13824, 40, 40, 40, 32000, 4096, 10000.0, 1e-5, false},
        {"llama3-70b", 8192, 28672, 80, 64, 8, 128256, 8192, 500000.0, 1e-5, false},
    };
    return presets;
}

gguf::KeyValue kv(std::string key, gguf::Value value) {
    gguf::KeyValue out;
    out.key = std::move(key);
    out.value = std::move(value);
    return out;
}

uint32_t as_u32(int64_t v, std::string_view what) {
    if (v < 0 || v > static_cast<int64_t>(UINT32_MAX)) {
        throw Error(fmt::format("{} = {} does not fit a GGUF u32", what, v));
    }
    return static_cast<uint32_t>(v);
}

}  // namespace

std::span<const LlamaShape> llama_presets() { return preset_table(); }

const LlamaShape* find_llama_preset(std::string_view name) {
    for (const auto& p : preset_table()) {
        if (p.name == name) return &p;
    }
    return nullptr;
}

std::string llama_preset_names() {
    std::string out;
    for (const auto& p : preset_table()) {
        if (!out.empty()) out += ", ";
        out += p.name;
    }
    return out;
}

void validate_llama_shape(const LlamaShape& s) {
    const struct {
        std::string_view what;
        int64_t value;
    } sizes[] = {{"n_embd", s.n_embd},   {"n_ff", s.n_ff},           {"n_layer", s.n_layer}, {"n_head", s.n_head},
                 {"n_head_kv", s.n_head_kv}, {"n_vocab", s.n_vocab}, {"n_ctx", s.n_ctx}};
    for (const auto& sz : sizes) {
        if (sz.value <= 0) throw Error(fmt::format("shape '{}': {} must be positive, found {}", s.name, sz.what, sz.value));
        as_u32(sz.value, sz.what);
    }
    if (s.n_embd % s.n_head != 0) {
        throw Error(fmt::format("shape '{}': n_head {} does not divide n_embd {}", s.name, s.n_head, s.n_embd));
    }
    if (s.n_head % s.n_head_kv != 0) {
        throw Error(fmt::format("shape '{}': n_head_kv {} does not divide n_head {}", s.name, s.n_head_kv, s.n_head));
    }
    if (s.head_dim() % 2 != 0) {
        throw Error(fmt::format("shape '{}': head dimension {} (n_embd / n_head) must be even for RoPE", s.name,
                                s.head_dim()));
    }
    if (!(s.rope_base > 0.0)) throw Error(fmt::format("shape '{}': rope base must be positive", s.name));
    if (!(s.rms_eps > 0.0)) throw Error(fmt::format("shape '{}': rms epsilon must be positive", s.name));
}

std::vector<TensorShape> llama_tensors(const LlamaShape& s) {
    const int64_t kv = s.n_embd_kv();
    std::vector<TensorShape> out;
    out.reserve(static_cast<size_t>(s.n_layer) * 9 + 3);
    out.push_back({"token_embd.weight", {s.n_embd, s.n_vocab}});
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        out.push_back({p + "attn_norm.weight", {s.n_embd}});
        out.push_back({p + "attn_q.weight", {s.n_embd, s.n_embd}});
        out.push_back({p + "attn_k.weight", {s.n_embd, kv}});
        out.push_back({p + "attn_v.weight", {s.n_embd, kv}});
        out.push_back({p + "attn_output.weight", {s.n_embd, s.n_embd}});
        out.push_back({p + "ffn_norm.weight", {s.n_embd}});
        out.push_back({p + "ffn_gate.weight", {s.n_embd, s.n_ff}});
        out.push_back({p + "ffn_up.weight", {s.n_embd, s.n_ff}});
        out.push_back({p + "ffn_down.weight", {s.n_ff, s.n_embd}});
    }
    out.push_back({"output_norm.weight", {s.n_embd}});
    if (!s.tied_embeddings) out.push_back({"output.weight", {s.n_embd, s.n_vocab}});
    return out;
}

uint64_t llama_param_count(const LlamaShape& shape) {
    uint64_t total = 0;
    for (const auto& t : llama_tensors(shape)) {
        uint64_t n = 1;
        for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
        total += n;
    }
    return total;
}

std::vector<gguf::KeyValue> llama_hparams(const LlamaShape& s) {
    using gguf::Value;
    std::vector<gguf::KeyValue> out;
    out.push_back(kv("general.architecture", Value::str("llama")));
    out.push_back(kv("llama.context_length", Value::u32(as_u32(s.n_ctx, "n_ctx"))));
    out.push_back(kv("llama.embedding_length", Value::u32(as_u32(s.n_embd, "n_embd"))));
    out.push_back(kv("llama.block_count", Value::u32(as_u32(s.n_layer, "n_layer"))));
    out.push_back(kv("llama.feed_forward_length", Value::u32(as_u32(s.n_ff, "n_ff"))));
    out.push_back(kv("llama.rope.dimension_count", Value::u32(as_u32(s.head_dim(), "head_dim"))));
    out.push_back(kv("llama.attention.head_count", Value::u32(as_u32(s.n_head, "n_head"))));
    out.push_back(kv("llama.attention.head_count_kv", Value::u32(as_u32(s.n_head_kv, "n_head_kv"))));
    out.push_back(kv("llama.attention.layer_norm_rms_epsilon", Value::f32(static_cast<float>(s.rms_eps))));
    out.push_back(kv("llama.rope.freq_base", Value::f32(static_cast<float>(s.rope_base))));
    out.push_back(kv("llama.vocab_size", Value::u32(as_u32(s.n_vocab, "n_vocab"))));
    return out;
}

int64_t layer_of_tensor(std::string_view name) {
    constexpr std::string_view kPrefix = "blk.";
    if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
    const char* first = name.data() + kPrefix.size();
    const char* last = name.data() + name.size();
    int64_t layer = -1;
    const auto [ptr, ec] = std::from_chars(first, last, layer);
    if (ec != std::errc() || ptr == first || ptr == last || *ptr != '.' || layer < 0) return -1;
    return layer;
}

}  // namespace tandem::model
