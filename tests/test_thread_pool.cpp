#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "kernels_cpu/cpu_info.h"
#include "kernels_cpu/range_stealer.h"
#include "kernels_cpu/thread_pool.h"

namespace {

using tandem::cpu::ThreadPool;

TEST(ThreadPool, DefaultSizeIsPhysicalCores) {
    ThreadPool pool;
    EXPECT_EQ(pool.size(), tandem::cpu::physical_core_count());
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads, false);
        for (int64_t n : {0, 1, 7, 1000, 100003}) {
            for (int64_t grain : {1, 16, 1000}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                std::atomic<int64_t> chunks_too_small{0};
                pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
                    if (e - b < grain && e - b < n) chunks_too_small.fetch_add(1);
                    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
                });
                for (int64_t i = 0; i < n; ++i) {
                    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
                        << "threads=" << threads << " n=" << n << " grain=" << grain << " i=" << i;
                }
                EXPECT_EQ(chunks_too_small.load(), 0);
            }
        }
    }
}

// The cost of range p of split_by_cost's bounds.
double range_cost(const std::vector<double>& costs, const std::vector<int64_t>& bounds, size_t p) {
    double c = 0.0;
    for (int64_t i = bounds[p]; i < bounds[p + 1]; ++i) c += costs[static_cast<size_t>(i)];
    return c;
}

TEST(ThreadPool, SplitByCostGivesEachRangeItsShare) {
    // A causal prompt's queries: query t attends t + 1 positions.
    std::vector<double> causal(32);
    for (size_t t = 0; t < causal.size(); ++t) causal[t] = static_cast<double>(t + 1);
    std::vector<double> one_big(10, 1.0);
    one_big[3] = 100.0;
    for (const auto* costs : {&causal, &one_big}) {
        double total = 0.0, biggest = 0.0;
        for (const double c : *costs) total += c, biggest = std::max(biggest, c);
        for (int parts : {1, 2, 3, 5, 40}) {
            const std::vector<int64_t> b = tandem::cpu::split_by_cost(*costs, parts);
            ASSERT_EQ(b.size(), static_cast<size_t>(parts) + 1);
            EXPECT_EQ(b.front(), 0);
            EXPECT_EQ(b.back(), static_cast<int64_t>(costs->size()));
            for (size_t p = 0; p < static_cast<size_t>(parts); ++p) {
                ASSERT_LE(b[p], b[p + 1]) << "parts=" << parts << " p=" << p;
                // Off the share by at most half an item at each end.
                EXPECT_LE(std::abs(range_cost(*costs, b, p) - total / parts), biggest + 1e-9)
                    << "parts=" << parts << " p=" << p;
            }
        }
    }
    // An equal split of the causal prompt over two threads gives 136 and
    // 392; by cost, 1 + ... + 22 = 253 and 23 + ... + 32 = 275 (the 23rd
    // query's midpoint, 264.5, is past half of 528).
    const std::vector<int64_t> two = tandem::cpu::split_by_cost(causal, 2);
    EXPECT_EQ(two[1], 22);
    // No cost at all: equal counts.
    EXPECT_EQ(tandem::cpu::split_by_cost(std::vector<double>(10, 0.0), 3), (std::vector<int64_t>{0, 3, 6, 10}));
    EXPECT_EQ(tandem::cpu::split_by_cost({}, 2), (std::vector<int64_t>{0, 0, 0}));
}

TEST(ThreadPool, SplitByCostRefusesBadCosts) {
    EXPECT_THROW(tandem::cpu::split_by_cost({1.0, -1.0}, 2), std::exception);
    EXPECT_THROW(tandem::cpu::split_by_cost({1.0, std::nan("")}, 2), std::exception);
    EXPECT_THROW(tandem::cpu::split_by_cost({1.0}, 0), std::exception);
}

TEST(ThreadPool, ParallelForCostCoversEveryIndexOnceInCostShares) {
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads, false);
        for (int64_t n : {0, 1, 2, 7, 1000}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            std::mutex mu;
            std::vector<std::pair<int64_t, int64_t>> ranges;
            pool.parallel_for_cost(
                n, [](int64_t i) { return static_cast<double>(i + 1); },
                [&](int64_t b, int64_t e) {
                    {
                        std::lock_guard<std::mutex> lk(mu);
                        ranges.emplace_back(b, e);
                    }
                    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
                });
            for (int64_t i = 0; i < n; ++i) {
                ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
            }
            if (n == 1000 && threads > 1) {
                // Rising costs: the first range holds the most items.
                std::sort(ranges.begin(), ranges.end());
                ASSERT_EQ(ranges.size(), static_cast<size_t>(threads));
                EXPECT_GT(ranges.front().second - ranges.front().first, ranges.back().second - ranges.back().first);
            }
        }
    }
}

TEST(ThreadPool, RunGivesEachThreadItsIndex) {
    for (int threads : {1, 2, 4}) {
        ThreadPool pool(threads, true);
        ASSERT_EQ(pool.size(), threads);
        std::mutex mu;
        std::multiset<int> seen;
        std::set<std::thread::id> ids;
        std::thread::id index0_thread;
        pool.run([&](int i, int n) {
            EXPECT_EQ(n, threads);
            std::lock_guard<std::mutex> lk(mu);
            seen.insert(i);
            ids.insert(std::this_thread::get_id());
            if (i == 0) index0_thread = std::this_thread::get_id();
        });
        ASSERT_EQ(seen.size(), static_cast<size_t>(threads));
        for (int i = 0; i < threads; ++i) EXPECT_EQ(seen.count(i), 1u);
        EXPECT_EQ(ids.size(), static_cast<size_t>(threads));  // distinct threads
        EXPECT_EQ(index0_thread, std::this_thread::get_id());  // the caller is thread 0
    }
}

