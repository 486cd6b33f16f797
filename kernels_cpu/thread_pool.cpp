// Persistent worker pool. A run() publishes the job by bumping a generation
// counter; workers that finished the previous job are still spinning on
// that counter for a short while, so back-to-back ops (a decode step issues
// hundreds) start within a cache-line transfer instead of a futex wake-up.
// Workers that spun out sleep on a condition variable, and run() only takes
// the mutex to wake them when one is actually asleep.
#include "kernels_cpu/thread_pool.h"

#include <hwloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kernels_cpu/cpu_info.h"
#include "runtime/common/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tandem::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

// How long an idle thread polls before sleeping. Long enough to cover the
// gap between consecutive ops of one step, short enough that an idle pool
// stops burning its cores almost at once.
constexpr auto kSpinTime = std::chrono::microseconds(100);

// Polls pred() for up to kSpinTime; true if it became true.
template <class Pred>
bool spin_until(Pred pred) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (pred()) return true;
            cpu_relax();
        }
        if (std::chrono::steady_clock::now() - start > kSpinTime) return pred();
    }
}

struct AlignedFree {
    void operator()(void* p) const { std::free(p); }
};

}  // namespace

struct ThreadPool::Impl {
    int n_threads = 1;
    std::vector<std::thread> workers;
    hwloc_topology_t topo = nullptr;

    // Job hand-off. `job` is written before the generation bump (release)
    // and read after observing it (acquire).
    const std::function<void(int, int)>* job = nullptr;
    alignas(64) std::atomic<uint64_t> generation{0};
    alignas(64) std::atomic<int> pending{0};
    std::atomic<bool> stop{false};

    // Sleeping workers.
    std::mutex wake_mu;
    std::condition_variable wake_cv;
    std::atomic<int> sleepers{0};

    // The caller sleeping on completion.
    std::mutex done_mu;
    std::condition_variable done_cv;
    std::atomic<bool> caller_waiting{false};

    std::mutex error_mu;
    std::exception_ptr error;
    std::atomic<bool> running{false};

    std::unique_ptr<void, AlignedFree> scratch;
    size_t scratch_bytes = 0;

    void record(std::exception_ptr e) {
        std::lock_guard<std::mutex> lk(error_mu);
        if (!error) error = std::move(e);
    }

    void pin(int index) {
        if (topo == nullptr) return;
        const int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        if (cores <= 0) return;
        hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(index % cores));
        if (core == nullptr || core->cpuset == nullptr) return;
        // Failure (a restricted cpuset, an OS without binding) only costs
        // locality, so it is ignored.
        (void)hwloc_set_cpubind(topo, core->cpuset, HWLOC_CPUBIND_THREAD);
    }

    void finish_one() {
        if (pending.fetch_sub(1) == 1 && caller_waiting.load()) {
            std::lock_guard<std::mutex> lk(done_mu);
            done_cv.notify_all();
        }
    }

    void worker_loop(int index, bool do_pin) {
        if (do_pin) pin(index);
        uint64_t seen = 0;
        for (;;) {
            auto published = [&] { return generation.load() != seen; };
            if (!spin_until(published)) {
                std::unique_lock<std::mutex> lk(wake_mu);
                sleepers.fetch_add(1);
                wake_cv.wait(lk, published);
                sleepers.fetch_sub(1);
            }
            seen = generation.load(std::memory_order_acquire);
            if (stop.load()) return;
            try {
                (*job)(index, n_threads);
            } catch (...) {
                record(std::current_exception());
            }
            finish_one();
        }
    }

    void publish() {
        // seq_cst on both sides: a worker that increments `sleepers` after
        // this load re-checks the generation under the mutex and sees the
        // bump, so no wake-up is lost.
        generation.fetch_add(1);
        if (sleepers.load() > 0) {
            std::lock_guard<std::mutex> lk(wake_mu);
            wake_cv.notify_all();
        }
    }

    void wait_done() {
        auto done = [&] { return pending.load() == 0; };
        if (spin_until(done)) return;
        std::unique_lock<std::mutex> lk(done_mu);
        caller_waiting.store(true);
        done_cv.wait(lk, done);
        caller_waiting.store(false);
    }
};

