// What the speculative-decoding tests share (run's in test_speculative.cpp
// and serve's in test_serve_spec.cpp): chi-square bounds and statistics
// for "these samples come from one distribution", and a model file with
// one token's text changed (a draft whose vocabulary differs).
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"

namespace tandem::testing {

// A prompt that repeats itself, so that n-gram speculation has drafts to take.
inline constexpr const char* kRepetitive =
    "The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog sat on the log. The cat sat on";

// Upper critical value of chi-square with df degrees of freedom at the
// normal quantile z (Wilson-Hilferty); z = 4.26: about 1e-5.
inline double chi2_critical(int df, double z = 4.26) {
    const double a = 2.0 / (9.0 * df);
    return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Two-sample chi-square of token counts (categories with fewer than 10
// together pooled into one); df receives the degrees of freedom.
inline double chi2_two_sample(const std::map<int32_t, int64_t>& a, const std::map<int32_t, int64_t>& b, int& df) {
    std::map<int32_t, std::pair<int64_t, int64_t>> all;
    for (const auto& [t, c] : a) all[t].first += c;
    for (const auto& [t, c] : b) all[t].second += c;
    std::vector<std::pair<int64_t, int64_t>> cells;
    std::pair<int64_t, int64_t> pooled{0, 0};
    for (const auto& [t, c] : all) {
        if (c.first + c.second < 10) {
            pooled.first += c.first;
            pooled.second += c.second;
        } else {
            cells.push_back(c);
        }
    }
    if (pooled.first + pooled.second > 0) cells.push_back(pooled);
    double x = 0.0;
    for (const auto& [x1, x2] : cells) {
        const double d = static_cast<double>(x1 - x2);
        x += d * d / static_cast<double>(x1 + x2);
    }
    df = static_cast<int>(cells.size()) - 1;
    return x;
}

// `model` rewritten to `out` with token `id`'s text replaced by `text`.
inline void write_with_token_text(const std::filesystem::path& model, const std::filesystem::path& out, int32_t id,
                                  const std::string& text) {
    const gguf::File file = gguf::File::open(model);
    gguf::Writer w(out, file.alignment());
    for (const auto& kv : file.metadata()) {
        if (kv.key != "tokenizer.ggml.tokens") {
            w.set(kv.key, kv.value);
            continue;
        }
        gguf::Value v = kv.value;
        auto& arr = std::get<gguf::Array>(v.data);
        arr.items[static_cast<size_t>(id)] = gguf::Value::str(text);
        w.set(kv.key, v);
    }
    for (const auto& t : file.tensors()) w.add_tensor({t.name, t.shape, t.type});
    w.write_header();
    for (const auto& t : file.tensors()) w.write_tensor_data(file.tensor_data(t));
    w.finish();
}

}  // namespace tandem::testing
