// Llama model geometry: the presets `tandem synth` can build (the shared
// tiny test model and the real Llama sizes the planner must handle), the
// ordered tensor list of such a model in llama.cpp's GGUF naming, and the
// hyperparameter keys llama.cpp writes for it. Nothing here allocates
// weights: a 70B shape is a few numbers and a list of ~720 names.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gguf/gguf_value.h"

namespace tandem::model {

struct LlamaShape {
    std::string name;
    int64_t n_embd = 0;
    int64_t n_ff = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t n_vocab = 0;
    int64_t n_ctx = 0;
    double rope_base = 10000.0;
    double rms_eps = 1e-5;
    // No output.weight: the head reuses token_embd.weight.
    bool tied_embeddings = false;

    int64_t head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }
    int64_t n_embd_kv() const { return head_dim() * n_head_kv; }
};

// The named presets, in a fixed order (smallest first).
std::span<const LlamaShape> llama_presets();
// nullptr when there is no preset of that name (case-sensitive: the names
// are lower-case by convention, "llama3-8b").
const LlamaShape* find_llama_preset(std::string_view name);
// "tiny, llama-1b, ..." for error messages and --help.
std::string llama_preset_names();

// Throws tandem::Error when the shape cannot describe a Llama model:
// non-positive sizes, heads that do not divide the embedding, KV heads that
// do not divide the heads, an odd head dimension (RoPE rotates pairs).
void validate_llama_shape(const LlamaShape& shape);

struct TensorShape {
    std::string name;
    std::vector<int64_t> shape;  // ne[0] first, as in GGUF
};

// Tensors in the order llama.cpp's converter writes them: token_embd, then
// per layer attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate, ffn_up, ffn_down, then output_norm and (unless tied) output.
std::vector<TensorShape> llama_tensors(const LlamaShape& shape);
// Total number of weights, from the same list.
uint64_t llama_param_count(const LlamaShape& shape);

// general.architecture and the llama.* hyperparameters, with the value
// types llama.cpp uses (u32 counts, f32 epsilon and RoPE base). The caller
// adds general.name, general.file_type, tokenizer keys and the
// quantization version.
std::vector<gguf::KeyValue> llama_hparams(const LlamaShape& shape);

// Layer index of a "blk.N." tensor name; -1 for any other name.
int64_t layer_of_tensor(std::string_view tensor_name);

}  // namespace tandem::model
