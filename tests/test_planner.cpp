// The planner: over a grid of real model shapes (header-only synth files)
// and VRAM sizes its choice fits and one more layer would not; on the
// stand-in device its bytes equal the runtime's ledgers, the planned split
// loads and the next one runs out of memory; `tandem plan` prints the JSON
// fields programs rely on and `run -ngl auto` uses the plan.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/planner.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"
#include "tests/run_command.h"
#include "tests/scratch_cache.h"
#include "tests/ledger_check.h"
#include "tests/test_paths.h"

namespace {

namespace fs = std::filesystem;
using tandem::MemoryCategory;
using tandem::planner::Plan;
using tandem::planner::PlanInputs;
using tandem::testing::run_tandem;
using tandem::testing::scratch_dir;
using tandem::testing::shell_quote;

using tandem::testing::kGiB;
constexpr uint64_t kMiB = 1ull << 20;

fs::path synth(const fs::path& dir, const std::string& shape, const std::string& type, const std::string& extra = "") {
    const fs::path out = dir / (shape + "-" + type + ".gguf");
    const auto r = run_tandem("synth --shape " + shape + " --type " + type + " " + extra + " -o " +
                                  shell_quote(out.string()),
                              dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
}

// The grid of the issue: every plan fits, one more layer would not, more
// VRAM never means fewer layers, and a device smaller than one layer gets
// none.
TEST(Planner, GridOfShapesTypesVramAndContexts) {
    const auto dir = scratch_dir();
    const std::vector<uint64_t> vram = {4 * kGiB, 8 * kGiB, 12 * kGiB, 16 * kGiB, 24 * kGiB, 48 * kGiB};
    const std::vector<int64_t> contexts = {2048, 8192, 32768};
    for (const char* shape : {"llama-1b", "llama2-7b", "llama3-8b", "llama2-13b", "llama3-70b"}) {
        for (const char* type : {"Q4_K_M", "Q8_0", "Q2_K"}) {
            SCOPED_TRACE(std::string(shape) + " " + type);
            const auto path = synth(dir, shape, type, "--header-only");
            const auto file = tandem::gguf::File::open(path);
            ASSERT_TRUE(file.header_only());
            const auto spec = tandem::model::load_model_spec(file);
            const int64_t full = spec.hp.n_layer + 1;
            for (int64_t ctx : contexts) {
                SCOPED_TRACE("ctx " + std::to_string(ctx));
                int64_t previous = 0;
                for (uint64_t cap : vram) {
                    SCOPED_TRACE("vram " + tandem::format_bytes(cap));
                    PlanInputs in;
                    in.device_capacity = cap;
                    in.n_ctx = ctx;
                    const Plan p = tandem::planner::plan(spec, in);
                    EXPECT_TRUE(p.fits);
                    EXPECT_LE(p.vram.total() + p.margin, cap);
                    EXPECT_GE(p.ngl, previous);
                    EXPECT_EQ(p.output_on_gpu, p.ngl == full);
                    previous = p.ngl;
                    if (p.ngl < full) {
                        in.ngl = p.ngl + 1;
                        const Plan next = tandem::planner::plan(spec, in);
                        EXPECT_TRUE(next.forced);
                        // One more layer either does not load, or loads
                        // only by giving up the streaming the plan kept.
                        EXPECT_FALSE(next.fits && (next.weight_stream || !p.weight_stream))
                            << "ngl " << p.ngl + 1 << " also fits";
                    }
                }
                // A device one byte short of layer 0 with its KV cache and
                // scratch (no margin) gets no layer, and then the runtime
                // does not use it at all: nothing on it.
                // (Without weight streaming, whose slots would use it.)
                const auto one = tandem::planner::device_bytes(spec, 1, ctx, 512, tandem::model::kCacheF16);
                PlanInputs small;
                small.n_ctx = ctx;
                small.margin = 0;
                small.weight_stream = false;
                small.device_capacity = one.total() - 1;
                const Plan none = tandem::planner::plan(spec, small);
                EXPECT_EQ(none.ngl, 0);
                EXPECT_TRUE(none.fits);
                EXPECT_EQ(none.vram.total(), 0u);
                EXPECT_NE(none.reasons.front().find("not even layer 0"), std::string::npos) << none.reasons.front();
                small.device_capacity = one.total();
                EXPECT_EQ(tandem::planner::plan(spec, small).ngl, 1);
                // With streaming, layer 0 needs room for the slots too; a
                // device that holds only the slots streams every layer.
                small.weight_stream = true;
                EXPECT_EQ(tandem::planner::plan(spec, small).ngl, 0);
                EXPECT_TRUE(tandem::planner::plan(spec, small).weight_stream);
                const auto one_streaming =
                    tandem::planner::device_bytes(spec, 1, ctx, 512, tandem::model::kCacheF16, true);
                small.device_capacity = one_streaming.total();
                const Plan both = tandem::planner::plan(spec, small);
                EXPECT_EQ(both.ngl, 1);
                EXPECT_TRUE(both.weight_stream);
                EXPECT_EQ(both.vram.total(), one_streaming.total());
                EXPECT_EQ(both.stream_bytes, tandem::model::stream_bytes(spec, 1, 512));
            }
        }
    }
}

TEST(Planner, WithoutADeviceEverythingIsOnTheHost) {
    const auto dir = scratch_dir();
    const auto file = tandem::gguf::File::open(synth(dir, "llama3-8b", "Q4_K_M", "--header-only"));
    const auto spec = tandem::model::load_model_spec(file);
    PlanInputs in;
    in.n_ctx = 4096;
    const Plan p = tandem::planner::plan(spec, in);
    EXPECT_EQ(p.ngl, 0);
    EXPECT_FALSE(p.has_device);
    EXPECT_EQ(p.vram.total(), 0u);
    uint64_t weights = tandem::model::token_embd_bytes(spec) + tandem::model::output_weight_bytes(spec);
    uint64_t kv = 0;
    for (int64_t il = 0; il < spec.hp.n_layer; ++il) {
        weights += tandem::model::layer_weight_bytes(spec, il);
        kv += tandem::model::kv_bytes_for_layer(spec, il, 4096, 512, tandem::model::kCacheF16);
    }
    EXPECT_EQ(p.ram.weights, weights);
    EXPECT_EQ(p.ram.kv, kv);
    EXPECT_GT(p.predicted.tg_tps, 0.0);
    EXPECT_GT(p.predicted.pp_tps, 0.0);
    in.ngl = 3;
    EXPECT_NE(tandem::testing::error_of([&] { tandem::planner::plan(spec, in); }).find("--vram"), std::string::npos);
    // Layers on a fast GPU must predict faster decoding than none.
    PlanInputs gpu;
    gpu.n_ctx = 4096;
    gpu.device_capacity = 24 * kGiB;
    EXPECT_GT(tandem::planner::plan(spec, gpu).predicted.tg_tps, p.predicted.tg_tps * 5);
}

// The bound is 100 ms for the whole command on a 70B header; the
// planning itself, over a 6 x 3 grid, must be a small part of that.
TEST(Planner, SeventyBGridPlansQuickly) {
    const auto dir = scratch_dir();
    const auto path = synth(dir, "llama3-70b", "Q4_K_M", "--header-only");
    const auto t0 = std::chrono::steady_clock::now();
    const auto file = tandem::gguf::File::open(path);
    const auto spec = tandem::model::load_model_spec(file);
    for (uint64_t cap : {4 * kGiB, 8 * kGiB, 12 * kGiB, 16 * kGiB, 24 * kGiB, 48 * kGiB}) {
        for (int64_t ctx : {2048, 8192, 32768}) {
            PlanInputs in;
            in.device_capacity = cap;
            in.n_ctx = ctx;
            (void)tandem::planner::plan(spec, in);
        }
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // The bound is the release build's; under AddressSanitizer everything
    // runs several times slower (it measured 110 ms there beside another
    // test, and 523 ms on a busy two-core host, where the release build
    // took 30-40 ms for the same grid through `tandem plan`), so that build
    // checks a looser one.
#if defined(__SANITIZE_ADDRESS__)
    constexpr double kLimitMs = 2000.0;
#else
    constexpr double kLimitMs = 100.0;
#endif
    EXPECT_LT(ms, kLimitMs);
}

// Builds the session the plan describes on the stand-in device and checks
// every ledger category against the plan, byte for byte (the issue allows
// 3%; the planner calls the same size functions, so there is no excuse).
void check_plan_against_ledger(const fs::path& model) {
    const auto file = tandem::gguf::File::open(model);
    const auto spec = tandem::model::load_model_spec(file);
    int checked = 0;
    for (int64_t ctx : {64, 256, 1024}) {
        for (uint64_t cap : {1 * kMiB, 3 * kMiB, 6 * kMiB, 8 * kMiB, 12 * kMiB, 20 * kMiB, 256 * kMiB}) {
            SCOPED_TRACE("ctx " + std::to_string(ctx) + ", capacity " + tandem::format_bytes(cap));
            PlanInputs in;
            in.device_capacity = cap;
            in.n_ctx = ctx;
            in.n_ubatch = 128;
            in.margin = 0;  // so that "does not fit" means the runtime refuses it
            const Plan p = tandem::planner::plan(spec, in);
            tandem::SessionOptions so;
            so.n_ctx = ctx;
            so.n_ubatch = 128;
            so.n_threads = 1;
            so.device = "cpu2";
            so.device_capacity = {cap};
            so.n_gpu_layers = p.ngl;
            ASSERT_TRUE(p.fits);
            tandem::Session session(file, spec, so);  // must not run out of memory
            ++checked;
            EXPECT_EQ(session.n_device_layers(), std::min(p.ngl, p.n_layer));
            EXPECT_EQ(session.output_on_device(), p.output_on_gpu);
            const auto ledgers = session.ledgers();
            // The runtime leaves an accelerator that holds nothing and
            // streams nothing unused.
            EXPECT_EQ(session.weight_stream_active(), p.weight_stream) << session.weight_stream_note();
            ASSERT_EQ(ledgers.size(), p.ngl > 0 || p.weight_stream ? 2u : 1u);
            if (p.ngl == 0 && !p.weight_stream) {
                EXPECT_EQ(p.vram.total(), 0u);
            }
            if (p.weight_stream) {
                EXPECT_EQ(p.stream_bytes, tandem::model::stream_bytes(spec, std::min(p.ngl, p.n_layer), p.n_ubatch));
            }
            tandem::testing::expect_ledgers_equal_plan(session, p.ram, p.vram);
            if (p.ngl < p.n_layer + 1) {
                // One more layer: out of memory, or (when the plan streams)
                // the layers fit and the stream's slots do not, so the
                // runtime drops streaming rather than fail.
                so.n_gpu_layers = p.ngl + 1;
                try {
                    tandem::Session more(file, spec, so);
                    EXPECT_TRUE(p.weight_stream) << "ngl " << p.ngl + 1 << " loaded";
                    EXPECT_FALSE(more.weight_stream_active()) << "ngl " << p.ngl + 1;
                } catch (const tandem::OutOfDeviceMemory&) {
                }
            }
        }
    }
    EXPECT_GT(checked, 6);
}

TEST(PlannerVsLedger, CommittedTinyModel) {
    check_plan_against_ledger(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf"));
}

// A tied head moves to the device as its own copy; the host keeps the
// embedding. Synthesized, since the committed model is untied.
TEST(PlannerVsLedger, TiedHead) {
    const auto dir = scratch_dir();
    const auto path = synth(dir, "tiny", "Q4_K_M", "--tied");
    const auto file = tandem::gguf::File::open(path);
    ASSERT_TRUE(tandem::model::load_model_spec(file).tied_output());
    check_plan_against_ledger(path);
}

TEST(PlannerVsLedger, SharedTinyModels) {
    const auto models = tandem::testing::shared("models");
    TANDEM_REQUIRE_SHARED(models);
    int n = 0;
    for (const auto& e : fs::directory_iterator(models)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("tiny-llama", 0) != 0 || e.path().extension() != ".gguf") continue;
        SCOPED_TRACE(name);
        check_plan_against_ledger(e.path());
        ++n;
    }
    if (n == 0) GTEST_SKIP() << "no tiny-llama models in " << models;
}

TEST(PlanCommand, JsonHasTheFieldsProgramsReadAndTheGridIsAnArray) {
    const auto dir = scratch_dir();
    const tandem::testing::ScratchCache cache(dir);  // the assumptions are the defaults
    const auto path = synth(dir, "llama3-8b", "Q4_K_M", "--header-only");
    auto r = run_tandem("plan -m " + shell_quote(path.string()) + " --vram 8GiB -c 4096 --json", dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j.is_object());
    for (const char* key : {"ngl", "n_layer", "output_on_gpu", "fits", "vram", "ram", "predicted", "reasons"}) {
        EXPECT_TRUE(j.contains(key)) << key;
    }
    for (const char* dev : {"vram", "ram"}) {
        for (const char* key : {"weights", "kv", "compute", "overhead", "total"}) {
            EXPECT_TRUE(j[dev].contains(key)) << dev << "." << key;
        }
    }
    EXPECT_GT(j["predicted"]["tg_tps"].get<double>(), 0.0);
    EXPECT_GT(j["predicted"]["pp_tps"].get<double>(), 0.0);
    EXPECT_TRUE(j["assumptions"]["cpu_gbps"]["default"].get<bool>());

    r = run_tandem("plan -m " + shell_quote(path.string()) + " --vram 4GiB,24GiB -c 4096,8192 --json --cpu-gbps 50",
                   dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto grid = nlohmann::json::parse(r.out);
    ASSERT_TRUE(grid.is_array());
    ASSERT_EQ(grid.size(), 4u);
    EXPECT_FALSE(grid[0]["assumptions"]["cpu_gbps"]["default"].get<bool>());
    EXPECT_LE(grid[0]["ngl"].get<int>(), grid[2]["ngl"].get<int>());

    r = run_tandem("plan -m " + shell_quote(path.string()) + " --vram 4GiB -ngl 33 --json", dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto forced = nlohmann::json::parse(r.out);
    EXPECT_EQ(forced["ngl"].get<int>(), 33);
    EXPECT_FALSE(forced["fits"].get<bool>());

    r = run_tandem("plan -m " + shell_quote(path.string()) + " --vram 8GiB,24GiB -c 4096,8192", dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("tg tok/s"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(default)"), std::string::npos) << r.out;

    r = run_tandem("plan -m " + shell_quote(path.string()) + " --vram lots", dir);
    tandem::testing::expect_one_line_error(r, "lots");
}

TEST(RunCommand, NglAutoUsesThePlanOnTheStandIn) {
    const auto dir = scratch_dir();
    const auto model = shell_quote(tandem::testing::test_data("tiny-llama-Q4_K_M.gguf").string());
    auto r = run_tandem("run -m " + model + " -p 'Once upon' -n 2 --temp 0 -c 256 --device cpu2 --vram 3MiB --verbose",
                        dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("-ngl auto chose"), std::string::npos) << r.err;
    r = run_tandem("run -m " + model + " -p 'Once upon' -n 2 --temp 0 -c 256 --device cpu2 --vram 1GiB --verbose", dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("-ngl auto chose 5 of 5"), std::string::npos) << r.err;
    r = run_tandem("run -m " + model + " -p 'Once upon' -n 2 -ngl many", dir);
    tandem::testing::expect_one_line_error(r, "many");
    r = run_tandem("run -m " + model + " -p 'Once upon' -n 2 --device cpu2", dir);
    tandem::testing::expect_one_line_error(r, "--vram");
}

}  // namespace
