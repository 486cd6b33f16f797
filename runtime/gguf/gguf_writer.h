// Writing GGUF v3 files with bounded memory: metadata and tensor infos are
// declared first, the header is written, then each tensor's bytes are
// streamed in declaration order. The output goes to PATH.partial and is
// renamed to PATH only by finish(), so a failed or interrupted write never
// leaves a truncated model under the real name or clobbers an existing one.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

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
    ~Writer();  // removes the .partial file if finish() was not reached

    // Adds or replaces a key (insertion order is kept). general.alignment is
    // managed by the writer from the constructor argument.
    void set(const std::string& key, Value value);
    // Throws tandem::Error if the shape does not fit the type's blocks.
    void add_tensor(TensorSpec spec);

    // Writes magic, counts, metadata and tensor infos. Afterwards the
    // declarations are frozen.
    void write_header();
    // The next tensor's bytes, in declaration order; size must equal the
    // tensor's byte size. Pads to the alignment.
    void write_tensor_data(std::span<const uint8_t> bytes);
    // Checks that every tensor was written (or none, for a header-only file,
    // which must have set kHeaderOnlyKey), flushes and renames into place.
    void finish();

    const std::vector<TensorSpec>& tensors() const { return tensors_; }
    uint64_t tensor_bytes(size_t index) const { return sizes_.at(index); }
    size_t next_tensor() const { return next_tensor_; }

private:
    void write_bytes(const void* p, size_t n);

    std::filesystem::path path_;
    std::filesystem::path partial_path_;
    uint64_t alignment_;
    std::vector<KeyValue> metadata_;
    std::vector<TensorSpec> tensors_;
    std::vector<uint64_t> sizes_;
    std::vector<uint64_t> offsets_;
    std::FILE* out_ = nullptr;
    uint64_t written_ = 0;
    bool header_written_ = false;
    bool finished_ = false;
    size_t next_tensor_ = 0;
};

}  // namespace tandem::gguf
