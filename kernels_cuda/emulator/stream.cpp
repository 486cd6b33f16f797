#include "kernels_cuda/emulator/stream.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace tandem::emu {

namespace {

bool eager_from_env() {
    const char* e = std::getenv("TANDEM_CUDA_EMULATE_EAGER");
    return e && std::string(e) == "1";
}

// More queued than this runs anyway, so that a loop that never waits does
// not hold unbounded work.
constexpr size_t kMaxDeferred = 4096;

struct Registry {
    std::mutex m;
    std::vector<Stream*> streams;  // every live stream, the legacy one first
};

Registry& registry() {
    static Registry* r = new Registry;  // never destroyed: streams end in any order at exit
    return *r;
}

}  // namespace

Stream::Stream(bool is_blocking) : blocking(is_blocking), eager_(eager_from_env()) {
    worker_ = std::thread([this] { loop(); });
    std::lock_guard<std::mutex> g(registry().m);
    registry().streams.push_back(this);
}

Stream::~Stream() {
    {
        std::lock_guard<std::mutex> g(registry().m);
        auto& v = registry().streams;
        v.erase(std::remove(v.begin(), v.end(), this), v.end());
    }
    {
        std::lock_guard<std::mutex> g(m_);
        run_until_ = submitted_;
        stop_ = true;
    }
    work_cv_.notify_all();
    worker_.join();
}

uint64_t Stream::push(std::function<void()> work) {
    uint64_t seq;
    {
        std::lock_guard<std::mutex> g(m_);
        queue_.push_back(std::move(work));
        seq = ++submitted_;
        if (eager_ || queue_.size() > kMaxDeferred) run_until_ = submitted_;
    }
    work_cv_.notify_one();
    return seq;
}

void Stream::wait(uint64_t seq) {
    std::unique_lock<std::mutex> g(m_);
    if (run_until_ < seq) {
        run_until_ = std::min(seq, submitted_);
        work_cv_.notify_one();
    }
    done_cv_.wait(g, [&] { return completed_ >= std::min(seq, submitted_); });
}

void Stream::wait_all() { wait(submitted()); }

bool Stream::done(uint64_t seq) {
    std::lock_guard<std::mutex> g(m_);
    if (completed_ >= seq) return true;
    if (run_until_ < seq) {
        run_until_ = std::min(seq, submitted_);
        work_cv_.notify_one();
    }
    return false;
}

uint64_t Stream::submitted() {
    std::lock_guard<std::mutex> g(m_);
    return submitted_;
}

void Stream::loop() {
    std::unique_lock<std::mutex> g(m_);
    for (;;) {
        work_cv_.wait(g, [&] { return (!queue_.empty() && completed_ < run_until_) || (stop_ && queue_.empty()); });
        if (queue_.empty()) return;  // stopping, nothing left
        std::function<void()> work = std::move(queue_.front());
        queue_.pop_front();
        g.unlock();
        work();
        work = nullptr;
        g.lock();
        ++completed_;
        done_cv_.notify_all();
    }
}

Stream& resolve(Stream* s) {
    static Stream* legacy = new Stream(true);  // lives until exit; its worker is detached by process end
    return s ? *s : *legacy;
}

uint64_t enqueue(Stream* s, std::function<void()> work) {
    Stream& target = resolve(s);
    Stream* const legacy = &resolve(nullptr);
    // The legacy stream's rule: its work waits for every blocking stream's
    // work before it, and a blocking stream's work for the legacy stream's.
    std::vector<std::pair<Stream*, uint64_t>> deps;
    if (target.blocking) {
        std::lock_guard<std::mutex> g(registry().m);
        const bool to_legacy = &target == legacy;
        for (Stream* o : registry().streams) {
            if (o == &target || !o->blocking) continue;
            const bool o_legacy = o == legacy;
            if (to_legacy || o_legacy) deps.emplace_back(o, 0);
        }
    }
    for (auto& d : deps) d.second = d.first->submitted();
    if (deps.empty()) return target.push(std::move(work));
    return target.push([deps = std::move(deps), work = std::move(work)] {
        for (const auto& [o, seq] : deps) {
            if (seq > 0) o->wait(seq);
        }
        work();
    });
}

void synchronize_all() {
    std::vector<std::pair<Stream*, uint64_t>> all;
    {
        std::lock_guard<std::mutex> g(registry().m);
        for (Stream* s : registry().streams) all.emplace_back(s, 0);
    }
    for (auto& a : all) a.second = a.first->submitted();
    for (const auto& [s, seq] : all) s->wait(seq);
}

Stream* create_stream(bool blocking) { return new Stream(blocking); }

void destroy_stream(Stream* s) { delete s; }

}  // namespace tandem::emu
