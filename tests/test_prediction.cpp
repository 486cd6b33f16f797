// The planner's time model (planner/cost_model.cpp): each fixed cost of a
// step (a product's hand-over, an op over the threads, a batch's own, a
// crossing between the devices, the stand-in's copies) enters the
// predicted time as often as the recipe pays it, the kernel rates scale
// the products, and bench --calibrate's file round-trips and still reads
// the files written before the kernels were measured. Every number here is
// set by the test: nothing depends on this machine's speed.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/calibration.h"
#include "planner/planner.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "tests/run_command.h"
#include "tools/bench_svg.h"
#include "tests/test_paths.h"

namespace {

namespace fs = std::filesystem;
namespace pl = tandem::planner;
using tandem::quant::Type;
using tandem::testing::run_tandem;
using tandem::testing::scratch_dir;
using tandem::testing::shell_quote;

using tandem::testing::kGiB;

// A header-only synthetic model: its spec, with the file kept alive.
struct HeaderModel {
    tandem::gguf::File file;
    tandem::model::ModelSpec spec;
};

// flags: more synth flags (they change the shape, so the file is named by them too).
std::unique_ptr<HeaderModel> header_model(const std::string& shape, const std::string& flags = "") {
    const fs::path dir = scratch_dir();
    std::string tag;
    for (const char c : flags) tag += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    const fs::path out = dir / (shape + tag + ".gguf");
    const auto r = run_tandem("synth --shape " + shape + " " + flags + " --header-only -o " + shell_quote(out.string()), dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto file = tandem::gguf::File::open(out);
    auto spec = tandem::model::load_model_spec(file);
    return std::unique_ptr<HeaderModel>(new HeaderModel{std::move(file), std::move(spec)});
}

// Inputs with every fixed cost zero, so a test sets the one it looks at.
pl::PlanInputs zero_cost_inputs(std::optional<uint64_t> capacity) {
    pl::PlanInputs in;
    in.device_capacity = capacity;
    in.n_ctx = 1024;
    in.n_ubatch = 64;
    in.weight_stream = false;
    for (pl::KernelCosts* k : {&in.host_costs, &in.device_costs}) {
        k->matmul_call_s = 0.0;
        k->pool_op_s = 0.0;
        k->inline_op_s = 0.0;
        k->batch_s = 0.0;
        k->crossing_s = 0.0;
    }
    return in;
}

double seconds(const HeaderModel& m, const pl::PlanInputs& in, std::optional<int64_t> ngl, const pl::Workload& w) {
    pl::PlanInputs forced = in;
    forced.ngl = ngl;
    const pl::Plan p = pl::plan(m.spec, forced);
    return pl::predict_seconds(m.spec, forced, p, w);
}

// The change in predicted seconds when one cost goes from 0 to `value`.
double delta(const HeaderModel& m, pl::PlanInputs in, std::optional<int64_t> ngl, const pl::Workload& w,
             std::optional<double> pl::KernelCosts::*field, double value, bool device = false) {
    const double base = seconds(m, in, ngl, w);
    (device ? in.device_costs : in.host_costs).*field = value;
    return seconds(m, in, ngl, w) - base;
}

TEST(Prediction, DecodePaysOneHandOverPerProductGroupAndTheHead) {
    const auto m = header_model("llama-1b");
    const int64_t L = m->spec.hp.n_layer;
    const pl::Workload one_token{0, 1, 0};
    // Q|K|V, the output, gate|up and down: four calls a layer, and the head.
    const double d = delta(*m, zero_cost_inputs(std::nullopt), std::nullopt, one_token,
                           &pl::KernelCosts::matmul_call_s, 1e-3);
    EXPECT_NEAR(d, static_cast<double>(4 * L + 1) * 1e-3, 1e-9);
    // Ten tokens pay it ten times.
    const double d10 = delta(*m, zero_cost_inputs(std::nullopt), std::nullopt, pl::Workload{0, 10, 0},
                             &pl::KernelCosts::matmul_call_s, 1e-3);
    EXPECT_NEAR(d10, 10 * d, 1e-9);
}

TEST(Prediction, DecodeRunsRowOpsInlineAndAttentionOnTheThreads) {
    const auto m = header_model("llama-1b");
    const int64_t L = m->spec.hp.n_layer;
    const pl::Workload one_token{0, 1, 0};
    const auto in = zero_cost_inputs(std::nullopt);
    // Over the threads: each layer's attention only.
    EXPECT_NEAR(delta(*m, in, std::nullopt, one_token, &pl::KernelCosts::pool_op_s, 1e-3),
                static_cast<double>(L) * 1e-3, 1e-9);
    // On the calling thread: two norms, RoPE of Q and K, the activation and
    // two residual adds a layer, then the embedding and the output norm.
    EXPECT_NEAR(delta(*m, in, std::nullopt, one_token, &pl::KernelCosts::inline_op_s, 1e-3),
                static_cast<double>(7 * L + 2) * 1e-3, 1e-9);
}

// A decode step's ops on the calling thread cost a fixed part and a part
// per element of the model's row (bench --calibrate times a norm at two
// widths); without the second, inline_op_s is the whole op.
TEST(Prediction, DecodeRowOpsCostAPartPerElementOfTheRow) {
    const auto m = header_model("llama-1b");
    const int64_t L = m->spec.hp.n_layer;
    const auto in = zero_cost_inputs(std::nullopt);
    const double d = delta(*m, in, std::nullopt, pl::Workload{0, 1, 0}, &pl::KernelCosts::inline_op_elem_s, 1e-9);
    EXPECT_NEAR(d, static_cast<double>(7 * L + 2) * static_cast<double>(m->spec.hp.n_embd) * 1e-9, 1e-12);
    // A batch runs its ops over the threads: no per-element part.
    EXPECT_NEAR(delta(*m, in, std::nullopt, pl::Workload{40, 0, 0}, &pl::KernelCosts::inline_op_elem_s, 1e-9), 0.0,
                1e-15);
}

// A micro-batch's ops over rows cost, past their hand-over, a part per
// element each passes over: per token and layer, the two norms (n_embd),
// RoPE of Q and K (their widths), the activation (n_ff) and the two
// residual adds (n_embd); none for a decode step, whose ops run inline.
TEST(Prediction, BatchRowOpsCostAPartPerElementOfEachOpsWidth) {
    for (const char* shape : {"llama-1b", "tiny"}) {
        const auto m = header_model(shape);
        const auto& hp = m->spec.hp;
        const auto in = zero_cost_inputs(std::nullopt);  // micro-batches of 64
        const auto per_layer = static_cast<double>(4 * hp.n_embd + hp.q_dim() + hp.n_head_kv * hp.head_dim_k + hp.n_ff);
        // 150 prompt tokens: every token's row ops once.
        EXPECT_NEAR(delta(*m, in, std::nullopt, pl::Workload{150, 0, 0}, &pl::KernelCosts::pool_op_elem_s, 1e-9),
                    150.0 * static_cast<double>(hp.n_layer) * per_layer * 1e-9, 1e-12)
            << shape;
        EXPECT_NEAR(delta(*m, in, std::nullopt, pl::Workload{0, 5, 0}, &pl::KernelCosts::pool_op_elem_s, 1e-9), 0.0,
                    1e-15)
            << shape;
    }
}

// Attention under kTiledAttentionMinTokens tokens costs the measured
// seconds per query head and position at the model's head dimension,
// interpolated between the measured ones and scaled past them; batches
// that take the tiled kernel keep the rate model.
TEST(Prediction, SmallBatchAttentionCostsTheMeasuredTimePerPosition) {
    const auto m = header_model("llama-1b");
    const auto& hp = m->spec.hp;
    const auto L = static_cast<double>(hp.n_layer);
    const auto heads = static_cast<double>(hp.n_head);
    ASSERT_EQ(hp.head_dim_k, 64);
    const auto at = [&](std::map<int64_t, double> per_pos, const pl::Workload& w) {
        auto in = zero_cost_inputs(std::nullopt);
        in.host_costs.attn_pos_s = std::move(per_pos);
        return seconds(*m, in, std::nullopt, w);
    };
    // 32 prompt tokens from an empty cache attend 1 + 2 + ... + 32 positions.
    const pl::Workload prompt{32, 0, 0};
    const double positions = 32.0 * 33.0 / 2.0;
    const double x = 1e-6;  // large, so the work outweighs reading the cache
    EXPECT_NEAR(at({{64, 2 * x}}, prompt) - at({{64, x}}, prompt), x * heads * positions * L, 1e-9);
    // Between 32 and 128: a third of the way.
    EXPECT_NEAR(at({{32, x}, {128, 4 * x}}, prompt) - at({{64, x}}, prompt), x * heads * positions * L, 1e-9);
    // Past the last measured dimension: scaled with it (64 / 32).
    EXPECT_NEAR(at({{32, x}}, prompt) - at({{64, x}}, prompt), x * heads * positions * L, 1e-9);
    // A decode step at depth 99 attends 100 positions.
    const pl::Workload step{0, 1, 99};
    EXPECT_NEAR(at({{64, 2 * x}}, step) - at({{64, x}}, step), x * heads * 100.0 * L, 1e-9);
    // 64 tokens take the tiled kernel: not this cost.
    EXPECT_NEAR(at({{64, 2 * x}}, pl::Workload{64, 0, 0}) - at({{64, x}}, pl::Workload{64, 0, 0}), 0.0, 1e-12);
}

// Rates measured on rows of kNarrowCols apply to a model as narrow as
// that; a wider one takes a share of the difference on log2 of its n_embd
// (llama-1b, 2048: a quarter of the way from kWideCols).
TEST(Prediction, NarrowRowsTakeTheNarrowRates) {
    const Type types[] = {Type::F32, Type::F16, Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::Q8_0};
    // Rates so low that the products are nearly all the time there is (the
    // embedding rows and the attention still read at the bandwidth).
    const auto ratio = [&](const HeaderModel& m, const pl::Workload& w) {
        auto in = zero_cost_inputs(std::nullopt);
        for (const Type t : types) {
            in.host_costs.matvec_gbps[t] = in.host_costs.matvec_cached_gbps[t] = 1e-3;
            in.host_costs.gemm_small_gflops[t] = in.host_costs.gemm_large_gflops[t] = 1e-3;
            in.host_costs.matvec_narrow_gbps[t] = 1e-3;
            in.host_costs.gemm_small_narrow_gflops[t] = 1e-3;
        }
        const double same = seconds(m, in, std::nullopt, w);
        for (const Type t : types) {
            in.host_costs.matvec_narrow_gbps[t] = 0.5e-3;
            in.host_costs.gemm_small_narrow_gflops[t] = 0.5e-3;
        }
        return seconds(m, in, std::nullopt, w) / same;
    };
    // Every matrix as wide as n_embd (the FFN too): each product takes the
    // rate at its own row width.
    const auto tiny = header_model("tiny", "--ff 256");
    ASSERT_EQ(tiny->spec.hp.n_embd, pl::kNarrowCols);
    EXPECT_NEAR(ratio(*tiny, pl::Workload{0, 1, 0}), 2.0, 0.01);
    EXPECT_NEAR(ratio(*tiny, pl::Workload{32, 0, 0}), 2.0, 0.02);
    const auto llama = header_model("llama-1b", "--ff 2048");
    ASSERT_EQ(llama->spec.hp.n_embd, 2048);
    EXPECT_NEAR(ratio(*llama, pl::Workload{0, 1, 0}), 1.0 / 0.875, 0.01);
    EXPECT_NEAR(ratio(*llama, pl::Workload{32, 0, 0}), 1.0 / 0.875, 0.01);
}

// bench --calibrate's micro-batch rates by row width: a product takes the
// rate at its own width (interpolated on log2 of the width between the
// measured ones), so a change at 2048 columns moves llama-1b's matrices of
// 2048 columns (all but the FFN's down, 5632) by their weights exactly.
TEST(Prediction, EachMatrixTakesTheBatchRateAtItsOwnWidth) {
    const auto m = header_model("llama-1b");
    ASSERT_EQ(m->spec.hp.n_embd, 2048);
    ASSERT_EQ(m->spec.hp.n_ff, 5632);
    // The layers' tensors of 2048 columns (the model counts the norms'
    // vectors as weights too: 2 x 2048 of ~50M a layer).
    double narrow_weights = 0.0;
    for (const auto& ls : m->spec.layers) {
        for (const auto* t : ls.tensors) {
            if (t && t->row_length() == 2048) narrow_weights += static_cast<double>(t->n_elements);
        }
    }
    ASSERT_GT(narrow_weights, 0.0);
    // A 32-token prompt's seconds with every width's rate 100 GFLOP/s but
    // `width`'s, which is `rate`.
    const auto with_rate_at = [](const HeaderModel& model, int64_t width, double rate) {
        auto in = zero_cost_inputs(std::nullopt);
        for (const Type t : {Type::F32, Type::Q4_K, Type::Q6_K}) {
            in.host_costs.matvec_gbps[t] = in.host_costs.matvec_cached_gbps[t] = 1.0;
            in.host_costs.gemm_small_gflops[t] = in.host_costs.gemm_large_gflops[t] = 100.0;
            in.host_costs.gemm_small_by_cols[t] = {{1024, 100.0}, {2048, 100.0}, {4096, 100.0}, {8192, 100.0}};
            in.host_costs.gemm_small_by_cols[t][width] = rate;
        }
        return seconds(model, in, std::nullopt, pl::Workload{32, 0, 0});
    };
    const double expected = 2.0 * 32.0 * narrow_weights * (1.0 / 50e9 - 1.0 / 100e9);
    EXPECT_NEAR(with_rate_at(*m, 2048, 50.0) - with_rate_at(*m, 2048, 100.0), expected, expected * 1e-9);
    // Between the measured widths, on log2: 5632 columns lie 0.46 of the
    // way from 4096 to 8192.
    const double f = std::log2(5632.0 / 4096.0);
    const double down_weights = static_cast<double>(m->spec.hp.n_layer) * 5632.0 * 2048.0;
    const double expected_down = 2.0 * 32.0 * down_weights * (1.0 / ((100.0 - 50.0 * f) * 1e9) - 1.0 / 100e9);
    EXPECT_NEAR(with_rate_at(*m, 8192, 50.0) - with_rate_at(*m, 8192, 100.0), expected_down, expected_down * 1e-9);
    // Past the widest measured width the rate stays flat: llama3-8b's down
    // (14336 columns) takes the rate at 8192; its other matrices (4096) do not.
    const auto big = header_model("llama3-8b");
    ASSERT_EQ(big->spec.hp.n_ff, 14336);
    const double big_down = static_cast<double>(big->spec.hp.n_layer) * 14336.0 * 4096.0;
    const double expected_big = 2.0 * 32.0 * big_down * (1.0 / 50e9 - 1.0 / 100e9);
    EXPECT_NEAR(with_rate_at(*big, 8192, 50.0) - with_rate_at(*big, 8192, 100.0), expected_big, expected_big * 1e-9);
}

TEST(Prediction, PrefillPaysFixedCostsPerMicroBatchNotPerToken) {
    const auto m = header_model("llama-1b");
    const int64_t L = m->spec.hp.n_layer;
    const auto in = zero_cost_inputs(std::nullopt);  // micro-batches of 64
    // 150 prompt tokens: batches of 64, 64 and 22; only the last computes
    // the head; every batch multiplies each matrix in its own call (Q, K,
    // V, the output, gate, up, down) and runs its ops over the threads.
    const pl::Workload prompt{150, 0, 0};
    EXPECT_NEAR(delta(*m, in, std::nullopt, prompt, &pl::KernelCosts::matmul_call_s, 1e-3),
                static_cast<double>(3 * 7 * L + 1) * 1e-3, 1e-9);
    EXPECT_NEAR(delta(*m, in, std::nullopt, prompt, &pl::KernelCosts::pool_op_s, 1e-3),
                static_cast<double>(3 * (8 * L + 1) + 1) * 1e-3, 1e-9);
    EXPECT_NEAR(delta(*m, in, std::nullopt, prompt, &pl::KernelCosts::inline_op_s, 1e-3), 0.0, 1e-12);
    // A batch's product hand-over, when measured apart, is the batches'
    // alone: not the decode steps', nor the head's (one token's logits).
    EXPECT_NEAR(delta(*m, in, std::nullopt, pl::Workload{150, 5, 0}, &pl::KernelCosts::batch_call_s, 1e-3),
                static_cast<double>(3 * 7 * L) * 1e-3, 1e-9);
    // The batch's own cost: three prompt batches and five decode steps.
    EXPECT_NEAR(delta(*m, in, std::nullopt, pl::Workload{150, 5, 0}, &pl::KernelCosts::batch_s, 1e-3), 8e-3,
                1e-9);
}

TEST(Prediction, CrossingsCostWhatTheSplitHandsOver) {
    const auto m = header_model("llama-1b");
    const int64_t L = m->spec.hp.n_layer;
    const auto in = zero_cost_inputs(4 * kGiB);
    const pl::Workload one_token{0, 1, 0};
    const auto crossing = [&](int64_t ngl) {
        return delta(*m, in, ngl, one_token, &pl::KernelCosts::crossing_s, 1e-3, true);
    };
    EXPECT_NEAR(crossing(0), 0.0, 1e-12);                 // all on the host
    EXPECT_NEAR(crossing(L / 2), 2e-3, 1e-9);             // there and back
    EXPECT_NEAR(crossing(L + 1), 2e-3, 1e-9);             // there, and the logits back
    // The host's crossing cost is not the device's: the device's link decides.
    EXPECT_NEAR(delta(*m, in, L / 2, one_token, &pl::KernelCosts::crossing_s, 1e-3, false), 0.0, 1e-12);
    // Bytes at copy_gbps: a hidden row there and back per token.
    pl::PlanInputs slow = in;
    slow.device_costs.copy_gbps = 1e-3;  // 1 MB/s
    const double base = seconds(*m, in, L / 2, pl::Workload{0, 1, 0});
    const double hidden = static_cast<double>(m->spec.hp.n_embd) * 4;
    EXPECT_NEAR(seconds(*m, slow, L / 2, pl::Workload{0, 1, 0}) - base, 2 * hidden / 1e6, 1e-6);
}

TEST(Prediction, ProductsScaleWithTheMeasuredRates) {
    const auto m = header_model("llama-1b");
    auto in = zero_cost_inputs(std::nullopt);
    in.cpu_gbps = 1e9;    // the KV cache and embedding rows: free
    in.cpu_gflops = 1e9;  // and attention
    for (Type t : {Type::F32, Type::Q4_K, Type::Q6_K, Type::Q8_0, Type::F16}) in.host_costs.matvec_gbps[t] = 10.0;
    const pl::Workload one_token{0, 1, 0};
    const double at10 = seconds(*m, in, std::nullopt, one_token);
    // About the bytes of the weights a token reads, at 10 GB/s.
    const double bytes = static_cast<double>(tandem::model::output_weight_bytes(m->spec)) +
                         [&] {
                             double b = 0;
                             for (int64_t il = 0; il < m->spec.hp.n_layer; ++il) {
                                 b += static_cast<double>(tandem::model::layer_decode_bytes(m->spec, il));
                             }
                             return b;
                         }();
    EXPECT_NEAR(at10, bytes / 10e9, 0.01 * bytes / 10e9);
    for (auto& [t, r] : in.host_costs.matvec_gbps) r = 20.0;
    EXPECT_NEAR(seconds(*m, in, std::nullopt, one_token), at10 / 2, 1e-6 * at10);
    // A batch at the small-batch GEMM rate: 2 FLOPs per weight and token.
    for (Type t : {Type::F32, Type::Q4_K, Type::Q6_K, Type::Q8_0, Type::F16}) {
        in.host_costs.gemm_small_gflops[t] = 100.0;
    }
    in.n_ubatch = pl::kGemmSmallBatch;
    const double pp = seconds(*m, in, std::nullopt, pl::Workload{pl::kGemmSmallBatch, 0, 0});
    double params = 0;
    for (const auto& layer : m->spec.layers) {
        for (const auto* t : layer.tensors) {
            if (t) params += static_cast<double>(t->n_elements);
        }
    }
    // The layers at 100 GFLOP/s, the head once for the last token at 20 GB/s.
    const double head = static_cast<double>(tandem::model::output_weight_bytes(m->spec)) / 20e9;
    EXPECT_NEAR(pp, 2 * params * pl::kGemmSmallBatch / 100e9 + head, 0.01 * pp);
}

// A batch of kGemmFewBatch tokens (weights from memory) takes the measured
// few-token rate, and one between that and kGemmSmallBatch the rate on
// log2 of the batch between the two.
TEST(Prediction, FewTokenProductsTakeTheMeasuredFewTokenRate) {
    const auto m = header_model("llama-1b");
    auto in = zero_cost_inputs(std::nullopt);
    in.cpu_gbps = 1e9;
    in.cpu_gflops = 1e9;
    const Type types[] = {Type::F32, Type::Q4_K, Type::Q6_K, Type::Q8_0, Type::F16};
    for (Type t : types) {
        in.host_costs.matvec_gbps[t] = 20.0;
        in.host_costs.gemm_small_gflops[t] = 100.0;
        in.host_costs.gemm_few_gflops[t] = 40.0;
    }
    double params = 0;
    for (const auto& layer : m->spec.layers) {
        for (const auto* t : layer.tensors) {
            if (t) params += static_cast<double>(t->n_elements);
        }
    }
    const double head = static_cast<double>(tandem::model::output_weight_bytes(m->spec)) / 20e9;
    for (const auto& [n, rate] : {std::pair{pl::kGemmFewBatch, 40.0}, std::pair{int64_t{8}, 60.0}}) {
        in.n_ubatch = n;
        const double pp = seconds(*m, in, std::nullopt, pl::Workload{n, 0, 0});
        EXPECT_NEAR(pp, 2 * params * static_cast<double>(n) / (rate * 1e9) + head, 0.01 * pp) << n << " tokens";
    }
    // Weights that fit in the cache: the one-token rate from cache and the
    // GEMM rate, not the few-token rate measured from memory.
    in.host_costs.cache_bytes = uint64_t{1} << 40;
    for (Type t : types) in.host_costs.matvec_cached_gbps[t] = 20.0;
    in.n_ubatch = pl::kGemmFewBatch;
    const double cached = seconds(*m, in, std::nullopt, pl::Workload{pl::kGemmFewBatch, 0, 0});
    EXPECT_LT(cached, 2 * params * static_cast<double>(pl::kGemmFewBatch) / 40e9 * 0.9);
}

TEST(Prediction, ABatchHandsEachExpertItUsesOverSeparately) {
    const auto m = header_model("moe-small");
    const int64_t L = m->spec.hp.n_layer;
    const double e = static_cast<double>(m->spec.hp.n_expert), u = static_cast<double>(m->spec.hp.n_expert_used);
    auto in = zero_cost_inputs(std::nullopt);
    // One token: Q|K|V, the output, the router, the experts' gate|up and
    // down, each group in one call; and the head.
    EXPECT_NEAR(delta(*m, in, std::nullopt, pl::Workload{0, 1, 0}, &pl::KernelCosts::matmul_call_s, 1e-3),
                static_cast<double>(5 * L + 1) * 1e-3, 1e-9);
    // A batch of 64: Q, K, V, the output and the router, then gate, up and
    // down of every expert the batch uses (all but a few of 32).
    const double met = e * (1.0 - std::pow(1.0 - u / e, 64.0));
    EXPECT_NEAR(delta(*m, in, std::nullopt, pl::Workload{64, 0, 0}, &pl::KernelCosts::matmul_call_s, 1e-3),
                (static_cast<double>(L) * (5 + 3 * met) + 1) * 1e-3, 1e-9);
    EXPECT_GT(met, 0.95 * e);
}

TEST(Prediction, ExpertsOfABatchAreReadOncePerExpertUsed) {
    const auto m = header_model("moe-small");
    auto in = zero_cost_inputs(std::nullopt);
    in.cpu_gbps = 10.0;
    in.cpu_gflops = 1e9;  // products bound by reading the weights alone
    in.n_ubatch = 512;
    in.n_ctx = 1024;
    const double one = seconds(*m, in, std::nullopt, pl::Workload{0, 1, 0});
    // A long batch uses every expert: it reads each once, not once per
    // token, so a token costs far less than one decoded alone...
    const double batch = seconds(*m, in, std::nullopt, pl::Workload{512, 0, 0}) / 512;
    EXPECT_LT(batch, one / 20);
    // ...while one token reads n_used of n_expert experts (the bytes a
    // decode step reads, at 10 GB/s).
    double bytes = static_cast<double>(tandem::model::output_weight_bytes(m->spec));
    for (int64_t il = 0; il < m->spec.hp.n_layer; ++il) {
        bytes += static_cast<double>(tandem::model::layer_decode_bytes(m->spec, il));
    }
    EXPECT_NEAR(one, bytes / 10e9, 0.01 * one);
}

TEST(Prediction, StreamingOnTheStandInAddsItsCopies) {
    const auto m = header_model("llama-1b");
    auto in = zero_cost_inputs(4 * kGiB);
    in.weight_stream = true;
    in.stream_min_batch = 32;
    in.device_costs.copy_gbps = 1.0;
    const pl::Workload prompt{64, 0, 0};
    pl::PlanInputs forced = in;
    forced.ngl = 0;
    const pl::Plan p = pl::plan(m->spec, forced);
    ASSERT_TRUE(p.weight_stream);
    const double at1 = pl::predict_seconds(m->spec, forced, p, prompt);
    forced.device_costs.copy_gbps = 2.0;
    const double at2 = pl::predict_seconds(m->spec, forced, p, prompt);
    // The weights of every layer cross once per micro-batch.
    double weights = 0;
    for (int64_t il = 0; il < m->spec.hp.n_layer; ++il) {
        weights += static_cast<double>(tandem::model::layer_weight_bytes(m->spec, il));
    }
    EXPECT_GT(at1 - at2, 0.99 * (weights / 1e9 - weights / 2e9));
    // A prompt below the threshold streams nothing.
    EXPECT_NEAR(pl::predict_seconds(m->spec, forced, p, pl::Workload{16, 0, 0}),
                seconds(*m, [&] { auto i = in; i.device_costs.copy_gbps = 1e-6; return i; }(), 0,
                        pl::Workload{16, 0, 0}),
                1e-9);
}

// A MoE model streams its layers' dense matrices, not its experts (the host
// multiplies those): the copies cost the dense matrices' bytes alone.
TEST(Prediction, StreamingAMoeModelCopiesItsDenseMatricesOnly) {
    const auto m = header_model("moe-small");
    auto in = zero_cost_inputs(4 * kGiB);
    in.weight_stream = true;
    in.stream_min_batch = 32;
    in.ngl = 0;
    const pl::Workload prompt{64, 0, 0};
    in.device_costs.copy_gbps = 1.0;
    const pl::Plan p = pl::plan(m->spec, in);
    ASSERT_TRUE(p.weight_stream);
    const double at1 = pl::predict_seconds(m->spec, in, p, prompt);
    in.device_costs.copy_gbps = 2.0;
    const double at2 = pl::predict_seconds(m->spec, in, p, prompt);
    double dense = 0, all = 0, io = 0;
    for (int64_t il = 0; il < m->spec.hp.n_layer; ++il) {
        all += static_cast<double>(tandem::model::layer_weight_bytes(m->spec, il));
        for (const auto role : tandem::model::kStreamedMatrices) {
            if (const auto* t = m->spec.layers[static_cast<size_t>(il)].get(role)) {
                dense += static_cast<double>(t->n_bytes);
                // Each token's input row there and output row back.
                io += static_cast<double>(t->row_length() + t->n_rows()) * 4.0 * static_cast<double>(prompt.n_prompt);
            }
        }
    }
    ASSERT_LT(dense, all / 4);  // the experts are most of the weights
    const double moved = dense + io;
    EXPECT_GT(at1 - at2, moved / 1e9 - moved / 2e9);
    EXPECT_LT(at1 - at2, 1.02 * (moved / 1e9 - moved / 2e9));
}

TEST(Prediction, PlanPrefillIsOneMicroBatchOfTheWorkloadModel) {
    const auto m = header_model("llama-1b");
    pl::PlanInputs in;
    in.n_ctx = 2048;
    in.n_ubatch = 256;
    const pl::Plan p = pl::plan(m->spec, in);
    EXPECT_NEAR(p.predicted.pp_tps, 256 / pl::predict_seconds(m->spec, in, p, pl::Workload{256, 0, 0}),
                1e-9 * p.predicted.pp_tps);
}

TEST(Prediction, BadWorkloadsAndCostsAreRefused) {
    const auto m = header_model("llama-1b");
    pl::PlanInputs in;
    in.n_ctx = 128;
    const pl::Plan p = pl::plan(m->spec, in);
    EXPECT_THROW(pl::predict_seconds(m->spec, in, p, pl::Workload{-1, 0, 0}), tandem::Error);
    EXPECT_THROW(pl::predict_seconds(m->spec, in, p, pl::Workload{100, 100, 0}), tandem::Error);
    in.host_costs.matmul_call_s = -1.0;
    EXPECT_THROW(pl::plan(m->spec, in), tandem::Error);
    in.host_costs.matmul_call_s.reset();
    in.host_costs.gemm_small_gflops[Type::Q4_K] = 0.0;
    EXPECT_THROW(pl::plan(m->spec, in), tandem::Error);
}

pl::Calibration full_calibration() {
    pl::Calibration c;
    c.cpu_model = "Test CPU";
    c.physical_cores = 8;
    c.cpu_gbps = 40.0;
    c.kernel_threads = 8;
    pl::KernelCosts& k = c.cpu_kernels;
    k.matvec_gbps = {{Type::Q4_K, 30.5}, {Type::F16, 35.0}};
    k.matvec_cached_gbps = {{Type::Q4_K, 80.25}};
    k.gemm_small_gflops = {{Type::Q4_K, 400.0}};
    k.gemm_large_gflops = {{Type::Q4_K, 600.0}, {Type::Q6_K, 500.0}};
    k.cache_bytes = 32ull << 20;
    k.matmul_call_s = 4e-6;
    k.batch_call_s = 9e-6;
    k.pool_op_s = 3e-6;
    k.inline_op_s = 2e-7;
    k.batch_s = 1e-5;
    k.crossing_s = 1e-7;
    k.copy_gbps = 12.0;
    k.inline_op_elem_s = 1.5e-9;
    k.pool_op_elem_s = 0.4e-9;
    k.attn_pos_s = {{32, 4e-9}, {128, 2e-9}};
    k.matvec_narrow_gbps = {{Type::Q4_K, 11.0}};
    k.gemm_small_narrow_gflops = {{Type::Q4_K, 77.0}};
    k.gemm_few_gflops = {{Type::Q4_K, 150.0}, {Type::Q6_K, 120.0}};
    k.gemm_small_by_cols = {{Type::Q4_K, {{1024, 180.0}, {4096, 240.0}}}, {Type::Q6_K, {{2048, 190.0}}}};
    return c;
}

TEST(Prediction, CalibrationRoundTripsTheKernels) {
    const pl::Calibration c = full_calibration();
    const pl::Calibration back = pl::calibration_from_json(nlohmann::json::parse(pl::to_json(c).dump()));
    EXPECT_EQ(back.kernel_threads, 8);
    const pl::KernelCosts& k = back.cpu_kernels;
    EXPECT_EQ(k.matvec_gbps, c.cpu_kernels.matvec_gbps);
    EXPECT_EQ(k.matvec_cached_gbps, c.cpu_kernels.matvec_cached_gbps);
    EXPECT_EQ(k.gemm_small_gflops, c.cpu_kernels.gemm_small_gflops);
    EXPECT_EQ(k.gemm_large_gflops, c.cpu_kernels.gemm_large_gflops);
    EXPECT_EQ(k.gemm_few_gflops, c.cpu_kernels.gemm_few_gflops);
    EXPECT_EQ(k.cache_bytes, c.cpu_kernels.cache_bytes);
    EXPECT_EQ(k.matmul_call_s, c.cpu_kernels.matmul_call_s);
    EXPECT_EQ(k.batch_call_s, c.cpu_kernels.batch_call_s);
    EXPECT_EQ(k.pool_op_s, c.cpu_kernels.pool_op_s);
    EXPECT_EQ(k.inline_op_s, c.cpu_kernels.inline_op_s);
    EXPECT_EQ(k.batch_s, c.cpu_kernels.batch_s);
    EXPECT_EQ(k.crossing_s, c.cpu_kernels.crossing_s);
    EXPECT_EQ(k.copy_gbps, c.cpu_kernels.copy_gbps);
    EXPECT_EQ(k.inline_op_elem_s, c.cpu_kernels.inline_op_elem_s);
    EXPECT_EQ(k.pool_op_elem_s, c.cpu_kernels.pool_op_elem_s);
    EXPECT_EQ(k.attn_pos_s, c.cpu_kernels.attn_pos_s);
    EXPECT_EQ(k.matvec_narrow_gbps, c.cpu_kernels.matvec_narrow_gbps);
    EXPECT_EQ(k.gemm_small_narrow_gflops, c.cpu_kernels.gemm_small_narrow_gflops);
    EXPECT_EQ(k.gemm_small_by_cols, c.cpu_kernels.gemm_small_by_cols);
    // The stand-in: the host's kernels, its copies in the host's weight memory.
    const pl::KernelCosts standin = pl::standin_costs(back);
    EXPECT_EQ(standin.matvec_gbps, k.matvec_gbps);
    EXPECT_EQ(standin.matmul_call_s, 4e-6);
    // Files from before that carry the stand-in's heap-memory rates load;
    // those rates are not read.
    nlohmann::json older = pl::to_json(c);
    older["standin_matvec_gbps"] = {{"Q4_K", 20.0}};
    EXPECT_EQ(pl::standin_costs(pl::calibration_from_json(older)).matvec_gbps, c.cpu_kernels.matvec_gbps);
    // And through the file.
    const fs::path path = scratch_dir() / "calibration.json";
    pl::save_calibration(c, path);
    std::string warning;
    const auto loaded = pl::load_calibration(path, &warning);
    ASSERT_TRUE(loaded) << warning;
    EXPECT_EQ(loaded->cpu_kernels.gemm_large_gflops, c.cpu_kernels.gemm_large_gflops);
    EXPECT_EQ(pl::to_json(*loaded), pl::to_json(c));
}

// bench --calibrate's rounds: the best of each measure, rates up and
// costs down, whichever round had it; a measure one round lacks is the
// other's.
TEST(Prediction, BestOfTwoCalibrationsKeepsTheFasterOfEachMeasure) {
    pl::Calibration a = full_calibration(), b = full_calibration();
    b.cpu_gbps = *a.cpu_gbps * 2;
    b.cpu_kernels.matvec_gbps[Type::Q4_K] = a.cpu_kernels.matvec_gbps.at(Type::Q4_K) / 2;
    b.cpu_kernels.gemm_small_gflops[Type::Q4_K] = a.cpu_kernels.gemm_small_gflops.at(Type::Q4_K) * 3;
    b.cpu_kernels.gemm_small_by_cols[Type::Q4_K][1024] = 1.0;
    b.cpu_kernels.gemm_small_by_cols[Type::Q4_K][4096] = 1000.0;
    b.cpu_kernels.gemm_small_by_cols[Type::Q4_K][8192] = 500.0;
    b.cpu_kernels.matmul_call_s = *a.cpu_kernels.matmul_call_s / 4;
    b.cpu_kernels.pool_op_s = *a.cpu_kernels.pool_op_s * 4;
    b.cpu_kernels.attn_pos_s[32] = a.cpu_kernels.attn_pos_s.at(32) / 2;
    b.cpu_kernels.attn_pos_s[128] = a.cpu_kernels.attn_pos_s.at(128) * 2;
    b.cpu_kernels.crossing_s = std::nullopt;
    a.cpu_kernels.copy_gbps = std::nullopt;
    for (const auto& [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
        const pl::Calibration m = pl::best_of(x, y);
        const pl::KernelCosts& k = m.cpu_kernels;
        EXPECT_EQ(m.cpu_gbps, b.cpu_gbps);
        EXPECT_EQ(k.matvec_gbps.at(Type::Q4_K), a.cpu_kernels.matvec_gbps.at(Type::Q4_K));
        EXPECT_EQ(k.gemm_small_gflops.at(Type::Q4_K), b.cpu_kernels.gemm_small_gflops.at(Type::Q4_K));
        const std::map<int64_t, double> by{{1024, 180.0}, {4096, 1000.0}, {8192, 500.0}};
        EXPECT_EQ(k.gemm_small_by_cols.at(Type::Q4_K), by);
        EXPECT_EQ(k.gemm_small_by_cols.at(Type::Q6_K), a.cpu_kernels.gemm_small_by_cols.at(Type::Q6_K));
        EXPECT_EQ(k.matmul_call_s, b.cpu_kernels.matmul_call_s);
        EXPECT_EQ(k.pool_op_s, a.cpu_kernels.pool_op_s);
        EXPECT_EQ(k.attn_pos_s.at(32), b.cpu_kernels.attn_pos_s.at(32));
        EXPECT_EQ(k.attn_pos_s.at(128), a.cpu_kernels.attn_pos_s.at(128));
        EXPECT_EQ(k.crossing_s, a.cpu_kernels.crossing_s);
        EXPECT_EQ(k.copy_gbps, b.cpu_kernels.copy_gbps);
        EXPECT_EQ(k.cache_bytes, a.cpu_kernels.cache_bytes);
    }
}

// The rounds combined: the memory-bound measures take the middle round
// (the host's bandwidth moves between states), the rest the best.
TEST(Prediction, CalibrationRoundsTakeTheMiddleBandwidthAndTheBestOfTheRest) {
    std::vector<pl::Calibration> rounds(3, full_calibration());
    const double gbps[] = {30.0, 60.0, 35.0}, matvec[] = {30.0, 55.0, 33.0}, copy[] = {10.0, 14.0, 12.0},
                 gemm[] = {400.0, 380.0, 450.0}, call[] = {3e-6, 2e-6, 4e-6};
    for (size_t i = 0; i < 3; ++i) {
        rounds[i].cpu_gbps = gbps[i];
        rounds[i].cpu_kernels.matvec_gbps[Type::Q4_K] = matvec[i];
        rounds[i].cpu_kernels.copy_gbps = copy[i];
        rounds[i].cpu_kernels.gemm_small_gflops[Type::Q4_K] = gemm[i];
        rounds[i].cpu_kernels.matmul_call_s = call[i];
    }
    const pl::Calibration c = pl::combine_rounds(rounds);
    EXPECT_EQ(c.cpu_gbps, 35.0);
    EXPECT_EQ(c.cpu_kernels.matvec_gbps.at(Type::Q4_K), 33.0);
    EXPECT_EQ(c.cpu_kernels.copy_gbps, 12.0);
    EXPECT_EQ(c.cpu_kernels.gemm_small_gflops.at(Type::Q4_K), 450.0);
    EXPECT_EQ(c.cpu_kernels.matmul_call_s, 2e-6);
    // Two rounds: the lower of the two; one round: itself.
    rounds.pop_back();
    EXPECT_EQ(pl::combine_rounds(rounds).cpu_gbps, 30.0);
    rounds.pop_back();
    EXPECT_EQ(pl::to_json(pl::combine_rounds(rounds)), pl::to_json(rounds.front()));
    EXPECT_THROW(pl::combine_rounds({}), tandem::Error);
}

TEST(Prediction, VersionOneCalibrationStillLoadsWithDefaultCosts) {
    const nlohmann::json v1 = {{"version", 1},        {"cpu_model", "Old CPU"}, {"physical_cores", 4},
                               {"cpu_gbps", 25.0},    {"gpu_gbps", nullptr},    {"pcie_gbps", nullptr}};
    const pl::Calibration c = pl::calibration_from_json(v1);
    EXPECT_EQ(c.cpu_gbps, 25.0);
    EXPECT_TRUE(c.cpu_kernels.empty());
    pl::PlanInputs in;
    const auto filled = pl::apply_calibration(c, in);
    EXPECT_EQ(filled, std::vector<std::string>{"cpu_gbps"});
    EXPECT_TRUE(in.host_costs.empty());
    // A plan from it says the fixed costs are the defaults.
    const auto m = header_model("llama-1b");
    const pl::Plan p = pl::plan(m->spec, in);
    bool seen = false;
    for (const pl::Assumption& a : p.assumptions) {
        if (a.name != "cpu_matmul_call_s") continue;
        seen = true;
        EXPECT_TRUE(a.is_default);
        EXPECT_EQ(a.value, pl::kDefaultMatmulCallS);
    }
    EXPECT_TRUE(seen);
}

TEST(Prediction, CalibrationFillsKernelsTheCallerLeftEmpty) {
    const pl::Calibration c = full_calibration();
    pl::PlanInputs in;
    const auto filled = pl::apply_calibration(c, in);
    EXPECT_EQ(in.host_costs.matmul_call_s, 4e-6);
    EXPECT_NE(std::find(filled.begin(), filled.end(), "cpu_matmul_call_s"), filled.end());
    pl::PlanInputs mine;
    mine.host_costs.pool_op_s = 1.0;
    pl::apply_calibration(c, mine);
    EXPECT_EQ(mine.host_costs.pool_op_s, 1.0);
    EXPECT_FALSE(mine.host_costs.matmul_call_s);
}

TEST(Prediction, DamagedKernelEntriesAreOneLineErrors) {
    nlohmann::json j = pl::to_json(full_calibration());
    j["cpu_kernels"]["matvec_gbps"]["Q9_Z"] = 3.0;
    try {
        pl::calibration_from_json(j);
        FAIL() << "an unknown type was accepted";
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find("Q9_Z"), std::string::npos) << e.what();
    }
    j = pl::to_json(full_calibration());
    j["cpu_kernels"]["pool_op_s"] = -2.0;
    EXPECT_THROW(pl::calibration_from_json(j), tandem::Error);
    j = pl::to_json(full_calibration());
    j["cpu_kernels"]["pool_op_elem_s"] = -1e-9;
    EXPECT_THROW(pl::calibration_from_json(j), tandem::Error);
    for (const char* bad : {"x", "0", "-64", "64k"}) {
        j = pl::to_json(full_calibration());
        j["cpu_kernels"]["attn_pos_s"][bad] = 1e-9;
        EXPECT_THROW(pl::calibration_from_json(j), tandem::Error) << bad;
    }
    j = pl::to_json(full_calibration());
    j["cpu_kernels"]["attn_pos_s"]["64"] = -1e-9;
    EXPECT_THROW(pl::calibration_from_json(j), tandem::Error);
    // Rates by row width: widths as keys, positive rates, known types.
    for (const char* bad : {"x", "0", "-1024", "2k"}) {
        j = pl::to_json(full_calibration());
        j["cpu_kernels"]["gemm32_gflops_by_cols"]["Q4_K"][bad] = 100.0;
        EXPECT_THROW(pl::calibration_from_json(j), tandem::Error) << bad;
    }
    j = pl::to_json(full_calibration());
    j["cpu_kernels"]["gemm32_gflops_by_cols"]["Q4_K"]["2048"] = 0.0;
    EXPECT_THROW(pl::calibration_from_json(j), tandem::Error);
    j = pl::to_json(full_calibration());
    j["cpu_kernels"]["gemm32_gflops_by_cols"]["Q9_Z"] = {{"2048", 100.0}};
    EXPECT_THROW(pl::calibration_from_json(j), tandem::Error);
    j = pl::to_json(full_calibration());
    j["cpu_kernels"]["gemm32_gflops_by_cols"]["Q4_K"] = 100.0;
    EXPECT_THROW(pl::calibration_from_json(j), tandem::Error);
    j = pl::to_json(full_calibration());
    j["cpu_kernels"]["gemm32_gflops"] = "fast";
    EXPECT_THROW(pl::calibration_from_json(j), tandem::Error);
    // Loading a damaged file warns and falls back, never throws.
    const fs::path path = scratch_dir() / "calibration.json";
    std::ofstream(path) << j.dump();
    std::string warning;
    EXPECT_FALSE(pl::load_calibration(path, &warning));
    EXPECT_NE(warning.find("gemm32_gflops"), std::string::npos) << warning;
}

// The chart names the worst gap between prediction and measurement per
// panel, over the splits that ran.
TEST(Prediction, ChartNamesTheWorstError) {
    tandem::tools::SweepChart c;
    c.title = "t";
    c.tg_test = "tg16";
    c.pp_test = "pp32";
    for (int64_t ngl = 0; ngl < 4; ++ngl) {
        tandem::tools::SweepPoint p;
        p.ngl = ngl;
        p.measured_tg = 100.0;
        p.predicted_tg = ngl == 2 ? 88.0 : 103.0;
        p.measured_pp = 1000.0;
        p.predicted_pp = 1050.0;
        c.points.push_back(p);
    }
    tandem::tools::SweepPoint unrun;  // did not fit: no measurement, never the worst
    unrun.ngl = 4;
    unrun.predicted_tg = 1.0;
    c.points.push_back(unrun);
    const std::string svg = tandem::tools::render_sweep_svg(c);
    EXPECT_NE(svg.find("worst -12% (ngl 2)"), std::string::npos) << svg;
    EXPECT_NE(svg.find("worst +5% (ngl 0)"), std::string::npos) << svg;
}

}  // namespace

namespace tandem::planner {
namespace {

// bench --calibrate-each predicts for the bandwidth of the moment: the
// rates memory bounds follow it, those of the cores and caches do not.
TEST(Calibration, AtBandwidthScalesTheRatesMemoryBounds) {
    Calibration c;
    c.cpu_gbps = 10.0;
    c.cpu_kernels.matvec_gbps[quant::Type::Q4_K] = 8.0;
    c.cpu_kernels.matvec_cached_gbps[quant::Type::Q4_K] = 30.0;
    c.cpu_kernels.gemm_small_gflops[quant::Type::Q4_K] = 200.0;
    c.cpu_kernels.gemm_few_gflops[quant::Type::Q4_K] = 50.0;
    c.cpu_kernels.copy_gbps = 6.0;
    const Calibration now = at_bandwidth(c, 15.0);
    EXPECT_DOUBLE_EQ(*now.cpu_gbps, 15.0);
    EXPECT_DOUBLE_EQ(now.cpu_kernels.matvec_gbps.at(quant::Type::Q4_K), 12.0);
    EXPECT_DOUBLE_EQ(*now.cpu_kernels.copy_gbps, 9.0);
    EXPECT_DOUBLE_EQ(now.cpu_kernels.matvec_cached_gbps.at(quant::Type::Q4_K), 30.0);
    EXPECT_DOUBLE_EQ(now.cpu_kernels.gemm_small_gflops.at(quant::Type::Q4_K), 200.0);
    EXPECT_DOUBLE_EQ(now.cpu_kernels.gemm_few_gflops.at(quant::Type::Q4_K), 50.0);
    // Nothing to scale from, or nothing measured: unchanged.
    Calibration none = c;
    none.cpu_gbps.reset();
    EXPECT_DOUBLE_EQ(at_bandwidth(none, 15.0).cpu_kernels.matvec_gbps.at(quant::Type::Q4_K), 8.0);
    EXPECT_DOUBLE_EQ(at_bandwidth(c, 0.0).cpu_kernels.matvec_gbps.at(quant::Type::Q4_K), 8.0);
}

}  // namespace
}  // namespace tandem::planner
