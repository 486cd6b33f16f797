// A little-endian byte builder for hand-made GGUF files. The reader tests
// build malformed files field by field with it, so each test says exactly
// which bytes are wrong instead of patching a real model at magic offsets.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_value.h"

namespace tandem::testing {

class GgufBytes {
public:
    // ---- raw little-endian fields -------------------------------------------
    GgufBytes& u8(uint8_t v) { return put(v); }
    GgufBytes& i8(int8_t v) { return put(v); }
    GgufBytes& u16(uint16_t v) { return put(v); }
    GgufBytes& i16(int16_t v) { return put(v); }
    GgufBytes& u32(uint32_t v) { return put(v); }
    GgufBytes& i32(int32_t v) { return put(v); }
    GgufBytes& u64(uint64_t v) { return put(v); }
    GgufBytes& i64(int64_t v) { return put(v); }
    GgufBytes& f32(float v) { return put(v); }
    GgufBytes& f64(double v) { return put(v); }

    GgufBytes& raw(std::string_view s) {
        bytes_.insert(bytes_.end(), s.begin(), s.end());
        return *this;
    }
    GgufBytes& raw(std::span<const uint8_t> s) {
        bytes_.insert(bytes_.end(), s.begin(), s.end());
        return *this;
    }
    GgufBytes& zeros(size_t n) {
        bytes_.insert(bytes_.end(), n, uint8_t{0});
        return *this;
    }
    // Zero padding up to the next multiple of `alignment`.
    GgufBytes& pad_to(uint64_t alignment) {
        while (bytes_.size() % alignment != 0) bytes_.push_back(0);
        return *this;
    }

    // ---- GGUF structures ----------------------------------------------------
    // A GGUF string: u64 length, then the bytes.
    GgufBytes& str(std::string_view s) { return u64(s.size()).raw(s); }

    GgufBytes& header(uint64_t tensor_count, uint64_t kv_count, uint32_t version = 3) {
        return raw("GGUF").u32(version).u64(tensor_count).u64(kv_count);
    }

    // The key and value type of a key/value record; the value follows.
    GgufBytes& key(std::string_view k, gguf::ValueType type) { return str(k).u32(static_cast<uint32_t>(type)); }

    GgufBytes& kv_string(std::string_view k, std::string_view v) { return key(k, gguf::ValueType::STRING).str(v); }
    GgufBytes& kv_u32(std::string_view k, uint32_t v) { return key(k, gguf::ValueType::U32).u32(v); }
    GgufBytes& kv_bool(std::string_view k, bool v) { return key(k, gguf::ValueType::BOOL).u8(v ? 1 : 0); }

    // The head of an array value (after its key record's type ARRAY): element
    // type and count; the elements follow.
    GgufBytes& array_head(gguf::ValueType elem_type, uint64_t count) {
        return u32(static_cast<uint32_t>(elem_type)).u64(count);
    }

    GgufBytes& tensor_info(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type_id,
                           uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(ne.size()));
        for (uint64_t n : ne) u64(n);
        return u32(type_id).u64(offset);
    }

    // ---- editing --------------------------------------------------------------
    void patch_u32(size_t at, uint32_t v) { std::memcpy(bytes_.data() + at, &v, sizeof v); }
    void patch_u64(size_t at, uint64_t v) { std::memcpy(bytes_.data() + at, &v, sizeof v); }
    void truncate(size_t n) { bytes_.resize(n); }

    size_t size() const { return bytes_.size(); }
    const std::vector<uint8_t>& bytes() const { return bytes_; }
    std::span<const uint8_t> span() const { return bytes_; }

private:
    template <class T>
    GgufBytes& put(T v) {
        uint8_t b[sizeof(T)];
        std::memcpy(b, &v, sizeof(T));  // the host is little-endian, as GGUF is
        bytes_.insert(bytes_.end(), b, b + sizeof(T));
        return *this;
    }

    std::vector<uint8_t> bytes_;
};

}  // namespace tandem::testing
