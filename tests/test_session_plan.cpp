// SessionPlan (runtime/engine/session_plan.h): where a session puts every
// tensor and cache, whether the accelerator holds anything, which layers
// may stream and whether the host copies its matrices, all decided from
// the metadata of a header-only file (llama-1b, no weights), before
// anything loads.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "runtime/common/error.h"
#include "runtime/engine/session.h"
#include "runtime/engine/session_plan.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "tests/run_command.h"
#include "tests/test_paths.h"

namespace {

using namespace tandem;

struct HeaderOnly {
    gguf::File file;
    model::ModelSpec spec;
};

const HeaderOnly& llama_1b() {
    static const HeaderOnly m = [] {
        const auto dir = tandem::testing::scratch_dir();
        const auto path = dir / "llama-1b-header.gguf";
        const auto r = tandem::testing::run_tandem(
            "synth --shape llama-1b --type Q4_K_M --header-only -o " + tandem::testing::shell_quote(path.string()), dir);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        gguf::File f = gguf::File::open(path);
        model::ModelSpec s = model::load_model_spec(f);
        return HeaderOnly{std::move(f), std::move(s)};
    }();
    return m;
}

using tandem::testing::kGiB;

TEST(SessionPlan, CpuOnlyPutsEverythingOnTheHost) {
    const HeaderOnly& m = llama_1b();
    ASSERT_TRUE(m.file.header_only());
    const SessionPlan p = plan_session(m.spec, SessionOptions{}, true, 64 * kGiB);
    EXPECT_EQ(p.opt.n_ctx, std::min<int64_t>(m.spec.hp.n_ctx_train, 4096));
    EXPECT_EQ(p.placement.devices.size(), 1u);
    EXPECT_FALSE(p.accel_holds);
    EXPECT_FALSE(p.wants_stream);
    EXPECT_EQ(p.n_device_layers, 0);
    EXPECT_TRUE(p.copy_host_weights);
    // Every layer's matrices and the head: most of the weights.
    EXPECT_GT(p.host_matrix_bytes, m.file.total_tensor_bytes() * 3 / 4);
    EXPECT_LE(p.host_matrix_bytes, m.file.total_tensor_bytes() + m.spec.output_head().n_bytes);
}

TEST(SessionPlan, LeadingLayersOnTheAcceleratorAndTheRestStreams) {
    const HeaderOnly& m = llama_1b();
    SessionOptions o;
    o.device = "cpu2";
    o.n_gpu_layers = 8;
    o.n_ctx = 1024;
    o.n_ubatch = 512;
    const SessionPlan p = plan_session(m.spec, o, true, 64 * kGiB);
    EXPECT_TRUE(p.accel_holds);
    EXPECT_EQ(p.n_device_layers, 8);
    for (int64_t il = 0; il < m.spec.hp.n_layer; ++il) {
        EXPECT_EQ(p.placement.layer[static_cast<size_t>(il)], il < 8 ? kAccelDevice : kHostDevice) << il;
        EXPECT_EQ(p.placement.kv[static_cast<size_t>(il)], il < 8 ? kAccelDevice : kHostDevice) << il;
    }
    EXPECT_EQ(p.stream_first, 8);
    EXPECT_TRUE(p.wants_stream);
    // Micro-batches below --stream-min-batch never stream; nor without streaming.
    o.n_ubatch = 16;
    EXPECT_FALSE(plan_session(m.spec, o, true, 64 * kGiB).wants_stream);
    o.n_ubatch = 512;
    o.weight_stream = false;
    EXPECT_FALSE(plan_session(m.spec, o, true, 64 * kGiB).wants_stream);
    // Every layer on the device: nothing left to stream.
    o.weight_stream = true;
    o.n_gpu_layers = m.spec.hp.n_layer + 1;
    const SessionPlan all = plan_session(m.spec, o, true, 64 * kGiB);
    EXPECT_EQ(all.stream_first, m.spec.hp.n_layer);
    EXPECT_FALSE(all.wants_stream);
    EXPECT_EQ(all.placement.head, kAccelDevice);
    EXPECT_EQ(all.host_matrix_bytes, 0u);  // the host keeps only the embedding lookup
}

TEST(SessionPlan, HostCopiesOnlyWhatFitsTheFreeRam) {
    const HeaderOnly& m = llama_1b();
    const SessionPlan tight = plan_session(m.spec, SessionOptions{}, true, 256u << 20);
    EXPECT_FALSE(tight.copy_host_weights);
    EXPECT_NE(tight.host_copy_note.find("would not fit in the free RAM"), std::string::npos) << tight.host_copy_note;
    // Unknown free RAM: copied; a file read into memory (or locked): never, and no note.
    EXPECT_TRUE(plan_session(m.spec, SessionOptions{}, true, std::nullopt).copy_host_weights);
    const SessionPlan unmapped = plan_session(m.spec, SessionOptions{}, false, 64 * kGiB);
    EXPECT_FALSE(unmapped.copy_host_weights);
    EXPECT_TRUE(unmapped.host_copy_note.empty());
}

TEST(SessionPlan, BadOptionsFailBeforeAnythingLoads) {
    const HeaderOnly& m = llama_1b();
    SessionOptions o;
    o.n_ubatch = 0;
    EXPECT_THROW(plan_session(m.spec, o, true, std::nullopt), Error);
    o = SessionOptions{};
    o.n_seq_max = 0;
    EXPECT_THROW(plan_session(m.spec, o, true, std::nullopt), Error);
    o = SessionOptions{};
    o.device = "gpu7";
    EXPECT_THROW(plan_session(m.spec, o, true, std::nullopt), Error);
    o = SessionOptions{};
    o.n_gpu_layers = 4;  // layers asked of an accelerator that is absent
    EXPECT_THROW(plan_session(m.spec, o, true, std::nullopt), Error);
    o.n_gpu_layers = -1;  // without a device a negative count means nothing
    EXPECT_NO_THROW(plan_session(m.spec, o, true, std::nullopt));
    // The session itself refuses the weightless file, after the plan.
    EXPECT_THROW(Session(m.file, m.spec, SessionOptions{}), Error);
}

}  // namespace
