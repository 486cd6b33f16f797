// The CUDA device's expert products (kernels_cuda/expert_matmul.h) run on
// the host: the row plan made from cpu::group_by_expert, the gathers it
// drives, each expert's slice multiplied by the CPU's scalar kernel, and
// the slot sum of op_math.h, against the CPU device's matmul_experts on a
// mixture-of-experts model. The device only moves rows and runs its usual
// products, so what a GPU adds is held by the kernel tests
// (test_cuda_kernels.cpp); the bookkeeping is held here, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels_cpu/matmul.h"
#include "kernels_cpu/moe.h"
#include "kernels_cpu/thread_pool.h"
#include "kernels_cuda/expert_matmul.h"
#include "kernels_cuda/op_math.h"
#include "runtime/engine/cpu_device.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "tests/test_cuda_inputs.h"

namespace tc = tandem::cpu;
namespace cm = tandem::cuda::math;
using tandem::Act;
using tandem::cuda::ExpertRows;

namespace {

using tandem::testing::random_floats;

// Routes of n_tokens tokens over n_expert experts, as the router makes them.
std::vector<float> random_route(int64_t n_expert, int64_t n_used, int64_t n_tokens, uint32_t seed) {
    const auto logits = random_floats(static_cast<size_t>(n_expert * n_tokens), seed, 2.0f);
    std::vector<float> route(static_cast<size_t>(2 * n_used * n_tokens));
    tc::moe_route(logits.data(), tc::RouteParams{n_expert, n_used}, route.data(), n_tokens);
    return route;
}

ExpertRows plan_of(const std::vector<float>& route, int64_t n_expert, int64_t n_used, int64_t n_tokens,
                   bool in_per_slot) {
    tc::ExpertGroups groups;
    tc::group_by_expert(route.data(), n_used, n_tokens, n_expert, groups);
    ExpertRows plan;
    tandem::cuda::plan_expert_rows(groups.offsets, groups.rows, n_used, in_per_slot, plan);
    return plan;
}

// dst row i = src row rows[i]: launch_gather_rows on the host.
std::vector<float> gather(const std::vector<float>& src, const int32_t* rows, int64_t n_rows, int64_t width) {
    std::vector<float> dst(static_cast<size_t>(n_rows * width));
    for (int64_t i = 0; i < n_rows; ++i) {
        std::memcpy(dst.data() + i * width, src.data() + static_cast<int64_t>(rows[i]) * width,
                    static_cast<size_t>(width) * sizeof(float));
    }
    return dst;
}

// run_expert_products on the host: the device's steps with the CPU's
// scalar products in place of the device's.
std::vector<float> emulate(const tandem::gguf::File& file, const tandem::gguf::TensorInfo& t, int64_t n_expert,
                           const ExpertRows& plan, const std::vector<float>& x, const std::vector<float>& route,
                           int64_t n_used, int64_t n_tokens, bool sum_slots, tc::ThreadPool& pool) {
    const int64_t cols = t.row_length(), rows = t.n_rows() / n_expert;
    const uint64_t rb = *tandem::quant::row_bytes(t.type, cols);
    const auto xg = gather(x, plan.indices.data(), plan.total, cols);
    std::vector<float> yg(static_cast<size_t>(plan.total * rows));
    for (int64_t e = 0; e < n_expert; ++e) {
        const int64_t first = plan.offsets[static_cast<size_t>(e)];
        const int64_t count = plan.offsets[static_cast<size_t>(e) + 1] - first;
        if (count == 0) continue;
        const tc::WeightView slice{t.type, file.tensor_data(t).data() + static_cast<uint64_t>(e * rows) * rb, rows,
                                   cols, rb};
        tc::matmul(slice, xg.data() + first * cols, cols, count, yg.data() + first * rows, rows, pool,
                   tc::SimdLevel::Scalar);
    }
    const int32_t* grouped_row = plan.indices.data() + plan.total;
    if (!sum_slots) return gather(yg, grouped_row, plan.total, rows);
    std::vector<float> out(static_cast<size_t>(n_tokens * rows));
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
        for (int64_t c = 0; c < rows; ++c) {
            out[static_cast<size_t>(tok * rows + c)] =
                cm::slot_sum_element(yg.data(), grouped_row, route.data(), n_used, rows, tok, c);
        }
    }
    return out;
}

// Values that differ; a reference of zeros (nothing computed) fails too.
int differing(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_TRUE(std::any_of(b.begin(), b.end(), [](float v) { return v != 0.0f; })) << "an all-zero reference";
    int n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += a[i] == b[i] ? 0 : 1;
    return n;
}

}  // namespace

