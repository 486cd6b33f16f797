// The router's choice (kernels_cpu/moe.h), against its definition worked
// out by hand: softmax or sigmoid gate values, a bias that changes which
// experts are chosen but not their weights, normalization and the scale.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels_cpu/moe.h"

namespace {

using tandem::cpu::moe_route;
using tandem::cpu::RouteParams;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

TEST(MoeRoute, SoftmaxKeepsTheLargestAndRenormalizes) {
    const std::vector<float> logits = {0.0f, 2.0f, 1.0f, -1.0f};
    std::vector<float> route(4);
    moe_route(logits.data(), RouteParams{4, 2}, route.data(), 1);
    EXPECT_EQ(route[0], 1.0f);  // expert 1 first, then 2
    EXPECT_EQ(route[2], 2.0f);
    // Renormalized over the two kept: e^2 / (e^2 + e^1) and e^1 / (e^2 + e^1).
    EXPECT_NEAR(route[1], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
    EXPECT_NEAR(route[3], std::exp(1.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
}

TEST(MoeRoute, SigmoidWithBiasChoosesByTheBiasAndWeighsWithout) {
    const std::vector<float> logits = {0.5f, 2.0f, 1.0f, -1.0f, /* token 2 */ 3.0f, 0.0f, 0.0f, 0.0f};
    // Expert 3's bias lifts it above the others in the choice only.
    const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 5.0f};
    RouteParams p{4, 2};
    p.sigmoid = true;
    p.selection_bias = bias.data();
    p.scale = 2.5f;
    std::vector<float> route(8);
    moe_route(logits.data(), p, route.data(), 2);
    const float s3 = sigmoid(-1.0f), s1 = sigmoid(2.0f);
    EXPECT_EQ(route[0], 3.0f);  // chosen by the bias
    EXPECT_EQ(route[2], 1.0f);
    EXPECT_NEAR(route[1], s3 / (s3 + s1) * 2.5f, 1e-6);  // weighted by the sigmoid alone
    EXPECT_NEAR(route[3], s1 / (s3 + s1) * 2.5f, 1e-6);
    // Token 2: expert 3 again by its bias, then expert 0.
    EXPECT_EQ(route[4], 3.0f);
    EXPECT_EQ(route[6], 0.0f);
    // Without normalization the weights are the scaled sigmoids.
    p.normalize = false;
    moe_route(logits.data(), p, route.data(), 1);
    EXPECT_NEAR(route[1], s3 * 2.5f, 1e-6);
    EXPECT_NEAR(route[3], s1 * 2.5f, 1e-6);
}

// gpt-oss: the largest raw logits chosen, weighted by a softmax over them
// alone; the experts nobody chose do not enter the sum. The weights differ
// from a softmax over all experts renormalized only in rounding, so the
// bits are checked against the definition in float.
TEST(MoeRoute, SoftmaxOfTheChosenWeighsOnlyTheKept) {
    const std::vector<float> logits = {1.5f, -0.5f, 4.0f, 3.0f, /* token 2 */ -2.0f, -1.0f, -3.0f, -1.5f};
    RouteParams p{4, 2};
    p.softmax_of_chosen = true;
    p.normalize = false;
    std::vector<float> route(8);
    moe_route(logits.data(), p, route.data(), 2);
    EXPECT_EQ(route[0], 2.0f);
    EXPECT_EQ(route[2], 3.0f);
    const float e0 = std::exp(4.0f - 4.0f), e1 = std::exp(3.0f - 4.0f);
    const auto inv = static_cast<float>(1.0 / (static_cast<double>(e0) + e1));
    EXPECT_EQ(route[1], e0 * inv);
    EXPECT_EQ(route[3], e1 * inv);
    EXPECT_NEAR(route[1], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
    // All negative logits: the largest (least negative) still win.
    EXPECT_EQ(route[4], 1.0f);
    EXPECT_EQ(route[6], 3.0f);
    EXPECT_NEAR(route[5] + route[7], 1.0f, 1e-6);
}

// DeepSeek-V3's group-limited choice: 8 experts in 4 groups of 2, the best
// 2 groups by the sum of their two keys; the single best expert can lose
// to two good ones in another group. Weights come from the gate values of
// the chosen, normalized.
TEST(MoeRoute, GroupLimitedChoiceKeepsTheBestGroups) {
    //                                 g0          g1          g2          g3
    const std::vector<float> logits = {4.0f, -3.0f, 1.0f, 1.0f, 0.5f, 0.4f, 2.0f, 0.9f};
    RouteParams p{8, 3};
    p.sigmoid = true;
    p.n_groups = 4;
    p.n_groups_used = 2;
    std::vector<float> route(6);
    moe_route(logits.data(), p, route.data(), 1);
    // Group sums of sigmoids: g0 0.98+0.05=1.03, g1 1.46, g2 1.22, g3 1.59:
    // groups 3 and 1; expert 0 (the largest logit) is out.
    EXPECT_EQ(route[0], 6.0f);
    EXPECT_EQ(route[2], 2.0f);  // ties with 3: the lower id first
    EXPECT_EQ(route[4], 3.0f);
    const float s6 = sigmoid(2.0f), s2 = sigmoid(1.0f);
    EXPECT_NEAR(route[1], s6 / (s6 + 2 * s2), 1e-6);
    // Without groups expert 0 wins.
    p.n_groups = 0;
    moe_route(logits.data(), p, route.data(), 1);
    EXPECT_EQ(route[0], 0.0f);
}

}  // namespace
