// Hyperparameters of a model, read from "{arch}.*" keys through one key
// table, with defaults where llama.cpp has them and checks that turn a
// hostile or inconsistent file into an Error before anything is allocated.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "runtime/model/arch.h"

namespace tandem::gguf {
class File;
}

namespace tandem::model {

// Far above any real model, low enough that products of these stay far from
// overflow and a hostile header cannot ask for terabytes of KV cache. The
// loader refuses larger values; synth refuses to write them.
inline constexpr int64_t kMaxDim = int64_t{1} << 24;
inline constexpr int64_t kMaxLayers = 4096;
// A head's K or V size (MLA: also the latent and its rotated part).
inline constexpr int64_t kMaxHeadDim = 4096;

struct HParams {
    std::string arch;
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_ff = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim_k = 0;
    int64_t head_dim_v = 0;
    int64_t n_rot = 0;           // rotated dimensions per head
    int64_t sliding_window = 0;  // 0: none
    double rope_base = 10000.0;
    double rope_base_swa = 10000.0;
    double rope_freq_scale = 1.0;  // 1 / the scaling factor (linear or YaRN)
    // YaRN (rope.scaling.type yarn), as llama.cpp's context sets it up:
    // ext_factor mixes each pair's extrapolated and interpolated angle
    // between the correction dims that beta_fast and beta_slow give over
    // n_ctx_orig positions; attn_factor multiplies the cosines and sines
    // (the kernels add YaRN's own 1 + 0.1 ln(factor) where ext_factor is
    // not 0). ext_factor 0: plain (linear) scaling.
    double rope_ext_factor = 0.0;
    double rope_attn_factor = 1.0;
    double rope_beta_fast = 32.0;
    double rope_beta_slow = 1.0;
    int64_t rope_n_ctx_orig = 0;  // 0: n_ctx_train
    double rms_eps = 1e-5;
    double final_logit_softcap = 0.0;  // 0: off
    double attn_logit_softcap = 0.0;   // 0: off (Gemma 2: cap * tanh(score / cap))
    // Mixture of experts (0 experts: a dense FFN).
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;  // one expert's hidden size (n_ff when the file does not say)
    int64_t n_expert_shared = 0;     // shared experts every token runs (their hidden size n_ff_exp each)
    int64_t n_layer_dense_lead = 0;  // the first layers have a dense FFN instead of experts
    int64_t n_nextn = 0;             // NextN blocks stored after the n_layer layers, not run
    // The router: expert_gating_func 2 is a sigmoid of each logit, 3 the
    // largest logits weighted by a softmax over those alone, else a
    // softmax over all; the kept weights divided by their sum when
    // expert_weights_norm, then multiplied by expert_weights_scale.
    int64_t expert_gating = 0;
    // Group-limited routing (DeepSeek-V3): expert_group_count groups, the
    // choice made within the expert_group_used_count best (0 or 1: none).
    int64_t n_expert_groups = 0;
    int64_t n_expert_groups_used = 0;
    bool expert_weights_norm = true;
    double expert_weights_scale = 1.0;
    // Multi-head latent attention (ArchSpec::mla): Q through a rank
    // n_lora_q bottleneck; keys and values from a shared latent of
    // n_lora_kv floats a token plus n_rot rotated ones, all the cache holds:
    // K = [latent | rope] (one KV head, head_dim_k = n_lora_kv + n_rot) and
    // V = the latent, K's first head_dim_v = n_lora_kv floats.
    // head_dim_k_mla and head_dim_v_mla are a head's sizes before the
    // absorption ([nope | rope] and the value out of the latent).
    int64_t n_lora_q = 0;
    int64_t n_lora_kv = 0;
    int64_t head_dim_k_mla = 0;
    int64_t head_dim_v_mla = 0;
    double rope_yarn_log_mul = 0.0;  // YaRN's mscale_all_dim (rope.scaling.yarn_log_multiplier, as llama.cpp reads it)
    // Each Q.K's scale; 0: 1 / sqrt(head_dim_k) (MLA: DeepSeek's, see ArchSpec::mla).
    double attn_scale = 0.0;
    // Widest fused product (Q|K|V or gate|up) the architecture has; 0: none.
    // Set by load_model_spec, which knows the tensors.
    int64_t fused_width = 0;

    int64_t q_dim() const { return n_head * head_dim_k; }
    int64_t k_dim() const { return n_head_kv * head_dim_k; }
    int64_t v_dim() const { return n_head_kv * head_dim_v; }
    int64_t out_dim() const { return n_head * head_dim_v; }  // attention's output
    bool mla() const { return n_lora_kv > 0; }
    // attn_output's input: attention's output, or with MLA each head's value out of the latent.
    int64_t o_dim() const { return mla() ? n_head * head_dim_v_mla : out_dim(); }
    // V floats a cache row stores: none with MLA (V is K's first head_dim_v).
    int64_t kv_v_dim() const { return mla() ? 0 : v_dim(); }
    int64_t q_mla_dim() const { return n_head * head_dim_k_mla; }  // q_b's output
    int64_t gqa_ratio() const { return n_head / n_head_kv; }
    int64_t qkv_dim() const { return q_dim() + k_dim() + v_dim(); }
    // The FFN's hidden activations of one token, the widest any layer
    // needs: n_ff (a dense layer), every used expert's hidden rows side by
    // side, or the shared experts' hidden rows.
    int64_t ffn_width() const {
        const int64_t experts = n_expert > 0 ? std::max(n_expert_used * n_ff_exp, n_ff_shexp()) : 0;
        return n_expert == 0 || n_layer_dense_lead > 0 ? std::max(n_ff, experts) : experts;
    }
    int64_t n_ff_shexp() const { return n_ff_exp * n_expert_shared; }
    bool layer_has_experts(int64_t il) const { return n_expert > 0 && il >= n_layer_dense_lead; }
    bool sigmoid_gating() const { return expert_gating == 2; }
    bool softmax_of_chosen() const { return expert_gating == 3; }
};

// Reads and validates. n_vocab comes from the token embedding's shape when
// the file has one (the tokenizer may list more or fewer entries).
HParams read_hparams(const gguf::File& file, const ArchSpec& arch);

// The size a tensor dimension must have under these hyperparameters.
int64_t dim_value(const HParams& hp, Dim d);

}  // namespace tandem::model
