#include "runtime/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "runtime/common/error.h"

namespace tandem {
namespace {

// Process-wide tables, kept here alone: a signal handler can reach nothing
// else. Temp files: paths in fixed buffers, published through atomics so
// the handler reads only whole entries. Inputs: (device, inode) pairs.
constexpr int kSlots = 64;
constexpr size_t kPathMax = 4096;

struct TempSlot {
    std::atomic<bool> live{false};
    char path[kPathMax]{};
};
std::array<TempSlot, kSlots> g_temps;

struct InputSlot {
    bool used = false;
    dev_t dev = 0;
    ino_t ino = 0;
};
std::array<InputSlot, kSlots> g_inputs;
std::mutex g_mutex;  // guards taking and freeing slots of both tables

// The handlers found when ours were installed: a program that handles a
// signal itself (tandem serve stops in order on SIGTERM) keeps doing so.
std::array<struct sigaction, 3> g_previous{};
constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};

extern "C" void remove_temps_and_reraise(int sig) {
    for (size_t i = 0; i < kSignals.size(); ++i) {
        const struct sigaction& prev = g_previous[i];
        if (kSignals[i] != sig || (prev.sa_flags & SA_SIGINFO) != 0) continue;
        if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
            // The program's own handler: it lets writers finish or fail
            // (each removes its temp file), so nothing is unlinked here.
            prev.sa_handler(sig);
            return;
        }
    }
    for (TempSlot& s : g_temps) {
        if (s.live.load(std::memory_order_acquire)) ::unlink(s.path);  // async-signal-safe
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

void install_handlers_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (size_t i = 0; i < kSignals.size(); ++i) {
            struct sigaction& old = g_previous[i];
            ::sigaction(kSignals[i], nullptr, &old);
            if (old.sa_handler == SIG_IGN) continue;  // ignored by the parent (nohup): keep it so
            struct sigaction sa {};
            sa.sa_handler = remove_temps_and_reraise;
            sigemptyset(&sa.sa_mask);
            ::sigaction(kSignals[i], &sa, nullptr);
        }
    });
}

int take_temp_slot(const std::string& path) {
    if (path.size() >= kPathMax) return -1;  // still removed by the destructor, not by a signal
    std::lock_guard lock(g_mutex);
    for (int i = 0; i < kSlots; ++i) {
        TempSlot& s = g_temps[static_cast<size_t>(i)];
        if (s.live.load(std::memory_order_relaxed)) continue;
        std::memcpy(s.path, path.c_str(), path.size() + 1);
        s.live.store(true, std::memory_order_release);
        return i;
    }
    return -1;
}

void free_temp_slot(int slot) {
    if (slot < 0) return;
    std::lock_guard lock(g_mutex);
    g_temps[static_cast<size_t>(slot)].live.store(false, std::memory_order_release);
}

int register_input(const struct stat& st) {
    std::lock_guard lock(g_mutex);
    for (int i = 0; i < kSlots; ++i) {
        InputSlot& s = g_inputs[static_cast<size_t>(i)];
        if (s.used) continue;
        s = {true, st.st_dev, st.st_ino};
        return i;
    }
    return -1;  // more than 64 open inputs: the rest go unguarded
}

bool is_input(const struct stat& st) {
    std::lock_guard lock(g_mutex);
    for (const InputSlot& s : g_inputs) {
        if (s.used && s.dev == st.st_dev && s.ino == st.st_ino) return true;
    }
    return false;
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

// ---- InputFile --------------------------------------------------------------

InputFile::InputFile(const std::filesystem::path& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) slot_ = register_input(st);
}

InputFile InputFile::from_fd(int fd) {
    InputFile f;
    struct stat st {};
    if (::fstat(fd, &st) == 0) f.slot_ = register_input(st);
    return f;
}

InputFile::InputFile(InputFile&& other) noexcept : slot_(std::exchange(other.slot_, -1)) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
    if (this != &other) {
        release();
        slot_ = std::exchange(other.slot_, -1);
    }
    return *this;
}

InputFile::~InputFile() { release(); }

