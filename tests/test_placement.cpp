// Per-tensor placement: the resolver (-ngl, -ot, --cpu-moe, --n-cpu-moe,
// -nkvo) as a pure function, and sessions on the stand-in device whose
// attention, FFN or caches sit on different devices giving the all-CPU
// logits bit for bit, with the activation moves counted.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels_cuda/cuda_api.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/placement/placement.h"
#include "runtime/engine/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace {

using tandem::kAccelDevice;
using tandem::kHostDevice;
using tandem::testing::contains;
using tandem::testing::error_of;
using tandem::testing::test_data;

struct Model {
    tandem::gguf::File file;
    tandem::model::ModelSpec spec;
};

Model open_committed() {
    auto file = tandem::gguf::File::open(test_data("tiny-llama-Q4_K_M.gguf"));
    auto spec = tandem::model::load_model_spec(file);
    return {std::move(file), std::move(spec)};
}

const tandem::gguf::TensorInfo* tensor(const Model& m, int64_t il, tandem::model::LayerTensor role) {
    return m.spec.layers.at(static_cast<size_t>(il)).get(role);
}

}  // namespace

TEST(Placement, ParsesOverrideLists) {
    const auto rules = tandem::parse_tensor_overrides(R"(blk\.[0-9]+\.ffn_.*=cpu, attn_q=cpu2)");
    ASSERT_EQ(rules.size(), 2u);
    EXPECT_EQ(rules[0].pattern, R"(blk\.[0-9]+\.ffn_.*)");
    EXPECT_EQ(rules[0].device, "cpu");
    EXPECT_EQ(rules[1].pattern, "attn_q");
    EXPECT_EQ(rules[1].device, "cpu2");
    EXPECT_TRUE(contains(error_of([] { tandem::parse_tensor_overrides("ffn_up"); }), "expected REGEX=DEVICE"));
    EXPECT_TRUE(contains(error_of([] { tandem::parse_tensor_overrides("=cpu"); }), "expected REGEX=DEVICE"));
    EXPECT_TRUE(contains(error_of([] { tandem::parse_tensor_overrides("blk[=cpu"); }), "not a valid regular"));
    EXPECT_TRUE(contains(error_of([] { tandem::parse_tensor_overrides(","); }), "expected REGEX=DEVICE"));
}

TEST(Placement, NglThenOverridesFirstRuleWins) {
    const Model m = open_committed();
    using tandem::model::LayerTensor;
    tandem::PlacementRequest req;
    req.devices = {"cpu2"};
    req.n_gpu_layers = 2;
    // The first rule keeps layer 0's ffn_up on cpu2 although the second
    // would move every FFN tensor to the host.
    req.overrides = tandem::parse_tensor_overrides(R"(^blk\.0\.ffn_up=cpu2,ffn_=CPU)");
    const auto p = tandem::place_tensors(m.spec, req);
    EXPECT_TRUE(p.overridden);
    EXPECT_EQ(p.of(tensor(m, 0, LayerTensor::AttnQ)), kAccelDevice);
    EXPECT_EQ(p.of(tensor(m, 0, LayerTensor::FfnUp)), kAccelDevice);
    EXPECT_EQ(p.of(tensor(m, 0, LayerTensor::FfnDown)), kHostDevice);
    EXPECT_EQ(p.of(tensor(m, 1, LayerTensor::FfnNorm)), kHostDevice);
    EXPECT_EQ(p.of(tensor(m, 2, LayerTensor::AttnQ)), kHostDevice);
    EXPECT_EQ(p.kv[0], kAccelDevice);
    EXPECT_EQ(p.kv[2], kHostDevice);
    EXPECT_EQ(p.head, kHostDevice);
    // Weight bytes per device add up to every tensor once, plus the tied
    // head counted again only where it is a copy (not here: on the host).
    uint64_t all = 0;
    for (const auto& t : m.file.tensors()) all += t.n_bytes;
    EXPECT_EQ(p.weight_bytes(kHostDevice) + p.weight_bytes(kAccelDevice), all);
    const std::string d = tandem::describe_placement(m.spec, p);
    EXPECT_TRUE(contains(d, "blk 0: attn cpu2, ffn mixed, kv cpu2")) << d;
    EXPECT_TRUE(contains(d, "blk 1: attn cpu2, ffn cpu, kv cpu2")) << d;
    EXPECT_TRUE(contains(d, "blk 2-3: cpu")) << d;
    EXPECT_TRUE(contains(d, "output: cpu")) << d;
}

