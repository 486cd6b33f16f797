// Weight streaming for long prompts, on the stand-in accelerator: the
// prefetch order of the double buffer, the logits of streamed micro-batches
// (the same bits as the CPU's, at every split), the accounting of the
// slots, the threshold, and a device too small for the slots (streaming is
// dropped with a note; the run goes on).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "runtime/common/memory_ledger.h"
#include "runtime/engine/weight_stream.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace {

using tandem::MemoryCategory;
using tandem::model::LayerTensor;
using tandem::testing::test_data;

// Records what the double buffer asks of a device, in order.
class RecordingStream final : public tandem::DoubleBufferedStream {
public:
    using DoubleBufferedStream::DoubleBufferedStream;
    std::vector<std::string> log;

protected:
    void begin_upload(int slot, const tandem::gguf::TensorInfo& t) override {
        log.push_back("upload " + t.name + " -> " + std::to_string(slot));
    }
    void multiply(int slot, const tandem::gguf::TensorInfo& t, const float*, int64_t, float*) override {
        log.push_back("multiply " + t.name + " in " + std::to_string(slot));
    }
};

TEST(WeightStream, CopiesTheNextMatrixBeforeEachProduct) {
    const auto file = tandem::gguf::File::open(test_data("tiny-llama-Q4_K_M.gguf"));
    const auto spec = tandem::model::load_model_spec(file);
    const int64_t first = spec.hp.n_layer - 2;
    RecordingStream stream(spec, first);
    for (int64_t il = first; il < spec.hp.n_layer; ++il) {
        for (const LayerTensor role : tandem::model::kStreamedMatrices) {
            if (spec.layers[static_cast<size_t>(il)].get(role)) stream.matmul(il, role, nullptr, 1, nullptr);
        }
    }
    const std::string a = "blk." + std::to_string(first) + ".";
    const std::string b = "blk." + std::to_string(first + 1) + ".";
    ASSERT_GE(stream.log.size(), 6u);
    // The first product finds nothing prefetched: its own copy, then the
    // next one's, then the product.
    EXPECT_EQ(stream.log[0], "upload " + a + "attn_q.weight -> 0");
    EXPECT_EQ(stream.log[1], "upload " + a + "attn_k.weight -> 1");
    EXPECT_EQ(stream.log[2], "multiply " + a + "attn_q.weight in 0");
    EXPECT_EQ(stream.log[3], "upload " + a + "attn_v.weight -> 0");
    EXPECT_EQ(stream.log[4], "multiply " + a + "attn_k.weight in 1");
    // Across the layer boundary, and at the end the first matrix again,
    // ready for the next micro-batch.
    const auto find = [&](const std::string& line) {
        for (size_t i = 0; i < stream.log.size(); ++i) {
            if (stream.log[i] == line) return static_cast<int64_t>(i);
        }
        return int64_t{-1};
    };
    EXPECT_LT(find("upload " + b + "attn_q.weight -> 1"), find("multiply " + a + "ffn_down.weight in 0"));
    EXPECT_EQ(stream.log.back(), "multiply " + b + "ffn_down.weight in 1");
    EXPECT_EQ(stream.log[stream.log.size() - 2], "upload " + a + "attn_q.weight -> 0");
    EXPECT_EQ(stream.uploads(), 2u * 7u + 1u);
    // A second pass finds its first matrix already there: 14 more copies.
    for (int64_t il = first; il < spec.hp.n_layer; ++il) {
        for (const LayerTensor role : tandem::model::kStreamedMatrices) {
            if (spec.layers[static_cast<size_t>(il)].get(role)) stream.matmul(il, role, nullptr, 1, nullptr);
        }
    }
    EXPECT_EQ(stream.uploads(), 2u * (2u * 7u) + 1u);
    EXPECT_THROW(stream.matmul(first - 1, LayerTensor::AttnQ, nullptr, 1, nullptr), tandem::InternalError);
    // A matrix the layer does not have (a fused Q|K|V in a llama layer).
    EXPECT_THROW(stream.matmul(first, LayerTensor::AttnQkv, nullptr, 1, nullptr), tandem::InternalError);
}

tandem::SessionOptions stream_options(int64_t ngl) {
    tandem::SessionOptions opt;
    opt.n_ctx = 128;
    opt.n_ubatch = 64;
    opt.device = "cpu2";
    opt.n_gpu_layers = ngl;
    opt.stream_min_batch = 8;
    return opt;
}

std::vector<int32_t> prompt(const tandem::gguf::File& file) {
    const auto tok = tandem::Tokenizer::from_gguf(file);
    return tok.encode("Once upon a time, there was a little robot who wanted to learn how to dance.", true);
}

