// GGUF metadata values: the thirteen value types of the format, arrays
// (of any type, nested arrays included) and the typed accessors the rest of
// Tandem uses to read hyperparameters without caring how a writer stored
// them (a context length may be u32 in one file and u64 in another).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tandem::gguf {

enum class ValueType : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
};
inline constexpr uint32_t kValueTypeCount = 13;

// Limits shared by the reader (which rejects files beyond them) and the
// writer (which refuses to produce files the reader would reject).
// Arrays of arrays recurse while parsing; the cap keeps a hostile file from
// exhausting the stack. Real files nest at most two levels.
inline constexpr int kMaxArrayDepth = 8;
// Keys and tensor names are identifiers, never payloads; a longer one is
// a corrupt length field.
inline constexpr uint64_t kMaxNameLength = 65535;

std::string_view value_type_name(ValueType t);  // "u32", "string", "array"...
// Size in bytes of a fixed-size scalar type; 0 for STRING and ARRAY.
size_t value_type_size(ValueType t);

struct Value;

struct Array {
    ValueType elem_type = ValueType::U8;
    std::vector<Value> items;
};

struct Value {
    ValueType type = ValueType::U8;
    // Unsigned integers are held as uint64_t, signed as int64_t, floats as
    // double; `type` keeps the exact stored width for writing back.
    std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;

    // Any integer type whose value fits; nullopt otherwise (wrong type or
    // negative).
    std::optional<uint64_t> as_uint() const;
    std::optional<int64_t> as_int() const;
    // Floats, and integers converted.
    std::optional<double> as_float() const;
    std::optional<bool> as_bool() const;
    const std::string* as_string() const;
    const Array* as_array() const;

    static Value u8(uint8_t v);
    static Value i8(int8_t v);
    static Value u16(uint16_t v);
    static Value i16(int16_t v);
    static Value u32(uint32_t v);
    static Value i32(int32_t v);
    static Value u64(uint64_t v);
    static Value i64(int64_t v);
    static Value f32(float v);
    static Value f64(double v);
    static Value boolean(bool v);
    static Value str(std::string v);
    static Value array(ValueType elem_type, std::vector<Value> items);
    static Value string_array(const std::vector<std::string>& items);
    static Value f32_array(const std::vector<float>& items);
    static Value i32_array(const std::vector<int32_t>& items);
};

// Exact equality: same type (width included) and same value; arrays compare
// element type and items. Floats compare as numbers, so NaN != NaN.
bool operator==(const Array& a, const Array& b);
bool operator==(const Value& a, const Value& b);

// A short human-readable rendering: scalars in full, strings quoted, arrays
// as "[type x N: first, second, ...]" cut after `max_items`.
std::string to_display_string(const Value& v, size_t max_items = 8);

struct KeyValue {
    std::string key;
    Value value;
    uint64_t offset = 0;  // file offset where the key's record starts (0 when built in memory)
};

}  // namespace tandem::gguf