// A pipeline stage's own -ngl auto plan (layers [2, 4) and the head of a
// 4-layer model) counts its units from its first layer, so two devices
// share them as the planner weighed them over the stage alone.
TEST(Placement, NglCountsFromAStagesFirstLayer) {
    const Model m = open_committed();
    ASSERT_EQ(m.spec.hp.n_layer, 4);
    tandem::PlacementRequest req;
    req.devices = {"cpu2", "cpu3"};
    req.split = {1, 1};
    req.n_gpu_layers = 3;
    req.first_layer = 2;
    const auto p = tandem::place_tensors(m.spec, req);
    EXPECT_EQ(p.layer, (std::vector<int>{kHostDevice, kHostDevice, kAccelDevice, kAccelDevice}));
    EXPECT_EQ(p.kv[1], kHostDevice);
    EXPECT_EQ(p.kv[2], kAccelDevice);
    EXPECT_EQ(p.head, kAccelDevice + 1);
    req.first_layer = 4;
    EXPECT_TRUE(contains(error_of([&] { tandem::place_tensors(m.spec, req); }), "expected a first layer in [0, 4)"));
}

TEST(Placement, KvFollowsAttentionOrStaysHomeWithNoKvOffload) {
    const Model m = open_committed();
    tandem::PlacementRequest req;
    req.devices = {"cpu2"};
    req.n_gpu_layers = m.spec.hp.n_layer + 1;
    req.overrides = tandem::parse_tensor_overrides("attn_k=cpu");
    auto p = tandem::place_tensors(m.spec, req);
    for (const int d : p.kv) EXPECT_EQ(d, kHostDevice);
    EXPECT_EQ(p.head, kAccelDevice);
    req.overrides.clear();
    req.kv_offload = false;
    p = tandem::place_tensors(m.spec, req);
    for (const int d : p.kv) EXPECT_EQ(d, kHostDevice);
    EXPECT_FALSE(p.overridden);
    EXPECT_TRUE(contains(tandem::describe_placement(m.spec, p), "blk 0-3: attn cpu2, ffn cpu2, kv cpu")) <<
        tandem::describe_placement(m.spec, p);
}

TEST(Placement, ExpertFlagsBecomeLlamaCppRulesAndBadRequestsSayWhy) {
    const Model m = open_committed();
    tandem::PlacementRequest req;
    req.devices = {"cpu2"};
    req.n_gpu_layers = 4;
    req.cpu_moe = true;
    req.n_cpu_moe = 2;
    // This dense model has no expert tensors: the rules move nothing.
    const auto p = tandem::place_tensors(m.spec, req);
    EXPECT_FALSE(p.overridden);
    EXPECT_EQ(p.of(tensor(m, 3, tandem::model::LayerTensor::FfnUp)), kAccelDevice);

    tandem::PlacementRequest bad;
    bad.devices = {"cpu2"};
    bad.overrides = tandem::parse_tensor_overrides("ffn=cuda1");
    EXPECT_TRUE(contains(error_of([&] { tandem::place_tensors(m.spec, bad); }), "device 'cuda1' is not in use"));
    bad = {};
    bad.overrides = tandem::parse_tensor_overrides("ffn=cpu2");
    EXPECT_TRUE(contains(error_of([&] { tandem::place_tensors(m.spec, bad); }), "--device is not set"));
    bad = {};
    bad.n_gpu_layers = 3;
    EXPECT_TRUE(contains(error_of([&] { tandem::place_tensors(m.spec, bad); }), "none is available"));
    bad.devices = {"cpu2"};
    bad.n_gpu_layers = -1;
    EXPECT_TRUE(contains(error_of([&] { tandem::place_tensors(m.spec, bad); }), "-ngl: expected a value >= 0"));
}

