// The emulator's runtime API: devices, memory, copies, streams, events and
// the launch of a grid (emu.h states the model).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kernels_cuda/emulator/block.h"
#include "kernels_cuda/emulator/stream.h"

struct tandem_emu_event {
    std::mutex m;
    tandem::emu::Stream* stream = nullptr;  // where it was last recorded
    uint64_t seq = 0;
    bool recorded = false;
    double seconds = 0.0;  // when the stream reached it
};

namespace tandem::emu {
namespace {

struct Alloc {
    size_t bytes = 0;
    int device = 0;
    bool pinned = false;  // host memory from cudaHostAlloc
};

size_t parse_bytes(const char* s, size_t fallback) {
    if (!s || !*s) return fallback;
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s || v <= 0) return fallback;
    const std::string unit(end);
    double mul = 1;
    if (unit == "KiB" || unit == "K") mul = 1024.0;
    else if (unit == "MiB" || unit == "M") mul = 1024.0 * 1024.0;
    else if (unit == "GiB" || unit == "G") mul = 1024.0 * 1024.0 * 1024.0;
    else if (!unit.empty()) return fallback;
    return static_cast<size_t>(v * mul);
}

struct State {
    std::mutex m;
    std::map<uintptr_t, Alloc> allocs;  // by first byte
    int n_devices = 1;
    std::vector<size_t> capacity, used, peak;
    std::atomic<bool> failed{false};
    std::string failure;
    State() {
        if (const char* e = std::getenv("TANDEM_CUDA_EMULATE_DEVICES"); e && *e) {
            n_devices = std::clamp(std::atoi(e), 1, 16);
        }
        capacity.assign(static_cast<size_t>(n_devices), default_capacity());
        used.assign(static_cast<size_t>(n_devices), 0);
        peak.assign(static_cast<size_t>(n_devices), 0);
    }
};

State& st() {
    static State* s = new State;  // never destroyed: stream workers may run past exit's destructors
    return *s;
}

thread_local int tl_device = 0;
thread_local cudaError_t tl_last = cudaSuccess;

cudaError_t fail_call(cudaError_t e) {
    tl_last = e;
    return e;
}

// The sticky error of a failed kernel: every later call returns it.
bool failed() { return st().failed.load(std::memory_order_acquire); }

}  // namespace

void set_failure(const std::string& msg) {
    State& s = st();
    std::lock_guard<std::mutex> g(s.m);
    if (s.failed.load()) return;
    s.failure = msg;
    s.failed.store(true, std::memory_order_release);
    std::fprintf(stderr, "CUDA emulator: %s\n", msg.c_str());
}

namespace {

#define TANDEM_EMU_STICKY()                                          \
    do {                                                             \
        if (failed()) return fail_call(cudaErrorLaunchFailure);      \
    } while (0)

// The allocation holding [p, p + bytes), or null.
const Alloc* find_locked(const void* p, size_t bytes, uintptr_t* base_out = nullptr) {
    State& s = st();
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = s.allocs.upper_bound(a);
    if (it == s.allocs.begin()) return nullptr;
    --it;
    const uintptr_t base = it->first;
    if (a < base || a + bytes > base + it->second.bytes || a > base + it->second.bytes) return nullptr;
    if (base_out) *base_out = base;
    return &it->second;
}

// Where a range lies: wholly in one device allocation, starting in one and
// running past its end, in pinned host memory, or in other host memory.
enum class Side { Device, DeviceOverrun, PinnedHost, PageableHost };

Side side_of(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> g(st().m);
    if (const Alloc* a = find_locked(p, bytes)) return a->pinned ? Side::PinnedHost : Side::Device;
    const Alloc* start = find_locked(p, 0);
    return start && !start->pinned ? Side::DeviceOverrun : Side::PageableHost;
}

}  // namespace

bool is_device_range(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> g(st().m);
    const Alloc* a = find_locked(p, bytes);
    return a && !a->pinned;
}

