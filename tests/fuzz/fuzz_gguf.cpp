// libFuzzer target for the GGUF reader. Any input must either parse into a
// File whose every view lies inside the input, or raise tandem::Error.
// Anything else (a crash, a sanitizer report, an InternalError or other
// exception escaping, a broken invariant below) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"

namespace {

using tandem::gguf::File;
using tandem::gguf::TensorInfo;

[[noreturn]] void finding(const char* what) {
    std::fprintf(stderr, "fuzz_gguf: invariant broken: %s\n", what);
    std::abort();
}

// Reads every byte so that a view past the input shows up under ASan.
uint64_t touch(std::span<const uint8_t> bytes) {
    uint64_t sum = 0;
    for (uint8_t b : bytes) sum += b;
    return sum;
}

uint64_t exercise(const File& f, std::span<const uint8_t> input) {
    uint64_t sink = f.version() + f.alignment() + f.architecture().size();
    for (const auto& kv : f.metadata()) {
        sink += kv.key.size() + to_display_string(kv.value, 4).size();
        if (f.find(kv.key) == nullptr) finding("a key present in metadata() is not found by find()");
        // The typed look-ups either convert or throw Error; both are fine.
        try { sink += f.find_uint(kv.key).value_or(0); } catch (const tandem::Error&) {}
        try { sink += static_cast<uint64_t>(f.find_float(kv.key).value_or(0) != 0); } catch (const tandem::Error&) {}
        try { sink += f.find_string(kv.key).value_or("").size(); } catch (const tandem::Error&) {}
        try { sink += f.find_bool(kv.key).value_or(false); } catch (const tandem::Error&) {}
    }
    const uint8_t* begin = input.data();
    const uint8_t* end = input.data() + input.size();
    uint64_t total = 0;
    for (const TensorInfo& t : f.tensors()) {
        if (f.find_tensor(t.name) != &t) finding("find_tensor does not return the tensor's own info");
        if (t.offset % f.alignment() != 0) finding("misaligned tensor accepted");
        if (t.shape.empty() || t.shape.size() > 4) finding("bad dimension count accepted");
        sink += static_cast<uint64_t>(t.n_rows() + t.row_length());
        total += t.n_bytes;
        if (f.header_only()) {
            try {
                (void)f.tensor_data(t);
                finding("tensor_data() returned bytes for a header-only file");
            } catch (const tandem::Error&) {
            }
            continue;
        }
        std::span<const uint8_t> data;
        try {
            data = f.tensor_data(t);
        } catch (const tandem::Error&) {
            finding("tensor_data() threw for a tensor the reader accepted");
        }
        if (data.size() != t.n_bytes) finding("tensor view size differs from n_bytes");
        if (data.size() != 0 && (data.data() < begin || data.data() + data.size() > end)) {
            finding("tensor view outside the input");
        }
        sink += touch(data);
    }
    if (total != f.total_tensor_bytes()) finding("total_tensor_bytes disagrees with the tensors");
    return sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const uint8_t> input(data, size);
    try {
        const File f = File::from_bytes(input, "fuzz.gguf");
        volatile uint64_t sink = exercise(f, input);
        (void)sink;
    } catch (const tandem::Error&) {
        // Rejected cleanly: the expected outcome for most inputs.
    }
    return 0;
}