namespace {

std::vector<float> eval_logits(const Model& m, const std::vector<int32_t>& tokens, const tandem::SessionOptions& opt,
                               int64_t* crossings = nullptr, uint64_t* device_weights = nullptr) {
    tandem::Session session(m.file, m.spec, opt);
    std::vector<float> logits;
    session.eval(tokens, true, logits);
    // Decode steps too: one token at a time takes other kernels.
    std::vector<float> step;
    for (int32_t id : {5, 17, 300}) {
        session.eval(std::vector<int32_t>{id}, false, step);
        logits.insert(logits.end(), step.begin(), step.end());
    }
    if (crossings) *crossings = session.activation_crossings();
    if (device_weights) {
        const auto ledgers = session.ledgers();
        *device_weights = ledgers.size() > 1 ? ledgers[1]->used(tandem::MemoryCategory::Weights) : 0;
    }
    return logits;
}

std::vector<int32_t> prompt_tokens(const Model& m) {
    const auto tok = tandem::Tokenizer::from_gguf(m.file);
    return tok.encode("Once upon a time, there was a little robot who wanted to learn.", true);
}

tandem::SessionOptions base_options() {
    tandem::SessionOptions opt;
    opt.n_ctx = 128;
    opt.n_ubatch = 64;
    return opt;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace

// The stand-in runs the same kernels as the host, so where a tensor lives
// must not change a bit; what changes is how often activations cross.
TEST(StandInPlacement, OverridesGiveTheCpuLogitsBitForBit) {
    const Model m = open_committed();
    const auto tokens = prompt_tokens(m);
    const auto reference = eval_logits(m, tokens, base_options());
    struct Case {
        const char* what;
        int64_t ngl;
        const char* ot;
        bool kv_offload;
    };
    const Case cases[] = {
        {"FFN on the host, attention on cpu2", 5, "ffn_=cpu", true},
        {"attention on the host, FFN on cpu2", 5, "attn=cpu", true},
        {"K/V caches on the host for cpu2 layers", 5, "", false},
        {"one layer's up projection alone on cpu2", 0, R"(^blk\.1\.ffn_up=cpu2)", true},
        {"head on cpu2, norm on the host", 5, "output_norm=cpu", true},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        auto opt = base_options();
        opt.device = "cpu2";
        opt.n_gpu_layers = c.ngl;
        if (*c.ot) opt.overrides = tandem::parse_tensor_overrides(c.ot);
        opt.kv_offload = c.kv_offload;
        int64_t crossings = 0;
        uint64_t device_weights = 0;
        const auto logits = eval_logits(m, tokens, opt, &crossings, &device_weights);
        expect_same_bits(logits, reference);
        EXPECT_GT(crossings, 0);
        // The device's ledger holds exactly what the placement put there.
        tandem::PlacementRequest req;
        req.devices = {"cpu2"};
        req.n_gpu_layers = c.ngl;
        req.overrides = opt.overrides;
        req.kv_offload = c.kv_offload;
        EXPECT_EQ(device_weights, tandem::place_tensors(m.spec, req).weight_bytes(kAccelDevice));
    }
}

TEST(StandInPlacement, EachCrossingMovesTheActivationsOnce) {
    const Model m = open_committed();
    const std::vector<int32_t> one{1};
    auto opt = base_options();
    opt.device = "cpu2";
    opt.n_gpu_layers = 5;
    opt.overrides = tandem::parse_tensor_overrides("ffn_=cpu");
    tandem::Session s(m.file, m.spec, opt);
    std::vector<float> logits;
    s.eval(one, false, logits);
    // Attention (and its cache) on cpu2, FFN on the host, head on cpu2.
    // Per layer X crosses twice: to cpu2 for the attention norm (the
    // residual add then runs there, where the o projection's output is),
    // and back for the FFN norm. Then X to cpu2 for the output norm, and
    // the logits back: nothing else moves.
    EXPECT_EQ(s.activation_crossings(), 4 * 2 + 2) << s.placement_summary();
    const int64_t E = m.spec.hp.n_embd;
    EXPECT_EQ(s.activation_bytes_moved(),
              static_cast<uint64_t>((4 * 2 + 1) * E + m.spec.hp.n_vocab) * sizeof(float));
}

TEST(StandInPlacement, RunTakesLlamaCppPlacementFlags) {
    const auto dir = tandem::testing::scratch_dir();
    const auto model = tandem::testing::shell_quote(test_data("tiny-llama-Q4_K_M.gguf").string());
    const auto r = tandem::testing::run_tandem(
        "run -m " + model + " -p Hello -n 4 --temp 0 --device cpu2 -ngl 99 -ot 'ffn_(up|down)=cpu' -nkvo --verbose",
        dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "placement: blk 0-3: attn cpu2, ffn mixed, kv cpu | output: cpu2")) << r.err;
    EXPECT_TRUE(contains(r.err, "activations moved between devices")) << r.err;
    const auto bad = tandem::testing::run_tandem("run -m " + model + " -p Hello -n 1 -ot ffn_up", dir);
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_TRUE(contains(bad.err, "expected REGEX=DEVICE")) << bad.err;
}

// No GPU (no CUDA in the build, no driver or no device): asking for one
// costs one warning line, and the CPU runs the model.
TEST(StandInPlacement, MissingGpuIsOneLineAndTheCpu) {
    setenv("TANDEM_CUDA_EMULATE", "0", 1);  // in the emulated build: the real plugin, which finds no GPU here
    std::string why;
    if (!tandem::cuda::list_devices(&why).empty()) GTEST_SKIP() << "a GPU is present here";
    const auto dir = tandem::testing::scratch_dir();
    const auto model = tandem::testing::shell_quote(test_data("tiny-llama-Q4_K_M.gguf").string());
    const auto r = tandem::testing::run_tandem("run -m " + model + " -p Hello -n 2 --temp 0 --device cuda0 -ngl 99", dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "tandem: warning: --device cuda0: ")) << r.err;
    EXPECT_TRUE(contains(r.err, "running on the CPU")) << r.err;
    EXPECT_TRUE(contains(r.out, "Hello")) << r.out;
}

