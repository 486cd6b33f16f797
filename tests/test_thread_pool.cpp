#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels_cpu/cpu_info.h"
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