namespace {

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- running a grid: blocks shared by the stream's worker and helpers
class BlockPool {
public:
    BlockPool() {
        unsigned n = std::max(1u, std::thread::hardware_concurrency());
        if (const char* e = std::getenv("TANDEM_CUDA_EMULATE_THREADS"); e && *e) n = std::max(1, std::atoi(e));
        n = std::min(n, 8u);
        for (unsigned i = 1; i < n; ++i) helpers_.emplace_back([this] { help(); });
    }

    // Runs every block of the grid; returns the first error ("" if none).
    std::string run(KernelCall* call, const dim3& grid, const dim3& block) {
        std::lock_guard<std::mutex> one(job_mutex_);  // one grid at a time
        const uint64_t total = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
        uint64_t gen = 0;
        {
            std::lock_guard<std::mutex> g(m_);
            call_ = call;
            grid_ = grid;
            block_ = block;
            total_ = total;
            next_.store(0);
            error_.clear();
            gen = ++generation_;
        }
        cv_.notify_all();
        work(gen);
        std::unique_lock<std::mutex> g(m_);
        done_cv_.wait(g, [&] { return active_ == 0; });
        call_ = nullptr;
        ++generation_;  // helpers that wake late find no job
        return error_;
    }

private:
    // Runs blocks of job `gen` until none is left. A helper that wakes
    // after its job ended finds another generation and counts for nothing
    // (it once counted itself into the next job's active_ after run() had
    // reset it: -1, and that job waited forever).
    void work(uint64_t gen) {
        {
            std::lock_guard<std::mutex> g(m_);
            if (gen != generation_ || call_ == nullptr) return;
            ++active_;
        }
        for (;;) {
            const uint64_t i = next_.fetch_add(1);
            if (i >= total_) break;
            const uint3 idx{static_cast<unsigned>(i % grid_.x), static_cast<unsigned>(i / grid_.x % grid_.y),
                            static_cast<unsigned>(i / (static_cast<uint64_t>(grid_.x) * grid_.y))};
            std::string e = run_block(call_, grid_, block_, idx);
            if (!e.empty()) {
                std::lock_guard<std::mutex> g(m_);
                if (error_.empty()) error_ = std::move(e);
                next_.store(total_);
                break;
            }
        }
        std::lock_guard<std::mutex> g(m_);
        if (--active_ == 0) done_cv_.notify_all();
    }

    void help() {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> g(m_);
        for (;;) {
            cv_.wait(g, [&] { return generation_ != seen && call_ != nullptr; });
            seen = generation_;
            g.unlock();
            work(seen);
            g.lock();
        }
    }

    std::mutex job_mutex_, m_;
    std::condition_variable cv_, done_cv_;
    KernelCall* call_ = nullptr;
    dim3 grid_, block_;
    uint64_t total_ = 0;
    std::atomic<uint64_t> next_{0};
    std::string error_;
    int active_ = 0;
    uint64_t generation_ = 0;
    std::vector<std::thread> helpers_;
};

BlockPool& pool() {
    static BlockPool* p = new BlockPool;
    return *p;
}

}  // namespace

// ---- emu.h
size_t default_capacity() { return parse_bytes(std::getenv("TANDEM_CUDA_EMULATE_VRAM"), size_t{8} << 30); }

int device_count() { return st().n_devices; }

void set_capacity(int device, size_t bytes) {
    std::lock_guard<std::mutex> g(st().m);
    if (device >= 0 && device < st().n_devices) st().capacity[static_cast<size_t>(device)] = bytes;
}

size_t capacity(int device) {
    std::lock_guard<std::mutex> g(st().m);
    return st().capacity.at(static_cast<size_t>(device));
}

size_t used_bytes(int device) {
    std::lock_guard<std::mutex> g(st().m);
    return st().used.at(static_cast<size_t>(device));
}

namespace {
std::atomic<uint64_t> g_host_waits{0};
}  // namespace

void host_waited() { g_host_waits.fetch_add(1, std::memory_order_relaxed); }

uint64_t host_waits() { return g_host_waits.load(std::memory_order_relaxed); }

size_t peak_bytes(int device) {
    std::lock_guard<std::mutex> g(st().m);
    return st().peak.at(static_cast<size_t>(device));
}

void reset_peak(int device) {
    std::lock_guard<std::mutex> g(st().m);
    const auto d = static_cast<size_t>(device);
    st().peak.at(d) = st().used.at(d);
}


