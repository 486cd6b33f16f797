// The bytes of a file on disk, either mapped read-only or read into an owned
// buffer, optionally pinned with mlock. Internal to runtime/gguf: the rest
// of Tandem sees these bytes only through gguf::File's tensor views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "runtime/common/atomic_file.h"

namespace tandem::gguf {

class MappedFile {
public:
    enum class Mode { Mmap, ReadIntoMemory };

    // Throws tandem::Error for a missing file, a directory or other
    // non-regular file, an empty file, an I/O error, or a failed mlock.
    static MappedFile open(const std::filesystem::path& path, Mode mode, bool lock_in_memory);

    MappedFile() = default;
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    std::span<const uint8_t> bytes() const { return {data_, size_}; }
    bool mapped() const { return mapped_; }
    bool locked() const { return locked_; }
    // A hint: the whole pages inside `range` (of bytes()) leave this
    // process's resident memory; read again, they come back from the file
    // (the mapping is private and never written). Nothing for a buffer or
    // a locked mapping.
    void drop_resident(std::span<const uint8_t> range) const noexcept;

private:
    void release() noexcept;

    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = false;  // true: munmap on release; false: an owned aligned buffer
    bool locked_ = false;
    InputFile input_;  // no output may replace this file while it is read
    int sigbus_slot_ = -1;  // its entry in the SIGBUS handler's table of mappings
};

}  // namespace tandem::gguf
