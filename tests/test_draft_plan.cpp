// A speculative draft beside its model: the planner places the draft first
// with the whole device and the model with what it leaves (pure, in
// planner/draft_plan.h), and run, plan and bench follow it on the stand-in
// device: the draft's layers on it, the model's fewer, the same tokens.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/draft_plan.h"
#include "planner/planner.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace {

namespace fs = std::filesystem;
namespace planner = tandem::planner;
using tandem::testing::contains;
using tandem::testing::run_tandem;
using tandem::testing::shell_quote;

constexpr int64_t kCtx = 256;

struct Model {
    tandem::gguf::File file;
    tandem::model::ModelSpec spec;
    explicit Model(const fs::path& p) : file(tandem::gguf::File::open(p)), spec(tandem::model::load_model_spec(file)) {}
};

fs::path tiny() { return tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"); }

// The stand-in's inputs as run makes them: no margin, context kCtx.
planner::PlanInputs standin(uint64_t capacity) {
    planner::PlanInputs in;
    in.device_capacity = capacity;
    in.device_name = "cpu2";
    in.margin = 0;
    in.n_ctx = kCtx;
    in.candidates.assign(std::begin(planner::kAllCandidates), std::end(planner::kAllCandidates));
    return in;
}

// What the model takes whole on the device, alone.
uint64_t whole_bytes(const tandem::model::ModelSpec& spec, bool draft) {
    planner::PlanInputs in = standin(uint64_t{1} << 40);
    if (draft) in = planner::draft_inputs(in, std::nullopt);
    const planner::Plan p = planner::plan(spec, in);
    EXPECT_EQ(p.ngl, spec.hp.n_layer + 1);
    return p.vram.total();
}

TEST(DraftPlan, DraftFirstThenTheModelInWhatIsLeft) {
    const Model target(tiny()), draft(tiny());
    const uint64_t whole_t = whole_bytes(target.spec, false), whole_d = whole_bytes(draft.spec, true);
    // Room for the model whole, or for the draft whole and half the model.
    const uint64_t cap = whole_t + whole_d / 2;
    const planner::PlanInputs in = standin(cap);
    const planner::Plan alone = planner::plan(target.spec, in);
    EXPECT_EQ(alone.ngl, target.spec.hp.n_layer + 1);

    const planner::PairPlan pp = planner::plan_with_draft(target.spec, draft.spec, in, std::nullopt);
    EXPECT_EQ(pp.draft.ngl, draft.spec.hp.n_layer + 1);
    EXPECT_EQ(pp.draft.vram.total(), whole_d);
    EXPECT_FALSE(pp.draft.weight_stream);
    ASSERT_TRUE(pp.target.capacity.has_value());
    EXPECT_EQ(*pp.target.capacity, cap - whole_d);
    EXPECT_LT(pp.target.ngl, alone.ngl);
    EXPECT_GT(pp.target.ngl, 0);
    EXPECT_TRUE(pp.target.fits);
    EXPECT_LE(pp.draft.vram.total() + pp.target.vram.total(), cap);
    ASSERT_FALSE(pp.target.reasons.empty());
    EXPECT_TRUE(contains(pp.target.reasons.front(), "the draft model runs whole on the accelerator"))
        << pp.target.reasons.front();

    // Host RAM: the draft's share is the model's less.
    planner::PlanInputs with_ram = in;
    with_ram.host_ram = uint64_t{8} << 30;
    const planner::PairPlan pr = planner::plan_with_draft(target.spec, draft.spec, with_ram, std::nullopt);
    ASSERT_TRUE(pr.target.host_ram.has_value());
    EXPECT_EQ(*pr.target.host_ram, (uint64_t{8} << 30) - pr.draft.ram.total());
    EXPECT_GT(pr.draft.ram.total(), 0u);

    // -ngld 0 keeps the draft's layers off the device; the model then fits whole.
    const planner::PairPlan p0 = planner::plan_with_draft(target.spec, draft.spec, in, int64_t{0});
    EXPECT_EQ(p0.draft.ngl, 0);
    EXPECT_EQ(*p0.target.capacity, cap - p0.draft.vram.total());
    EXPECT_EQ(p0.target.ngl, target.spec.hp.n_layer + 1);
    EXPECT_TRUE(contains(p0.target.reasons.front(), "the draft model runs on the CPU")) << p0.target.reasons.front();

    // No device: both on the CPU, the model's plan unchanged but for the reason.
    planner::PlanInputs cpu = in;
    cpu.device_capacity.reset();
    const planner::PairPlan pc = planner::plan_with_draft(target.spec, draft.spec, cpu, std::nullopt);
    EXPECT_EQ(pc.draft.ngl, 0);
    EXPECT_EQ(pc.target.ngl, 0);
    EXPECT_TRUE(contains(pc.target.reasons.front(), "on the CPU beside it")) << pc.target.reasons.front();
}

// The default margin is the whole device's, not the remainder's.
TEST(DraftPlan, MarginOfTheWholeDevice) {
    const Model target(tiny()), draft(tiny());
    planner::PlanInputs in = standin(uint64_t{1} << 30);
    in.margin.reset();
    const planner::PairPlan pp = planner::plan_with_draft(target.spec, draft.spec, in, std::nullopt);
    EXPECT_EQ(pp.target.margin, planner::default_margin(uint64_t{1} << 30));
    EXPECT_EQ(pp.draft.margin, planner::default_margin(uint64_t{1} << 30));
}

// run -md on the stand-in: the draft whole on it, the model with fewer
// layers than alone, and the tokens of a plain CPU run.
TEST(DraftPlanRun, StandInPlacesTheDraftFirst) {
    const auto dir = tandem::testing::scratch_dir();
    const Model target(tiny()), draft(tiny());
    const uint64_t cap = whole_bytes(target.spec, false) + whole_bytes(draft.spec, true) / 2;
    const std::string m = shell_quote(tiny().string());
    const std::string base = "run -m " + m + " -p 'Once upon a time' -n 24 --temp 0 --ignore-eos -t 2 -c " +
                             std::to_string(kCtx) + " --no-display-prompt";
    const std::string dev = " --device cpu2 --vram " + std::to_string(cap) + "B --verbose";
    const auto plain = run_tandem(base, dir);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const auto alone = run_tandem(base + dev, dir);
    ASSERT_EQ(alone.exit_code, 0) << alone.err;
    EXPECT_TRUE(contains(alone.err, "-ngl auto chose 5 of 5")) << alone.err;

    const auto both = run_tandem(base + dev + " -md " + m, dir);
    ASSERT_EQ(both.exit_code, 0) << both.err;
    EXPECT_EQ(both.out, plain.out);
    EXPECT_TRUE(contains(both.err, "the draft model runs whole on the accelerator")) << both.err;
    const size_t at = both.err.find("draft placement: ");
    ASSERT_NE(at, std::string::npos) << both.err;
    const std::string line = both.err.substr(at, both.err.find('\n', at) - at);
    EXPECT_TRUE(contains(line, "blk 0-3: ") && contains(line, "output: cpu2")) << line;
    EXPECT_FALSE(contains(both.err, "-ngl auto chose 5 of 5")) << both.err;
    EXPECT_TRUE(contains(both.err, "-ngl auto chose")) << both.err;
    EXPECT_TRUE(contains(both.err, "speculative (")) << both.err;

    // -ngld 0: the draft on the CPU, the model whole on the device.
    const auto d0 = run_tandem(base + dev + " -md " + m + " -ngld 0", dir);
    ASSERT_EQ(d0.exit_code, 0) << d0.err;
    EXPECT_EQ(d0.out, plain.out);
    EXPECT_TRUE(contains(d0.err, "-ngl auto chose 5 of 5")) << d0.err;

    tandem::testing::expect_one_line_error(run_tandem(base + " -ngld 2", dir), "-md");
    tandem::testing::expect_one_line_error(run_tandem(base + " -md " + m + " -ngld lots", dir), "-ngld");
    fs::remove_all(dir);
}

// plan -md: the draft's plan in the JSON, the two within the device.
TEST(DraftPlanRun, PlanPrintsBothPlans) {
    const auto dir = tandem::testing::scratch_dir();
    const std::string m = shell_quote(tiny().string());
    auto r = run_tandem("plan -m " + m + " -md " + m + " --vram 64MiB -c 256 --json", dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j.contains("draft")) << r.out;
    const auto total = [](const nlohmann::json& p) { return p["vram"]["total"].get<uint64_t>(); };
    EXPECT_EQ(j["draft"]["ngl"].get<int>(), 5);
    EXPECT_GT(total(j["draft"]), 0u);
    EXPECT_LE(total(j) + total(j["draft"]), uint64_t{64} << 20);

    r = run_tandem("plan -m " + m + " -md " + m + " --vram 64MiB -c 256", dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "draft: ")) << r.out;
    EXPECT_TRUE(contains(r.out, "the draft model runs whole on the accelerator")) << r.out;
    tandem::testing::expect_one_line_error(run_tandem("plan -m " + m + " -ngld 1", dir), "-md");
    fs::remove_all(dir);
}

}  // namespace
