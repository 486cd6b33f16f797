// The one way Tandem writes a file (models from quantize and synth, logits
// dumps, caches): a temp file with a unique name beside the target, created
// with O_EXCL; refused when the target is one of this process's inputs (the
// same inode: a model being read, a vocabulary being copied); fsync'd and
// renamed over the target only by commit(). Every error names the path and
// says why (errno's text). The temp file is removed by the destructor, and
// by SIGINT, SIGTERM and SIGHUP, which then end the process as they would
// have. Two writers into one target each write their own temp file: the
// last rename wins and the target is always one whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace tandem {

// A file this process reads from: while registered, no AtomicFile may
// replace it. gguf files register themselves when opened.
class InputFile {
public:
    InputFile() = default;
    // Registers the file at path (a file that cannot be stat'ed is not registered).
    explicit InputFile(const std::filesystem::path& path);
    // Registers an open descriptor's file.
    static InputFile from_fd(int fd);
    InputFile(InputFile&& other) noexcept;
    InputFile& operator=(InputFile&& other) noexcept;
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;
    ~InputFile();

private:
    void release() noexcept;
    int slot_ = -1;
};

class AtomicFile {
public:
    // Creates the temp file. Throws tandem::Error when the target is a
    // directory or an input of this process, or the temp file cannot be made.
    explicit AtomicFile(std::filesystem::path target);
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile();  // removes the temp file unless committed

    // Buffered: small writes (a header's fields) cost no system call each.
    void write(const void* data, size_t n);
    void write(const std::string& s) { write(s.data(), s.size()); }
    // Flushes to disk, closes and renames over the target.
    void commit();

    const std::filesystem::path& target() const { return target_; }
    const std::filesystem::path& temp_path() const { return temp_; }
    uint64_t bytes_written() const { return written_; }

private:
    void flush_buffer();
    void write_through(const char* p, size_t n);

    std::filesystem::path target_, temp_;
    std::string buffer_;
    int fd_ = -1;
    int slot_ = -1;  // in the signal handler's list of temp files
    uint64_t written_ = 0;
    bool committed_ = false;
};

// Writes text to path through an AtomicFile.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

}  // namespace tandem
