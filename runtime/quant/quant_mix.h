// Quantization mixes: the whole-file types users ask for (Q4_K_M, Q3_K_S,
// IQ2_XS...) and the per-tensor choice each makes, as llama.cpp's quantizer
// does it: norms stay F32, the output head gets Q6_K (Q5_K for the lowest
// i-quant mixes), attention V and FFN down get more bits in some layers,
// K-quants fall back to legacy types and i-quants to IQ4_NL on rows that are
// not a multiple of 256. The i-quant mixes depend on whether an importance
// matrix is given (MixModelInfo::imatrix), and the lowest need one
// (requires_imatrix).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "runtime/quant/quant_types.h"

namespace tandem::quant {

// llama_ftype values, as stored in general.file_type.
enum class FileType : uint32_t {
    ALL_F32 = 0,
    MOSTLY_F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q8_0 = 7,
    Q5_0 = 8,
    Q5_1 = 9,
    Q2_K = 10,
    Q3_K_S = 11,
    Q3_K_M = 12,
    Q3_K_L = 13,
    Q4_K_S = 14,
    Q4_K_M = 15,
    Q5_K_S = 16,
    Q5_K_M = 17,
    Q6_K = 18,
    IQ2_XXS = 19,
    IQ2_XS = 20,
    IQ3_XS = 22,
    IQ3_XXS = 23,
    IQ1_S = 24,
    IQ4_NL = 25,
    IQ3_S = 26,
    IQ3_M = 27,
    IQ2_S = 28,
    IQ2_M = 29,
    IQ4_XS = 30,
    IQ1_M = 31,
    MOSTLY_BF16 = 32,
    MXFP4_MOE = 38,
};

struct MixInfo {
    FileType file_type;
    std::string_view name;  // "Q4_K_M", "F16"
    Type base_type;         // the type most 2-D weights get
    std::string_view description;
};

std::span<const MixInfo> all_mixes();
std::optional<FileType> file_type_from_name(std::string_view name);  // case-insensitive
const MixInfo* find_mix(FileType ft);
// general.file_type's name ("Q4_K_M"), or "unknown (N)".
std::string file_type_name(uint64_t file_type);

// The facts about a model that the mix rules look at.
struct MixModelInfo {
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t n_expert = 0;  // {arch}.expert_count; 0: dense. 8 (Mixtral) bumps attention; > 1 needs blk.N. FFN names
    bool has_output_tensor = false;  // false: tied embeddings, token_embd doubles as the head
    // Whether the weights are quantized with an importance matrix
    // (llama-quantize --imatrix). Like llama.cpp's has_imatrix it is a fact
    // about the whole run, not each tensor: tensors the matrix has no entry
    // for (token_embd, output) still count as quantized with one. It changes
    // IQ3_XXS (attn_v stays IQ3_XXS instead of IQ3_S, ffn_down stays IQ3_XXS
    // instead of Q4_K/Q3_K), IQ4_NL and IQ4_XS (no Q5_K ffn_down in the first
    // eighth of the layers) and Q4_0/Q5_0 (Q4_1/Q5_1 ffn_down there).
    bool imatrix = false;
};

// Type for one tensor of the model. `shape` is GGUF order (ne[0] first).
// 1-D tensors (norms, biases) keep F32.
Type choose_tensor_type(FileType ft, const MixModelInfo& model, std::string_view tensor_name,
                        std::span<const int64_t> shape);

// Whether llama-quantize refuses to make this tensor of type t without an
// importance matrix: the i-quants below 3 bits and IQ3_XXS ("the result
// will be garbage"), except for the token embedding and the output head,
// which a matrix never covers.
bool requires_imatrix(std::string_view tensor_name, Type t);

}  // namespace tandem::quant
