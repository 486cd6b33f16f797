// Reading GGUF files (versions 2 and 3).
//
// A File is validated completely when it is opened: every count, length,
// type id, shape, offset and size is checked against the bytes actually
// present before any of it is used, and a failure raises tandem::Error with
// a message of the form
//   "FILE: offset 0x1a2b: tensor 'blk.0.attn_q.weight': expected ..., found ..."
// Tensor data is mmapped (or read into memory on request) and handed out as
// views of the GGUF blocks exactly as stored.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gguf/gguf_value.h"
#include "runtime/quant/quant_types.h"

namespace tandem::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr int kMaxDims = 4;  // ggml tensors have at most 4 dimensions
// Written by `tandem synth --header-only`: tensor infos are real but the
// data section is absent; such a file can be planned, never run.
inline constexpr std::string_view kHeaderOnlyKey = "tandem.header_only";

struct TensorInfo {
    std::string name;
    std::vector<int64_t> shape;  // ne[0] first: ne[0] is the contiguous row length
    quant::Type type = quant::Type::F32;
    uint64_t offset = 0;        // relative to the start of the data section, as stored
    uint64_t n_elements = 0;
    uint64_t n_bytes = 0;
    uint64_t info_offset = 0;   // file offset of this tensor's info record, for messages

    int64_t row_length() const { return shape.empty() ? 1 : shape[0]; }
    int64_t n_rows() const;     // product of shape[1..]
};

// A shape as messages and listings print it: "[4096, 32000]", ne[0] first.
std::string shape_string(const std::vector<int64_t>& shape);

enum class LoadMode {
    Mmap,            // map the file; pages come in on first touch
    ReadIntoMemory,  // read the whole file into an owned buffer
};

struct OpenOptions {
    LoadMode mode = LoadMode::Mmap;
    bool mlock = false;  // pin the mapping (or buffer) in RAM; failure is an Error
};

class File {
public:
    // Opens and validates. Throws tandem::Error on any problem.
    static File open(const std::filesystem::path& path, const OpenOptions& options = {});
    // Parses bytes that the caller keeps alive (fuzzer, tests). `name` is
    // used in messages in place of a path.
    static File from_bytes(std::span<const uint8_t> bytes, std::string name = "<memory>");

    File(File&&) noexcept;
    File& operator=(File&&) noexcept;
    ~File();

    const std::string& name() const;  // the path, or the name given to from_bytes
    uint32_t version() const;
    uint64_t alignment() const;
    uint64_t data_offset() const;  // file offset of the data section
    uint64_t file_size() const;
    bool header_only() const;      // tensor data absent: plan only
    bool mapped() const;           // the data is a mapping of the file (not read into memory, not caller bytes)
    bool locked() const;           // pinned in RAM (OpenOptions::mlock)

    const std::vector<KeyValue>& metadata() const;
    const Value* find(std::string_view key) const;
    // The whole record, with the file offset where it starts (for messages
    // that point at the key).
    const KeyValue* find_key_value(std::string_view key) const;

    // general.architecture, required by the reader except in an importance
    // matrix (general.type "imatrix"), where it is empty.
    const std::string& architecture() const;

    // Typed look-ups. find_* return nullopt when the key is absent and throw
    // when it is present with an incompatible type; get_* also throw when
    // the key is absent. Messages name the key, its offset, the expected and
    // the found type.
    std::optional<std::string> find_string(std::string_view key) const;
    std::optional<uint64_t> find_uint(std::string_view key) const;
    std::optional<double> find_float(std::string_view key) const;
    std::optional<bool> find_bool(std::string_view key) const;
    std::string get_string(std::string_view key) const;
    uint64_t get_uint(std::string_view key) const;
    double get_float(std::string_view key) const;

    const std::vector<TensorInfo>& tensors() const;
    const TensorInfo* find_tensor(std::string_view name) const;
    // The tensor's bytes. Throws for a header-only file.
    std::span<const uint8_t> tensor_data(const TensorInfo& info) const;
    // The tensor's pages leave resident memory (MappedFile::drop_resident):
    // for a mapping whose data was copied elsewhere. Nothing otherwise.
    void drop_resident(const TensorInfo& info) const noexcept;
    // Sum of n_bytes over all tensors.
    uint64_t total_tensor_bytes() const;

private:
    [[noreturn]] void fail_type(const KeyValue& kv, std::string_view expected) const;
    [[noreturn]] void fail_missing(std::string_view key, std::string_view expected) const;

    struct Impl;
    explicit File(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::gguf
