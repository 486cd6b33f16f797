#include "runtime/gguf/gguf_file.h"

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_parse.h"
#include "runtime/gguf/mapped_file.h"

namespace tandem::gguf {

int64_t TensorInfo::n_rows() const {
    int64_t rows = 1;
    for (size_t d = 1; d < shape.size(); ++d) rows *= shape[d];  // the reader checked the product fits
    return rows;
}

std::string shape_string(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

struct File::Impl {
    std::string name;
    MappedFile storage;  // empty for from_bytes: the caller owns the bytes
    std::span<const uint8_t> bytes;
    ParsedGguf parsed;
};

namespace {

// The found value for a type-mismatch message, cut short: it may be a
// megabyte string or a vocabulary-sized array.
std::string found_text(const Value& v) {
    std::string s = fmt::format("{} {}", value_type_name(v.type), to_display_string(v, 4));
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}

}  // namespace

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::filesystem::path& path, const OpenOptions& options) {
    auto impl = std::make_unique<Impl>();
    impl->name = path.string();
    const auto mode =
        options.mode == LoadMode::Mmap ? MappedFile::Mode::Mmap : MappedFile::Mode::ReadIntoMemory;
    impl->storage = MappedFile::open(path, mode, options.mlock);
    impl->bytes = impl->storage.bytes();
    impl->parsed = parse_gguf(impl->bytes, impl->name);
    return File(std::move(impl));
}

File File::from_bytes(std::span<const uint8_t> bytes, std::string name) {
    auto impl = std::make_unique<Impl>();
    impl->name = std::move(name);
    impl->bytes = bytes;
    impl->parsed = parse_gguf(impl->bytes, impl->name);
    return File(std::move(impl));
}

const std::string& File::name() const { return impl_->name; }
uint32_t File::version() const { return impl_->parsed.version; }
uint64_t File::alignment() const { return impl_->parsed.alignment; }
uint64_t File::data_offset() const { return impl_->parsed.data_offset; }
uint64_t File::file_size() const { return impl_->bytes.size(); }
bool File::header_only() const { return impl_->parsed.header_only; }
bool File::mapped() const { return impl_->storage.mapped(); }
bool File::locked() const { return impl_->storage.locked(); }
void File::drop_resident(const TensorInfo& info) const noexcept {
    if (header_only() || !mapped()) return;
    try {
        impl_->storage.drop_resident(tensor_data(info));
    } catch (const Error&) {  // an info of another file: nothing to drop
    }
}
const std::vector<KeyValue>& File::metadata() const { return impl_->parsed.metadata; }
const std::string& File::architecture() const { return impl_->parsed.architecture; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->parsed.tensors; }

const KeyValue* File::find_key_value(std::string_view key) const {
    const auto& index = impl_->parsed.key_index;
    const auto it = index.find(key);
    return it == index.end() ? nullptr : &impl_->parsed.metadata[it->second];
}

const Value* File::find(std::string_view key) const {
    const KeyValue* kv = find_key_value(key);
    return kv == nullptr ? nullptr : &kv->value;
}

void File::fail_type(const KeyValue& kv, std::string_view expected) const {
    throw Error(fmt::format("{}: offset 0x{:x}: key '{}': expected {}, found {}", impl_->name, kv.offset, kv.key,
                            expected, found_text(kv.value)));
}

void File::fail_missing(std::string_view key, std::string_view expected) const {
    throw Error(fmt::format("{}: missing key '{}': expected {}, found no such key among the {} keys", impl_->name,
                            key, expected, impl_->parsed.metadata.size()));
}

std::optional<std::string> File::find_string(std::string_view key) const {
    const KeyValue* kv = find_key_value(key);
    if (kv == nullptr) return std::nullopt;
    const std::string* s = kv->value.as_string();
    if (s == nullptr) fail_type(*kv, "a string");
    return *s;
}

std::optional<uint64_t> File::find_uint(std::string_view key) const {
    const KeyValue* kv = find_key_value(key);
    if (kv == nullptr) return std::nullopt;
    const auto v = kv->value.as_uint();
    if (!v) fail_type(*kv, "a non-negative integer");
    return v;
}

std::optional<double> File::find_float(std::string_view key) const {
    const KeyValue* kv = find_key_value(key);
    if (kv == nullptr) return std::nullopt;
    const auto v = kv->value.as_float();
    if (!v) fail_type(*kv, "a number");
    return v;
}

std::optional<bool> File::find_bool(std::string_view key) const {
    const KeyValue* kv = find_key_value(key);
    if (kv == nullptr) return std::nullopt;
    const auto v = kv->value.as_bool();
    if (!v) fail_type(*kv, "a bool");
    return v;
}

std::string File::get_string(std::string_view key) const {
    auto v = find_string(key);
    if (!v) fail_missing(key, "a string");
    return std::move(*v);
}

uint64_t File::get_uint(std::string_view key) const {
    const auto v = find_uint(key);
    if (!v) fail_missing(key, "a non-negative integer");
    return *v;
}

double File::get_float(std::string_view key) const {
    const auto v = find_float(key);
    if (!v) fail_missing(key, "a number");
    return *v;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    const auto& index = impl_->parsed.tensor_index;
    const auto it = index.find(name);
    return it == index.end() ? nullptr : &impl_->parsed.tensors[it->second];
}

std::span<const uint8_t> File::tensor_data(const TensorInfo& info) const {
    if (impl_->parsed.header_only) {
        throw Error(fmt::format(
            "{}: tensor '{}': this file was written by `tandem synth --header-only` ({} = true) and holds no weights: "
            "it can be planned but not run",
            impl_->name, info.name, kHeaderOnlyKey));
    }
    // The parser checked every tensor of this file; this guards against an
    // info that came from another file (or was edited by the caller).
    const uint64_t start = impl_->parsed.data_offset + info.offset;
    const uint64_t size = impl_->bytes.size();
    if (info.offset > size || start > size || info.n_bytes > size - start) {
        throw Error(fmt::format("{}: offset 0x{:x}: tensor '{}': expected {} bytes inside the {}-byte file, found a "
                                "range past its end (is this TensorInfo from another file?)",
                                impl_->name, start, info.name, info.n_bytes, size));
    }
    return impl_->bytes.subspan(start, info.n_bytes);
}

uint64_t File::total_tensor_bytes() const {
    uint64_t total = 0;
    for (const auto& t : impl_->parsed.tensors) total += t.n_bytes;  // each fits in the file, or is header-only and < 2^63
    return total;
}

}  // namespace tandem::gguf
