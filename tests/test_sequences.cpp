// Several sequences in one session: a batch mixing them gives each the
// logits it gets alone, removed positions can be evaluated again as if
// never seen, and a copied prefix serves a second sequence.
#include <gtest/gtest.h>

#include <span>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "kernels_cuda/cuda_api.h"
#include "tests/test_cuda_inputs.h"
#include "tests/test_paths.h"

namespace {

using tandem::BatchToken;
using tandem::testing::contains;
using tandem::testing::error_of;

struct Fixture {
    tandem::gguf::File file = tandem::gguf::File::open(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"));
    tandem::model::ModelSpec spec = tandem::model::load_model_spec(file);
    tandem::Tokenizer tok = tandem::Tokenizer::from_gguf(file);
    std::vector<int32_t> a = tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    std::vector<int32_t> b = tok.encode("The capital of France is", true);
};

tandem::SessionOptions options(const std::string& device = "", int64_t ngl = 0) {
    tandem::SessionOptions opt;
    // Q8_0: with an F16 cache the one-pass attention rounds its running V
    // sums to fp16 at every cell, so any change of product shape (a batch of
    // 22 rows instead of 16, micro-batches of 5 instead of 64) moves these
    // random models' logits by up to 0.25 even for one sequence; with Q8_0
    // they move by 4e-6, so a token attending to another sequence's cells
    // (an O(1) change) cannot hide under the tolerance.
    opt.cache_type = tandem::model::kCacheQ8_0;
    opt.n_ctx = 256;
    opt.n_ubatch = 64;
    opt.device = device;
    opt.n_gpu_layers = ngl;
    return opt;
}

// Where bits are compared with the same cells and product shapes.
tandem::SessionOptions f16_options() {
    tandem::SessionOptions opt = options();
    opt.cache_type = tandem::model::kCacheF16;
    return opt;
}

// Logits of every token of `ids` evaluated alone in a fresh session, in
// calls of the given sizes (all at once by default).
std::vector<float> alone(const Fixture& f, const std::vector<int32_t>& ids, const tandem::SessionOptions& opt,
                         std::vector<size_t> calls = {}) {
    tandem::Session s(f.file, f.spec, opt);
    if (calls.empty()) calls = {ids.size()};
    std::vector<float> logits, part;
    size_t done = 0;
    for (const size_t n : calls) {
        s.eval(std::span(ids.data() + done, n), true, part);
        logits.insert(logits.end(), part.begin(), part.end());
        done += n;
    }
    return logits;
}

float max_abs_diff(const float* x, const float* y, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i] - y[i]));
    return m;
}

// The batch's logits rows split back per sequence (every token asks).
void check_mixed_batch(const Fixture& f, const std::vector<BatchToken>& batch, const tandem::SessionOptions& opt,
                       float tolerance) {
    tandem::Session s(f.file, f.spec, opt);
    std::vector<float> logits;
    s.eval_batch(batch, logits);
    const auto ref_a = alone(f, f.a, options()), ref_b = alone(f, f.b, options());
    const size_t V = static_cast<size_t>(f.spec.hp.n_vocab);
    ASSERT_EQ(logits.size(), batch.size() * V);
    for (size_t i = 0; i < batch.size(); ++i) {
        const auto& ref = batch[i].seq == 0 ? ref_a : ref_b;
        const float d = max_abs_diff(logits.data() + i * V, ref.data() + static_cast<size_t>(batch[i].pos) * V, V);
        EXPECT_LE(d, tolerance) << "batch row " << i << " (sequence " << batch[i].seq << ", position " << batch[i].pos
                                << ")";
    }
    EXPECT_EQ(s.seq_pos_max(0), static_cast<int32_t>(f.a.size()) - 1);
    EXPECT_EQ(s.seq_pos_max(1), static_cast<int32_t>(f.b.size()) - 1);
}

std::vector<BatchToken> sequential_batch(const Fixture& f) {
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < f.a.size(); ++i) batch.push_back({f.a[i], static_cast<int32_t>(i), 0, true});
    for (size_t i = 0; i < f.b.size(); ++i) batch.push_back({f.b[i], static_cast<int32_t>(i), 1, true});
    return batch;
}

