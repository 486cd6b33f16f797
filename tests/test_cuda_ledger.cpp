// The planner's device bytes are what the CUDA device allocates, byte for
// byte: a session on the device, loaded at a split and run through a
// prompt of two micro-batches (the batch products, cuBLAS and its
// workspace, weight streaming where layers stay on the host) and a few
// decode steps (one sequence, or three side by side, each with its own
// window in gemma2's sliding-window layers), holds in its ledgers exactly the plan's bytes per
// category, and the most the device's allocator held at once (the
// emulator's count) is the plan's total. Nothing allocated outside the
// ledger, and no KV layout larger than the planner's figure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_api.h"
#include "planner/planner.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/ledger_check.h"
#include "tests/test_cuda_inputs.h"

namespace {

namespace tq = tandem::quant;

struct LedgerCase {
    std::string model;
    tandem::model::CacheType cache_type;
    int64_t n_ctx;
    int64_t n_seq = 1;  // sequences side by side (a window each in a sliding-window layer)
};

std::string case_name(const ::testing::TestParamInfo<LedgerCase>& info) {
    std::string s = info.param.model + "_" + tandem::planner::cache_type_name(info.param.cache_type) + "_ctx" +
                    std::to_string(info.param.n_ctx) + "_seq" + std::to_string(info.param.n_seq);
    for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return s;
}

class CudaLedger : public ::testing::TestWithParam<LedgerCase> {};

TEST_P(CudaLedger, PeakDeviceBytesArePlannedBytes) {
    TANDEM_REQUIRE_GPU(dev);
    (void)dev;
    const LedgerCase& c = GetParam();
    TANDEM_REQUIRE_MODEL(path, c.model);
    const auto file = tandem::gguf::File::open(path);
    const auto spec = tandem::model::load_model_spec(file);
    const auto tok = tandem::Tokenizer::from_gguf(file);
    std::vector<int32_t> prompt = tok.encode(
        "Once upon a time, there was a little robot who wanted to learn. Every morning it rolled to the library, "
        "read one page, and asked the librarian what the words meant.",
        true);
    prompt.resize(std::min<size_t>(prompt.size(), 40));
    ASSERT_GT(prompt.size(), 32u) << "the prompt must fill more than one micro-batch";
    const int64_t n_layer = spec.hp.n_layer;
    for (const int64_t ngl : {n_layer / 2, n_layer + 1}) {
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        tandem::SessionOptions so;
        so.n_ctx = c.n_ctx;
        so.n_ubatch = 32;
        so.n_threads = 1;
        so.cache_type = c.cache_type;
        so.n_seq_max = c.n_seq;
        so.kv_per_sequence = c.n_seq > 1;
        so.device = "cuda0";
        so.n_gpu_layers = ngl;
        tandem::Session s(file, spec, so);
        std::vector<float> logits;
        s.eval(prompt, false, logits);
        for (int i = 0; i < 3; ++i) s.eval(std::vector<int32_t>{prompt[static_cast<size_t>(i)]}, false, logits);
        const bool streams = s.weight_stream_active();
        EXPECT_EQ(streams, ngl <= n_layer) << s.weight_stream_note();
        const auto vram =
            tandem::planner::device_bytes(spec, ngl, c.n_ctx, so.n_ubatch, c.cache_type, streams, c.n_seq);
        const auto ram = tandem::planner::host_bytes(spec, ngl, true, c.n_ctx, so.n_ubatch, c.cache_type, c.n_seq);
        tandem::testing::expect_ledgers_equal_plan(s, ram, vram);
        ASSERT_GT(vram.kv, 0u);
        ASSERT_GT(ram.staging, 0u);
        const auto peak = s.accelerator_peak_bytes();
        if (!peak) TANDEM_CUDA_SKIP("the device cannot tell its peak (not the emulator)");
        EXPECT_EQ(*peak, vram.total());
    }
}

INSTANTIATE_TEST_SUITE_P(
    CudaBackend, CudaLedger,
    ::testing::Values(LedgerCase{"tiny-llama-Q4_K_M.gguf", tandem::model::kCacheF16, 256},
                      LedgerCase{"tiny-llama-Q4_K_M.gguf", tandem::model::kCacheQ8_0, 200},
                      LedgerCase{"tiny-llama-F16.gguf", tandem::model::kCacheF16, 96},
                      LedgerCase{"synth-qwen3moe-Q8_0.gguf", tandem::model::kCacheQ8_0, 160},
                      LedgerCase{"synth-gemma2-Q8_0.gguf", tandem::model::kCacheF16, 256},
                      LedgerCase{"synth-gemma2-Q8_0.gguf", tandem::model::kCacheQ8_0, 512, 3},
                      // K and V of other types and row sizes (issue 47)
                      LedgerCase{"tiny-llama-Q4_K_M.gguf", {tq::Type::Q8_0, tq::Type::F16}, 200},
                      LedgerCase{"synth-llama-Q8_0.gguf", {tq::Type::Q4_0, tq::Type::Q4_0}, 256},
                      LedgerCase{"synth-gemma2-Q8_0.gguf", {tq::Type::F32, tq::Type::IQ4_NL}, 256, 2}),
    case_name);

}  // namespace
