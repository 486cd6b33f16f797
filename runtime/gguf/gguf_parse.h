// Parsing and validating the GGUF header from raw bytes. Internal to
// runtime/gguf: gguf::File wraps the result with the storage that owns the
// bytes. Every check the format allows is done here, once, so that File can
// hand out tensor views without further bounds checks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/gguf/gguf_file.h"

namespace tandem::gguf {

// Smallest encodings of a record: a count larger than the bytes left divided
// by these cannot be genuine, and is rejected before anything is allocated.
inline constexpr uint64_t kMinKeyValueBytes = 8 + 1 + 4 + 1;          // key length, 1-byte key, type, u8 value
inline constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name length, 1-byte name, n_dims, ne[0], type, offset
// Each array element becomes a Value of about 50 bytes in memory. The cap
// bounds what a small hostile file can make the reader allocate; the
// largest real vocabularies (256k tokens plus merges) are far below it.
inline constexpr uint64_t kMaxArrayElementsTotal = uint64_t{1} << 24;
// Each record costs a few hundred bytes in memory for as few as 14 (or 33)
// in the file: without a cap, a large hostile file of tiny records would
// need several times its size in RAM. Real files hold tens of keys and at
// most tens of thousands of tensors.
inline constexpr uint64_t kMaxKeyValues = uint64_t{1} << 20;
inline constexpr uint64_t kMaxTensors = uint64_t{1} << 20;

struct ParsedGguf {
    uint32_t version = 0;
    uint64_t alignment = kDefaultAlignment;
    uint64_t data_offset = 0;
    bool header_only = false;
    std::string architecture;
    std::vector<KeyValue> metadata;
    std::vector<TensorInfo> tensors;
    std::map<std::string, size_t, std::less<>> key_index;     // key -> index in metadata
    std::map<std::string, size_t, std::less<>> tensor_index;  // name -> index in tensors
};

// Throws tandem::Error naming `name`, the byte offset, what was expected and
// what was found.
ParsedGguf parse_gguf(std::span<const uint8_t> bytes, const std::string& name);

}  // namespace tandem::gguf