std::string last_error_message() {
    std::lock_guard<std::mutex> g(st().m);
    return st().failure;
}

void clear_error() {
    synchronize_all();
    std::lock_guard<std::mutex> g(st().m);
    st().failure.clear();
    st().failed.store(false);
    tl_last = cudaSuccess;
}


void submit(const Config& c, KernelCall* call) {
    std::unique_ptr<KernelCall> owned(call);
    const uint64_t threads = static_cast<uint64_t>(c.block.x) * c.block.y * c.block.z;
    if (failed()) {
        tl_last = cudaErrorLaunchFailure;
        return;
    }
    if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
        c.grid.x > 0x7fffffffu || c.grid.y > 65535 || c.grid.z > 65535 || c.shared > 48 * 1024) {
        std::fprintf(stderr, "CUDA emulator: launch at %s: invalid configuration grid (%u,%u,%u) block (%u,%u,%u)\n",
                     site(c.file, c.line).c_str(), c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z);
        tl_last = cudaErrorInvalidConfiguration;
        return;
    }
    std::shared_ptr<KernelCall> shared(std::move(owned));
    enqueue(c.stream, [c, shared] {
        if (failed()) return;
        // What a GPU would fault on: a pointer argument outside device memory.
        for (int i = 0; i < shared->pointer_count(); ++i) {
            const void* p = shared->pointer(i);
            if (p && !is_device_range(p, 0)) {
                set_failure(fmt::format("kernel launched at {}: pointer argument {} ({}) is not device memory",
                                        site(c.file, c.line), i, p));
                return;
            }
        }
        const std::string e = pool().run(shared.get(), c.grid, c.block);
        if (!e.empty()) set_failure(fmt::format("kernel launched at {}: {}", site(c.file, c.line), e));
    });
}

}  // namespace tandem::emu

using tandem::emu::host_waited;

using namespace tandem::emu;

// ---- devices and errors
cudaError_t cudaGetDeviceCount(int* count) {
    *count = device_count();
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device < 0 || device >= device_count()) return fail_call(cudaErrorInvalidDevice);
    *prop = cudaDeviceProp{};
    std::snprintf(prop->name, sizeof(prop->name), "emulated GPU");
    prop->totalGlobalMem = capacity(device);
    prop->sharedMemPerBlock = 48 * 1024;
    prop->regsPerBlock = 65536;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 0x7fffffff;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->major = 8;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    TANDEM_EMU_STICKY();
    if (device < 0 || device >= device_count()) return fail_call(cudaErrorInvalidDevice);
    tl_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    *device = tl_device;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
    host_waited();
    synchronize_all();
    TANDEM_EMU_STICKY();
    return cudaSuccess;
}

cudaError_t cudaDeviceReset() {
    synchronize_all();
    return cudaSuccess;
}

cudaError_t cudaGetLastError() {
    if (failed()) return cudaErrorLaunchFailure;
    const cudaError_t e = tl_last;
    tl_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError() { return failed() ? cudaErrorLaunchFailure : tl_last; }

const char* cudaGetErrorName(cudaError_t err) {
    switch (err) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInitializationError: return "cudaErrorInitializationError";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t err) {
    switch (err) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevicePointer: return "invalid device pointer";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorLaunchFailure:
            return "unspecified launch failure (the CUDA emulator printed the failed check)";
        default: return "unknown error";
    }
}

