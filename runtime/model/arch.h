// Architectures as data. Each supported architecture is one ArchSpec row:
// which per-layer tensors it has, how RoPE rotates, which FFN activation it
// uses, and its few numeric quirks. The forward pass asks for tensor roles
// and flags, never for architecture names.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem::model {

// NORM rotates adjacent pairs (x[2i], x[2i+1]) as Llama does; NEOX rotates
// (x[i], x[i + n_rot/2]) as GPT-NeoX and Gemma do.
enum class RopeStyle { Norm, Neox };

enum class FfnActivation {
    Silu,      // SwiGLU: silu(gate) * up
    GeluTanh,  // GeGLU with the tanh approximation of GELU
    // gpt-oss's clamped SwiGLU: x = min(gate, 7), y = clamp(up, -7, 7),
    // x * sigmoid(1.702 x) * (y + 1)
    SwigluOai,
};

// What a tensor does inside a transformer block. The FFN block's roles
// come last, from FfnNorm on (is_ffn_role).
enum class LayerTensor : int {
    AttnNorm,
    AttnQkv,       // Q, K and V in one matrix (Phi-3): rows [Q | K | V]
    AttnQ,
    AttnK,
    AttnV,
    // Multi-head latent attention (DeepSeek-V2/V3): Q through a low-rank
    // bottleneck (q_a, its norm, q_b: each head [nope | rope]); one product
    // kv_a_mqa gives the shared latent (normed by kv_a_norm) and the rotated
    // key part; k_b and v_b are per-head 3-D matrices that take a head's
    // nope query into the latent and the latent back out of it (absorbed
    // attention: the cache holds the latent alone).
    AttnQA,
    AttnQANorm,
    AttnQB,
    AttnKvAMqa,
    AttnKvANorm,
    AttnKB,
    AttnVB,
    AttnQBias,     // added to Q, K and V after their products (Qwen2)
    AttnKBias,
    AttnVBias,
    AttnOutput,
    AttnOutputBias,  // added to attn_output's product (gpt-oss)
    AttnSinks,     // one learned logit per query head joining each softmax row's sum (gpt-oss)
    AttnQNorm,     // per-head RMSNorm of Q (Gemma 3, Qwen3)
    AttnKNorm,     // per-head RMSNorm of K (Gemma 3, Qwen3)
    AttnPostNorm,  // RMSNorm of the attention output before the residual add (Gemma)
    FfnNorm,
    FfnGate,
    FfnUp,
    FfnGateUp,     // gate and up in one matrix named ffn_up (Phi-3): rows [gate | up]
    FfnDown,
    FfnGateInp,    // the router of a mixture of experts: one logit per expert
    FfnGateInpBias,  // added to the router's logits (gpt-oss)
    FfnGateExps,   // the experts' matrices, one 2-D slice per expert (3-D tensors)
    FfnUpExps,
    FfnDownExps,
    FfnGateExpsBias,  // one bias row per expert, added to that expert's product (gpt-oss)
    FfnUpExpsBias,
    FfnDownExpsBias,
    FfnExpProbsB,  // added to the router's gate values to choose the experts, not to weight them (GLM-4.5, DeepSeek-V3)
    FfnGateShexp,  // the shared expert every token also runs, beside the routed ones (GLM-4.5, DeepSeek-V3)
    FfnUpShexp,
    FfnDownShexp,
    FfnPostNorm,   // RMSNorm of the FFN output before the residual add (Gemma)
    Count,
};
inline constexpr int kLayerTensorCount = static_cast<int>(LayerTensor::Count);
constexpr bool is_ffn_role(LayerTensor r) { return r >= LayerTensor::FfnNorm && r < LayerTensor::Count; }
// The experts' own tensors: their 3-D matrices and per-expert biases
// (what --cpu-moe and the planner's expert candidate keep on the host).
constexpr bool is_expert_role(LayerTensor r) {
    switch (r) {
        case LayerTensor::FfnGateExps:
        case LayerTensor::FfnUpExps:
        case LayerTensor::FfnDownExps:
        case LayerTensor::FfnGateExpsBias:
        case LayerTensor::FfnUpExpsBias:
        case LayerTensor::FfnDownExpsBias: return true;
        default: return false;
    }
}

enum class GlobalTensor : int {
    TokenEmbd,
    OutputNorm,
    Output,     // absent when the head is tied to token_embd
    RopeFreqs,  // per-dimension RoPE frequency factors (Llama 3.1 long context)
    Count,
};
inline constexpr int kGlobalTensorCount = static_cast<int>(GlobalTensor::Count);

// Dense and Expert resolve against the file, layer by layer: a layer with
// experts ({arch}.expert_count > 0, past the leading_dense_block_count
// dense layers) has the Expert tensors and not the Dense ones, a layer
// without has the Dense ones (Mixtral is the llama architecture with
// experts).
enum class Presence : uint8_t { Absent, Optional, Required, Dense, Expert };
// Dense and Expert for a model with or without experts: Required or Absent;
// the others stay as they are.
Presence resolve_presence(Presence p, bool has_experts);

