// Writing GGUF v3 files with bounded memory: metadata and tensor infos are
// declared first, the header is written, then each tensor's bytes are
// streamed in declaration order. The output goes through an AtomicFile
// (runtime/common/atomic_file.h): a unique temp file beside PATH, renamed to
// PATH only by finish(), so a failed or interrupted write never leaves a
// truncated model under the real name, and an input is never the output.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "runtime/common/atomic_file.h"
#include "runtime/gguf/gguf_value.h"
#include "runtime/quant/quant_types.h"

namespace tandem::gguf {

struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;  // ne[0] first
    quant::Type type = quant::Type::F32;
};

class Writer {
public:
    explicit Writer(std::filesystem::path path, uint64_t alignment = 32);
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;
    ~Writer();  // removes the temp file if finish() was not reached

    // Adds or replaces a key (insertion order is kept). general.alignment is
    // managed by the writer from the constructor argument: setting it only
    // chooses where the key goes (by default, last), so all keys of another
    // file can be copied over as they are.
    // Throws tandem::Error for an empty key, or a value whose contents do
    // not match its declared type (array items included).
    void set(const std::string& key, Value value);
    // Throws tandem::Error if the shape does not fit the type's blocks.
    void add_tensor(TensorSpec spec);

    // Writes magic, counts, metadata and tensor infos. Afterwards the
    // declarations are frozen. general.architecture must have been set (the
    // reader requires it), unless general.type is "imatrix".
    void write_header();
    // The next tensor's bytes, in declaration order; size must equal the
    // tensor's byte size. Pads to the alignment.
    void write_tensor_data(std::span<const uint8_t> bytes);
    // The next piece of the current tensor's bytes, for tensors too large to
    // hold whole (a 70B model's output head is ~1 GB in Q8_0). Once the
    // pieces add up to the tensor's size, the writer pads and moves on.
    void write_tensor_chunk(std::span<const uint8_t> bytes);
    // Checks that every tensor was written (or none, for a header-only file,
    // which must have set kHeaderOnlyKey), flushes and renames into place.
    // Writes the header first if write_header() was not called.
    void finish();

    const std::vector<TensorSpec>& tensors() const { return tensors_; }
    uint64_t tensor_bytes(size_t index) const { return sizes_.at(index); }
    size_t next_tensor() const { return next_tensor_; }

private:
    void check_not_frozen(std::string_view what) const;
    bool header_only_requested() const;
    void write_bytes(const void* p, size_t n);
    void write_u32(uint32_t v);
    void write_u64(uint64_t v);
    void write_string(const std::string& s);
    void write_value(const Value& v);
    void pad_to(uint64_t target_offset);

    std::filesystem::path path_;
    uint64_t alignment_;
    std::vector<KeyValue> metadata_;
    std::vector<TensorSpec> tensors_;
    std::unordered_set<std::string> tensor_names_;  // duplicate check without a scan per tensor
    std::vector<uint64_t> sizes_;
    std::vector<uint64_t> offsets_;
    std::unique_ptr<AtomicFile> out_;  // from write_header() on
    uint64_t written_ = 0;
    uint64_t data_start_ = 0;  // file offset of the data section
    bool header_written_ = false;
    bool finished_ = false;
    size_t next_tensor_ = 0;
    uint64_t chunk_written_ = 0;  // bytes of the current tensor written so far
};

}  // namespace tandem::gguf