// The CUDA plugin loads into the `tandem` binary with every symbol it
// takes from there resolved: with the driver check skipped, the plugin's
// own CUDA runtime is what answers (no GPU here), not the loader.
TEST(CudaPlugin, LoadsIntoTheTandemBinary) {
#ifndef TANDEM_HAVE_CUDA
    GTEST_SKIP() << "built without CUDA: there is no plugin";
#else
    const auto dir = tandem::testing::scratch_dir();
    const auto model = tandem::testing::shell_quote(test_data("tiny-llama-Q4_K_M.gguf").string());
    setenv("TANDEM_CUDA_SKIP_DRIVER_CHECK", "1", 1);
    const auto r = tandem::testing::run_tandem("plan -m " + model, dir);
    unsetenv("TANDEM_CUDA_SKIP_DRIVER_CHECK");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(contains(r.err + r.out, "cannot be loaded")) << r.err << r.out;
    EXPECT_FALSE(contains(r.err + r.out, "no usable CUDA plugin")) << r.err << r.out;
    EXPECT_FALSE(contains(r.err + r.out, "another build")) << r.err << r.out;
    // Either the plugin's CUDA runtime said why there is no GPU, or it found one.
    EXPECT_TRUE(contains(r.out, "CUDA reports") || contains(r.out, "CUDA found") || !contains(r.out, "no GPU"))
        << r.out;
#endif
}