// The size a tensor dimension must have, in terms of the hyperparameters.
enum class Dim : uint8_t {
    One,
    Embd,      // n_embd
    QDim,      // n_head * head_dim_k
    KDim,      // n_head_kv * head_dim_k
    VDim,      // n_head_kv * head_dim_v
    OutDim,    // attn_output's input: n_head * head_dim_v (MLA: n_head * head_dim_v_mla)
    NHead,     // n_head
    HeadDimK,  // head_dim_k
    FF,        // n_ff
    FF2,       // 2 * n_ff (gate and up fused)
    QkvDim,    // q_dim + k_dim + v_dim (fused Q, K, V)
    FFExp,     // n_ff_exp: one expert's hidden size
    NExpert,   // n_expert
    FFShexp,   // n_ff_exp * n_expert_shared: the shared experts' hidden size
    Vocab,     // n_vocab
    RopeHalf,  // n_rot / 2
    QLora,     // n_lora_q (MLA)
    KvLora,    // n_lora_kv (MLA)
    QMla,      // n_head * head_dim_k_mla: q_b's output, each head [nope | rope]
    KNope,     // head_dim_k_mla - n_rot: a head's query part without RoPE
    VMla,      // head_dim_v_mla: a head's value out of the latent
};

struct TensorRule {
    std::string_view suffix;  // "attn_q" -> "blk.N.attn_q.weight"
    Dim ne0;
    Dim ne1;                  // Dim::One for vectors
    Dim ne2 = Dim::One;       // the experts of a 3-D expert tensor, or the heads of a per-head one (MLA)
    bool bias = false;        // "blk.N.attn_q.bias"
};

// The naming and shape of every role, shared by all architectures.
const TensorRule& layer_tensor_rule(LayerTensor t);
const TensorRule& global_tensor_rule(GlobalTensor t);
std::string layer_tensor_name(int64_t layer, LayerTensor t);  // "blk.3.attn_q.weight", "blk.3.attn_q.bias"
struct ArchSpec;
// The role whose name an architecture stores role t under: t itself, or
// AttnPostNorm for the pre-FFN norm of ArchSpec::ffn_norm_named_post_attention.
LayerTensor stored_as(LayerTensor t, const ArchSpec& arch);
// layer_tensor_name of stored_as(t, arch).
std::string layer_tensor_name(int64_t layer, LayerTensor t, const ArchSpec& arch);
std::string global_tensor_name(GlobalTensor t);                // "token_embd.weight"

// A row names only what differs from Llama's defaults below.
struct ArchSpec {
    std::string_view name;  // general.architecture
    RopeStyle rope_style = RopeStyle::Norm;
    FfnActivation ffn_activation = FfnActivation::Silu;
    bool scale_embeddings = false;  // multiply embeddings by sqrt(n_embd) (Gemma)
    // Sliding-window layers: every swa_period-th layer (the last of each
    // period) is global, the rest see only the last sliding_window
    // positions. 0: all layers global.
    int swa_period = 0;
    // RoPE base of sliding-window layers without a {arch}.rope.freq_base_swa
    // key; 0: the global base.
    double default_rope_base_swa = 0.0;
    // Query scale = 1/sqrt(head_dim_k) for all here; kept as data so an
    // architecture scaling by 1/sqrt(n_embd/n_head) is one row away.
    bool query_scale_by_embd_per_head = false;
    // Where the query scale is applied: to Q before attention (Gemma, Phi-3,
    // as llama.cpp's graphs do) or to each Q.K score. The two differ where
    // the fp16 rounding of Q for the cache dot product meets subnormals.
    bool scale_query_before_attention = false;
    // Mixture of experts: the router's softmax over all experts, the top
    // expert_used_count kept; their weights renormalized to sum to 1.
    // ({arch}.expert_weights_norm overrides it.)
    bool moe_normalize_weights = true;
    // The pre-FFN norm is stored as post_attention_norm (GLM-4.5, gpt-oss).
    bool ffn_norm_named_post_attention = false;
    // The router's gating without an {arch}.expert_gating_func key, as
    // llama.cpp's codes: 1 softmax over all experts, 2 sigmoid of each,
    // 3 the largest logits chosen and weighted by a softmax over those
    // alone (gpt-oss). 0: softmax.
    int default_expert_gating = 0;
    // Multi-head latent attention (the MLA roles above, its hparams
    // required), with DeepSeek's YaRN: the file's yarn_log_multiplier is a
    // tenth of the config's mscale_all_dim, and each Q.K is scaled by
    // mscale^2 / sqrt(head_dim_k_mla), mscale = 1 + 0.1 m ln(factor), as
    // llama.cpp's deepseek2 graph does.
    bool mla = false;
    std::array<Presence, kLayerTensorCount> layer{};
    //                                            embd, output_norm, output, rope_freqs
    std::array<Presence, kGlobalTensorCount> global{Presence::Required, Presence::Required, Presence::Optional,
                                                    Presence::Optional};
};

// nullptr for an architecture Tandem does not run.
const ArchSpec* find_arch(std::string_view name);
std::span<const ArchSpec> all_archs();
std::string supported_arch_names();  // "llama, gemma3, ..."

}  // namespace tandem::model
