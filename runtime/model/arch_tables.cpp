#include <array>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/model/arch.h"

namespace tandem::model {
namespace {

// Indexed by LayerTensor. Shapes are GGUF order: ne0 is the input (row)
// length, ne1 the number of output rows.
constexpr std::array<TensorRule, kLayerTensorCount> kLayerRules = {{
    {"attn_norm", Dim::Embd, Dim::One},
    {"attn_q", Dim::Embd, Dim::QDim},
    {"attn_k", Dim::Embd, Dim::KDim},
    {"attn_v", Dim::Embd, Dim::VDim},
    {"attn_output", Dim::OutDim, Dim::Embd},
    {"attn_q_norm", Dim::HeadDimK, Dim::One},
    {"attn_k_norm", Dim::HeadDimK, Dim::One},
    {"post_attention_norm", Dim::Embd, Dim::One},
    {"ffn_norm", Dim::Embd, Dim::One},
    {"ffn_gate", Dim::Embd, Dim::FF},
    {"ffn_up", Dim::Embd, Dim::FF},
    {"ffn_down", Dim::FF, Dim::Embd},
    {"post_ffw_norm", Dim::Embd, Dim::One},
}};

constexpr std::array<TensorRule, kGlobalTensorCount> kGlobalRules = {{
    {"token_embd", Dim::Embd, Dim::Vocab},
    {"output_norm", Dim::Embd, Dim::One},
    {"output", Dim::Embd, Dim::Vocab},
    {"rope_freqs", Dim::RopeHalf, Dim::One},
}};

constexpr Presence R = Presence::Required;
constexpr Presence O = Presence::Optional;
constexpr Presence A = Presence::Absent;

constexpr std::array kArchs = {
    // Llama 1/2/3, Mistral, TinyLlama: pre-norm blocks, SwiGLU, NORM RoPE.
    ArchSpec{
        .name = "llama",
        .rope_style = RopeStyle::Norm,
        .ffn_activation = FfnActivation::Silu,
        .scale_embeddings = false,
        .swa_period = 0,
        .default_rope_base_swa = 0.0,
        .query_scale_by_embd_per_head = false,
        .scale_query_before_attention = false,
        //      norm q  k  v  out qn kn pan fn gate up down pfn
        .layer = {R, R, R, R, R, A, A, A, R, R, R, R, A},
        //        embd onorm output rope_freqs
        .global = {R, R, O, O},
    },
    // Gemma 3: GeGLU, NEOX RoPE, Q/K norms, post-attention and post-FFN
    // norms, 5 sliding-window layers then 1 global, local RoPE base 10000.
    ArchSpec{
        .name = "gemma3",
        .rope_style = RopeStyle::Neox,
        .ffn_activation = FfnActivation::GeluTanh,
        .scale_embeddings = true,
        .swa_period = 6,
        .default_rope_base_swa = 10000.0,
        .query_scale_by_embd_per_head = false,
        .scale_query_before_attention = true,
        .layer = {R, R, R, R, R, R, R, R, R, R, R, R, R},
        .global = {R, R, O, A},
    },
};

}  // namespace

const TensorRule& layer_tensor_rule(LayerTensor t) {
    const int i = static_cast<int>(t);
    TANDEM_CHECK(i >= 0 && i < kLayerTensorCount, "layer tensor role out of range");
    return kLayerRules[static_cast<size_t>(i)];
}

const TensorRule& global_tensor_rule(GlobalTensor t) {
    const int i = static_cast<int>(t);
    TANDEM_CHECK(i >= 0 && i < kGlobalTensorCount, "global tensor role out of range");
    return kGlobalRules[static_cast<size_t>(i)];
}

std::string layer_tensor_name(int64_t layer, LayerTensor t) {
    return fmt::format("blk.{}.{}.weight", layer, layer_tensor_rule(t).suffix);
}

std::string global_tensor_name(GlobalTensor t) { return fmt::format("{}.weight", global_tensor_rule(t).suffix); }

const ArchSpec* find_arch(std::string_view name) {
    for (const auto& a : kArchs) {
        if (a.name == name) return &a;
    }
    return nullptr;
}

std::span<const ArchSpec> all_archs() { return kArchs; }

std::string supported_arch_names() {
    std::string s;
    for (const auto& a : kArchs) {
        if (!s.empty()) s += ", ";
        s += a.name;
    }
    return s;
}

}  // namespace tandem::model