// Every (token, slot) row is gathered from its input row and put back
// where it came from; a plan from rows that are not one per (token, slot)
// (a broken grouping: the groups are this program's) is a checked failure,
// not a write out of bounds.
TEST(CudaExpertsHost, PlanGroupsEveryRowOnceAndRejectsBadGroups) {
    constexpr int64_t kExperts = 8, kUsed = 2, kTokens = 13;
    const auto route = random_route(kExperts, kUsed, kTokens, 3);
    for (const bool per_slot : {false, true}) {
        SCOPED_TRACE(per_slot ? "input per slot" : "input per token");
        const ExpertRows plan = plan_of(route, kExperts, kUsed, kTokens, per_slot);
        ASSERT_EQ(plan.total, kTokens * kUsed);
        ASSERT_EQ(plan.offsets.size(), static_cast<size_t>(kExperts + 1));
        for (int64_t e = 0; e < kExperts; ++e) {
            for (int64_t i = plan.offsets[static_cast<size_t>(e)]; i < plan.offsets[static_cast<size_t>(e) + 1]; ++i) {
                // Grouped row i came from (token, slot) row r of expert e.
                int64_t r = -1;
                for (int64_t q = 0; q < plan.total; ++q) {
                    if (plan.indices[static_cast<size_t>(plan.total + q)] == i) r = q;
                }
                ASSERT_GE(r, 0) << "grouped row " << i << " is no (token, slot) row's";
                EXPECT_EQ(route[static_cast<size_t>(2 * r)], static_cast<float>(e));
                EXPECT_EQ(plan.indices[static_cast<size_t>(i)], per_slot ? r : r / kUsed);
            }
        }
    }
    ExpertRows plan;
    const std::vector<int64_t> offsets = {0, 2, 4};
    EXPECT_THROW(tandem::cuda::plan_expert_rows(offsets, std::vector<int64_t>{0, 1, 1, 3}, 2, true, plan),
                 tandem::InternalError);
    EXPECT_THROW(tandem::cuda::plan_expert_rows(offsets, std::vector<int64_t>{0, 1, 2, 4}, 2, true, plan),
                 tandem::InternalError);
    EXPECT_THROW(tandem::cuda::plan_expert_rows(offsets, std::vector<int64_t>{0, 1, 2}, 2, true, plan),
                 tandem::InternalError);
}

// The recipe's two expert calls (gate and up from the shared input; down
// from each slot's rows, summed with the route's weights) on a real MoE
// model's first layer: the device's steps give the CPU device's bits.
TEST(CudaExpertsHost, GroupedProductsGiveTheCpuDevicesBits) {
    TANDEM_REQUIRE_MODEL(path, "synth-qwen3moe-Q8_0.gguf");
    const auto file = tandem::gguf::File::open(path);
    const auto spec = tandem::model::load_model_spec(file);
    const auto& hp = spec.hp;
    ASSERT_GT(hp.n_expert, 0);
    constexpr int64_t kTokens = 11;
    tc::ThreadPool pool(2, false);
    tandem::DeviceConfig config;
    config.n_ctx = 64;
    config.n_ubatch = kTokens;
    tandem::CpuDevice cpu("cpu", std::nullopt, file, spec, config, pool, tc::SimdLevel::Scalar);
    const auto& layer = spec.layers.at(0);
    const auto* gate = layer.get(tandem::model::LayerTensor::FfnGateExps);
    const auto* up = layer.get(tandem::model::LayerTensor::FfnUpExps);
    const auto* down = layer.get(tandem::model::LayerTensor::FfnDownExps);
    ASSERT_TRUE(gate && up && down);
    for (const auto* t : {gate, up, down}) cpu.load_matrix(*t);
    cpu.allocate_workspace(false);

    const int64_t k = hp.n_expert_used, n_ff = hp.n_ff_exp, E = hp.n_embd;
    const auto route = random_route(hp.n_expert, k, kTokens, 7);
    cpu.write_act(Act::Route, route.data(), static_cast<int64_t>(route.size()));
    const auto x = random_floats(static_cast<size_t>(kTokens * E), 8);
    cpu.write_act(Act::Cur, x.data(), kTokens * E);
    const tandem::MatmulOut gate_up[] = {{gate, Act::Gate}, {up, Act::Up}};
    cpu.matmul_experts(gate_up, Act::Cur, tandem::ExpertOp{k, false, false}, kTokens);
    std::vector<float> want(static_cast<size_t>(kTokens * k * n_ff));
    const ExpertRows shared = plan_of(route, hp.n_expert, k, kTokens, false);
    for (const auto& [t, a] : {std::pair{gate, Act::Gate}, std::pair{up, Act::Up}}) {
        SCOPED_TRACE(t->name);
        cpu.read_act(a, want.data(), static_cast<int64_t>(want.size()));
        const auto got = emulate(file, *t, hp.n_expert, shared, x, route, k, kTokens, false, pool);
        EXPECT_EQ(differing(got, want), 0) << "of " << want.size();
    }

    const auto h = random_floats(static_cast<size_t>(kTokens * k * n_ff), 9);
    cpu.write_act(Act::Gate, h.data(), static_cast<int64_t>(h.size()));
    const tandem::MatmulOut to_cur[] = {{down, Act::Cur}};
    cpu.matmul_experts(to_cur, Act::Gate, tandem::ExpertOp{k, true, true}, kTokens);
    std::vector<float> summed(static_cast<size_t>(kTokens * E));
    cpu.read_act(Act::Cur, summed.data(), kTokens * E);
    const ExpertRows per_slot = plan_of(route, hp.n_expert, k, kTokens, true);
    const auto got = emulate(file, *down, hp.n_expert, per_slot, h, route, k, kTokens, true, pool);
    EXPECT_EQ(differing(got, summed), 0) << "of " << summed.size();
}