TEST(ThreadPool, ExceptionsPropagateAndPoolStaysUsable) {
    ThreadPool pool(3, false);
    for (int thrower : {0, 1, 2}) {
        EXPECT_THROW(pool.run([&](int i, int) {
            if (i == thrower) throw std::runtime_error("boom");
        }),
                     std::runtime_error);
    }
    // Every thread throwing: one exception comes out, nothing hangs.
    EXPECT_THROW(pool.run([](int, int) { throw std::logic_error("all"); }), std::logic_error);
    std::atomic<int> ran{0};
    pool.run([&](int, int) { ran.fetch_add(1); });
    EXPECT_EQ(ran.load(), 3);
    EXPECT_THROW(pool.parallel_for(100, 1, [](int64_t b, int64_t) {
        if (b > 0) throw std::runtime_error("chunk");
    }),
                 std::runtime_error);
}

TEST(ThreadPool, ManyShortRunsInARow) {
    ThreadPool pool(2, false);
    std::atomic<int64_t> total{0};
    constexpr int kRuns = 20000;
    for (int r = 0; r < kRuns; ++r) {
        pool.run([&](int i, int) { total.fetch_add(i + 1, std::memory_order_relaxed); });
    }
    EXPECT_EQ(total.load(), int64_t{kRuns} * 3);
}

TEST(ThreadPool, WakesWorkersThatFellAsleep) {
    ThreadPool pool(3, false);
    for (int r = 0; r < 5; ++r) {
        // Long enough for the workers to stop spinning and block.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::atomic<int> ran{0};
        pool.run([&](int, int) { ran.fetch_add(1); });
        EXPECT_EQ(ran.load(), 3);
    }
}

TEST(ThreadPool, UnevenWorkCompletes) {
    ThreadPool pool(2, false);
    std::atomic<int> ran{0};
    pool.run([&](int i, int) {
        // The caller finishes early and has to wait (sleeping) for thread 1.
        if (i == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
        ran.fetch_add(1);
    });
    EXPECT_EQ(ran.load(), 2);
}

TEST(ThreadPool, SingleThreadRunsInline) {
    ThreadPool pool(1);
    std::thread::id where;
    pool.run([&](int i, int n) {
        EXPECT_EQ(i, 0);
        EXPECT_EQ(n, 1);
        where = std::this_thread::get_id();
    });
    EXPECT_EQ(where, std::this_thread::get_id());
}

// Every item is taken exactly once, a thread takes its own range from the
// front in order before it steals, and chunks stay within max_chunk, also
// when one thread is slow and the others steal from it.
TEST(RangeStealer, EveryItemOnceOwnRangeFirst) {
    for (int threads : {1, 2, 3, 7}) {
        for (int64_t n : {0, 1, 5, 64, 1001}) {
            for (int64_t max_chunk : {1, 4, 64}) {
                tandem::cpu::RangeStealer split(n, threads);
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                std::vector<std::vector<std::pair<int64_t, int64_t>>> taken(static_cast<size_t>(threads));
                std::vector<std::thread> pool;
                for (int t = 0; t < threads; ++t) {
                    pool.emplace_back([&, t] {
                        int64_t b = 0, e = 0;
                        while (split.next(t, max_chunk, b, e)) {
                            taken[static_cast<size_t>(t)].emplace_back(b, e);
                            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
                            if (t == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));  // the slow one
                        }
                    });
                }
                for (auto& th : pool) th.join();
                for (int64_t i = 0; i < n; ++i) {
                    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
                }
                for (int t = 0; t < threads; ++t) {
                    const auto& chunks = taken[static_cast<size_t>(t)];
                    const int64_t lo = n * t / threads, hi = n * (t + 1) / threads;
                    // Chunks of its own range first, in order from its
                    // front (thieves take from the back), then stolen ones.
                    int64_t expect = lo;
                    bool stealing = false;
                    for (const auto& [b, e] : chunks) {
                        EXPECT_GT(e, b);
                        EXPECT_LE(e - b, max_chunk);
                        if (b >= lo && b < hi) {
                            EXPECT_FALSE(stealing) << "thread " << t << " went back to its own range";
                            EXPECT_EQ(b, expect) << "thread " << t;
                            expect = e;
                        } else {
                            stealing = true;
                        }
                    }
                }
            }
        }
    }
}

TEST(RangeStealer, SlowThreadIsRelieved) {
    // Thread 0 stalls on its first chunk; thread 1 must take most of thread
    // 0's range instead of waiting.
    tandem::cpu::RangeStealer split(200, 2);
    std::atomic<int64_t> by_one{0};
    std::atomic<bool> zero_started{false}, one_done{false};
    std::thread slow([&] {
        int64_t b = 0, e = 0;
        bool first = true;
        while (split.next(0, 4, b, e)) {
            if (first) {
                zero_started = true;
                while (!one_done.load()) std::this_thread::yield();
                first = false;
            }
        }
    });
    while (!zero_started.load()) std::this_thread::yield();
    int64_t b = 0, e = 0;
    while (split.next(1, 4, b, e)) by_one += e - b;
    one_done = true;
    slow.join();
    EXPECT_EQ(by_one.load(), 196);  // all but thread 0's first chunk
}

TEST(ThreadPool, ScratchIsAlignedAndGrows) {
    ThreadPool pool(2, false);
    void* a = pool.scratch(100);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
    EXPECT_EQ(pool.scratch(50), a);  // reused when it fits
    void* b = pool.scratch(1 << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
    static_cast<unsigned char*>(b)[(1 << 20) - 1] = 1;  // whole size writable
}

}  // namespace