ThreadPool::ThreadPool(int n_threads, bool pin) : impl_(std::make_unique<Impl>()) {
    // Counts come from -t: bounded, so a typo cannot start millions of
    // threads. 0 and -1 (llama.cpp's "default") mean the physical cores.
    const int logical = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    if (n_threads < -1 || n_threads > 4 * logical) {
        throw Error(fmt::format("-t/--threads: expected 1 to {} (4x the {} logical CPUs), or 0 or -1 for the "
                                "physical cores, found {}",
                                4 * logical, logical, n_threads));
    }
    impl_->n_threads = n_threads > 0 ? n_threads : physical_core_count();
    if (impl_->n_threads == 1) return;
    if (pin && hwloc_topology_init(&impl_->topo) == 0) {
        if (hwloc_topology_load(impl_->topo) != 0) {
            hwloc_topology_destroy(impl_->topo);
            impl_->topo = nullptr;
        }
    }
    // Worker i (i >= 1) goes to core i; the caller, thread 0, keeps its own
    // affinity: pinning it would also pin every thread the application
    // creates from it later.
    impl_->workers.reserve(static_cast<size_t>(impl_->n_threads - 1));
    for (int i = 1; i < impl_->n_threads; ++i) {
        impl_->workers.emplace_back([this, i, pin] { impl_->worker_loop(i, pin); });
    }
}

ThreadPool::~ThreadPool() {
    impl_->stop.store(true);
    {
        std::lock_guard<std::mutex> lk(impl_->wake_mu);
        impl_->generation.fetch_add(1);
    }
    impl_->wake_cv.notify_all();
    for (auto& t : impl_->workers) t.join();
    if (impl_->topo != nullptr) hwloc_topology_destroy(impl_->topo);
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::run(const std::function<void(int, int)>& fn) {
    Impl& p = *impl_;
    if (p.n_threads == 1) {
        fn(0, 1);
        return;
    }
    TANDEM_CHECK(!p.running.exchange(true), "ThreadPool::run called while a run is in progress (nested or concurrent)");
    p.error = nullptr;
    p.job = &fn;
    p.pending.store(p.n_threads - 1);
    p.publish();
    try {
        fn(0, p.n_threads);
    } catch (...) {
        p.record(std::current_exception());
    }
    p.wait_done();
    p.job = nullptr;
    p.running.store(false);
    if (p.error) {
        std::exception_ptr e = p.error;
        p.error = nullptr;
        std::rethrow_exception(e);
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    // At most one chunk per thread, each at least `grain` long.
    const int64_t chunks = std::min<int64_t>(size(), std::max<int64_t>(1, n / grain));
    if (chunks == 1) {
        fn(0, n);
        return;
    }
    run([&](int i, int) {
        if (i >= chunks) return;
        const int64_t begin = n * i / chunks;
        const int64_t end = n * (i + 1) / chunks;
        fn(begin, end);
    });
}

void ThreadPool::parallel_for_cost(int64_t n, const std::function<double(int64_t)>& cost,
                                   const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    const int parts = static_cast<int>(std::min<int64_t>(size(), n));
    if (parts == 1) {
        fn(0, n);
        return;
    }
    std::vector<double> costs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) costs[static_cast<size_t>(i)] = cost(i);
    const std::vector<int64_t> bounds = split_by_cost(costs, parts);
    run([&](int i, int) {
        if (i >= parts || bounds[static_cast<size_t>(i)] == bounds[static_cast<size_t>(i) + 1]) return;
        fn(bounds[static_cast<size_t>(i)], bounds[static_cast<size_t>(i) + 1]);
    });
}

std::vector<int64_t> split_by_cost(const std::vector<double>& costs, int parts) {
    TANDEM_CHECK(parts > 0, "split_by_cost: parts must be positive");
    const auto n = static_cast<int64_t>(costs.size());
    double total = 0.0;
    for (const double c : costs) {
        TANDEM_CHECK(std::isfinite(c) && c >= 0.0, "split_by_cost: a cost must be finite and >= 0");
        total += c;
    }
    std::vector<int64_t> bounds(static_cast<size_t>(parts) + 1, n);
    bounds[0] = 0;
    if (total <= 0.0) {
        for (int p = 1; p < parts; ++p) bounds[static_cast<size_t>(p)] = n * p / parts;
        return bounds;
    }
    double running = 0.0;
    int64_t i = 0;
    for (int p = 1; p < parts; ++p) {
        const double target = total * p / parts;
        // Items whose cost's midpoint comes before the target stay in this
        // range; the next one starts the next range.
        while (i < n && running + costs[static_cast<size_t>(i)] * 0.5 < target) running += costs[static_cast<size_t>(i++)];
        bounds[static_cast<size_t>(p)] = i;
    }
    return bounds;
}

void* ThreadPool::scratch(size_t bytes) {
    Impl& p = *impl_;
    if (bytes > p.scratch_bytes || !p.scratch) {
        // Grow geometrically so a slowly increasing batch size does not
        // reallocate on every call.
        const size_t want = std::max<size_t>({bytes, p.scratch_bytes + p.scratch_bytes / 2, 4096});
        const size_t rounded = (want + 63) / 64 * 64;
        void* mem = std::aligned_alloc(64, rounded);
        if (mem == nullptr) throw std::bad_alloc();
        p.scratch.reset(mem);
        p.scratch_bytes = rounded;
    }
    return p.scratch.get();
}

}  // namespace tandem::cpu
