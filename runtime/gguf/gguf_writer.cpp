#include "runtime/gguf/gguf_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <utility>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_parse.h"

namespace tandem::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF writer assumes a little-endian host");

constexpr uint32_t kWrittenVersion = 3;
constexpr std::string_view kAlignmentKey = "general.alignment";

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// Does the held number fit the declared width? A Value built by hand as
// {U8, 300} would otherwise be silently truncated on disk.
bool fits_width(const Value& v) {
    switch (v.type) {
        case ValueType::U8: return std::get<uint64_t>(v.data) <= std::numeric_limits<uint8_t>::max();
        case ValueType::U16: return std::get<uint64_t>(v.data) <= std::numeric_limits<uint16_t>::max();
        case ValueType::U32: return std::get<uint64_t>(v.data) <= std::numeric_limits<uint32_t>::max();
        case ValueType::I8: {
            const int64_t i = std::get<int64_t>(v.data);
            return i >= std::numeric_limits<int8_t>::min() && i <= std::numeric_limits<int8_t>::max();
        }
        case ValueType::I16: {
            const int64_t i = std::get<int64_t>(v.data);
            return i >= std::numeric_limits<int16_t>::min() && i <= std::numeric_limits<int16_t>::max();
        }
        case ValueType::I32: {
            const int64_t i = std::get<int64_t>(v.data);
            return i >= std::numeric_limits<int32_t>::min() && i <= std::numeric_limits<int32_t>::max();
        }
        default: return true;
    }
}

bool holds_declared_alternative(const Value& v) {
    switch (v.type) {
        case ValueType::U8:
        case ValueType::U16:
        case ValueType::U32:
        case ValueType::U64: return std::holds_alternative<uint64_t>(v.data);
        case ValueType::I8:
        case ValueType::I16:
        case ValueType::I32:
        case ValueType::I64: return std::holds_alternative<int64_t>(v.data);
        case ValueType::F32:
        case ValueType::F64: return std::holds_alternative<double>(v.data);
        case ValueType::BOOL: return std::holds_alternative<bool>(v.data);
        case ValueType::STRING: return std::holds_alternative<std::string>(v.data);
        case ValueType::ARRAY: return std::holds_alternative<Array>(v.data);
    }
    return false;
}

// Rejects values the writer could not encode faithfully or the reader would
// refuse; counts array elements toward the reader's whole-file cap.
void check_value(const Value& v, const std::string& key, int depth, uint64_t& array_elements) {
    const auto where = [&] { return fmt::format("gguf::Writer: key '{}'", key); };
    if (static_cast<uint32_t>(v.type) >= kValueTypeCount) {
        throw Error(fmt::format("{}: expected a value type 0..12, found {}", where(), static_cast<uint32_t>(v.type)));
    }
    if (!holds_declared_alternative(v) || !fits_width(v)) {
        throw Error(fmt::format("{}: the value does not match its declared type {}", where(), value_type_name(v.type)));
    }
    if (v.type != ValueType::ARRAY) return;
    if (depth + 1 > kMaxArrayDepth) {
        throw Error(fmt::format("{}: expected arrays nested at most {} deep, found deeper", where(), kMaxArrayDepth));
    }
    const Array& a = std::get<Array>(v.data);
    if (static_cast<uint32_t>(a.elem_type) >= kValueTypeCount) {
        throw Error(fmt::format("{}: expected an array element type 0..12, found {}", where(),
                                static_cast<uint32_t>(a.elem_type)));
    }
    array_elements += a.items.size();
    for (const Value& item : a.items) {
        if (item.type != a.elem_type) {
            throw Error(fmt::format("{}: expected array items of type {}, found one of type {}", where(),
                                    value_type_name(a.elem_type), value_type_name(item.type)));
        }
        check_value(item, key, depth + 1, array_elements);
    }
}

void check_name(std::string_view what, const std::string& name) {
    if (name.empty()) throw Error(fmt::format("gguf::Writer: expected a non-empty {}, found an empty string", what));
    if (name.size() > kMaxNameLength) {
        throw Error(fmt::format("gguf::Writer: {} '{}...': expected at most {} bytes, found {}", what,
                                name.substr(0, 32), kMaxNameLength, name.size()));
    }
}

}  // namespace