void check_streaming_matches_cpu(const std::filesystem::path& model) {
    const auto file = tandem::gguf::File::open(model);
    const auto spec = tandem::model::load_model_spec(file);
    const auto tokens = prompt(file);
    ASSERT_GE(tokens.size(), 8u);
    tandem::SessionOptions cpu_only;
    cpu_only.n_ctx = 128;
    cpu_only.n_ubatch = 64;
    std::vector<float> reference;
    tandem::Session(file, spec, cpu_only).eval(tokens, true, reference);
    for (int64_t ngl = 0; ngl <= spec.hp.n_layer + 1; ++ngl) {
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        const auto opt = stream_options(ngl);
        tandem::Session session(file, spec, opt);
        const bool host_layers = ngl < spec.hp.n_layer;
        EXPECT_EQ(session.weight_stream_active(), host_layers) << session.weight_stream_note();
        std::vector<float> logits;
        session.eval(tokens, true, logits);
        // Two more single tokens: decode never streams.
        std::vector<float> step;
        session.eval(std::vector<int32_t>{tokens[1]}, false, step);
        EXPECT_EQ(session.streamed_batches(), host_layers ? 1 : 0);
        ASSERT_EQ(logits.size(), reference.size());
        // The stand-in multiplies with the host's kernels: not one bit moves.
        float max_diff = 0.0f;
        for (size_t i = 0; i < logits.size(); ++i) max_diff = std::max(max_diff, std::fabs(logits[i] - reference[i]));
        EXPECT_EQ(max_diff, 0.0f);
        // The slots and buffers are on the accelerator's ledger, beside one
        // micro-batch of activations when it runs layers of its own, and
        // the GEMM tile either way.
        const auto ledgers = session.ledgers();
        ASSERT_EQ(ledgers.size(), 2u);
        const uint64_t own = ngl > 0 ? tandem::model::compute_bytes(spec, opt.n_ubatch, ngl > spec.hp.n_layer) : 0;
        const uint64_t slots = host_layers ? tandem::model::stream_bytes(spec, ngl, opt.n_ubatch) : 0;
        EXPECT_EQ(ledgers[1]->used(MemoryCategory::Compute), own + slots + tandem::model::gemm_tile_bytes(spec));
    }
}

TEST(WeightStream, StreamedBatchesGiveTheCpuLogitsAtEveryNgl) {
    check_streaming_matches_cpu(test_data("tiny-llama-Q4_K_M.gguf"));
}

TEST(WeightStream, StreamedBatchesGiveTheCpuLogitsSharedModels) {
    // The architectures' files too: fused products (phi3), biases (qwen2)
    // and layers whose experts stay on the host while their attention
    // matrices stream (qwen3moe).
    for (const char* name : {"tiny-llama-F16.gguf", "tiny-llama-Q8_0.gguf", "tiny-llama-Q6_K.gguf",
                             "synth-phi3-Q8_0.gguf", "synth-qwen2-Q8_0.gguf", "synth-qwen3moe-Q8_0.gguf",
                             "synth-gemma2-Q8_0.gguf", "synth-deepseek2-Q8_0.gguf"}) {
        const auto path = tandem::testing::shared(std::string("models/") + name);
        TANDEM_REQUIRE_SHARED(path);
        SCOPED_TRACE(name);
        check_streaming_matches_cpu(path);
    }
}

TEST(WeightStream, ShortBatchesAndNoStreamRunOnTheCpu) {
    const auto file = tandem::gguf::File::open(test_data("tiny-llama-Q4_K_M.gguf"));
    const auto spec = tandem::model::load_model_spec(file);
    const auto tokens = prompt(file);
    std::vector<float> logits;
    {
        // Below the threshold: the stream is ready but not used.
        auto opt = stream_options(1);
        opt.stream_min_batch = static_cast<int64_t>(tokens.size()) + 1;
        tandem::Session session(file, spec, opt);
        EXPECT_TRUE(session.weight_stream_active());
        session.eval(tokens, false, logits);
        EXPECT_EQ(session.streamed_batches(), 0);
    }
    {
        // Micro-batches that can never reach the threshold: no stream, and
        // at ngl 0 no accelerator at all.
        auto opt = stream_options(0);
        opt.stream_min_batch = opt.n_ubatch + 1;
        tandem::Session session(file, spec, opt);
        EXPECT_FALSE(session.weight_stream_active());
        EXPECT_EQ(session.ledgers().size(), 1u);
    }
    {
        auto opt = stream_options(0);
        opt.weight_stream = false;  // --no-stream
        tandem::Session session(file, spec, opt);
        EXPECT_FALSE(session.weight_stream_active());
        EXPECT_EQ(session.ledgers().size(), 1u);
        EXPECT_TRUE(session.weight_stream_note().empty());
    }
}

// A device with room for its layers but not for the slots keeps the layers,
// drops streaming with a note naming the bytes, and runs on.
TEST(WeightStream, SlotsThatDoNotFitAreDroppedNotFatal) {
    const auto file = tandem::gguf::File::open(test_data("tiny-llama-Q4_K_M.gguf"));
    const auto spec = tandem::model::load_model_spec(file);
    const auto tokens = prompt(file);
    for (const int64_t ngl : {int64_t{0}, int64_t{2}}) {
        SCOPED_TRACE("ngl " + std::to_string(ngl));
        auto opt = stream_options(ngl);
        const auto need = tandem::model::stream_bytes(spec, ngl, opt.n_ubatch);
        uint64_t layers = 0;
        for (int64_t il = 0; il < ngl; ++il) {
            layers += tandem::model::layer_weight_bytes(spec, il) +
                      tandem::model::kv_bytes_for_layer(spec, il, opt.n_ctx, opt.n_ubatch, opt.cache_type);
        }
        if (ngl > 0) layers += tandem::model::compute_bytes(spec, opt.n_ubatch, false);
        opt.device_capacity = {layers + tandem::model::gemm_tile_bytes(spec) + (64u << 10) + need / 2};
        tandem::Session session(file, spec, opt);
        EXPECT_FALSE(session.weight_stream_active());
        const std::string& note = session.weight_stream_note();
        EXPECT_NE(note.find("weight streaming off"), std::string::npos) << note;
        EXPECT_NE(note.find("out of memory on cpu2"), std::string::npos) << note;
        EXPECT_EQ(session.n_device_layers(), ngl);
        EXPECT_EQ(session.ledgers().size(), ngl > 0 ? 2u : 1u);
        std::vector<float> logits;
        session.eval(tokens, false, logits);
        EXPECT_EQ(session.streamed_batches(), 0);
    }
}

}  // namespace
