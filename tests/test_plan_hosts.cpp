// tandem plan --hosts: the hosts file, and pipeline stages planned per host
// (planner/hosts.h): the stages cover the layers in order, hold between
// them exactly the model's weights (the embedding on the first, the head
// on the last), and the link's time is its hops'.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "planner/hosts.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "tests/test_paths.h"
#include "tools/plan_hosts.h"

namespace {

namespace fs = std::filesystem;
using tandem::testing::shared;

std::string write_file(const std::string& name, const std::string& text) {
    const fs::path p = fs::temp_directory_path() / ("tandem-hosts-" + std::to_string(::getpid()) + "-" + name);
    std::ofstream(p) << text;
    return p.string();
}

TEST(HostsFile, HostsAndLinkAreRead) {
    const auto f = tandem::tools::read_hosts_file(
        write_file("ok", "# two boxes\na ram=128GiB vram=24GiB\nb ram=64GiB vram=24GiB,12GiB   # two GPUs\n"
                         "c ram=32GiB\nlink 10Gbit latency=50us\n"));
    ASSERT_EQ(f.hosts.size(), 3u);
    EXPECT_EQ(f.hosts[0].name, "a");
    EXPECT_EQ(f.hosts[1].ram, 64ull << 30);
    EXPECT_EQ(f.hosts[1].vram, (std::vector<uint64_t>{24ull << 30, 12ull << 30}));
    EXPECT_TRUE(f.hosts[2].vram.empty());
    EXPECT_DOUBLE_EQ(f.link.bytes_per_s, 1.25e9);
    EXPECT_DOUBLE_EQ(f.link.latency_s, 50e-6);
}

TEST(HostsFile, BadLinesNameTheLineAndWhatWasExpected) {
    const std::pair<std::string, std::string> cases[] = {
        {"a vram=24GiB\nlink 10Gbit\n", "line 1: host a needs ram=SIZE"},
        {"a ram=8GiB\nb ram=8GiB\n", "expected a line 'link BANDWIDTH"},
        {"a ram=8GiB\nlink fast\n", "line 2: expected a bandwidth"},
        {"a ram=8GiB\nlink 1Gbit latency=soon\n", "expected a time"},
        {"a ram=8 vram=1G\n", "a size needs a unit"},
        {"a ram=8GiB gpu=1\n", "expected ram=SIZE or vram=SIZE"},
        {"# nothing\n", "expected a line per host"},
    };
    int i = 0;
    for (const auto& [text, says] : cases) {
        try {
            (void)tandem::tools::read_hosts_file(write_file("bad" + std::to_string(i++), text));
            ADD_FAILURE() << text << " was accepted";
        } catch (const tandem::Error& e) {
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
        }
    }
}

TEST(HostsPlan, StagesCoverTheLayersAndHoldTheModelOnce) {
    const auto path = shared("models/synth-qwen3moe-Q8_0.gguf");
    TANDEM_REQUIRE_SHARED(path);
    const auto file = tandem::gguf::File::open(path);
    const auto spec = tandem::model::load_model_spec(file);
    tandem::planner::PlanInputs base;
    base.n_ctx = 128;
    base.n_ubatch = 16;
    base.candidates.assign(std::begin(tandem::planner::kAllCandidates), std::end(tandem::planner::kAllCandidates));
    // The whole model on one CPU: what the stages must hold between them.
    const tandem::planner::Plan whole = tandem::planner::plan(spec, base);
    const tandem::planner::Link link{1.25e9, 50e-6};
    for (const size_t n_hosts : {2u, 3u}) {
        std::vector<tandem::planner::Host> hosts(n_hosts);
        for (size_t h = 0; h < n_hosts; ++h) hosts[h] = {"h" + std::to_string(h), 1ull << 30, {}};
        hosts[0].vram = {2u << 20};  // a little GPU: some of its layers there
        const auto p = tandem::planner::plan_hosts(spec, hosts, link, base);
        ASSERT_EQ(p.stages.size(), n_hosts);
        int64_t next = 0;
        uint64_t weights = 0;
        for (const auto& s : p.stages) {
            EXPECT_EQ(s.first, next);
            EXPECT_GT(s.end, s.first);
            next = s.end;
            weights += s.plan.ram.weights + s.plan.vram.weights;
            EXPECT_TRUE(s.plan.fits);
        }
        EXPECT_EQ(next, spec.hp.n_layer);
        EXPECT_EQ(weights, whole.ram.weights) << n_hosts << " hosts";
        const double hop = 50e-6 + spec.hp.n_embd * 4.0 / 1.25e9;
        const double back = 50e-6 + spec.hp.n_vocab * 4.0 / 1.25e9;
        EXPECT_NEAR(p.link_s, (n_hosts - 1) * hop + back, 1e-12);
        double stages = 0;
        for (const auto& s : p.stages) stages += s.decode_s;
        EXPECT_NEAR(1.0 / p.tg_tps, stages + p.link_s, 1e-9);
    }
    // More hosts than layers cannot be staged.
    std::vector<tandem::planner::Host> many(static_cast<size_t>(spec.hp.n_layer) + 1, {"x", 1ull << 30, {}});
    EXPECT_THROW((void)tandem::planner::plan_hosts(spec, many, link, base), tandem::Error);
}

}  // namespace