Writer::Writer(std::filesystem::path path, uint64_t alignment)
    : path_(std::move(path)), alignment_(alignment) {
    // general.alignment is stored as u32.
    if (alignment == 0 || !std::has_single_bit(alignment) || alignment > std::numeric_limits<uint32_t>::max()) {
        throw Error(fmt::format("gguf::Writer: {}: alignment: expected a nonzero power of two below 2^32, found {}",
                                path_.string(), alignment));
    }
}

Writer::~Writer() = default;

void Writer::check_not_frozen(std::string_view what) const {
    if (header_written_) {
        throw Error(fmt::format("gguf::Writer: {}: {} after write_header(): the declarations are frozen",
                                path_.string(), what));
    }
}

void Writer::set(const std::string& key, Value value) {
    check_not_frozen("set('" + key + "')");
    check_name("key", key);
    // The writer owns the alignment (it lays the data out with it), so the
    // value given here is replaced by the constructor's. The key keeps its
    // place, so copying every key of a file reproduces its layout exactly.
    if (key == kAlignmentKey) value = Value::u32(static_cast<uint32_t>(alignment_));
    uint64_t array_elements = 0;
    check_value(value, key, 0, array_elements);
    for (KeyValue& kv : metadata_) {
        if (kv.key == key) {
            kv.value = std::move(value);
            return;
        }
    }
    metadata_.push_back(KeyValue{key, std::move(value), 0});
}

void Writer::add_tensor(TensorSpec spec) {
    check_not_frozen("add_tensor('" + spec.name + "')");
    check_name("tensor name", spec.name);
    const auto where = [&] { return fmt::format("gguf::Writer: tensor '{}'", spec.name); };
    if (tensor_names_.count(spec.name) != 0) {
        throw Error(fmt::format("{}: expected each tensor name once, found a duplicate", where()));
    }
    if (spec.shape.empty() || spec.shape.size() > static_cast<size_t>(kMaxDims)) {
        throw Error(fmt::format("{}: expected 1 to {} dimensions, found {}", where(), kMaxDims, spec.shape.size()));
    }
    uint64_t rows = 1;
    for (size_t d = 0; d < spec.shape.size(); ++d) {
        if (spec.shape[d] <= 0) {
            throw Error(fmt::format("{}: ne[{}]: expected a positive dimension, found {}", where(), d, spec.shape[d]));
        }
        if (d > 0 && __builtin_mul_overflow(rows, static_cast<uint64_t>(spec.shape[d]), &rows)) {
            throw Error(fmt::format("{}: expected a shape whose element count fits 64 bits, found an overflow", where()));
        }
    }
    const auto row = quant::row_bytes(spec.type, spec.shape[0]);
    if (!row) {
        const auto& traits = quant::traits(spec.type);
        throw Error(fmt::format("{}: ne[0]: expected a multiple of {} (the {} block size), found {}", where(),
                                traits.block_elems, traits.name, spec.shape[0]));
    }
    uint64_t bytes = 0;
    uint64_t elements = 0;
    if (__builtin_mul_overflow(*row, rows, &bytes) || bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(rows, static_cast<uint64_t>(spec.shape[0]), &elements) ||
        elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw Error(fmt::format("{}: expected a tensor below 2^63 elements and bytes, found an overflow", where()));
    }
    const uint64_t offset =
        offsets_.empty() ? 0 : align_up(offsets_.back() + sizes_.back(), alignment_);
    offsets_.push_back(offset);
    sizes_.push_back(bytes);
    tensor_names_.insert(spec.name);
    tensors_.push_back(std::move(spec));
}

bool Writer::header_only_requested() const {
    for (const KeyValue& kv : metadata_) {
        if (kv.key == kHeaderOnlyKey) return kv.value.as_bool().value_or(false);
    }
    return false;
}

