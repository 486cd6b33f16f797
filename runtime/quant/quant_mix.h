// Quantization mixes: the whole-file types users ask for (Q4_K_M, Q3_K_S...)
// and the per-tensor choice each makes, as llama.cpp's quantizer does it:
// norms stay F32, the output head gets Q6_K, attention V and FFN down get
// more bits in some layers, K-quants fall back to legacy types on rows that
// are not a multiple of 256.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
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
    MOSTLY_BF16 = 32,
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

// The facts about a model that the mix rules look at.
struct MixModelInfo {
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t n_expert = 0;  // {arch}.expert_count; 0: dense. 8 (Mixtral) bumps attention; > 1 needs blk.N. FFN names
    bool has_output_tensor = false;  // false: tied embeddings, token_embd doubles as the head
};

// Type for one tensor of the model. `shape` is GGUF order (ne[0] first).
// 1-D tensors (norms, biases) keep F32.
Type choose_tensor_type(FileType ft, const MixModelInfo& model, std::string_view tensor_name,
                        std::span<const int64_t> shape);

}  // namespace tandem::quant