// ---- memory
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    TANDEM_EMU_STICKY();
    *ptr = nullptr;
    State& s = st();
    const auto d = static_cast<size_t>(tl_device);
    {
        std::lock_guard<std::mutex> g(s.m);
        if (bytes > s.capacity[d] - std::min(s.capacity[d], s.used[d])) return fail_call(cudaErrorMemoryAllocation);
    }
    // One heap block per allocation, so that AddressSanitizer sees its ends.
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (!p) return fail_call(cudaErrorMemoryAllocation);
    // Not zero: a kernel that reads what nobody wrote sees noise. Blocks past
    // 64 MiB stay as the allocator gives them (untouched pages cost nothing,
    // so a test can hold a cache past 2 GiB).
    if (bytes <= (size_t{64} << 20)) std::memset(p, 0xA5, bytes);
    std::lock_guard<std::mutex> g(s.m);
    s.allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, tl_device, false};
    s.used[d] += bytes;
    s.peak[d] = std::max(s.peak[d], s.used[d]);
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    if (!ptr) return cudaSuccess;
    synchronize_all();  // cudaFree waits for the device, as CUDA's does
    State& s = st();
    std::lock_guard<std::mutex> g(s.m);
    const auto it = s.allocs.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == s.allocs.end() || it->second.pinned) return fail_call(cudaErrorInvalidDevicePointer);
    s.used[static_cast<size_t>(it->second.device)] -= it->second.bytes;
    s.allocs.erase(it);
    std::free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    TANDEM_EMU_STICKY();
    std::lock_guard<std::mutex> g(st().m);
    const auto d = static_cast<size_t>(tl_device);
    *total_bytes = st().capacity[d];
    *free_bytes = st().capacity[d] - std::min(st().capacity[d], st().used[d]);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned) {
    TANDEM_EMU_STICKY();
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (!p) return fail_call(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> g(st().m);
    st().allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, tl_device, true};
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
    if (!ptr) return cudaSuccess;
    synchronize_all();
    std::lock_guard<std::mutex> g(st().m);
    const auto it = st().allocs.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == st().allocs.end() || !it->second.pinned) return fail_call(cudaErrorInvalidValue);
    st().allocs.erase(it);
    std::free(ptr);
    return cudaSuccess;
}

namespace {

// A copy's two ranges, and what is wrong with them for its kind ("" when
// nothing is).
struct CopyCheck {
    Side dst, src;
    std::string problem;
};

CopyCheck check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    CopyCheck c{side_of(dst, bytes), side_of(src, bytes), ""};
    auto dev = [](Side x) { return x == Side::Device || x == Side::DeviceOverrun; };
    auto name = [](Side x) {
        return x == Side::Device          ? "device memory"
               : x == Side::DeviceOverrun ? "device memory, past its allocation"
               : x == Side::PinnedHost    ? "pinned host memory"
                                          : "host memory";
    };
    bool ok = true;
    switch (kind) {
        case cudaMemcpyHostToDevice: ok = dev(c.dst) && !dev(c.src); break;
        case cudaMemcpyDeviceToHost: ok = !dev(c.dst) && dev(c.src); break;
        case cudaMemcpyDeviceToDevice: ok = dev(c.dst) && dev(c.src); break;
        case cudaMemcpyHostToHost: ok = !dev(c.dst) && !dev(c.src); break;
        case cudaMemcpyDefault: ok = true; break;
    }
    // A device side must hold the whole range.
    if (ok && c.dst != Side::DeviceOverrun && c.src != Side::DeviceOverrun) return c;
    c.problem = fmt::format(
        "copy of {} bytes ({}) from {} ({}) to {} ({}): a range is not wholly in the memory its kind names", bytes,
        static_cast<int>(kind), src, name(c.src), dst, name(c.dst));
    return c;
}

