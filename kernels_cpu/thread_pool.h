// One persistent pool of worker threads for all CPU work. Threads are
// created once (creating them per op costs more than a decode step's
// matvec on small models), pinned one per physical core with hwloc where
// possible, and spin briefly before sleeping so back-to-back ops within a
// step do not pay a futex wake-up each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace tandem::cpu {

class ThreadPool {
public:
    // n_threads <= 0: the number of physical cores (physical_core_count()).
    // pin: bind thread i to physical core i (ignored where hwloc cannot).
    explicit ThreadPool(int n_threads = 0, bool pin = true);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const;  // threads, the calling thread included

    // Runs fn(thread_index, n_threads) on every thread (the caller is thread
    // 0) and returns when all are done. Exceptions thrown by fn are
    // rethrown here (the first one).
    void run(const std::function<void(int thread_index, int n_threads)>& fn);

    // Splits [0, n) into contiguous chunks of at least `grain` items and runs
    // fn(begin, end) for each, spread over the threads.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

    // The same with one contiguous range per thread, the ranges of about
    // equal total cost(i) (split_by_cost): for items of unequal size, such
    // as the queries of a causal prompt, of which the later ones attend
    // more positions (an equal split of 32 queries gave one thread ~2.9x
    // the other's attention work).
    void parallel_for_cost(int64_t n, const std::function<double(int64_t item)>& cost,
                           const std::function<void(int64_t begin, int64_t end)>& fn);

    // A 64-byte aligned buffer of at least `bytes`, owned by the pool and
    // reused across calls (it only grows), so per-op staging such as
    // quantized activations costs no allocation in the steady state. Valid
    // until the next scratch() call; one user at a time, like run().
    void* scratch(size_t bytes);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Bounds of `parts` contiguous ranges of the items [0, costs.size()): range
// p is [bounds[p], bounds[p + 1]), bounds[0] = 0 and bounds[parts] = the
// item count. Each item goes to the range its cost's midpoint falls in,
// counted along the running total cut into `parts` equal shares, so a
// range is off its share by at most half an item at each end. Costs must
// be finite and >= 0; all zero: equal counts.
std::vector<int64_t> split_by_cost(const std::vector<double>& costs, int parts);

}  // namespace tandem::cpu
