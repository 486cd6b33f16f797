#include "runtime/gguf/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include "runtime/common/error.h"

namespace tandem::gguf {
namespace {

// Owned buffers are page-aligned like a mapping, so tensor views have the
// same alignment in both load modes.
constexpr size_t kBufferAlignment = 4096;

std::string errno_text(int err) { return std::strerror(err); }

// Closes the descriptor on every path out of open().
class FileDescriptor {
public:
    explicit FileDescriptor(int fd) : fd_(fd) {}
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    ~FileDescriptor() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }

private:
    int fd_;
};

void read_all(int fd, uint8_t* dst, size_t size, const std::filesystem::path& path) {
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(fd, dst + done, size - done, static_cast<off_t>(done));
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(fmt::format("{}: read failed at offset 0x{:x}: {}", path.string(), done, errno_text(errno)));
        }
        if (n == 0) {
            throw Error(fmt::format("{}: offset 0x{:x}: file shrank while it was being read: expected {} bytes, found {}",
                                    path.string(), done, size, done));
        }
        done += static_cast<size_t>(n);
    }
}

// ---- SIGBUS from a mapping whose file shrank -----------------------------
// Another process truncating a model while it is mapped turns the next read
// of a lost page into SIGBUS. The handler names the file and exits 1; the
// table of mappings is what it can reach (fixed slots, published through
// atomics). A fault elsewhere keeps its default meaning.
struct MappingSlot {
    std::atomic<bool> live{false};
    const uint8_t* begin = nullptr;
    size_t size = 0;
    char message[1200]{};
    size_t message_len = 0;
};
std::array<MappingSlot, 16> g_mappings;
std::mutex g_mappings_mutex;

extern "C" void on_sigbus(int sig, siginfo_t* info, void*) {
    const auto* addr = static_cast<const uint8_t*>(info->si_addr);
    for (const MappingSlot& m : g_mappings) {
        if (m.live.load(std::memory_order_acquire) && addr >= m.begin && addr < m.begin + m.size) {
            [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, m.message, m.message_len);
            ::_exit(1);
        }
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

int register_mapping(const uint8_t* begin, size_t size, const std::filesystem::path& path) {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa {};
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        ::sigaction(SIGBUS, &sa, nullptr);
    });
    std::string text = path.string();
    if (text.size() > 1000) text = "..." + text.substr(text.size() - 997);
    const std::string message =
        fmt::format("tandem: error: {}: the file changed on disk while in use (truncated or rewritten); stopped\n", text);
    std::lock_guard lock(g_mappings_mutex);
    for (size_t i = 0; i < g_mappings.size(); ++i) {
        MappingSlot& m = g_mappings[i];
        if (m.live.load(std::memory_order_relaxed)) continue;
        m.begin = begin;
        m.size = size;
        std::memcpy(m.message, message.data(), message.size());
        m.message_len = message.size();
        m.live.store(true, std::memory_order_release);
        return static_cast<int>(i);
    }
    return -1;  // more than 16 mappings: the rest keep the plain SIGBUS
}

void unregister_mapping(int slot) {
    if (slot < 0) return;
    std::lock_guard lock(g_mappings_mutex);
    g_mappings[static_cast<size_t>(slot)].live.store(false, std::memory_order_release);
}

}  // namespace

MappedFile MappedFile::open(const std::filesystem::path& path, Mode mode, bool lock_in_memory) {
    // O_NONBLOCK keeps open() from hanging on a FIFO; it has no effect on the
    // regular files accepted below.
    FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd.get() < 0) {
        throw Error(fmt::format("{}: cannot open: {}", path.string(), errno_text(errno)));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        throw Error(fmt::format("{}: cannot stat: {}", path.string(), errno_text(errno)));
    }
    if (S_ISDIR(st.st_mode)) {
        throw Error(fmt::format("{}: is a directory, expected a GGUF file", path.string()));
    }
    if (!S_ISREG(st.st_mode)) {
        throw Error(fmt::format("{}: is not a regular file, expected a GGUF file", path.string()));
    }
    if (st.st_size == 0) {
        throw Error(fmt::format("{}: offset 0x0: file is empty: expected a GGUF file starting with magic \"GGUF\"",
                                path.string()));
    }
    const auto size = static_cast<size_t>(st.st_size);

    MappedFile file;
    file.input_ = InputFile::from_fd(fd.get());
    if (mode == Mode::Mmap) {
        void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
        // MAP_PRIVATE + PROT_READ: nothing Tandem does can write to the
        // model. If another process truncates the file while it is mapped,
        // touching the lost pages raises SIGBUS; no reader can prevent that.
        if (p == MAP_FAILED) {
            throw Error(fmt::format("{}: mmap of {} bytes failed: {}", path.string(), size, errno_text(errno)));
        }
        file.data_ = static_cast<const uint8_t*>(p);
        file.size_ = size;
        file.mapped_ = true;
        file.sigbus_slot_ = register_mapping(file.data_, size, path);
        // A mapping stays valid after close(); the descriptor is not kept.
    } else {
        const size_t allocated = (size + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
        auto* buffer = static_cast<uint8_t*>(::operator new(allocated, std::align_val_t{kBufferAlignment}, std::nothrow));
        if (buffer == nullptr) {
            throw Error(fmt::format("{}: cannot allocate {} bytes to read the file into memory", path.string(), size));
        }
        file.data_ = buffer;
        file.size_ = size;
        read_all(fd.get(), buffer, size, path);  // on throw, `file` frees the buffer
    }

    if (lock_in_memory) {
        if (::mlock(file.data_, file.size_) != 0) {
            const int err = errno;
            throw Error(fmt::format(
                "{}: mlock of {} bytes failed: {}: raise the locked-memory limit RLIMIT_MEMLOCK (ulimit -l) or run "
                "without mlock",
                path.string(), file.size_, errno_text(err)));
        }
        file.locked_ = true;
    }
    return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, false)),
      locked_(std::exchange(other.locked_, false)),
      input_(std::move(other.input_)),
      sigbus_slot_(std::exchange(other.sigbus_slot_, -1)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        mapped_ = std::exchange(other.mapped_, false);
        input_ = std::move(other.input_);
        sigbus_slot_ = std::exchange(other.sigbus_slot_, -1);
        locked_ = std::exchange(other.locked_, false);
    }
    return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::drop_resident(std::span<const uint8_t> range) const noexcept {
    if (!mapped_ || locked_ || range.empty()) return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto lo = (reinterpret_cast<uintptr_t>(range.data()) + page - 1) / page * page;
    const auto hi = (reinterpret_cast<uintptr_t>(range.data()) + range.size()) / page * page;
    const auto base = reinterpret_cast<uintptr_t>(data_);
    if (lo >= hi || lo < base || hi > base + size_) return;
    ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);  // a hint: a failure changes nothing
}

void MappedFile::release() noexcept {
    if (data_ == nullptr) return;
    if (locked_) ::munlock(data_, size_);
    if (mapped_) {
        unregister_mapping(std::exchange(sigbus_slot_, -1));
        ::munmap(const_cast<uint8_t*>(data_), size_);
    } else {
        ::operator delete(const_cast<uint8_t*>(data_), std::align_val_t{kBufferAlignment});
    }
    data_ = nullptr;
    size_ = 0;
    mapped_ = false;
    locked_ = false;
}

}  // namespace tandem::gguf
