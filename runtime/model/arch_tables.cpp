#include <array>
#include <initializer_list>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/model/arch.h"

namespace tandem::model {
namespace {

// Indexed by LayerTensor. Shapes are GGUF order: ne0 is the input (row)
// length, ne1 the number of output rows, ne2 the experts.
constexpr std::array<TensorRule, kLayerTensorCount> kLayerRules = {{
    {"attn_norm", Dim::Embd, Dim::One},
    {"attn_qkv", Dim::Embd, Dim::QkvDim},
    {"attn_q", Dim::Embd, Dim::QDim},
    {"attn_k", Dim::Embd, Dim::KDim},
    {"attn_v", Dim::Embd, Dim::VDim},
    {"attn_q_a", Dim::Embd, Dim::QLora},
    {"attn_q_a_norm", Dim::QLora, Dim::One},
    {"attn_q_b", Dim::QLora, Dim::QMla},
    {"attn_kv_a_mqa", Dim::Embd, Dim::KDim},
    {"attn_kv_a_norm", Dim::KvLora, Dim::One},
    {"attn_k_b", Dim::KNope, Dim::KvLora, Dim::NHead},
    {"attn_v_b", Dim::KvLora, Dim::VMla, Dim::NHead},
    {"attn_q", Dim::QDim, Dim::One, Dim::One, true},
    {"attn_k", Dim::KDim, Dim::One, Dim::One, true},
    {"attn_v", Dim::VDim, Dim::One, Dim::One, true},
    {"attn_output", Dim::OutDim, Dim::Embd},
    {"attn_output", Dim::Embd, Dim::One, Dim::One, true},
    {"attn_sinks", Dim::NHead, Dim::One},
    {"attn_q_norm", Dim::HeadDimK, Dim::One},
    {"attn_k_norm", Dim::HeadDimK, Dim::One},
    {"post_attention_norm", Dim::Embd, Dim::One},
    {"ffn_norm", Dim::Embd, Dim::One},
    {"ffn_gate", Dim::Embd, Dim::FF},
    {"ffn_up", Dim::Embd, Dim::FF},
    {"ffn_up", Dim::Embd, Dim::FF2},
    {"ffn_down", Dim::FF, Dim::Embd},
    {"ffn_gate_inp", Dim::Embd, Dim::NExpert},
    {"ffn_gate_inp", Dim::NExpert, Dim::One, Dim::One, true},
    {"ffn_gate_exps", Dim::Embd, Dim::FFExp, Dim::NExpert},
    {"ffn_up_exps", Dim::Embd, Dim::FFExp, Dim::NExpert},
    {"ffn_down_exps", Dim::FFExp, Dim::Embd, Dim::NExpert},
    {"ffn_gate_exps", Dim::FFExp, Dim::NExpert, Dim::One, true},
    {"ffn_up_exps", Dim::FFExp, Dim::NExpert, Dim::One, true},
    {"ffn_down_exps", Dim::Embd, Dim::NExpert, Dim::One, true},
    {"exp_probs_b", Dim::NExpert, Dim::One, Dim::One, true},
    {"ffn_gate_shexp", Dim::Embd, Dim::FFShexp},
    {"ffn_up_shexp", Dim::Embd, Dim::FFShexp},
    {"ffn_down_shexp", Dim::FFShexp, Dim::Embd},
    {"post_ffw_norm", Dim::Embd, Dim::One},
}};

constexpr std::array<TensorRule, kGlobalTensorCount> kGlobalRules = {{
    {"token_embd", Dim::Embd, Dim::Vocab},
    {"output_norm", Dim::Embd, Dim::One},
    {"output", Dim::Embd, Dim::Vocab},
    {"rope_freqs", Dim::RopeHalf, Dim::One},
}};

using L = LayerTensor;
constexpr Presence R = Presence::Required;
constexpr Presence O = Presence::Optional;

struct RolePresence {
    LayerTensor role;
    Presence presence;
};

// A layer row from the roles an architecture has; every other role is absent.
constexpr std::array<Presence, kLayerTensorCount> has(std::initializer_list<RolePresence> roles) {
    std::array<Presence, kLayerTensorCount> row{};
    for (const RolePresence& r : roles) row[static_cast<size_t>(r.role)] = r.presence;
    return row;
}

using Row = std::array<Presence, kLayerTensorCount>;

// The roles of several rows together.
constexpr Row merge(std::initializer_list<Row> rows) {
    Row out{};
    for (const Row& r : rows) {
        for (size_t i = 0; i < out.size(); ++i) {
            if (r[i] != Presence::Absent) out[i] = r[i];
        }
    }
    return out;
}

// The attention of Llama and most of its descendants, and the two FFNs.
constexpr Row kPlainAttn = has({{L::AttnNorm, R}, {L::AttnQ, R}, {L::AttnK, R}, {L::AttnV, R}, {L::AttnOutput, R}});
constexpr Row kDenseFfn = has({{L::FfnNorm, R}, {L::FfnGate, R}, {L::FfnUp, R}, {L::FfnDown, R}});
constexpr Row kMoeFfn =
    has({{L::FfnNorm, R}, {L::FfnGateInp, R}, {L::FfnGateExps, R}, {L::FfnUpExps, R}, {L::FfnDownExps, R}});
constexpr Row kQkNorm = has({{L::AttnQNorm, R}, {L::AttnKNorm, R}});

constexpr Presence kNoRopeFreqs = Presence::Absent;

constexpr std::array kArchs = {
    // Llama 1/2/3, Mistral, TinyLlama: pre-norm blocks, SwiGLU, NORM RoPE.
    // With experts (expert_count > 0) it is Mixtral.
    ArchSpec{
        .name = "llama",
        .layer = merge({kPlainAttn, has({{L::FfnNorm, R},
                                         {L::FfnGate, Presence::Dense},
                                         {L::FfnUp, Presence::Dense},
                                         {L::FfnDown, Presence::Dense},
                                         {L::FfnGateInp, Presence::Expert},
                                         {L::FfnGateExps, Presence::Expert},
                                         {L::FfnUpExps, Presence::Expert},
                                         {L::FfnDownExps, Presence::Expert}})}),
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
        .scale_query_before_attention = true,
        .layer = merge({kPlainAttn, kQkNorm, kDenseFfn, has({{L::AttnPostNorm, R}, {L::FfnPostNorm, R}})}),
        .global = {R, R, O, kNoRopeFreqs},
    },
    // Gemma 2: Gemma 3 without Q/K norms; attention scores soft-capped
    // ({arch}.attn_logit_softcapping), sliding window on every other layer
    // (the even ones), one RoPE base for all.
    ArchSpec{
        .name = "gemma2",
        .rope_style = RopeStyle::Neox,
        .ffn_activation = FfnActivation::GeluTanh,
        .scale_embeddings = true,
        .swa_period = 2,
        .scale_query_before_attention = true,
        .layer = merge({kPlainAttn, kDenseFfn, has({{L::AttnPostNorm, R}, {L::FfnPostNorm, R}})}),
        .global = {R, R, O, kNoRopeFreqs},
    },
    // Qwen2 / Qwen2.5: Llama with biases on Q, K and V, NEOX RoPE.
    ArchSpec{
        .name = "qwen2",
        .rope_style = RopeStyle::Neox,
        .layer = merge({kPlainAttn, kDenseFfn, has({{L::AttnQBias, R}, {L::AttnKBias, R}, {L::AttnVBias, R}})}),
    },
    // Qwen3: per-head RMS norms on Q and K, NEOX RoPE; the head size is
    // attention.key_length, not n_embd / n_head.
    ArchSpec{
        .name = "qwen3",
        .rope_style = RopeStyle::Neox,
        .layer = merge({kPlainAttn, kQkNorm, kDenseFfn}),
    },
    // Qwen3 MoE (30B-A3B, 235B-A22B): Qwen3's attention, every FFN a
    // mixture of experts (softmax router, top-k, weights renormalized).
    ArchSpec{
        .name = "qwen3moe",
        .rope_style = RopeStyle::Neox,
        .layer = merge({kPlainAttn, kQkNorm, kMoeFfn}),
    },
    // GLM-4.5 (glm4moe): Qwen2's biases and Qwen3's Q/K norms, NEOX RoPE
    // over the first rope.dimension_count dims of each head; the leading
    // dense layers a SwiGLU FFN, the rest sigmoid-gated experts chosen with
    // exp_probs_b (the file says the gating, the normalization and the
    // scale) plus a shared expert. The pre-FFN norm is post_attention_norm.
    // NextN (multi-token prediction) blocks follow the layers; they are not
    // run.
    ArchSpec{
        .name = "glm4moe",
        .rope_style = RopeStyle::Neox,
        .ffn_norm_named_post_attention = true,
        .layer = merge({kPlainAttn, has({{L::AttnQBias, R}, {L::AttnKBias, R}, {L::AttnVBias, R}, {L::AttnQNorm, O},
                                         {L::AttnKNorm, O}, {L::FfnNorm, R}, {L::FfnGate, Presence::Dense},
                                         {L::FfnUp, Presence::Dense}, {L::FfnDown, Presence::Dense},
                                         {L::FfnGateInp, Presence::Expert}, {L::FfnGateExps, Presence::Expert},
                                         {L::FfnUpExps, Presence::Expert}, {L::FfnDownExps, Presence::Expert},
                                         {L::FfnExpProbsB, Presence::Expert}, {L::FfnGateShexp, Presence::Expert},
                                         {L::FfnUpShexp, Presence::Expert}, {L::FfnDownShexp, Presence::Expert}})}),
    },
    // gpt-oss: Qwen2's biases and one on the output, a sink logit per
    // head, NEOX RoPE (YaRN-scaled as the file says), sliding-window
    // attention on every other layer (the even ones); every FFN experts
    // with biases, chosen by the router's (biased) logits and weighted by
    // a softmax over the chosen, through the clamped SwiGLU. The pre-FFN
    // norm is post_attention_norm.
    ArchSpec{
        .name = "gpt-oss",
        .rope_style = RopeStyle::Neox,
        .ffn_activation = FfnActivation::SwigluOai,
        .swa_period = 2,
        .moe_normalize_weights = false,
        .ffn_norm_named_post_attention = true,
        .default_expert_gating = 3,
        .layer = merge({kPlainAttn, kMoeFfn,
                        has({{L::AttnQBias, R}, {L::AttnKBias, R}, {L::AttnVBias, R}, {L::AttnOutputBias, R},
                             {L::AttnSinks, R}, {L::FfnGateInpBias, R}, {L::FfnGateExpsBias, R},
                             {L::FfnUpExpsBias, R}, {L::FfnDownExpsBias, R}})}),
    },
    // DeepSeek-V2/V3 (and Kimi-K2): multi-head latent attention with a
    // latent-only cache (arch.h), NORM RoPE YaRN-scaled as DeepSeek's; the
    // leading dense layers a SwiGLU FFN, the rest experts (the file says
    // the gating, its bias, the groups, the normalization and the scale)
    // plus shared experts. Files converted before the split k_b/v_b
    // (attn_kv_b) are refused by the keys check (hparams).
    ArchSpec{
        .name = "deepseek2",
        .mla = true,
        .layer = has({{L::AttnNorm, R}, {L::AttnQA, R}, {L::AttnQANorm, R}, {L::AttnQB, R}, {L::AttnKvAMqa, R},
                      {L::AttnKvANorm, R}, {L::AttnKB, R}, {L::AttnVB, R}, {L::AttnOutput, R}, {L::FfnNorm, R},
                      {L::FfnGate, Presence::Dense}, {L::FfnUp, Presence::Dense}, {L::FfnDown, Presence::Dense},
                      {L::FfnGateInp, Presence::Expert}, {L::FfnGateExps, Presence::Expert},
                      {L::FfnUpExps, Presence::Expert}, {L::FfnDownExps, Presence::Expert}, {L::FfnExpProbsB, O},
                      {L::FfnGateShexp, Presence::Expert}, {L::FfnUpShexp, Presence::Expert},
                      {L::FfnDownShexp, Presence::Expert}}),
    },
    // Phi-3: Q, K and V fused in attn_qkv, gate and up fused in ffn_up,
    // NEOX RoPE, Q scaled before attention.
    ArchSpec{
        .name = "phi3",
        .rope_style = RopeStyle::Neox,
        .scale_query_before_attention = true,
        .layer = has({{L::AttnNorm, R}, {L::AttnQkv, R}, {L::AttnOutput, R}, {L::FfnNorm, R}, {L::FfnGateUp, R},
                      {L::FfnDown, R}}),
        .global = {R, R, O, kNoRopeFreqs},
    },
};

}  // namespace

Presence resolve_presence(Presence p, bool has_experts) {
    if (p == Presence::Dense) return has_experts ? Presence::Absent : Presence::Required;
    if (p == Presence::Expert) return has_experts ? Presence::Required : Presence::Absent;
    return p;
}

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
    const TensorRule& rule = layer_tensor_rule(t);
    return fmt::format("blk.{}.{}.{}", layer, rule.suffix, rule.bias ? "bias" : "weight");
}

LayerTensor stored_as(LayerTensor t, const ArchSpec& arch) {
    return t == LayerTensor::FfnNorm && arch.ffn_norm_named_post_attention ? LayerTensor::AttnPostNorm : t;
}

std::string layer_tensor_name(int64_t layer, LayerTensor t, const ArchSpec& arch) {
    return layer_tensor_name(layer, stored_as(t, arch));
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
