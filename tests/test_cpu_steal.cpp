// The steal reading `tandem bench` reports: /proc/stat's aggregate line
// parsed, the per-CPU lines and malformed text refused, and the share
// between two readings.
#include "tools/cpu_steal.h"

#include <gtest/gtest.h>

namespace tandem::tools {
namespace {

TEST(CpuSteal, ParsesTheAggregateLine) {
    // user nice system idle iowait irq softirq steal guest guest_nice
    const char* text =
        "cpu0 1 2 3 4 5 6 7 8 0 0\n"
        "cpu  239764 0 9787 239153 739 0 151 9248 500 0\n"
        "cpu1 9 9 9 9 9 9 9 9 0 0\n"
        "intr 123\n";
    const auto t = parse_cpu_times(text);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->steal, 9248u);
    // The first eight fields: guest time is counted inside user already.
    EXPECT_EQ(t->total, 239764u + 9787u + 239153u + 739u + 151u + 9248u);
}

TEST(CpuSteal, RefusesTextWithoutACompleteAggregateLine) {
    EXPECT_FALSE(parse_cpu_times("").has_value());
    EXPECT_FALSE(parse_cpu_times("cpu0 1 2 3 4 5 6 7 8\n").has_value());  // per-CPU lines only
    EXPECT_FALSE(parse_cpu_times("cpu  1 2 3 4 5 6 7\n").has_value());    // no steal field
    EXPECT_FALSE(parse_cpu_times("cpu  1 2 x 4 5 6 7 8\n").has_value());
    EXPECT_FALSE(parse_cpu_times("cpu  -1 2 3 4 5 6 7 8\n").has_value());
}

TEST(CpuSteal, ShareOfAllCpuTimeBetweenReadings) {
    const CpuTimes a{1000, 100}, b{1400, 150};
    ASSERT_TRUE(steal_percent(a, b).has_value());
    EXPECT_DOUBLE_EQ(*steal_percent(a, b), 12.5);  // 50 of 400 ticks
    EXPECT_DOUBLE_EQ(*steal_percent(a, CpuTimes{1400, 100}), 0.0);
    EXPECT_FALSE(steal_percent(a, a).has_value());  // no time passed
    EXPECT_FALSE(steal_percent(b, a).has_value());  // backwards
}

TEST(CpuSteal, ReadsThisMachineWhereThereIsAProcStat) {
    const auto t = read_cpu_times();
    if (!t) GTEST_SKIP() << "no /proc/stat with steal accounting here";
    EXPECT_GT(t->total, 0u);
    EXPECT_LE(t->steal, t->total);
}

}  // namespace
}  // namespace tandem::tools
