// Tensor element types as GGUF numbers them, and the traits table that every
// other module consults instead of switching on the type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace tandem::quant {

// Values are the ggml_type ids stored in GGUF tensor infos; gaps are ids
// that ggml retired or formats Tandem does not implement.
enum class Type : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    IQ1_M = 29,
    BF16 = 30,
    MXFP4 = 39,
};

// Converts n floats into n / block_elems blocks. n is a multiple of
// block_elems (callers check with row_bytes first).
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
// The inverse: n / block_elems blocks into n floats.
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
// quantize with importance weights qw (n of them, one per column; may be
// null): the searches llama-quantize runs when given an importance matrix.
using QuantizeRowWeightedFn = void (*)(const float* src, void* dst, int64_t n, const float* qw);

struct TypeTraits {
    Type type;
    std::string_view name;  // as llama.cpp prints it: "Q4_K", "F16"
    int64_t block_elems;    // weights per block
    size_t block_bytes;     // bytes per block, == sizeof(block_*)
    bool is_quantized;
    bool is_activation_only;  // Q8_K, Q8_1: dot-product partners, never stored weights
    QuantizeRowFn quantize_row;  // null: Tandem reads the type but does not make it
    DequantizeRowFn dequantize_row;
    QuantizeRowWeightedFn quantize_weighted = nullptr;  // null: importance weights change nothing
    bool needs_weights = false;  // quantize_row refuses: made only with importance weights
};

// What activations are quantized to before a dot product with rows of type
// t, on every device (ggml's vec_dot_type): Q8_0 for Q4_0, Q5_0 and Q8_0,
// Q8_1 for Q4_1 and Q5_1, Q8_K for the K-quants and the 256-element
// i-quants, Q8_0 for IQ4_NL and MXFP4, t itself for the float
// types and the activation types. The one place this pairing is written:
// the CPU kernel table and the CUDA kernels (at compile time) read it.
// The float weight types (multiplied as they are, or by a BLAS).
constexpr bool is_float_weight(Type t) { return t == Type::F32 || t == Type::F16 || t == Type::BF16; }

constexpr Type dot_type(Type t) {
    switch (t) {
        case Type::Q4_0:
        case Type::Q5_0:
        case Type::Q8_0:
        case Type::IQ4_NL:
        case Type::MXFP4:
            return Type::Q8_0;
        case Type::Q4_1:
        case Type::Q5_1:
            return Type::Q8_1;
        case Type::Q2_K:
        case Type::Q3_K:
        case Type::Q4_K:
        case Type::Q5_K:
        case Type::Q6_K:
        case Type::IQ2_XXS:
        case Type::IQ2_XS:
        case Type::IQ2_S:
        case Type::IQ3_XXS:
        case Type::IQ3_S:
        case Type::IQ1_S:
        case Type::IQ1_M:
        case Type::IQ4_XS:
            return Type::Q8_K;
        default:
            return t;
    }
}

// nullptr for ids Tandem does not know (retired, TQ*, future types): the
// GGUF reader turns that into an error naming the id.
const TypeTraits* find_traits(uint32_t type_id);
// For a Type value, which is always known.
const TypeTraits& traits(Type t);
std::optional<Type> type_from_name(std::string_view name);  // case-insensitive
std::span<const TypeTraits> all_traits();

// Bytes of a row of n elements; nullopt if n is not a multiple of the block
// size (a malformed tensor shape).
std::optional<uint64_t> row_bytes(Type t, int64_t n);

// Throws tandem::Error for a type Tandem does not make (quantize_row null)
// or makes only with importance weights (needs_weights).
void quantize_row(Type t, const float* src, void* dst, int64_t n);
void dequantize_row(Type t, const void* src, float* dst, int64_t n);
// With importance weights (qw: n values, or null): the type's weighted
// search where it has one, quantize_row otherwise (so qw null on a
// needs_weights type throws as quantize_row does).
void quantize_row_weighted(Type t, const float* src, void* dst, int64_t n, const float* qw);

}  // namespace tandem::quant
