// Reading llama.cpp's golden files (../shared/golden, see its README) and
// comparing logits with them: shared by the golden tests and the CUDA
// tests that hold the device path to the same bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tandem::testing {

// MODEL.PROMPT.tokens: the prompt's ids, then after "# greedy" the greedy ids.
struct GoldenTokens {
    std::vector<int32_t> prompt;
    std::vector<int32_t> greedy;
};

inline GoldenTokens read_golden_tokens(const std::filesystem::path& p) {
    std::ifstream in(p);
    GoldenTokens g;
    std::string line;
    bool in_greedy = false;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        if (line[0] == '#') {
            in_greedy = line.rfind("# greedy", 0) == 0;
            continue;
        }
        (in_greedy ? g.greedy : g.prompt).push_back(std::stoi(line));
    }
    return g;
}

// A file of float32 values (MODEL.PROMPT.logits: n_vocab per position).
inline std::vector<float> read_floats(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary | std::ios::ate);
    std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    return v;
}

// KL(P || Q) of the softmaxes of two logit rows, in double.
inline double kl_divergence(const float* p_logits, const float* q_logits, int64_t n) {
    auto log_softmax = [n](const float* l, std::vector<double>& out) {
        double mx = l[0];
        for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(l[i]));
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += std::exp(l[i] - mx);
        const double lse = mx + std::log(sum);
        out.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = l[i] - lse;
    };
    std::vector<double> lp, lq;
    log_softmax(p_logits, lp);
    log_softmax(q_logits, lq);
    double kl = 0.0;
    for (int64_t i = 0; i < n; ++i) kl += std::exp(lp[static_cast<size_t>(i)]) * (lp[static_cast<size_t>(i)] - lq[static_cast<size_t>(i)]);
    return kl;
}

// The mean KL(ref || got) over rows of n_vocab logits.
inline double mean_kl(const std::vector<float>& ref, const std::vector<float>& got, int64_t n_vocab) {
    const int64_t rows = static_cast<int64_t>(ref.size()) / n_vocab;
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) total += kl_divergence(ref.data() + r * n_vocab, got.data() + r * n_vocab, n_vocab);
    return total / static_cast<double>(rows);
}

}  // namespace tandem::testing
