// The layer described once (runtime/model/layer_ops.h): the op list every
// model's recipe writes is well formed, the width table is the memory the
// devices reserve, and the planner's count of activation crossings, from
// the same list, is what the executor moves on the stand-in device.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "planner/layout.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/layer_ops.h"
#include "runtime/model/model_spec.h"
#include "runtime/placement/placement.h"
#include "tests/test_paths.h"

namespace {

namespace fs = std::filesystem;
namespace model = tandem::model;
using model::Act;
using model::LayerTensor;
using model::OpKind;

struct Model {
    tandem::gguf::File file;
    model::ModelSpec spec;
};

// Every model of the committed and shared sets whose architecture loads.
std::vector<fs::path> every_model() {
    std::vector<fs::path> out{tandem::testing::test_data("tiny-llama-Q4_K_M.gguf")};
    const fs::path dir = tandem::testing::shared("models");
    if (fs::is_directory(dir)) {
        for (const auto& e : fs::directory_iterator(dir)) {
            if (e.path().extension() == ".gguf") out.push_back(e.path());
        }
    }
    return out;
}

int count_kind(const std::vector<model::LayerOp>& ops, OpKind k) {
    int n = 0;
    for (const auto& op : ops) n += op.kind == k ? 1 : 0;
    return n;
}

TEST(LayerOps, EveryBufferIsWrittenBeforeItIsReadAndEveryOpHasItsTensor) {
    int loaded = 0;
    for (const fs::path& path : every_model()) {
        SCOPED_TRACE(path.filename().string());
        std::optional<tandem::gguf::File> file;
        model::ModelSpec spec;
        try {
            file.emplace(tandem::gguf::File::open(path));
            spec = model::load_model_spec(*file);
        } catch (const tandem::Error& e) {
            // An architecture or weight type this build does not run yet says so.
            const std::string what = e.what();
            EXPECT_TRUE(tandem::testing::contains(what, "is not supported") ||
                        tandem::testing::contains(what, "unknown tensor type"))
                << what;
            continue;
        }
        ++loaded;
        for (size_t il = 0; il < spec.layers.size(); ++il) {
            const model::LayerSpec& L = spec.layers[il];
            ASSERT_FALSE(L.ops.empty());
            std::array<bool, model::kActCount> written{};
            written[static_cast<size_t>(Act::X)] = true;  // the layer's input
            for (const model::LayerOp& op : L.ops) {
                SCOPED_TRACE(std::string(model::op_name(op.kind)));
                std::array<Act, 3> room;
                for (const Act a : op.inputs(room)) EXPECT_TRUE(written[static_cast<size_t>(a)]) << model::act_name(a);
                if (op.is_product()) {
                    for (const LayerTensor r : op.weights()) EXPECT_NE(L.get(r), nullptr);
                } else {
                    EXPECT_TRUE(op.at == model::kWithCache || L.get(op.at) != nullptr);
                }
                for (const Act a : op.outs()) {
                    written[static_cast<size_t>(a)] = true;
                    EXPECT_GT(model::act_width(spec.hp, a), 0) << model::act_name(a);
                }
            }
            // A layer has one attention and two residual adds (more with a
            // shared expert), ending in X.
            EXPECT_EQ(count_kind(L.ops, OpKind::Attention), 1);
            EXPECT_GE(count_kind(L.ops, OpKind::Add), 2);
            EXPECT_EQ(L.ops.back().kind, OpKind::Add);
            EXPECT_EQ(L.ops.back().out[0], Act::X);
        }
    }
    EXPECT_GT(loaded, 0);
}

// A decode step's activation moves, as the executor makes them on the
// stand-in device, against the planner's count from the same op list.
TEST(LayerOps, PlannerCrossingsAreTheExecutorsMoves) {
    struct Case {
        const char* model;
        int64_t ngl;
        const char* ot;
        bool kv_offload;
    };
    const Case cases[] = {
        {"tiny-llama-Q4_K_M.gguf", 5, "ffn_=cpu", true},
        {"tiny-llama-Q4_K_M.gguf", 5, "attn=cpu", true},
        {"tiny-llama-Q4_K_M.gguf", 3, "", true},
        {"tiny-llama-Q4_K_M.gguf", 5, "", false},
        {"tiny-llama-Q4_K_M.gguf", 0, R"(^blk\.1\.ffn_up=cpu2)", true},
        {"tiny-llama-Q4_K_M.gguf", 5, "output_norm=cpu", true},
        {"models/synth-qwen3moe-Q8_0.gguf", 99, "exps=cpu", true},
        {"models/synth-qwen3moe-Q8_0.gguf", 99, "ffn_gate_inp=cpu", true},
        {"models/synth-qwen3moe-Q8_0.gguf", 1, "ffn_down_exps=cpu2", true},
        {"models/synth-phi3-Q8_0.gguf", 99, "ffn_up=cpu", true},
        {"models/synth-qwen2-Q8_0.gguf", 99, R"(attn_q\.bias=cpu)", true},
        {"models/synth-glm4moe-Q8_0.gguf", 99, "exp_probs_b=cpu", true},
        {"models/synth-glm4moe-Q8_0.gguf", 99, "shexp=cpu", true},
        {"models/synth-glm4moe-Q8_0.gguf", 2, "", true},
        {"models/synth-gpt-oss-Q8_0.gguf", 99, "exps=cpu", true},
        {"models/synth-gpt-oss-Q8_0.gguf", 99, R"(attn_output\.bias=cpu)", true},
        {"models/synth-gpt-oss-Q8_0.gguf", 2, "attn_sinks=cpu2", false},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(std::string(c.model) + " -ngl " + std::to_string(c.ngl) + " -ot " + c.ot);
        const fs::path path = std::string(c.model).rfind("models/", 0) == 0 ? tandem::testing::shared(c.model)
                                                                           : tandem::testing::test_data(c.model);
        if (!fs::exists(path)) GTEST_SKIP() << path << " is not here (../shared)";
        auto file = tandem::gguf::File::open(path);
        const model::ModelSpec spec = model::load_model_spec(file);
        tandem::SessionOptions opt;
        opt.n_ctx = 64;
        opt.n_ubatch = 16;
        opt.device = "cpu2";
        opt.n_gpu_layers = c.ngl;
        if (*c.ot) opt.overrides = tandem::parse_tensor_overrides(c.ot);
        opt.kv_offload = c.kv_offload;
        tandem::Session s(file, spec, opt);
        std::vector<float> logits;
        s.eval(std::vector<int32_t>{1}, false, logits);

        namespace pd = tandem::planner::detail;
        const pd::Tables t = pd::make_tables(spec, opt.n_ctx, opt.n_ubatch, model::kCacheF16);
        const pd::Mode mode = pd::mode_of(spec, t, s.placement());
        const pd::Layout layout{&mode, &mode, 0, s.placement().of(spec.get(model::GlobalTensor::OutputNorm)),
                                s.placement().head};
        const pd::Crossings planned = pd::crossings(t, layout);
        EXPECT_GT(planned.count, 0);
        EXPECT_EQ(planned.count, s.activation_crossings()) << s.placement_summary();
        EXPECT_EQ(planned.bytes + planned.logits_bytes, s.activation_bytes_moved()) << s.placement_summary();
    }
}

// The width table is what every device reserves: compute_bytes is its sum.
TEST(LayerOps, ComputeBytesIsTheWidthTable) {
    auto file = tandem::gguf::File::open(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"));
    const model::ModelSpec spec = model::load_model_spec(file);
    const model::WorkspaceWidths w = model::workspace_widths(spec.hp);
    int64_t acts = 0;
    for (int a = 0; a < model::kActCount; ++a) {
        if (static_cast<Act>(a) != Act::Logits) acts += model::act_width(spec.hp, static_cast<Act>(a));
    }
    const int64_t scratch = w.positions + w.matmul_input + w.expert_rows + w.expert_index;
    EXPECT_EQ(model::compute_bytes(spec, 7, false), 7u * static_cast<uint64_t>(acts + scratch) * sizeof(float));
    EXPECT_EQ(model::compute_bytes(spec, 7, true) - model::compute_bytes(spec, 7, false),
              7u * static_cast<uint64_t>(spec.hp.n_vocab) * sizeof(float));
    EXPECT_EQ(w.act[static_cast<size_t>(Act::Q)], spec.hp.q_dim());
}

}  // namespace
