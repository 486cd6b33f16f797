// The emulator's streams: each a worker thread that runs its work in order,
// deferred until something waits for it (emu.h). The legacy default stream
// (cudaStream_t null) waits for every blocking stream before each of its
// operations, and they for it, as CUDA's legacy stream does. Internal.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "kernels_cuda/emulator/emu.h"

namespace tandem::emu {

struct Stream {
    explicit Stream(bool blocking);
    ~Stream();  // runs what is queued, then ends the worker
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    // Queues `work`; returns its sequence number (1, 2, ...).
    uint64_t push(std::function<void()> work);
    // Lets the worker run everything up to `seq`, and waits for it.
    void wait(uint64_t seq);
    void wait_all();
    // Whether everything up to `seq` has run; starts it running if not.
    bool done(uint64_t seq);
    uint64_t submitted();

    const bool blocking;

private:
    void loop();
    std::mutex m_;
    std::condition_variable work_cv_, done_cv_;
    std::deque<std::function<void()>> queue_;
    uint64_t submitted_ = 0, completed_ = 0, run_until_ = 0;
    bool stop_ = false;
    bool eager_ = false;
    std::thread worker_;
};

// The stream a handle means (null: the legacy default stream).
Stream& resolve(Stream* s);
// Queues `work` on `s` after what it must wait for on other streams (the
// legacy stream's rule); returns its sequence number on s.
uint64_t enqueue(Stream* s, std::function<void()> work);
// Waits until every stream has run everything queued (cudaDeviceSynchronize).
void synchronize_all();
// A stream made by cudaStreamCreate, and its end.
Stream* create_stream(bool blocking);
void destroy_stream(Stream* s);

}  // namespace tandem::emu
