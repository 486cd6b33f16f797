// What the stand-in split tests share (test_archs.cpp, test_multi_device.cpp):
// a shared model opened with its spec, the options they start from, and one
// scenario run under a placement: a 21-token prompt of sequence 0 and a copy
// of its first 5 tokens in sequence 1 in one batch (batched products,
// per-sequence attention), three decode steps of both, then one token of
// sequence 0 alone (the single-token kernels). Its logits are compared bit
// for bit against the all-CPU run's.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/common/memory_ledger.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"

namespace tandem::testing {

struct SplitModel {
    gguf::File file;
    model::ModelSpec spec;
};

inline SplitModel open_split_model(const std::filesystem::path& path) {
    auto file = gguf::File::open(path);
    auto spec = model::load_model_spec(file);
    return {std::move(file), std::move(spec)};
}

inline SessionOptions split_base_options() {
    SessionOptions opt;
    opt.n_ctx = 128;
    opt.n_ubatch = 16;  // the prompt in several micro-batches, past gemma2's window of 8
    opt.n_seq_max = 2;
    return opt;
}

struct SplitOutcome {
    std::vector<float> logits;
    std::vector<uint64_t> device_weights;  // each opened accelerator's ledger, in order
    int64_t step_crossings = 0;            // activation moves of the last (one-token) step
};

inline SplitOutcome run_split_scenario(const SplitModel& m, const SessionOptions& opt) {
    Session session(m.file, m.spec, opt);
    std::vector<BatchToken> batch;
    for (int32_t i = 0; i < 21; ++i) batch.push_back({(i * 37 + 11) % 8000, i, 0, true});
    for (int32_t i = 0; i < 5; ++i) batch.push_back({(i * 37 + 11) % 8000, i, 1, true});
    SplitOutcome out;
    session.eval_batch(batch, out.logits);
    std::vector<float> step;
    for (int32_t k = 0; k < 3; ++k) {
        const std::vector<BatchToken> two = {{100 + k, 21 + k, 0, true}, {200 + k, 5 + k, 1, true}};
        session.eval_batch(two, step);
        out.logits.insert(out.logits.end(), step.begin(), step.end());
    }
    const int64_t before = session.activation_crossings();
    session.eval_batch(std::vector<BatchToken>{{300, 24, 0, true}}, step);
    out.step_crossings = session.activation_crossings() - before;
    out.logits.insert(out.logits.end(), step.begin(), step.end());
    const auto ledgers = session.ledgers();
    for (size_t i = 1; i < ledgers.size(); ++i) out.device_weights.push_back(ledgers[i]->used(MemoryCategory::Weights));
    return out;
}

inline void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// A model name as a test name: anything but letters and digits becomes '_'.
inline std::string model_test_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string n = info.param;
    for (auto& ch : n) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return n;
}

}  // namespace tandem::testing
