// Checks shared by the quantization-mix tests (test_quant_mix.cpp) and the
// `tandem quantize` / `tandem synth` tests (test_quantize_command.cpp): the
// types a file holds, the types the mix rules choose for its tensors, and
// the comparison of the two.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "runtime/gguf/gguf_file.h"
#include "runtime/quant/quant_mix.h"
#include "runtime/quant/quant_types.h"

namespace tandem::quant::mix_checks {

inline int64_t hparam(const gguf::File& f, const std::string& key, int64_t fallback) {
    const auto v = f.find_uint(f.architecture() + "." + key);
    return v ? static_cast<int64_t>(*v) : fallback;
}

inline MixModelInfo info_of(const gguf::File& f) {
    MixModelInfo m;
    m.n_layer = hparam(f, "block_count", 0);
    m.n_head = hparam(f, "attention.head_count", 0);
    m.n_head_kv = hparam(f, "attention.head_count_kv", m.n_head);
    m.n_expert = hparam(f, "expert_count", 0);
    m.has_output_tensor = f.find_tensor("output.weight") != nullptr;
    return m;
}

inline std::map<std::string, Type> types_of(const gguf::File& f) {
    std::map<std::string, Type> out;
    for (const auto& t : f.tensors()) out[t.name] = t.type;
    return out;
}

// What choose_tensor_type gives for every tensor of `shapes_from`.
inline std::map<std::string, Type> chosen_types(FileType ft, const gguf::File& shapes_from, bool imatrix = false) {
    MixModelInfo m = info_of(shapes_from);
    m.imatrix = imatrix;
    std::map<std::string, Type> out;
    for (const auto& t : shapes_from.tensors()) out[t.name] = choose_tensor_type(ft, m, t.name, t.shape);
    return out;
}

inline std::string type_name(Type t) { return std::string(traits(t).name); }

inline void expect_same_types(const std::map<std::string, Type>& got, const std::map<std::string, Type>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, type] : want) {
        auto it = got.find(name);
        ASSERT_NE(it, got.end()) << name;
        EXPECT_EQ(type_name(it->second), type_name(type)) << name;
    }
}

}  // namespace tandem::quant::mix_checks
