#include "runtime/gguf/gguf_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>

#include "runtime/common/error.h"

namespace tandem::gguf {
namespace {

// GGUF is little-endian; values are copied out with memcpy as they lie.
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

constexpr uint64_t kNoElement = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;  // magic, version, tensor count, metadata count
constexpr uint64_t kMinArrayHeaderBytes = 4 + 8;  // element type, count
constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// What a read is for, formatted only when it fails so that the success path
// (hundreds of thousands of vocabulary strings) builds no strings.
struct Where {
    std::string_view subject;  // "header", "key 'general.name'", "tensor 'output.weight'"
    std::string_view field;    // "string length", "value type", ...
    uint64_t element = kNoElement;  // index inside the innermost array, if any

    Where with_field(std::string_view f) const { return Where{subject, f, element}; }
};

std::string describe(const Where& where) {
    std::string s(where.subject);
    if (where.element != kNoElement) s += fmt::format(": element {}", where.element);
    if (!where.field.empty()) {
        s += ": ";
        s += where.field;
    }
    return s;
}

// Bytes as text for messages: printable ASCII kept, the rest as \xNN, the
// first 80 bytes only (a corrupt length can make a name kilobytes long).
std::string printable(std::span<const uint8_t> raw) {
    constexpr size_t kShown = 80;
    std::string s;
    for (uint8_t c : raw.first(std::min(raw.size(), kShown))) {
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            s += static_cast<char>(c);
        } else {
            s += fmt::format("\\x{:02x}", c);
        }
    }
    if (raw.size() > kShown) s += fmt::format("... ({} bytes)", raw.size());
    return s;
}

std::string quoted(std::string_view kind, const std::string& name) {
    return fmt::format("{} '{}'", kind, printable({reinterpret_cast<const uint8_t*>(name.data()), name.size()}));
}

// A found value for a message, cut short: it may be a megabyte string.
std::string short_display(const Value& v) {
    std::string s = fmt::format("{} {}", value_type_name(v.type), to_display_string(v, 4));
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}

std::string supported_tensor_types() {
    std::string s;
    for (const auto& t : quant::all_traits()) {
        if (!s.empty()) s += ", ";
        s += fmt::format("{}={}", t.name, static_cast<uint32_t>(t.type));
    }
    return s;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool checked_add(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }

class Parser {
public:
    Parser(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

    ParsedGguf run() {
        read_header();
        read_metadata();
        check_special_keys();
        read_tensor_infos();
        place_data_section();
        check_tensor_data_ranges();
        return std::move(out_);
    }

private:
    // ---- primitives ---------------------------------------------------------

    uint64_t remaining() const { return bytes_.size() - pos_; }

    [[noreturn]] void fail_at(uint64_t at, const std::string& context, const std::string& detail) const {
        throw Error(fmt::format("{}: offset 0x{:x}: {}: {}", name_, at, context, detail));
    }

    [[noreturn]] void fail_expected(uint64_t at, const std::string& context, const std::string& expected,
                                    const std::string& found) const {
        fail_at(at, context, fmt::format("expected {}, found {}", expected, found));
    }

    void need(uint64_t n, const Where& where) const {
        if (remaining() < n) {
            fail_at(pos_, describe(where),
                    fmt::format("truncated file: expected {} more byte{}, found {} before the end of the {}-byte file",
                                n, n == 1 ? "" : "s", remaining(), bytes_.size()));
        }
    }

    template <class T>
    T read(const Where& where) {
        need(sizeof(T), where);
        T v;
        std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    // A GGUF string: u64 length, then that many bytes (no terminator). The
    // view points into the file's bytes.
    std::string_view read_string_view(const Where& where, uint64_t max_length, std::string_view limit_reason) {
        const uint64_t length_at = pos_;
        const uint64_t length = read<uint64_t>(where);
        if (length > max_length) {
            // Past the end of the file, the length may be fine and the file
            // cut short: the message offers both readings.
            const bool past_end = length > remaining();
            fail_expected(length_at, describe(where.with_field("string length")),
                          fmt::format("at most {} bytes ({})", max_length, limit_reason),
                          fmt::format("{}{}", length, past_end ? " (corrupt length or truncated file)" : ""));
        }
        need(length, where.with_field("string bytes"));  // implied by max_length; kept as the last word
        const std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
        pos_ += length;
        return s;
    }

    std::string read_name(const Where& where) {
        const uint64_t at = pos_;
        std::string s(read_string_view(where, std::min(kMaxNameLength, remaining_after_length()),
                                       "names are at most 65535 bytes and must fit in the file"));
        if (s.empty()) fail_expected(at, describe(where), "a non-empty name", "an empty string");
        return s;
    }

    // Bytes that a string's contents may occupy once its length is read.
    uint64_t remaining_after_length() const { return remaining() >= 8 ? remaining() - 8 : 0; }

    ValueType read_value_type(const Where& where) {
        const uint64_t at = pos_;
        const uint32_t id = read<uint32_t>(where);
        if (id >= kValueTypeCount) {
            fail_expected(at, describe(where),
                          "a value type id 0..12 (u8, i8, u16, i16, u32, i32, f32, bool, string, array, u64, i64, f64)",
                          fmt::format("{} (invalid value type)", id));
        }
        return static_cast<ValueType>(id);
    }

    // ---- header -------------------------------------------------------------

    void read_header() {
        const Where magic_where{"header", "magic"};
        if (bytes_.empty()) {
            fail_expected(0, "header: magic", "a GGUF file starting with \"GGUF\"", "an empty file");
        }
        need(4, magic_where);
        const uint32_t magic = read<uint32_t>(magic_where);
        if (magic != kMagic) {
            const auto raw = bytes_.subspan(0, 4);
            std::string hint;
            const std::string_view text(reinterpret_cast<const char*>(raw.data()), 4);
            if (text == "lmgg" || text == "fmgg" || text == "tjgg") {
                hint = " (a pre-GGUF ggml/ggjt model: convert it to GGUF with a current llama.cpp)";
            }
            fail_expected(0, "header: magic", "\"GGUF\"", fmt::format("\"{}\"{}", printable(raw), hint));
        }
        const uint32_t version = read<uint32_t>({"header", "version"});
        if (version == 1) {
            fail_expected(4, "header: version",
                          "version 2 or 3 (version 1 used 32-bit counts and is not supported; re-convert the model "
                          "with a current llama.cpp)",
                          "version 1");
        }
        if (version == 0x02000000u || version == 0x03000000u) {  // 2 or 3 with the bytes swapped
            fail_expected(4, "header: version", "a little-endian GGUF file (version 2 or 3)",
                          fmt::format("a big-endian file (version field 0x{:08x}), which Tandem does not read", version));
        }
        if (version != 2 && version != 3) {
            fail_expected(4, "header: version", "version 2 or 3", fmt::format("version {}", version));
        }
        out_.version = version;

        const uint64_t tensor_count_at = pos_;
        tensor_count_ = read<uint64_t>({"header", "tensor count"});
        const uint64_t kv_count_at = pos_;
        kv_count_ = read<uint64_t>({"header", "metadata count"});

        if (kv_count_ > kMaxKeyValues) {
            fail_expected(kv_count_at, "metadata count", fmt::format("at most {} key/value pairs", kMaxKeyValues),
                          fmt::format("{} (corrupt count)", kv_count_));
        }
        if (tensor_count_ > kMaxTensors) {
            fail_expected(tensor_count_at, "tensor count", fmt::format("at most {} tensors", kMaxTensors),
                          fmt::format("{} (corrupt count)", tensor_count_));
        }
        const uint64_t body = bytes_.size() - kHeaderBytes;
        if (kv_count_ > body / kMinKeyValueBytes) {
            fail_expected(kv_count_at, "metadata count",
                          fmt::format("at most {} key/value pairs in a {}-byte file", body / kMinKeyValueBytes,
                                      bytes_.size()),
                          fmt::format("{} (corrupt count or truncated file)", kv_count_));
        }
        if (tensor_count_ > body / kMinTensorInfoBytes) {
            fail_expected(tensor_count_at, "tensor count",
                          fmt::format("at most {} tensor infos in a {}-byte file", body / kMinTensorInfoBytes,
                                      bytes_.size()),
                          fmt::format("{} (corrupt count or truncated file)", tensor_count_));
        }
    }

    // ---- metadata -----------------------------------------------------------

    void read_metadata() {
        metadata_at_ = pos_;
        // Bounded by the file size check above, but a count near it would
        // still reserve gigabytes for a file that then turns out truncated.
        out_.metadata.reserve(std::min<uint64_t>(kv_count_, 1024));
        for (uint64_t i = 0; i < kv_count_; ++i) {
            const uint64_t record_at = pos_;
            const std::string pair_subject = fmt::format("metadata key/value pair #{}", i);
            std::string key = read_name({pair_subject, "key"});
            const std::string subject = quoted("key", key);
            if (const auto it = out_.key_index.find(key); it != out_.key_index.end()) {
                fail_expected(record_at, subject, "each key once",
                              fmt::format("a duplicate key (first defined at offset 0x{:x})",
                                          out_.metadata[it->second].offset));
            }
            const ValueType type = read_value_type({subject, "value type"});
            KeyValue& kv = out_.metadata.emplace_back();
            read_value(kv.value, type, Where{subject, "value"}, 0);
            kv.offset = record_at;
            out_.key_index.emplace(key, out_.metadata.size() - 1);
            kv.key = std::move(key);
        }
    }

    // Fills `out` in place: a vocabulary is hundreds of thousands of values,
    // and building each one elsewhere and moving it in doubles the copying.
    void read_value(Value& out, ValueType type, const Where& where, int depth) {
        const uint64_t at = pos_;
        out.type = type;
        switch (type) {
            case ValueType::U8: out.data = uint64_t{read<uint8_t>(where)}; return;
            case ValueType::I8: out.data = int64_t{read<int8_t>(where)}; return;
            case ValueType::U16: out.data = uint64_t{read<uint16_t>(where)}; return;
            case ValueType::I16: out.data = int64_t{read<int16_t>(where)}; return;
            case ValueType::U32: out.data = uint64_t{read<uint32_t>(where)}; return;
            case ValueType::I32: out.data = int64_t{read<int32_t>(where)}; return;
            case ValueType::U64: out.data = read<uint64_t>(where); return;
            case ValueType::I64: out.data = read<int64_t>(where); return;
            case ValueType::F32: out.data = double{read<float>(where)}; return;
            case ValueType::F64: out.data = read<double>(where); return;
            case ValueType::BOOL: {
                const uint8_t b = read<uint8_t>(where);
                // Anything but 0 or 1 is corruption, and accepting it would
                // make a read-then-write round trip change the bytes.
                if (b > 1) fail_expected(at, describe(where), "a bool (0 or 1)", std::to_string(b));
                out.data = b == 1;
                return;
            }
            case ValueType::STRING: {
                const std::string_view s = read_string_view(where, remaining_after_length(), "the bytes left in the file");
                out.data.emplace<std::string>(s);
                return;
            }
            case ValueType::ARRAY: read_array(out.data.emplace<Array>(), where, depth + 1); return;
        }
        fail_expected(at, describe(where), "a valid value type", "an invalid one");
    }

    void read_array(Array& array, const Where& where, int depth) {
        const uint64_t at = pos_;
        if (depth > kMaxArrayDepth) {
            fail_expected(at, describe(where), fmt::format("arrays nested at most {} deep", kMaxArrayDepth),
                          fmt::format("nesting depth {} (arrays nested too deep)", depth));
        }
        array.elem_type = read_value_type(where.with_field("array element type"));
        const uint64_t count_at = pos_;
        const uint64_t count = read<uint64_t>(where.with_field("array count"));
        const uint64_t fixed = value_type_size(array.elem_type);
        const uint64_t min_element_bytes = fixed != 0                               ? fixed
                                           : array.elem_type == ValueType::STRING ? uint64_t{8}
                                                                                  : kMinArrayHeaderBytes;
        if (count > remaining() / min_element_bytes) {
            fail_expected(count_at, describe(where.with_field("array count")),
                          fmt::format("at most {} {} elements in the {} bytes left", remaining() / min_element_bytes,
                                      value_type_name(array.elem_type), remaining()),
                          fmt::format("{} (corrupt count or truncated file)", count));
        }
        array_elements_ += count;
        if (array_elements_ > kMaxArrayElementsTotal) {
            fail_expected(count_at, describe(where.with_field("array count")),
                          fmt::format("at most {} array elements in the whole file", kMaxArrayElementsTotal),
                          fmt::format("{} (this array holds {})", array_elements_, count));
        }
        array.items.reserve(count);  // count * min_element_bytes <= bytes left, and the total is capped
        for (uint64_t i = 0; i < count; ++i) {
            read_value(array.items.emplace_back(), array.elem_type, Where{where.subject, where.field, i}, depth);
        }
    }

    // Keys whose meaning the reader depends on, checked once all are read.
    void check_special_keys() {
        if (const auto it = out_.key_index.find("general.alignment"); it != out_.key_index.end()) {
            const KeyValue& kv = out_.metadata[it->second];
            if (kv.value.type != ValueType::U32) {
                fail_expected(kv.offset, "key 'general.alignment'", "type u32",
                              short_display(kv.value));
            }
            const uint64_t a = std::get<uint64_t>(kv.value.data);
            if (a == 0 || !std::has_single_bit(a)) {
                fail_expected(kv.offset, "key 'general.alignment'", "a nonzero power of two",
                              fmt::format("{} (bad alignment)", a));
            }
            out_.alignment = a;
        }

        const auto arch = out_.key_index.find("general.architecture");
        // An importance matrix (llama-imatrix's GGUF: general.type "imatrix")
        // describes no model and names no architecture.
        if (arch == out_.key_index.end() && is_imatrix()) return check_header_only_key();
        if (arch == out_.key_index.end()) {
            fail_expected(metadata_at_, "metadata",
                          "the required key general.architecture (a string such as \"llama\")",
                          fmt::format("no such key among the {} keys (missing general.architecture)", kv_count_));
        }
        const KeyValue& arch_kv = out_.metadata[arch->second];
        const std::string* arch_name = arch_kv.value.as_string();
        if (arch_name == nullptr || arch_name->empty()) {
            fail_expected(arch_kv.offset, "key 'general.architecture'", "a non-empty string",
                          short_display(arch_kv.value));
        }
        out_.architecture = *arch_name;
        check_header_only_key();
    }

    bool is_imatrix() const {
        const auto it = out_.key_index.find("general.type");
        if (it == out_.key_index.end()) return false;
        const std::string* type = out_.metadata[it->second].value.as_string();
        return type != nullptr && *type == "imatrix";
    }

    void check_header_only_key() {
        if (const auto it = out_.key_index.find(kHeaderOnlyKey); it != out_.key_index.end()) {
            const KeyValue& kv = out_.metadata[it->second];
            if (kv.value.type != ValueType::BOOL) {
                fail_expected(kv.offset, fmt::format("key '{}'", kHeaderOnlyKey), "type bool",
                              short_display(kv.value));
            }
            out_.header_only = std::get<bool>(kv.value.data);
        }
    }

    // ---- tensor infos -------------------------------------------------------

    void read_tensor_infos() {
        out_.tensors.reserve(std::min<uint64_t>(tensor_count_, 4096));
        for (uint64_t i = 0; i < tensor_count_; ++i) {
            TensorInfo info;
            info.info_offset = pos_;
            const std::string info_subject = fmt::format("tensor info #{}", i);
            info.name = read_name({info_subject, "name"});
            const std::string subject = quoted("tensor", info.name);
            if (const auto it = out_.tensor_index.find(info.name); it != out_.tensor_index.end()) {
                fail_expected(info.info_offset, subject, "each tensor name once",
                              fmt::format("a duplicate tensor name (first defined at offset 0x{:x})",
                                          out_.tensors[it->second].info_offset));
            }
            read_shape(info, subject);
            read_type_and_size(info, subject);

            const uint64_t offset_at = pos_;
            info.offset = read<uint64_t>({subject, "data offset"});
            if (info.offset % out_.alignment != 0) {
                fail_expected(offset_at, subject + ": data offset",
                              fmt::format("a multiple of the alignment {}", out_.alignment),
                              fmt::format("0x{:x} (misaligned)", info.offset));
            }
            out_.tensor_index.emplace(info.name, out_.tensors.size());
            out_.tensors.push_back(std::move(info));
        }
    }

    void read_shape(TensorInfo& info, const std::string& subject) {
        const uint64_t dims_at = pos_;
        const uint32_t n_dims = read<uint32_t>({subject, "dimension count"});
        if (n_dims == 0 || n_dims > static_cast<uint32_t>(kMaxDims)) {
            fail_expected(dims_at, subject + ": dimension count", fmt::format("1 to {} dimensions", kMaxDims),
                          std::to_string(n_dims));
        }
        uint64_t elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t dim_at = pos_;
            const std::string field = fmt::format("ne[{}]", d);
            const uint64_t ne = read<uint64_t>({subject, field});
            if (ne == 0 || ne > kMaxInt64) {
                fail_expected(dim_at, subject + ": " + field, "a dimension between 1 and 2^63-1",
                              ne == 0 ? std::string("0") : fmt::format("{} ({} as a signed number)", ne, static_cast<int64_t>(ne)));
            }
            if (!checked_mul(elements, ne, elements) || elements > kMaxInt64) {
                fail_expected(dim_at, subject + ": " + field, "a shape with at most 2^63-1 elements",
                              "a dimension product that overflows");
            }
            info.shape.push_back(static_cast<int64_t>(ne));
        }
        info.n_elements = elements;
    }

    void read_type_and_size(TensorInfo& info, const std::string& subject) {
        const uint64_t type_at = pos_;
        const uint32_t type_id = read<uint32_t>({subject, "type"});
        const quant::TypeTraits* traits = quant::find_traits(type_id);
        if (traits == nullptr) {
            fail_expected(type_at, subject + ": type", fmt::format("a supported tensor type ({})", supported_tensor_types()),
                          fmt::format("unknown tensor type id {}", type_id));
        }
        info.type = traits->type;
        const auto block = static_cast<uint64_t>(traits->block_elems);
        const auto row_length = static_cast<uint64_t>(info.shape[0]);
        if (row_length % block != 0) {
            fail_expected(type_at, subject + ": ne[0]",
                          fmt::format("a multiple of {} (the {} block size)", block, traits->name),
                          std::to_string(row_length));
        }
        // Elements fit in int64, so rows * row_length does too; only the
        // byte count (up to block_bytes / block_elems times larger) can wrap.
        const uint64_t rows = info.n_elements / row_length;
        uint64_t row_bytes = 0;
        uint64_t total = 0;
        if (!checked_mul(row_length / block, traits->block_bytes, row_bytes) || !checked_mul(row_bytes, rows, total) ||
            total > kMaxInt64) {
            fail_expected(type_at, subject + ": size", "a byte size below 2^63", "a size that overflows");
        }
        info.n_bytes = total;
    }

    // ---- data section -------------------------------------------------------

    void place_data_section() {
        const uint64_t header_end = pos_;
        // header_end <= file size < 2^63 and alignment <= 2^31: no overflow.
        out_.data_offset = (header_end + out_.alignment - 1) / out_.alignment * out_.alignment;
        // A file without tensors needs no data section, and writers end such
        // files without the final padding (llama.cpp's vocab-only files do).
        if (!out_.header_only && !out_.tensors.empty() && out_.data_offset > bytes_.size()) {
            fail_expected(header_end, "padding before the data section",
                          fmt::format("{} bytes of padding up to the data section at offset 0x{:x}",
                                      out_.data_offset - header_end, out_.data_offset),
                          fmt::format("{} (truncated file)", remaining() == 0 ? "the end of the file"
                                                                              : fmt::format("only {} bytes", remaining())));
        }
    }

    void check_tensor_data_ranges() {
        std::vector<size_t> by_offset(out_.tensors.size());
        std::iota(by_offset.begin(), by_offset.end(), size_t{0});
        for (const TensorInfo& info : out_.tensors) {
            uint64_t end = 0;
            uint64_t absolute_end = 0;
            const bool fits = checked_add(info.offset, info.n_bytes, end) &&
                              checked_add(out_.data_offset, end, absolute_end);
            if (!fits) {
                fail_expected(info.info_offset, quoted("tensor", info.name) + ": data range",
                              "a range that fits in 64 bits", fmt::format("offset 0x{:x} + {} bytes overflows", info.offset, info.n_bytes));
            }
            // Header-only files declare tensors whose bytes were never written.
            if (!out_.header_only && absolute_end > bytes_.size()) {
                const uint64_t start = out_.data_offset + info.offset;
                fail_expected(info.info_offset, quoted("tensor", info.name) + ": data",
                              fmt::format("{} bytes at file offsets 0x{:x}..0x{:x}", info.n_bytes, start, absolute_end),
                              fmt::format("the file ends at 0x{:x}: {}", bytes_.size(),
                                          start >= bytes_.size() ? "data offset past the end of the file (truncated file?)"
                                                                 : "data runs past the end of the file (truncated file?)"));
            }
        }
        std::sort(by_offset.begin(), by_offset.end(), [&](size_t a, size_t b) {
            return out_.tensors[a].offset < out_.tensors[b].offset;
        });
        for (size_t k = 1; k < by_offset.size(); ++k) {
            const TensorInfo& prev = out_.tensors[by_offset[k - 1]];
            const TensorInfo& cur = out_.tensors[by_offset[k]];
            const uint64_t prev_end = prev.offset + prev.n_bytes;  // checked above
            if (cur.offset < prev_end) {
                fail_expected(cur.info_offset, quoted("tensor", cur.name) + ": data offset",
                              fmt::format("a range not overlapping {} (data 0x{:x}..0x{:x})", quoted("tensor", prev.name),
                                          prev.offset, prev_end),
                              fmt::format("0x{:x}..0x{:x} (overlapping tensor data)", cur.offset, cur.offset + cur.n_bytes));
            }
        }
    }

    std::span<const uint8_t> bytes_;
    const std::string& name_;
    uint64_t pos_ = 0;
    uint64_t tensor_count_ = 0;
    uint64_t kv_count_ = 0;
    uint64_t metadata_at_ = 0;
    uint64_t array_elements_ = 0;
    ParsedGguf out_;
};

}  // namespace

ParsedGguf parse_gguf(std::span<const uint8_t> bytes, const std::string& name) {
    return Parser(bytes, name).run();
}

}  // namespace tandem::gguf
