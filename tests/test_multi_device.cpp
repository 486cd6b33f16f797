// Several accelerators in one process (--device cpu2,cpu3 with -ts, as
// llama.cpp's -sm layer): the layers split between the devices by
// placement.h's layer_device, -ot naming any of them, and every split giving
// the all-CPU logits bit for bit on the stand-ins, with each device's
// ledger holding what the placement puts there and the hidden state
// crossing each boundary once per step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runtime/common/error.h"
#include "planner/hosts.h"
#include "planner/planner.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/engine/device_registry.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/placement/placement.h"
#include "runtime/serving/split.h"
#include "tests/split_scenario.h"
#include "tests/test_paths.h"

namespace {

using tandem::testing::expect_same_bits;
using tandem::testing::model_test_name;
using tandem::testing::open_split_model;
using tandem::testing::run_split_scenario;
using tandem::testing::shared;
using tandem::testing::split_base_options;
using tandem::testing::SplitModel;
using tandem::testing::SplitOutcome;

TEST(DeviceList, NamesParseInOrderAndDuplicatesAreRefused) {
    EXPECT_EQ(tandem::parse_accelerators(""), std::vector<std::string>{});
    EXPECT_EQ(tandem::parse_accelerators("cpu2,cpu3"), (std::vector<std::string>{"cpu2", "cpu3"}));
    EXPECT_EQ(tandem::parse_accelerators("cuda,cuda1"), (std::vector<std::string>{"cuda0", "cuda1"}));
    EXPECT_TRUE(tandem::all_stand_ins("cpu2,cpu3,cpu4"));
    EXPECT_FALSE(tandem::all_stand_ins("cpu2,cuda0"));
    EXPECT_FALSE(tandem::all_stand_ins(""));
    for (const std::string bad : {"cpu2,cpu2", "cuda,cuda0", "cpu2,", ",cpu2", "cpu2,,cpu3", "cpu1", "cpu0",
                                  "cpu02", "cpu2,gpu"}) {
        EXPECT_THROW((void)tandem::parse_accelerators(bad), tandem::Error) << bad;
    }
}

// llama.cpp's rule, as llama-model.cpp writes it: the split points are the
// cumulative proportions over their sum, and unit i goes to the first
// device whose point is above i / n (std::upper_bound over floats).
int llama_layer_gpu(int64_t i, int64_t n, const std::vector<float>& split) {
    std::vector<float> points(split.size());
    float sum = 0;
    for (size_t k = 0; k < split.size(); ++k) points[k] = sum += split[k];
    for (float& p : points) p /= sum;
    return static_cast<int>(std::upper_bound(points.begin(), points.end(), static_cast<float>(i) / n) - points.begin());
}

TEST(DeviceList, LayerSharesFollowLlamaCppsTensorSplit) {
    const std::vector<std::vector<float>> splits = {{1, 1}, {3, 1}, {1, 3}, {0, 1}, {1, 0}, {2, 1, 1}, {24, 12}, {1, 1, 1, 1}};
    for (const auto& split : splits) {
        const std::vector<double> as_double(split.begin(), split.end());
        for (const int64_t n : {1, 7, 17, 33, 81}) {
            for (int64_t i = 0; i < n; ++i) {
                EXPECT_EQ(tandem::layer_device(i, n, static_cast<int64_t>(split.size()), as_double),
                          llama_layer_gpu(i, n, split) + 1)
                    << "unit " << i << " of " << n << ", split of " << split.size();
            }
        }
    }
    EXPECT_EQ(tandem::layer_device(5, 10, 2, {}), 2);  // equal shares
    EXPECT_EQ(tandem::layer_device(4, 10, 2, {}), 1);
    EXPECT_THROW((void)tandem::layer_device(0, 10, 2, {1}), tandem::Error);         // one proportion for two devices
    EXPECT_THROW((void)tandem::layer_device(0, 10, 2, {0, 0}), tandem::Error);      // nothing above 0
    EXPECT_THROW((void)tandem::layer_device(0, 10, 2, {1, -1}), tandem::Error);     // negative
}

struct Split {
    const char* device;
    const char* ts;  // "" for equal shares
    int64_t ngl;     // below 0: n_layer + 1 + ngl
    const char* ot = "";
    int64_t boundaries = -1;  // device-to-device hand-overs in a step (-1: not checked)
};

std::vector<double> proportions(const std::string& ts) {
    std::vector<double> out;
    size_t start = 0;
    while (start < ts.size()) {
        const size_t comma = std::min(ts.find(',', start), ts.size());
        out.push_back(std::stod(ts.substr(start, comma - start)));
        start = comma + 1;
    }
    return out;
}

class MultiDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(MultiDevice, LayerSplitsGiveTheCpuLogitsBitForBit) {
    const auto path = shared("models/" + GetParam() + ".gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    const int64_t n_layer = m.spec.hp.n_layer;
    const auto reference = run_split_scenario(m, split_base_options());
    const Split splits[] = {
        // Everything, head included, shared equally by two: host -> cpu2 -> cpu3 -> host.
        {"cpu2,cpu3", "", -1, "", 1},
        {"cpu2,cpu3", "3,1", -1, "", 1},
        {"cpu2,cpu3", "1,3", n_layer / 2},
        {"cpu2,cpu3,cpu4", "1,1,1", -1, "", 2},
        // One device takes no layer: it holds nothing and is not opened.
        {"cpu2,cpu3", "0,1", -1, "", 0},
        // -ot names the second device: every layer's FFN there, the rest on the first.
        {"cpu2,cpu3", "1,0", -1, "ffn_=cpu3"},
        // -ot names the host and a device: the last layer's attention on the host.
        {"cpu2,cpu3", "1,1", n_layer, "blk\\.1\\.attn=cpu,output=cpu3"},
    };
    for (const Split& s : splits) {
        const int64_t ngl = s.ngl < 0 ? n_layer + 1 + s.ngl + 1 : s.ngl;
        SCOPED_TRACE(std::string(s.device) + " -ts " + s.ts + " -ngl " + std::to_string(ngl) + " -ot " + s.ot);
        auto opt = split_base_options();
        opt.device = s.device;
        opt.tensor_split = proportions(s.ts);
        opt.n_gpu_layers = ngl;
        if (*s.ot) opt.overrides = tandem::parse_tensor_overrides(s.ot);
        const SplitOutcome got = run_split_scenario(m, opt);
        expect_same_bits(got.logits, reference.logits);
        tandem::PlacementRequest req;
        req.devices = tandem::parse_accelerators(s.device);
        req.split = opt.tensor_split;
        req.n_gpu_layers = ngl;
        req.overrides = opt.overrides;
        const tandem::Placement p = tandem::place_tensors(m.spec, req);
        std::vector<uint64_t> expected;
        for (size_t d = 1; d < p.devices.size(); ++d) {
            if (p.uses(static_cast<int>(d))) expected.push_back(p.weight_bytes(static_cast<int>(d)));
        }
        EXPECT_EQ(got.device_weights, expected);
        // Whole layers: the hidden state goes to the first device, crosses
        // each boundary once, and the logits come back.
        if (s.boundaries >= 0) {
            EXPECT_EQ(got.step_crossings, s.boundaries + 2);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shared, MultiDevice,
                         ::testing::Values("synth-llama-Q8_0", "synth-gemma2-Q8_0", "synth-qwen3moe-Q8_0",
                                           "synth-gpt-oss-Q8_0", "synth-deepseek2-Q8_0"),
                         model_test_name);

TEST(MultiDeviceOptions, BadListsAndSplitsAreRefusedBeforeLoading) {
    const auto path = shared("models/synth-llama-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    auto expect_error = [&](const char* device, std::vector<double> ts, std::vector<uint64_t> caps,
                            const std::string& says) {
        auto opt = split_base_options();
        opt.device = device;
        opt.tensor_split = std::move(ts);
        opt.device_capacity = std::move(caps);
        opt.n_gpu_layers = 99;
        try {
            tandem::Session s(m.file, m.spec, opt);
            ADD_FAILURE() << device << " was accepted";
        } catch (const tandem::Error& e) {
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
        }
    };
    expect_error("cpu2,cpu3", {1, 2, 3}, {}, "expected 2 proportions");
    expect_error("cpu2,cpu2", {}, {}, "twice");
    expect_error("cpu2,cpu3", {}, {1u << 30, 1u << 30, 1u << 30}, "one per device");
    // A device too small for its share: the stand-in's own out-of-memory error.
    expect_error("cpu2,cpu3", {1, 1}, {64u << 20, 4096}, "cpu3");
}

}  // namespace

namespace {

// -ngl auto over several devices (--vram one size each): the planner's
// split, as resolve_split hands it to the session, and each device's bytes
// in the plan equal that device's ledger, category by category.
TEST(MultiDevicePlan, EachDevicesLedgerEqualsThePlan) {
    for (const std::string name : {"synth-llama-Q8_0", "synth-qwen3moe-Q8_0", "synth-gemma2-Q8_0"}) {
        const auto path = shared("models/" + name + ".gguf");
        TANDEM_REQUIRE_SHARED(path);
        const SplitModel m = open_split_model(path);
        const uint64_t whole = tandem::planner::device_bytes(m.spec, m.spec.hp.n_layer + 1, 128, 16,
                                                             tandem::model::kCacheF16).total();
        // Room for everything, for about half, and uneven devices.
        const std::vector<std::vector<uint64_t>> grids = {{whole, whole}, {whole / 3, whole / 3}, {whole / 2, whole / 5, whole / 4}};
        for (const auto& caps : grids) {
            std::string devices;
            for (size_t i = 0; i < caps.size(); ++i) devices += (i ? ",cpu" : "cpu") + std::to_string(i + 2);
            SCOPED_TRACE(name + " on " + devices + ", first " + std::to_string(caps[0]));
            tandem::planner::PlanInputs in;
            in.device_name = devices;
            in.device_capacities = caps;
            in.margin = 0;
            in.n_ctx = 128;
            in.n_ubatch = 16;
            in.n_seq = 2;
            in.candidates.assign(std::begin(tandem::planner::kAllCandidates), std::end(tandem::planner::kAllCandidates));
            const tandem::planner::Plan p = tandem::planner::plan(m.spec, in);
            ASSERT_EQ(p.devices.size(), caps.size());
            EXPECT_TRUE(p.fits);
            auto opt = split_base_options();
            opt.device = devices;
            opt.device_capacity = caps;
            opt.n_gpu_layers = p.ngl;
            opt.tensor_split = p.tensor_split;
            opt.overrides = p.rules.overrides;
            opt.cpu_moe = p.rules.cpu_moe;
            opt.n_cpu_moe = p.rules.n_cpu_moe;
            tandem::Session session(m.file, m.spec, opt);
            const auto ledgers = session.ledgers();
            size_t next = 1;
            for (const auto& part : p.devices) {
                if (part.vram.total() == 0) continue;  // not opened
                ASSERT_LT(next, ledgers.size());
                const auto& l = *ledgers[next++];
                using C = tandem::MemoryCategory;
                EXPECT_EQ(l.used(C::Weights), part.vram.weights) << part.name;
                EXPECT_EQ(l.used(C::KvCache), part.vram.kv) << part.name;
                EXPECT_EQ(l.used(C::Compute), part.vram.compute) << part.name;
                EXPECT_EQ(l.used(C::Staging), part.vram.staging) << part.name;
            }
            EXPECT_EQ(next, ledgers.size());
            EXPECT_EQ(ledgers[0]->used(tandem::MemoryCategory::Staging), p.ram.staging);
        }
    }
}

namespace {

// Stage [first, end)'s own -ngl auto plan on cpu2,cpu3 of `caps`
// (context 128, 2 sequences, micro-batches of 16).
tandem::planner::PlanInputs stage_inputs(const SplitModel& m, int64_t first, int64_t end,
                                         const std::vector<uint64_t>& caps) {
    tandem::planner::PlanInputs in;
    in.device_name = "cpu2,cpu3";
    in.device_capacities = caps;
    in.margin = 0;
    in.n_ctx = 128;
    in.n_ubatch = 16;
    in.n_seq = 2;
    in.stage_embeds = first == 0;
    in.stage_outputs = end == m.spec.hp.n_layer;
    in.first_layer = first;
    return in;
}

// The session that stage opens with plan p (-ngl counted from the stage's
// first layer, n_gpu_layers_from); each device's ledger must hold the
// plan's weights and KV bytes.
std::unique_ptr<tandem::Session> expect_stage_holds_its_plan(const SplitModel& m, int64_t first, int64_t end,
                                                             const std::vector<uint64_t>& caps,
                                                             const tandem::planner::Plan& p) {
    auto opt = split_base_options();
    opt.device = "cpu2,cpu3";
    opt.device_capacity = caps;
    opt.n_gpu_layers = p.ngl;
    opt.n_gpu_layers_from = first;
    opt.tensor_split = p.tensor_split;
    opt.stage_first = first;
    opt.stage_end = end;
    auto session = std::make_unique<tandem::Session>(m.file, m.spec, opt);
    const auto ledgers = session->ledgers();
    EXPECT_EQ(ledgers.size(), 3u);
    for (size_t d = 0; d < 2 && d + 1 < ledgers.size(); ++d) {
        using C = tandem::MemoryCategory;
        SCOPED_TRACE(p.devices[d].name);
        EXPECT_GT(p.devices[d].vram.weights, 0u);
        EXPECT_EQ(ledgers[d + 1]->used(C::Weights), p.devices[d].vram.weights);
        EXPECT_EQ(ledgers[d + 1]->used(C::KvCache), p.devices[d].vram.kv);
    }
    return session;
}

}  // namespace

// A stage without the head on two devices: the planner's empty unit past
// its last layer takes no device's share of the split, so both devices
// hold layers (counted, the count was one too many).
TEST(MultiDevicePlan, AStageWithoutTheHeadSharesItsLayersOverBothDevices) {
    const auto path = shared("models/synth-llama-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    const int64_t first = 0, end = 2;
    const tandem::model::ModelSpec stage = tandem::planner::stage_spec(m.spec, first, end);
    const uint64_t need = tandem::planner::device_bytes(stage, end - first, 128, 16, tandem::model::kCacheF16).total();
    const std::vector<uint64_t> caps = {need * 3 / 4, need * 3 / 4};  // neither holds the stage alone
    const tandem::planner::Plan p = tandem::planner::plan(stage, stage_inputs(m, first, end, caps));
    ASSERT_TRUE(p.fits);
    EXPECT_EQ(p.ngl, end - first);
    const auto session = expect_stage_holds_its_plan(m, first, end, caps, p);
    for (int64_t il = first; il < end; ++il) EXPECT_NE(session->layer_device(il), "cpu") << "layer " << il;
}

// The same stage whole on one device: planner::plan itself stops at the
// stage's layers, for every caller (plan --hosts printed "ngl 3/3" for two
// layers, and each serving path capped it on its own).
TEST(MultiDevicePlan, AStageWithoutTheHeadOnOneDeviceCountsOnlyItsLayers) {
    const auto path = shared("models/synth-llama-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    const int64_t first = 0, end = 2;
    const tandem::model::ModelSpec stage = tandem::planner::stage_spec(m.spec, first, end);
    tandem::planner::PlanInputs in = stage_inputs(m, first, end, {});
    in.device_name = "cpu2";
    in.device_capacity = uint64_t{1} << 30;  // room for all of it
    const tandem::planner::Plan p = tandem::planner::plan(stage, in);
    ASSERT_TRUE(p.fits);
    EXPECT_EQ(p.ngl, end - first);
    ASSERT_FALSE(p.weighed.empty());
    EXPECT_EQ(p.weighed.front().ngl, end - first);
    EXPECT_NE(tandem::planner::option_label(p.weighed.front(), p.n_layer).find("ngl 2/"), std::string::npos)
        << tandem::planner::option_label(p.weighed.front(), p.n_layer);
}

// A pipeline stage's own -ngl auto plan (layers [2, 4) and the head, on
// two devices of half the whole model each), as a later stage's
// session opens it.
TEST(MultiDevicePlan, AStagesOwnPlanIsWhatItsSessionHolds) {
    const auto path = shared("models/synth-llama-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    const int64_t first = 2, end = m.spec.hp.n_layer;
    const uint64_t whole = tandem::planner::device_bytes(m.spec, m.spec.hp.n_layer + 1, 128, 16,
                                                         tandem::model::kCacheF16).total();
    const std::vector<uint64_t> caps = {whole / 2, whole / 2};
    const tandem::planner::PlanInputs in = stage_inputs(m, first, end, caps);
    const tandem::planner::Plan p = tandem::planner::plan(tandem::planner::stage_spec(m.spec, first, end), in);
    ASSERT_TRUE(p.fits);
    ASSERT_EQ(p.ngl, end - first + 1);  // the whole stage fits: both devices hold some of it
    expect_stage_holds_its_plan(m, first, end, caps, p);

    // resolve_split plans the same stage when told its layers.
    tandem::serving::SplitRequest r;
    r.device = in.device_name;
    r.vram = caps;
    r.stage = {{first, end}};
    r.n_ctx = 128;
    r.n_ubatch = 16;
    r.n_seq = 2;
    const tandem::serving::Split s = tandem::serving::resolve_split(r, m.file, m.spec, [](const std::string&) {});
    EXPECT_EQ(s.so.n_gpu_layers_from, first);
    EXPECT_EQ(s.so.n_gpu_layers, p.ngl);
    EXPECT_NE(s.why.find("this stage's layers [2, 4) and the head"), std::string::npos) << s.why;
}

// --n-cpu-moe counts the model's layers in a stage's own plan, as the
// stage's session and the tensors' names do: over a later stage of a
// mixture of experts, the plan's bytes on the device are what the session
// holds there (the stage's plan used to count the rule from its own layer
// 0, so its first layer's experts were sized on the device).
TEST(MultiDevicePlan, NCpuMoeCountsTheModelsLayersInAStagesPlan) {
    const auto path = shared("models/synth-qwen3moe-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const SplitModel m = open_split_model(path);
    const int64_t end = m.spec.hp.n_layer, first = end / 2;
    ASSERT_GE(first, 1);
    tandem::planner::PlanInputs in;
    in.device_name = "cpu2";
    in.device_capacity = uint64_t{1} << 40;
    in.margin = 0;
    in.n_ctx = 128;
    in.n_ubatch = 16;
    in.n_seq = 2;
    in.stage_embeds = false;
    in.first_layer = first;
    in.ngl = end - first + 1;
    const tandem::model::ModelSpec stage = tandem::planner::stage_spec(m.spec, first, end);
    const tandem::planner::Plan all = tandem::planner::plan(stage, in);
    in.rules.n_cpu_moe = first + 1;  // the stage's first layer's experts on the host
    const tandem::planner::Plan p = tandem::planner::plan(stage, in);
    ASSERT_TRUE(p.fits);
    EXPECT_LT(p.vram.weights, all.vram.weights);
    auto opt = split_base_options();
    opt.device = in.device_name;
    opt.device_capacity = {*in.device_capacity};
    opt.n_gpu_layers = p.ngl;
    opt.n_gpu_layers_from = first;
    opt.n_cpu_moe = first + 1;
    opt.stage_first = first;
    opt.stage_end = end;
    tandem::Session session(m.file, m.spec, opt);
    const auto ledgers = session.ledgers();
    ASSERT_EQ(ledgers.size(), 2u);
    EXPECT_EQ(ledgers[1]->used(tandem::MemoryCategory::Weights), p.vram.weights);
    EXPECT_EQ(ledgers[1]->used(tandem::MemoryCategory::KvCache), p.vram.kv);
}

}  // namespace
