// The layer split on the stand-in accelerator (a second CPU device that owns
// its memory and has a capacity): every ngl from 0 to n_layer + 1 gives the
// all-CPU logits, each layer's KV cache is accounted on its own device, and
// a capacity too small is a clean out-of-memory error.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <utility>
#include <vector>

#include "runtime/common/memory_ledger.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace {

using tandem::testing::shared;
using tandem::testing::test_data;

std::vector<float> eval_logits(const tandem::gguf::File& file, const tandem::model::ModelSpec& spec,
                               const std::vector<int32_t>& tokens, const tandem::SessionOptions& opt) {
    tandem::Session session(file, spec, opt);
    std::vector<float> logits;
    session.eval(tokens, true, logits);
    return logits;
}

tandem::SessionOptions split_options(int64_t ngl) {
    tandem::SessionOptions opt;
    opt.n_ctx = 128;
    opt.n_ubatch = 64;
    opt.device = "cpu2";
    opt.n_gpu_layers = ngl;
    return opt;
}

void check_every_split_matches_cpu(const std::filesystem::path& model) {
    const auto file = tandem::gguf::File::open(model);
    const auto spec = tandem::model::load_model_spec(file);
    const auto tok = tandem::Tokenizer::from_gguf(file);
    const auto tokens = tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
    tandem::SessionOptions cpu_only;
    cpu_only.n_ctx = 128;
    cpu_only.n_ubatch = 64;
    const auto reference = eval_logits(file, spec, tokens, cpu_only);
    for (int64_t ngl = 0; ngl <= spec.hp.n_layer + 1; ++ngl) {
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        const auto logits = eval_logits(file, spec, tokens, split_options(ngl));
        ASSERT_EQ(logits.size(), reference.size());
        // The stand-in runs the same kernels, so the split must not change a
        // single bit: any difference is a hand-over or placement bug.
        float max_diff = 0.0f;
        for (size_t i = 0; i < logits.size(); ++i) max_diff = std::max(max_diff, std::fabs(logits[i] - reference[i]));
        EXPECT_EQ(max_diff, 0.0f);
    }
}

}  // namespace

TEST(StandInSplit, EveryNglGivesTheCpuLogitsCommittedModel) {
    check_every_split_matches_cpu(test_data("tiny-llama-Q4_K_M.gguf"));
}

TEST(StandInSplit, EveryNglGivesTheCpuLogitsSharedModels) {
    for (const char* name : {"tiny-llama-F16.gguf", "tiny-llama-Q8_0.gguf", "tiny-llama-b-Q4_K_M.gguf"}) {
        const auto path = shared(std::string("models/") + name);
        TANDEM_REQUIRE_SHARED(path);
        SCOPED_TRACE(name);
        check_every_split_matches_cpu(path);
    }
}

TEST(StandInSplit, KvCacheLivesOnTheLayersDevice) {
    const auto file = tandem::gguf::File::open(test_data("tiny-llama-Q4_K_M.gguf"));
    const auto spec = tandem::model::load_model_spec(file);
    const int64_t ngl = 3;
    const auto opt = split_options(ngl);
    tandem::Session session(file, spec, opt);
    uint64_t kv_device = 0, kv_host = 0, w_device = 0;
    for (int64_t il = 0; il < spec.hp.n_layer; ++il) {
        const uint64_t kv = tandem::model::kv_bytes_for_layer(spec, il, opt.n_ctx, opt.n_ubatch, opt.cache_type);
        EXPECT_EQ(session.layer_device(il), il < ngl ? "cpu2" : "cpu") << "layer " << il;
        (il < ngl ? kv_device : kv_host) += kv;
        if (il < ngl) w_device += tandem::model::layer_weight_bytes(spec, il);
    }
    const auto ledgers = session.ledgers();
    ASSERT_EQ(ledgers.size(), 2u);
    EXPECT_EQ(ledgers[1]->used(tandem::MemoryCategory::KvCache), kv_device);
    EXPECT_EQ(ledgers[0]->used(tandem::MemoryCategory::KvCache), kv_host);
    EXPECT_EQ(ledgers[1]->used(tandem::MemoryCategory::Weights), w_device);
    EXPECT_FALSE(session.output_on_device());
}