void Writer::write_header() {
    check_not_frozen("write_header()");
    const KeyValue* arch = nullptr;
    bool imatrix = false;  // an importance matrix names no architecture (the reader agrees)
    uint64_t array_elements = 0;
    for (const KeyValue& kv : metadata_) {
        if (kv.key == "general.architecture") arch = &kv;
        if (kv.key == "general.type" && kv.value.as_string() && *kv.value.as_string() == "imatrix") imatrix = true;
        if (kv.key == kHeaderOnlyKey && kv.value.type != ValueType::BOOL) {
            throw Error(fmt::format("gguf::Writer: {}: key '{}': expected a bool, found {}", path_.string(),
                                    kHeaderOnlyKey, value_type_name(kv.value.type)));
        }
        check_value(kv.value, kv.key, 0, array_elements);
    }
    if (!(imatrix && arch == nullptr) &&
        (arch == nullptr || arch->value.as_string() == nullptr || arch->value.as_string()->empty())) {
        throw Error(fmt::format("gguf::Writer: {}: expected general.architecture set to a non-empty string before "
                                "write_header() (readers require it), found {}",
                                path_.string(), arch == nullptr ? "no such key" : value_type_name(arch->value.type)));
    }
    if (array_elements > kMaxArrayElementsTotal) {
        throw Error(fmt::format("gguf::Writer: {}: expected at most {} array elements in all (the reader's limit), "
                                "found {}",
                                path_.string(), kMaxArrayElementsTotal, array_elements));
    }

    out_ = std::make_unique<AtomicFile>(path_);

    write_u32(kMagic);
    write_u32(kWrittenVersion);
    write_u64(tensors_.size());
    const bool alignment_declared = std::any_of(metadata_.begin(), metadata_.end(),
                                                [](const KeyValue& kv) { return kv.key == kAlignmentKey; });
    write_u64(metadata_.size() + (alignment_declared ? 0 : 1));
    for (const KeyValue& kv : metadata_) {
        write_string(kv.key);
        write_u32(static_cast<uint32_t>(kv.value.type));
        write_value(kv.value);
    }
    if (!alignment_declared) {
        write_string(std::string(kAlignmentKey));
        write_u32(static_cast<uint32_t>(ValueType::U32));
        write_u32(static_cast<uint32_t>(alignment_));
    }

    for (size_t i = 0; i < tensors_.size(); ++i) {
        const TensorSpec& t = tensors_[i];
        write_string(t.name);
        write_u32(static_cast<uint32_t>(t.shape.size()));
        for (int64_t ne : t.shape) write_u64(static_cast<uint64_t>(ne));
        write_u32(static_cast<uint32_t>(t.type));
        write_u64(offsets_[i]);
    }
    pad_to(align_up(written_, alignment_));
    data_start_ = written_;
    header_written_ = true;
}

void Writer::write_tensor_data(std::span<const uint8_t> bytes) {
    if (header_written_ && !finished_ && next_tensor_ < tensors_.size() &&
        (chunk_written_ != 0 || bytes.size() != sizes_[next_tensor_])) {
        throw Error(fmt::format("gguf::Writer: {}: tensor '{}': expected {} bytes, found {}", path_.string(),
                                tensors_[next_tensor_].name, sizes_[next_tensor_], chunk_written_ + bytes.size()));
    }
    write_tensor_chunk(bytes);
}

void Writer::write_tensor_chunk(std::span<const uint8_t> bytes) {
    if (!header_written_) {
        throw Error(fmt::format("gguf::Writer: {}: tensor data written before write_header()", path_.string()));
    }
    if (finished_ || next_tensor_ >= tensors_.size()) {
        throw Error(fmt::format("gguf::Writer: {}: expected {} tensors, found a call to write data for one more",
                                path_.string(), tensors_.size()));
    }
    const TensorSpec& t = tensors_[next_tensor_];
    const uint64_t want = sizes_[next_tensor_];
    if (bytes.empty() || chunk_written_ + bytes.size() > want) {
        throw Error(fmt::format("gguf::Writer: {}: tensor '{}': expected {} bytes in all, found {}", path_.string(),
                                t.name, want, chunk_written_ + bytes.size()));
    }
    if (chunk_written_ == 0) pad_to(data_start_ + offsets_[next_tensor_]);
    write_bytes(bytes.data(), bytes.size());
    chunk_written_ += bytes.size();
    if (chunk_written_ == want) {
        // Padding after every tensor, the last included, so the file ends
        // aligned as llama.cpp's writer leaves it.
        pad_to(align_up(written_, alignment_));
        ++next_tensor_;
        chunk_written_ = 0;
    }
}