void InputFile::release() noexcept {
    if (slot_ < 0) return;
    std::lock_guard lock(g_mutex);
    g_inputs[static_cast<size_t>(slot_)].used = false;
    slot_ = -1;
}

// ---- AtomicFile -------------------------------------------------------------

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
    if (target_.empty()) throw Error("output file: expected a path, found an empty one");
    struct stat st {};
    if (::stat(target_.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            throw Error(fmt::format("{}: is a directory, expected a file path to write", target_.string()));
        }
        if (is_input(st)) {
            throw Error(fmt::format("{}: is also an input of this command; write the output to another path",
                                    target_.string()));
        }
    }
    install_handlers_once();
    // A hidden name beside the target (same file system: the rename is
    // atomic), unique through O_EXCL. The name is handed to the signal
    // handler before the file exists (unlinking a name not yet created is
    // harmless): registered after mkstemp, a signal between the two left
    // the temp file behind.
    const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : ".";
    static std::atomic<uint64_t> counter{0};
    for (int attempt = 0;; ++attempt) {
        const uint64_t unique = (static_cast<uint64_t>(::getpid()) << 32) ^ counter.fetch_add(1) ^
                                static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
        const std::string name = (dir / fmt::format(".{}.tandem-{:016x}", target_.filename().string(), unique)).string();
        slot_ = take_temp_slot(name);
        fd_ = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);  // less the umask
        if (fd_ >= 0) {
            temp_ = name;
            break;
        }
        const int err = errno;
        free_temp_slot(std::exchange(slot_, -1));
        if (err != EEXIST || attempt >= 16) {
            throw Error(fmt::format("{}: cannot create a temp file in {}: {}", target_.string(), dir.string(),
                                    errno_text(err)));
        }
    }
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
    free_temp_slot(slot_);
}

void AtomicFile::write(const void* data, size_t n) {
    TANDEM_CHECK(fd_ >= 0 && !committed_, "AtomicFile: write after commit");
    constexpr size_t kBuffer = size_t{1} << 20;
    const auto* p = static_cast<const char*>(data);
    if (buffer_.size() + n <= kBuffer) {
        buffer_.append(p, n);
        return;
    }
    flush_buffer();
    if (n >= kBuffer) {
        write_through(p, n);
    } else {
        buffer_.assign(p, n);
    }
}

void AtomicFile::flush_buffer() {
    write_through(buffer_.data(), buffer_.size());
    buffer_.clear();
}

void AtomicFile::write_through(const char* p, size_t n) {
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            throw Error(fmt::format("{}: writing failed after {} bytes: {}", target_.string(), written_,
                                    errno_text(err)));
        }
        p += w;
        n -= static_cast<size_t>(w);
        written_ += static_cast<uint64_t>(w);
    }
}

void AtomicFile::commit() {
    TANDEM_CHECK(fd_ >= 0 && !committed_, "AtomicFile: commit twice");
    flush_buffer();
    // fsync before rename: after a crash the target holds the old file or
    // the whole new one, never a torn write.
    if (::fsync(fd_) != 0) {
        const int err = errno;
        throw Error(fmt::format("{}: cannot flush to disk: {}", target_.string(), errno_text(err)));
    }
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) {
        const int err = errno;
        throw Error(fmt::format("{}: cannot close: {}", target_.string(), errno_text(err)));
    }
    // The target may have become an input since the constructor looked.
    struct stat st {};
    if (::stat(target_.c_str(), &st) == 0 && is_input(st)) {
        throw Error(fmt::format("{}: is also an input of this command; write the output to another path",
                                target_.string()));
    }
    if (::rename(temp_.c_str(), target_.c_str()) != 0) {
        const int err = errno;
        throw Error(fmt::format("{}: cannot rename {} over it: {}", target_.string(), temp_.string(), errno_text(err)));
    }
    committed_ = true;
    free_temp_slot(std::exchange(slot_, -1));
}

void write_file_atomic(const std::filesystem::path& path, const std::string& text) {
    AtomicFile f(path);
    f.write(text);
    f.commit();
}

}  // namespace tandem