// The upload progress feed counts every byte that goes to the device, in
// order, and ends exactly at the total it announced (the weights the
// device's ledger records), for a split with and without the head.
TEST(StandInSplit, UploadProgressCountsTheDevicesWeights) {
    const auto file = tandem::gguf::File::open(test_data("tiny-llama-Q4_K_M.gguf"));
    const auto spec = tandem::model::load_model_spec(file);
    for (const int64_t ngl : {int64_t{2}, spec.hp.n_layer + 1}) {
        auto opt = split_options(ngl);
        std::vector<std::pair<uint64_t, uint64_t>> calls;
        opt.upload_progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
        tandem::Session session(file, spec, opt);
        ASSERT_FALSE(calls.empty());
        const uint64_t total = calls.front().second;
        for (size_t i = 0; i < calls.size(); ++i) {
            EXPECT_EQ(calls[i].second, total);
            if (i > 0) {
                EXPECT_GT(calls[i].first, calls[i - 1].first);
            }
        }
        EXPECT_EQ(calls.back().first, total) << "ngl " << ngl;
        EXPECT_EQ(session.ledgers()[1]->used(tandem::MemoryCategory::Weights), total) << "ngl " << ngl;
    }
}

TEST(StandInSplit, TooSmallCapacityIsACleanOutOfMemory) {
    const auto file = tandem::gguf::File::open(test_data("tiny-llama-Q4_K_M.gguf"));
    const auto spec = tandem::model::load_model_spec(file);
    auto opt = split_options(spec.hp.n_layer + 1);
    opt.device_capacity = {1u << 20};  // 1 MiB: less than the layers' weights
    try {
        tandem::Session session(file, spec, opt);
        FAIL() << "a 1 MiB device accepted the whole model";
    } catch (const tandem::OutOfDeviceMemory& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("out of memory on cpu2"), std::string::npos) << msg;
        EXPECT_NE(msg.find("bytes"), std::string::npos) << msg;
        EXPECT_NE(msg.find("available"), std::string::npos) << msg;
    }
}

TEST(MemoryLedger, ParsesSizesAndRefusesPastCapacity) {
    EXPECT_EQ(tandem::parse_size("8GiB"), 8ull << 30);
    EXPECT_EQ(tandem::parse_size("512MiB"), 512ull << 20);
    EXPECT_EQ(tandem::parse_size("1.5GB"), 1500000000ull);
    EXPECT_EQ(tandem::parse_size("4096"), 4096ull);
    EXPECT_THROW(tandem::parse_size("lots"), tandem::Error);
    EXPECT_THROW(tandem::parse_size("8XB"), tandem::Error);
    tandem::MemoryLedger ledger("dev", 1000);
    ledger.reserve(tandem::MemoryCategory::Weights, 600, "a");
    EXPECT_THROW(ledger.reserve(tandem::MemoryCategory::KvCache, 401, "b"), tandem::OutOfDeviceMemory);
    ledger.reserve(tandem::MemoryCategory::KvCache, 400, "c");
    EXPECT_EQ(ledger.total(), 1000u);
    {
        tandem::LedgerReservation r;
        EXPECT_THROW(r = tandem::LedgerReservation(ledger, tandem::MemoryCategory::Compute, 1, "d"),
                     tandem::OutOfDeviceMemory);
    }
    ledger.release(tandem::MemoryCategory::Weights, 600);
    EXPECT_EQ(ledger.total(), 400u);
    EXPECT_EQ(ledger.peak(), 1000u);
}

TEST(StandInSplit, RunStepsDownWhenTheDeviceIsFull) {
    const auto dir = tandem::testing::scratch_dir();
    const auto model = tandem::testing::shell_quote(test_data("tiny-llama-Q4_K_M.gguf").string());
    // 24 MiB holds a few layers with their scratch, not the whole model.
    const auto r = tandem::testing::run_tandem(
        "run -m " + model + " -p Hello -n 4 --temp 0 --device cpu2 --vram 24MiB -ngl 5 --verbose", dir);
    EXPECT_FALSE(r.signaled);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("tandem: warning: out of memory on cpu2"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("retrying with -ngl 4"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("Hello"), std::string::npos) << r.out;
}