std::vector<BatchToken> interleaved_batch(const Fixture& f) {
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < std::max(f.a.size(), f.b.size()); ++i) {
        if (i < f.b.size()) batch.push_back({f.b[i], static_cast<int32_t>(i), 1, true});
        if (i < f.a.size()) batch.push_back({f.a[i], static_cast<int32_t>(i), 0, true});
    }
    return batch;
}

}  // namespace

// The batch's products have other shapes than each prompt's alone (22
// rows, not 16 or 6), which moves logits by ~4e-6; reading another
// sequence's cells would move them by O(1).
TEST(Sequences, TwoSequencesInOneBatchGetTheirLogitsAlone) {
    const Fixture f;
    check_mixed_batch(f, sequential_batch(f), options(), 1e-4f);
    check_mixed_batch(f, interleaved_batch(f), options(), 1e-4f);
}

TEST(Sequences, TwoSequencesAcrossTheStandInSplit) {
    const Fixture f;
    check_mixed_batch(f, interleaved_batch(f), options("cpu2", 2), 1e-4f);
    auto kv_home = options("cpu2", 5);
    kv_home.kv_offload = false;
    check_mixed_batch(f, interleaved_batch(f), kv_home, 1e-4f);
}

// Two sequences in one batch on the CUDA device (its KV caches with cells
// of several sequences): each sequence's logits are those the same device
// gives it alone, within the product-shape rounding the CPU sees; reading
// the other's cells would move them by O(1).
TEST(Sequences, CudaTwoSequencesInOneBatch) {
    std::string why;
    if (tandem::cuda::list_devices(&why).empty()) TANDEM_CUDA_SKIP("no GPU: " << why);
    const Fixture f;
    for (const int64_t ngl : {int64_t{2}, f.spec.hp.n_layer}) {  // the head stays on the CPU: most of an emulated step
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        const auto opt = options("cuda0", ngl);
        tandem::Session s(f.file, f.spec, opt);
        std::vector<float> logits;
        const auto batch = interleaved_batch(f);
        s.eval_batch(batch, logits);
        const auto ref_a = alone(f, f.a, opt), ref_b = alone(f, f.b, opt);
        const size_t V = static_cast<size_t>(f.spec.hp.n_vocab);
        ASSERT_EQ(logits.size(), batch.size() * V);
        for (size_t i = 0; i < batch.size(); ++i) {
            const auto& ref = batch[i].seq == 0 ? ref_a : ref_b;
            const float d = max_abs_diff(logits.data() + i * V, ref.data() + static_cast<size_t>(batch[i].pos) * V, V);
            EXPECT_LE(d, 1e-4f) << "batch row " << i << " (sequence " << batch[i].seq << ")";
        }
    }
}

// What speculative decoding needs: drafted positions removed, then other
// tokens evaluated at those positions as if the draft had never been.
TEST(Sequences, RemovedPositionsEvaluateAgainAsFresh) {
    const Fixture f;
    const tandem::SessionOptions f16 = f16_options();
    tandem::Session s(f.file, f.spec, f16);
    std::vector<float> logits;
    s.eval(f.a, false, logits);
    const std::vector<int32_t> draft{100, 200, 300};
    s.eval(draft, true, logits);
    EXPECT_EQ(s.n_past(), static_cast<int64_t>(f.a.size() + draft.size()));
    s.remove_positions(0, static_cast<int32_t>(f.a.size()), -1);
    EXPECT_EQ(s.n_past(), static_cast<int64_t>(f.a.size()));
    const std::vector<int32_t> accepted{7, 8};
    std::vector<float> again;
    s.eval(accepted, true, again);

    auto whole = f.a;
    whole.insert(whole.end(), accepted.begin(), accepted.end());
    // The same calls in a fresh session: the cells and product shapes are
    // the same, so every bit must be.
    const auto fresh = alone(f, whole, f16, {f.a.size(), accepted.size()});
    const size_t V = static_cast<size_t>(f.spec.hp.n_vocab);
    ASSERT_EQ(again.size(), 2 * V);
    EXPECT_EQ(max_abs_diff(again.data(), fresh.data() + f.a.size() * V, 2 * V), 0.0f);
}

