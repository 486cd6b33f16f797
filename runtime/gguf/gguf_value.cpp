#include "runtime/gguf/gguf_value.h"

#include <fmt/format.h>

#include <limits>

#include "runtime/common/error.h"

namespace tandem::gguf {

std::string_view value_type_name(ValueType t) {
    switch (t) {
        case ValueType::U8: return "u8";
        case ValueType::I8: return "i8";
        case ValueType::U16: return "u16";
        case ValueType::I16: return "i16";
        case ValueType::U32: return "u32";
        case ValueType::I32: return "i32";
        case ValueType::F32: return "f32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::U64: return "u64";
        case ValueType::I64: return "i64";
        case ValueType::F64: return "f64";
    }
    // Only reachable through a cast of an unchecked number; the reader
    // validates type ids before converting them.
    return "invalid";
}

size_t value_type_size(ValueType t) {
    switch (t) {
        case ValueType::U8:
        case ValueType::I8:
        case ValueType::BOOL: return 1;
        case ValueType::U16:
        case ValueType::I16: return 2;
        case ValueType::U32:
        case ValueType::I32:
        case ValueType::F32: return 4;
        case ValueType::U64:
        case ValueType::I64:
        case ValueType::F64: return 8;
        case ValueType::STRING:
        case ValueType::ARRAY: return 0;
    }
    return 0;
}

// ---- accessors --------------------------------------------------------------

std::optional<uint64_t> Value::as_uint() const {
    if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
    if (const auto* i = std::get_if<int64_t>(&data)) {
        if (*i >= 0) return static_cast<uint64_t>(*i);
    }
    return std::nullopt;
}

std::optional<int64_t> Value::as_int() const {
    if (const auto* i = std::get_if<int64_t>(&data)) return *i;
    if (const auto* u = std::get_if<uint64_t>(&data)) {
        if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(*u);
    }
    return std::nullopt;
}

std::optional<double> Value::as_float() const {
    if (const auto* d = std::get_if<double>(&data)) return *d;
    if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
    if (const auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
    return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
    if (const auto* b = std::get_if<bool>(&data)) return *b;
    return std::nullopt;
}

const std::string* Value::as_string() const { return std::get_if<std::string>(&data); }

const Array* Value::as_array() const { return std::get_if<Array>(&data); }

// ---- factories --------------------------------------------------------------

Value Value::u8(uint8_t v) { return Value{ValueType::U8, uint64_t{v}}; }
Value Value::i8(int8_t v) { return Value{ValueType::I8, int64_t{v}}; }
Value Value::u16(uint16_t v) { return Value{ValueType::U16, uint64_t{v}}; }
Value Value::i16(int16_t v) { return Value{ValueType::I16, int64_t{v}}; }
Value Value::u32(uint32_t v) { return Value{ValueType::U32, uint64_t{v}}; }
Value Value::i32(int32_t v) { return Value{ValueType::I32, int64_t{v}}; }
Value Value::u64(uint64_t v) { return Value{ValueType::U64, v}; }
Value Value::i64(int64_t v) { return Value{ValueType::I64, v}; }
Value Value::f32(float v) { return Value{ValueType::F32, double{v}}; }
Value Value::f64(double v) { return Value{ValueType::F64, v}; }
Value Value::boolean(bool v) { return Value{ValueType::BOOL, v}; }
Value Value::str(std::string v) { return Value{ValueType::STRING, std::move(v)}; }

Value Value::array(ValueType elem_type, std::vector<Value> items) {
    for (const Value& item : items) {
        TANDEM_CHECK(item.type == elem_type,
                     fmt::format("Value::array: item of type {} in an array of {}", value_type_name(item.type),
                                 value_type_name(elem_type)));
    }
    return Value{ValueType::ARRAY, Array{elem_type, std::move(items)}};
}

Value Value::string_array(const std::vector<std::string>& items) {
    std::vector<Value> values;
    values.reserve(items.size());
    for (const auto& s : items) values.push_back(str(s));
    return Value{ValueType::ARRAY, Array{ValueType::STRING, std::move(values)}};
}

Value Value::f32_array(const std::vector<float>& items) {
    std::vector<Value> values;
    values.reserve(items.size());
    for (float f : items) values.push_back(f32(f));
    return Value{ValueType::ARRAY, Array{ValueType::F32, std::move(values)}};
}

Value Value::i32_array(const std::vector<int32_t>& items) {
    std::vector<Value> values;
    values.reserve(items.size());
    for (int32_t i : items) values.push_back(i32(i));
    return Value{ValueType::ARRAY, Array{ValueType::I32, std::move(values)}};
}

// ---- comparison -------------------------------------------------------------

bool operator==(const Array& a, const Array& b) { return a.elem_type == b.elem_type && a.items == b.items; }

bool operator==(const Value& a, const Value& b) { return a.type == b.type && a.data == b.data; }

// ---- display ----------------------------------------------------------------

namespace {

// Strings come from untrusted files: control bytes are escaped so that a
// hostile value cannot rewrite the terminal it is printed on.
void append_quoted(std::string& out, const std::string& s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20 || c == 0x7f) {
                    out += fmt::format("\\x{:02x}", c);
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    out += '"';
}

void append_display(std::string& out, const Value& v, size_t max_items) {
    switch (v.type) {
        case ValueType::U8:
        case ValueType::U16:
        case ValueType::U32:
        case ValueType::U64: out += fmt::format("{}", std::get<uint64_t>(v.data)); return;
        case ValueType::I8:
        case ValueType::I16:
        case ValueType::I32:
        case ValueType::I64: out += fmt::format("{}", std::get<int64_t>(v.data)); return;
        // Printed at the stored precision: 1e-05, not 9.999999747378752e-06.
        case ValueType::F32: out += fmt::format("{}", static_cast<float>(std::get<double>(v.data))); return;
        case ValueType::F64: out += fmt::format("{}", std::get<double>(v.data)); return;
        case ValueType::BOOL: out += std::get<bool>(v.data) ? "true" : "false"; return;
        case ValueType::STRING: append_quoted(out, std::get<std::string>(v.data)); return;
        case ValueType::ARRAY: {
            const Array& a = std::get<Array>(v.data);
            out += fmt::format("[{} x {}", value_type_name(a.elem_type), a.items.size());
            const size_t shown = std::min(a.items.size(), max_items);
            for (size_t i = 0; i < shown; ++i) {
                out += i == 0 ? ": " : ", ";
                append_display(out, a.items[i], max_items);
            }
            if (shown < a.items.size()) out += shown == 0 ? ": ..." : ", ...";
            out += ']';
            return;
        }
    }
    out += "<invalid value type>";
}

}  // namespace

std::string to_display_string(const Value& v, size_t max_items) {
    std::string out;
    append_display(out, v, max_items);
    return out;
}

}  // namespace tandem::gguf
