// Model geometry for `tandem synth`: the presets it can build (the shared
// tiny test model and real sizes the planner must handle: Llama, Qwen2.5,
// Qwen3 MoE, Mixtral, Phi-3), the ordered tensor list of such a model in
// llama.cpp's GGUF naming, and the hyperparameter keys llama.cpp's converter
// writes for it. The tensor list comes from the same tables the loader
// checks (runtime/model/arch.h: the architecture's presence row and each
// role's TensorRule dims), so a synthetic file binds through
// load_model_spec by construction. Nothing here allocates weights: a 235B
// shape is a few numbers and a list of ~1200 names.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gguf/gguf_value.h"

namespace tandem::model {

struct ModelShape {
    std::string name;
    std::string arch = "llama";  // general.architecture: a row of arch.h
    int64_t n_embd = 0;
    int64_t n_ff = 0;  // dense FFN hidden size (MoE files record it too)
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t n_vocab = 0;
    int64_t n_ctx = 0;
    double rope_base = 10000.0;
    double rms_eps = 1e-5;
    // No output.weight: the head reuses token_embd.weight.
    bool tied_embeddings = false;
    // Per-head size when config.json gives head_dim (Qwen3): written as
    // attention.key_length / value_length. 0: n_embd / n_head, no key.
    int64_t head_dim = 0;
    // Mixture of experts; 0 experts: a dense FFN.
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    // One expert's hidden size, written as expert_feed_forward_length.
    // 0: each expert has n_ff rows (Mixtral, which has no such key).
    int64_t n_ff_exp = 0;
    // attention.sliding_window when > 0 (Phi-3's config says 2047; the
    // Gemma architectures require it).
    int64_t sliding_window = 0;
    // YaRN RoPE scaling (rope.scaling.type yarn) by this factor from
    // yarn_orig_ctx positions (gpt-oss: 32 from 4096); 0: none.
    double yarn_factor = 0.0;
    int64_t yarn_orig_ctx = 0;
    // GLM-4.5 and DeepSeek-V3 style experts: shared experts beside the
    // routed ones, the first n_dense_lead layers a dense FFN of n_ff, the
    // router a sigmoid (expert_gating_func 2, weights normalized; on
    // deepseek2 with its choice bias exp_probs_b), RoPE on the first n_rot
    // dims of each head (0: all).
    int64_t n_expert_shared = 0;
    int64_t n_dense_lead = 0;
    bool sigmoid_router = false;
    int64_t n_rot = 0;
    // DeepSeek-V3's routing: the experts chosen within the
    // n_expert_groups_used best of n_expert_groups groups (n_group,
    // topk_group; 0: no groups), their weights times expert_weights_scale
    // (routed_scaling_factor).
    int64_t n_expert_groups = 0;
    int64_t n_expert_groups_used = 0;
    double expert_weights_scale = 1.0;
    // Multi-head latent attention (deepseek2; kv_lora_rank 0: none): Q
    // through a q_lora_rank bottleneck, K and V out of a kv_lora_rank
    // latent. Before absorption a head's query and key are
    // [qk_nope_head_dim | n_rot] (n_rot is qk_rope_head_dim), its value
    // v_head_dim; the file's one KV head is the cached [latent | rope].
    int64_t q_lora_rank = 0;
    int64_t kv_lora_rank = 0;
    int64_t qk_nope_head_dim = 0;
    int64_t v_head_dim = 0;
    // DeepSeek's YaRN: config.json's rope_scaling.mscale_all_dim, written
    // as rope.scaling.yarn_log_multiplier = 0.1 * it (llama.cpp's
    // converter); 0: no key.
    double yarn_mscale_all_dim = 0.0;

    bool mla() const { return kv_lora_rank > 0; }
    // The cache's per-head K and V sizes (attention.key_length and
    // value_length): with MLA the latent and its rotated part, and the latent.
    int64_t head_dim_k() const {
        if (mla()) return kv_lora_rank + n_rot;
        return head_dim > 0 ? head_dim : (n_head > 0 ? n_embd / n_head : 0);
    }
    int64_t head_dim_v() const { return mla() ? kv_lora_rank : head_dim_k(); }
    int64_t key_length_mla() const { return qk_nope_head_dim + n_rot; }
    int64_t expert_ff() const { return n_ff_exp > 0 ? n_ff_exp : n_ff; }
};

// The named presets, in a fixed order (smallest first).
std::span<const ModelShape> model_presets();
// nullptr when there is no preset of that name (case-sensitive: the names
// are lower-case by convention, "llama3-8b").
const ModelShape* find_preset(std::string_view name);
// "tiny, llama-1b, ..." for error messages and --help.
std::string preset_names();

// Throws tandem::Error when the shape cannot describe a model of its
// architecture: an unknown architecture, non-positive sizes, heads that do
// not divide the embedding (without head_dim), KV heads that do not divide
// the heads, an odd head dimension (RoPE rotates pairs), experts on an
// architecture without a mixture-of-experts FFN or none on one that is only
// that, more experts used than there are, expert groups llama.cpp's loader
// refuses, multi-head latent attention on an architecture without it (or
// none on deepseek2), MLA sizes that are not positive, RoPE dims that are
// odd or not below the key's, more than one KV head with MLA.
void validate_shape(const ModelShape& shape);

struct TensorShape {
    std::string name;
    std::vector<int64_t> shape;  // ne[0] first, as in GGUF
};

// Tensors in the order llama.cpp's converter writes them: token_embd, then
// per layer every role the architecture has (arch.h order: attn_norm,
// attn_q, attn_k, attn_v, biases, attn_output, Q/K norms, ffn_norm, the
// FFN or the router and experts), then output_norm and (unless tied)
// output. Optional roles (rope_freqs) are left out.
std::vector<TensorShape> model_tensors(const ModelShape& shape);
// Total number of weights, from the same list.
uint64_t param_count(const ModelShape& shape);

// general.architecture and the {arch}.* hyperparameters, the keys and value
// types llama.cpp's converter writes for that architecture (u32 counts, f32
// epsilon and RoPE base). The caller adds general.name, general.file_type,
// tokenizer keys and the quantization version.
std::vector<gguf::KeyValue> model_hparams(const ModelShape& shape);

// Layer index of a "blk.N." tensor name; -1 for any other name.
int64_t layer_of_tensor(std::string_view tensor_name);

}  // namespace tandem::model
