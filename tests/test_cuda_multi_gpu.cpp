// Two GPUs in one process (--device cuda0,cuda1 -ts 1,1): the layers split
// between them give one GPU's logits bit for bit (the same kernels; the
// hidden state crosses through host floats), and each GPU's peak bytes and
// ledger are the planner's for that GPU. On the emulator the test binary
// asks for two emulated GPUs (tests/test_cuda_emulator.cpp); on a machine
// with one GPU it skips (fails where a GPU is required).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_api.h"
#include "planner/planner.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "tests/test_cuda_inputs.h"

namespace {

// A 20-token prompt (every position's logits) then 3 decode steps.
std::vector<float> run(tandem::Session& s) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 20; ++i) prompt.push_back((i * 37 + 11) % 1000);
    std::vector<float> logits, step;
    s.eval(prompt, true, logits);
    for (int32_t k = 0; k < 3; ++k) {
        s.eval(std::vector<int32_t>{100 + k}, false, step);
        logits.insert(logits.end(), step.begin(), step.end());
    }
    return logits;
}

TEST(CudaMultiGpu, TwoGpusGiveOneGpusLogitsAndEachTheirPlannedBytes) {
    std::string why;
    const auto gpus = tandem::cuda::list_devices(&why);
    if (gpus.size() < 2) TANDEM_CUDA_SKIP("needs two GPUs, found " << gpus.size() << (why.empty() ? "" : ": " + why));
    for (const char* name : {"synth-llama-Q8_0.gguf", "synth-qwen3moe-Q8_0.gguf"}) {
        TANDEM_REQUIRE_MODEL(path, name);
        SCOPED_TRACE(name);
        const auto file = tandem::gguf::File::open(path);
        const auto spec = tandem::model::load_model_spec(file);
        tandem::SessionOptions so;
        so.n_ctx = 128;
        so.n_ubatch = 32;
        so.n_threads = 1;
        so.n_gpu_layers = spec.hp.n_layer + 1;
        so.device = "cuda0";
        so.weight_stream = false;
        std::vector<float> one;
        {
            tandem::Session s(file, spec, so);
            one = run(s);
        }
        so.device = "cuda0,cuda1";
        so.tensor_split = {1, 1};
        tandem::Session two(file, spec, so);
        const std::vector<float> logits = run(two);
        ASSERT_EQ(logits.size(), one.size());
        EXPECT_EQ(std::memcmp(logits.data(), one.data(), one.size() * sizeof(float)), 0);
        // The plan of the same split, device by device.
        tandem::planner::PlanInputs in;
        in.device_name = "cuda0,cuda1";
        in.device_capacities = {1ull << 34, 1ull << 34};
        in.tensor_split = {1, 1};
        in.ngl = so.n_gpu_layers;
        in.margin = 0;
        in.n_ctx = so.n_ctx;
        in.n_ubatch = so.n_ubatch;
        const tandem::planner::Plan p = tandem::planner::plan(spec, in);
        ASSERT_EQ(p.devices.size(), 2u);
        const auto ledgers = two.ledgers();
        ASSERT_EQ(ledgers.size(), 3u);
        for (int d = 1; d <= 2; ++d) {
            const auto& part = p.devices[static_cast<size_t>(d - 1)];
            using C = tandem::MemoryCategory;
            EXPECT_EQ(ledgers[static_cast<size_t>(d)]->used(C::Weights), part.vram.weights) << part.name;
            EXPECT_EQ(ledgers[static_cast<size_t>(d)]->used(C::KvCache), part.vram.kv) << part.name;
            EXPECT_EQ(ledgers[static_cast<size_t>(d)]->used(C::Compute), part.vram.compute) << part.name;
            const auto peak = two.accelerator_peak_bytes(d);
            if (!peak) TANDEM_CUDA_SKIP("the device cannot tell its peak (not the emulator)");
            EXPECT_EQ(*peak, part.vram.total()) << part.name;
        }
    }
}

}  // namespace