cudaError_t bad_copy(const std::string& why) {
    std::fprintf(stderr, "CUDA emulator: %s\n", why.c_str());
    return fail_call(cudaErrorInvalidValue);
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    TANDEM_EMU_STICKY();
    host_waited();
    if (bytes == 0) return cudaSuccess;
    if (const CopyCheck c = check_copy(dst, src, bytes, kind); !c.problem.empty()) return bad_copy(c.problem);
    const uint64_t seq = enqueue(nullptr, [=] {
        if (!failed()) std::memmove(dst, src, bytes);
    });
    resolve(nullptr).wait(seq);
    TANDEM_EMU_STICKY();
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    TANDEM_EMU_STICKY();
    if (bytes == 0) return cudaSuccess;
    const CopyCheck c = check_copy(dst, src, bytes, kind);
    if (!c.problem.empty()) return bad_copy(c.problem);
    if (c.src == Side::PageableHost || c.dst == Side::PageableHost) host_waited();
    if (c.src == Side::PageableHost) {
        // CUDA stages pageable memory before returning: the source may be
        // reused at once, the copy itself is still queued.
        auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                                   static_cast<const unsigned char*>(src) + bytes);
        enqueue(stream, [=] {
            if (!failed()) std::memcpy(dst, staged->data(), bytes);
        });
        return cudaSuccess;
    }
    const uint64_t seq = enqueue(stream, [=] {
        if (!failed()) std::memmove(dst, src, bytes);
    });
    if (c.dst == Side::PageableHost) {
        // To pageable memory CUDA returns only once the copy is done.
        resolve(stream).wait(seq);
    }
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
    TANDEM_EMU_STICKY();
    if (bytes == 0) return cudaSuccess;
    if (!is_device_range(ptr, bytes)) return bad_copy(fmt::format("memset of {} bytes at {}: not device memory", bytes, ptr));
    enqueue(stream, [=] {
        if (!failed()) std::memset(ptr, value, bytes);
    });
    return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) { return cudaMemsetAsync(ptr, value, bytes, nullptr); }

// ---- streams
namespace {
// Where the event was last recorded: its stream and the work's number
// there; false if it never was.
bool recorded_at(cudaEvent_t event, Stream*& s, uint64_t& seq) {
    std::lock_guard<std::mutex> g(event->m);
    s = event->stream;
    seq = event->seq;
    return event->recorded;
}
}  // namespace

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
    TANDEM_EMU_STICKY();
    *stream = create_stream((flags & cudaStreamNonBlocking) == 0);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream) return fail_call(cudaErrorInvalidResourceHandle);
    destroy_stream(stream);  // runs what is queued first
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    host_waited();
    Stream& s = resolve(stream);
    s.wait(s.submitted());
    TANDEM_EMU_STICKY();
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    TANDEM_EMU_STICKY();
    Stream& s = resolve(stream);
    return s.done(s.submitted()) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
    TANDEM_EMU_STICKY();
    if (!event) return fail_call(cudaErrorInvalidResourceHandle);
    Stream* src = nullptr;
    uint64_t seq = 0;
    if (!recorded_at(event, src, seq)) return cudaSuccess;  // CUDA: an unrecorded event is waited for at once
    enqueue(stream, [src, seq] { src->wait(seq); });
    return cudaSuccess;
}

// ---- events
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
    TANDEM_EMU_STICKY();
    *event = new tandem_emu_event;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event) return fail_call(cudaErrorInvalidResourceHandle);
    Stream* s = nullptr;
    uint64_t seq = 0;
    if (recorded_at(event, s, seq)) s->wait(seq);  // its record task writes into it
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    TANDEM_EMU_STICKY();
    if (!event) return fail_call(cudaErrorInvalidResourceHandle);
    Stream& s = resolve(stream);
    std::lock_guard<std::mutex> g(event->m);
    event->stream = &s;
    event->recorded = true;
    event->seq = enqueue(stream, [event] {
        std::lock_guard<std::mutex> eg(event->m);
        event->seconds = now_seconds();
    });
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    host_waited();
    if (!event) return fail_call(cudaErrorInvalidResourceHandle);
    Stream* s = nullptr;
    uint64_t seq = 0;
    if (!recorded_at(event, s, seq)) return cudaSuccess;
    s->wait(seq);
    TANDEM_EMU_STICKY();
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    TANDEM_EMU_STICKY();
    if (!event) return fail_call(cudaErrorInvalidResourceHandle);
    Stream* s = nullptr;
    uint64_t seq = 0;
    if (!recorded_at(event, s, seq)) return cudaSuccess;
    return s->done(seq) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
    TANDEM_EMU_STICKY();
    if (!start || !stop) return fail_call(cudaErrorInvalidResourceHandle);
    if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(stop) != cudaSuccess) return fail_call(cudaErrorNotReady);
    std::lock_guard<std::mutex> g1(start->m);
    if (start == stop) {
        *ms = 0.0f;
        return cudaSuccess;
    }
    std::lock_guard<std::mutex> g2(stop->m);
    *ms = static_cast<float>((stop->seconds - start->seconds) * 1e3);
    return cudaSuccess;
}