void Writer::finish() {
    if (finished_) throw Error(fmt::format("gguf::Writer: {}: finish() called twice", path_.string()));
    if (!header_written_) write_header();
    const bool header_only = header_only_requested() && next_tensor_ == 0;
    if (next_tensor_ != tensors_.size() && !header_only) {
        throw Error(fmt::format("gguf::Writer: {}: expected data for all {} tensors before finish(), found {} written "
                                "(next: '{}'){}",
                                path_.string(), tensors_.size(), next_tensor_, tensors_[next_tensor_].name,
                                next_tensor_ == 0 ? fmt::format("; a header-only file must set {} = true", kHeaderOnlyKey)
                                                  : std::string()));
    }
    out_->commit();
    out_.reset();
    finished_ = true;
}

// ---- encoding ---------------------------------------------------------------

void Writer::write_bytes(const void* p, size_t n) {
    if (n == 0) return;
    out_->write(p, n);
    written_ += n;
}

void Writer::write_u32(uint32_t v) { write_bytes(&v, sizeof v); }
void Writer::write_u64(uint64_t v) { write_bytes(&v, sizeof v); }

void Writer::write_string(const std::string& s) {
    write_u64(s.size());
    write_bytes(s.data(), s.size());
}

void Writer::pad_to(uint64_t target) {
    static constexpr std::array<uint8_t, 4096> kZeros{};
    while (written_ < target) {
        write_bytes(kZeros.data(), static_cast<size_t>(std::min<uint64_t>(kZeros.size(), target - written_)));
    }
}

void Writer::write_value(const Value& v) {
    switch (v.type) {
        case ValueType::U8: {
            const auto x = static_cast<uint8_t>(std::get<uint64_t>(v.data));
            return write_bytes(&x, sizeof x);
        }
        case ValueType::I8: {
            const auto x = static_cast<int8_t>(std::get<int64_t>(v.data));
            return write_bytes(&x, sizeof x);
        }
        case ValueType::U16: {
            const auto x = static_cast<uint16_t>(std::get<uint64_t>(v.data));
            return write_bytes(&x, sizeof x);
        }
        case ValueType::I16: {
            const auto x = static_cast<int16_t>(std::get<int64_t>(v.data));
            return write_bytes(&x, sizeof x);
        }
        case ValueType::U32: return write_u32(static_cast<uint32_t>(std::get<uint64_t>(v.data)));
        case ValueType::I32: {
            const auto x = static_cast<int32_t>(std::get<int64_t>(v.data));
            return write_bytes(&x, sizeof x);
        }
        case ValueType::U64: return write_u64(std::get<uint64_t>(v.data));
        case ValueType::I64: {
            const int64_t x = std::get<int64_t>(v.data);
            return write_bytes(&x, sizeof x);
        }
        case ValueType::F32: {
            const auto x = static_cast<float>(std::get<double>(v.data));
            return write_bytes(&x, sizeof x);
        }
        case ValueType::F64: {
            const double x = std::get<double>(v.data);
            return write_bytes(&x, sizeof x);
        }
        case ValueType::BOOL: {
            const uint8_t x = std::get<bool>(v.data) ? 1 : 0;
            return write_bytes(&x, sizeof x);
        }
        case ValueType::STRING: return write_string(std::get<std::string>(v.data));
        case ValueType::ARRAY: {
            const Array& a = std::get<Array>(v.data);
            write_u32(static_cast<uint32_t>(a.elem_type));
            write_u64(a.items.size());
            for (const Value& item : a.items) write_value(item);
            return;
        }
    }
    TANDEM_CHECK(false, "write_value: value type not validated by check_value");
}

}  // namespace tandem::gguf