TEST(Sequences, CopiedPrefixServesASecondSequence) {
    const Fixture f;
    const tandem::SessionOptions f16 = f16_options();
    tandem::Session s(f.file, f.spec, f16);
    std::vector<float> logits;
    s.eval(f.a, false, logits);
    s.copy_sequence(0, 1, 0, -1);
    EXPECT_EQ(s.seq_pos_max(1), static_cast<int32_t>(f.a.size()) - 1);
    // The source goes on elsewhere; the copy continues from the prefix.
    const auto n = static_cast<int32_t>(f.a.size());
    std::vector<float> l0, l1;
    s.eval_batch(std::vector<BatchToken>{{42, n, 0, true}}, l0);
    s.remove_positions(0, 0, -1);  // the copy keeps the shared cells
    EXPECT_EQ(s.seq_pos_max(0), -1);
    s.eval_batch(std::vector<BatchToken>{{9, n, 1, true}}, l1);

    const size_t V = static_cast<size_t>(f.spec.hp.n_vocab);
    auto with42 = f.a, with9 = f.a;
    with42.push_back(42);
    with9.push_back(9);
    const std::vector<size_t> calls{f.a.size(), 1};
    EXPECT_EQ(max_abs_diff(l0.data(), alone(f, with42, f16, calls).data() + f.a.size() * V, V), 0.0f);
    EXPECT_EQ(max_abs_diff(l1.data(), alone(f, with9, f16, calls).data() + f.a.size() * V, V), 0.0f);
}

TEST(Sequences, BadBatchesSayWhat) {
    const Fixture f;
    tandem::Session s(f.file, f.spec, options());
    std::vector<float> logits;
    auto eval = [&](BatchToken t) { s.eval_batch(std::vector<BatchToken>{t}, logits); };
    EXPECT_TRUE(contains(error_of([&] { eval({1, 0, 64, true}); }), "sequence id 64 is outside [0, 64)"));
    EXPECT_TRUE(contains(error_of([&] { eval({1, 0, -1, true}); }), "sequence id -1"));
    EXPECT_TRUE(contains(error_of([&] { eval({1, 256, 0, true}); }), "position 256 is outside the context"));
    EXPECT_TRUE(contains(error_of([&] { eval({-3, 0, 0, true}); }), "token id -3"));
    EXPECT_TRUE(contains(error_of([&] { s.eval_batch({}, logits); }), "no tokens"));
    EXPECT_TRUE(contains(error_of([&] { s.copy_sequence(0, 70, 0, -1); }), "sequence id 70"));
}

// A sequence's largest position is what its cells hold, also after
// removing a middle range and then the tail above it.
TEST(Sequences, LargestPositionIsWhatTheCellsHold) {
    const Fixture f;
    tandem::Session s(f.file, f.spec, options());
    std::vector<float> logits;
    s.eval(f.a, false, logits);  // positions 0 .. 15
    s.remove_positions(0, 2, 8);
    EXPECT_EQ(s.seq_pos_max(0), static_cast<int32_t>(f.a.size()) - 1);
    s.remove_positions(0, 8, -1);
    EXPECT_EQ(s.seq_pos_max(0), 1);
    EXPECT_EQ(s.n_past(), 2);
    s.copy_sequence(0, 3, 0, -1);
    EXPECT_EQ(s.seq_pos_max(3), 1);
    EXPECT_EQ(s.seq_pos_max(5), -1);
}

// The session places every layer's cells before a micro-batch runs: a
// batch that does not fit in some layer leaves no position behind in any
// layer, so the same sequence can then store what does fit.
TEST(Sequences, ABatchThatDoesNotFitLeavesNoCellTaken) {
    const Fixture f;
    tandem::SessionOptions opt;
    opt.n_ctx = 16;
    opt.n_ubatch = 16;
    opt.n_seq_max = 2;
    tandem::Session s(f.file, f.spec, opt);
    std::vector<float> logits;
    const auto batch = [](int32_t seq, int n) {
        std::vector<tandem::BatchToken> b;
        for (int i = 0; i < n; ++i) b.push_back({100 + i, i, seq, i == n - 1});
        return b;
    };
    s.eval_batch(batch(0, 10), logits);
    // 6 cells are free: 10 more positions fail in the first layer already.
    EXPECT_THROW(s.eval_batch(batch(1, 10), logits), tandem::Error);
    EXPECT_EQ(s.seq_pos_max(1), -1);
    EXPECT_EQ(s.seq_pos_max(0), 9);
    s.eval_batch(batch(1, 6), logits);  // exactly the free cells, in every layer
    EXPECT_EQ(s.seq_pos_max(1), 5);
    EXPECT_THROW(s.eval_batch(batch(1, 1), logits), tandem::Error);  // position 0 again: no cell free
}
