#include "runtime/engine/sequence_state.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"

namespace tandem {
namespace {

constexpr size_t kArchBytes = 32;
constexpr size_t kLayerHeaderBytes = 16;
constexpr size_t kChecksumBytes = 8;

// FNV-1a over bytes: the fingerprint's hashes (small inputs).
struct Fnv {
    uint64_t h = 0xcbf29ce484222325ull;
    void bytes(const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        for (size_t i = 0; i < n; ++i) {
            h ^= b[i];
            h *= 0x100000001b3ull;
        }
    }
    void u64(uint64_t v) {
        uint8_t b[8];
        for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
        bytes(b, 8);
    }
    void str(const std::string& s) {
        u64(s.size());
        bytes(s.data(), s.size());
    }
};

class Writer {
public:
    explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
    void u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
    void u64(uint64_t v) {
        for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    }
    void i32s(std::span<const int32_t> v) {
        for (int32_t x : v) u32(static_cast<uint32_t>(x));
    }
    void bytes(const void* p, size_t n) {
        const size_t at = out_.size();
        out_.resize(at + n);
        if (n != 0) std::memcpy(out_.data() + at, p, n);
    }
    void zeros(size_t n) { out_.insert(out_.end(), n, uint8_t{0}); }

private:
    std::vector<uint8_t>& out_;
};

uint32_t load_u32(const uint8_t* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
    return v;
}

uint64_t load_u64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

// Reads fields in order; every read is checked against the bytes left.
class Reader {
public:
    Reader(std::span<const uint8_t> b, size_t end) : b_(b), end_(end) {}
    size_t offset() const { return off_; }
    size_t left() const { return end_ - off_; }
    void need(size_t n, const std::string& what) const {
        if (n > left()) {
            throw Error(fmt::format("sequence state truncated: {} needs {} bytes at offset {}, {} left", what, n, off_,
                                    left()));
        }
    }
    uint32_t u32(const std::string& what) {
        need(4, what);
        const uint32_t v = load_u32(b_.data() + off_);
        off_ += 4;
        return v;
    }
    uint64_t u64(const std::string& what) {
        need(8, what);
        const uint64_t v = load_u64(b_.data() + off_);
        off_ += 8;
        return v;
    }
    // count values of `elem` bytes: the product is checked before it is formed.
    void need_array(uint64_t count, uint64_t elem, const std::string& what) const {
        if (elem != 0 && count > left() / elem) {
            throw Error(fmt::format("sequence state truncated: {} needs {} x {} bytes at offset {}, {} left", what,
                                    count, elem, off_, left()));
        }
    }
    std::vector<int32_t> i32s(uint64_t count, const std::string& what) {
        need_array(count, 4, what);
        std::vector<int32_t> v(static_cast<size_t>(count));
        for (auto& x : v) {
            x = static_cast<int32_t>(load_u32(b_.data() + off_));
            off_ += 4;
        }
        return v;
    }
    std::vector<uint8_t> raw(uint64_t count, uint64_t elem, const std::string& what) {
        need_array(count, elem, what);
        const size_t n = static_cast<size_t>(count * elem);
        std::vector<uint8_t> v(b_.begin() + static_cast<std::ptrdiff_t>(off_),
                               b_.begin() + static_cast<std::ptrdiff_t>(off_ + n));
        off_ += n;
        return v;
    }
    const uint8_t* at(size_t off) const { return b_.data() + off; }

private:
    std::span<const uint8_t> b_;
    size_t end_;
    size_t off_ = 0;
};

}  // namespace

ModelFingerprint model_fingerprint(const gguf::File& file, uint64_t n_vocab) {
    ModelFingerprint fp;
    fp.arch = file.architecture().substr(0, kArchBytes - 1);
    Fnv layout, weights;
    layout.str(file.architecture());
    fp.n_tensors = file.tensors().size();
    for (const gguf::TensorInfo& t : file.tensors()) {
        layout.str(t.name);
        layout.u64(static_cast<uint64_t>(t.type));
        layout.u64(t.shape.size());
        for (int64_t d : t.shape) layout.u64(static_cast<uint64_t>(d));
        if (!file.header_only()) {
            const std::span<const uint8_t> data = file.tensor_data(t);
            weights.bytes(data.data(), std::min<size_t>(data.size(), 64));
        }
    }
    fp.layout_hash = layout.h;
    fp.weights_hash = weights.h;
    fp.n_vocab = n_vocab;
    return fp;
}

uint64_t sequence_state_checksum(std::span<const uint8_t> bytes) {
    // 8-byte words, each mixed in with a multiply and a rotation; the tail
    // zero-padded, the length mixed in last.
    uint64_t h = 0x9e3779b97f4a7c15ull;
    const size_t n = bytes.size();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        h = (h ^ load_u64(bytes.data() + i)) * 0xff51afd7ed558ccdull;
        h = (h << 31) | (h >> 33);
    }
    uint64_t tail = 0;
    for (size_t j = 0; i + j < n; ++j) tail |= static_cast<uint64_t>(bytes[i + j]) << (8 * j);
    h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
    h ^= n;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

void reseal_sequence_state(std::span<uint8_t> blob) {
    if (blob.size() < kSequenceStateHeaderBytes + kChecksumBytes) return;
    const size_t body = blob.size() - kChecksumBytes;
    const uint64_t sum = sequence_state_checksum(blob.first(body));
    for (int i = 0; i < 8; ++i) blob[body + static_cast<size_t>(i)] = static_cast<uint8_t>(sum >> (8 * i));
}

std::vector<uint8_t> encode_sequence_state(const SequenceState& s) {
    TANDEM_CHECK(s.layers.size() == s.n_layer, "sequence state: one entry per layer");
    std::vector<uint8_t> out;
    uint64_t total = kSequenceStateHeaderBytes + 4 * s.tokens.size() + kChecksumBytes;
    for (const KvSeqRows& l : s.layers) {
        TANDEM_CHECK(l.cell.size() == l.pos.size() && l.k.size() == l.pos.size() * l.k_row_bytes &&
                         l.v.size() == l.pos.size() * l.v_row_bytes,
                     "sequence state: rows and positions disagree");
        total += kLayerHeaderBytes + 8 * l.pos.size() + l.k.size() + l.v.size();
    }
    out.reserve(static_cast<size_t>(total));
    Writer w(out);
    w.bytes(kSequenceStateMagic, sizeof kSequenceStateMagic);
    w.u32(kSequenceStateVersion);
    w.u32(static_cast<uint32_t>(kSequenceStateHeaderBytes));
    w.u64(total);
    char arch[kArchBytes] = {};
    std::memcpy(arch, s.model.arch.data(), std::min(s.model.arch.size(), kArchBytes - 1));
    w.bytes(arch, kArchBytes);
    w.u64(s.model.n_vocab);
    w.u64(s.model.n_tensors);
    w.u64(s.model.layout_hash);
    w.u64(s.model.weights_hash);
    w.u32(s.n_layer);
    w.u32(s.cache_type);
    w.u32(static_cast<uint32_t>(s.tokens.size()));
    w.zeros(kSequenceStateHeaderBytes - out.size());
    w.i32s(s.tokens);
    for (size_t il = 0; il < s.layers.size(); ++il) {
        const KvSeqRows& l = s.layers[il];
        w.u32(static_cast<uint32_t>(il));
        w.u32(static_cast<uint32_t>(l.pos.size()));
        w.u32(l.k_row_bytes);
        w.u32(l.v_row_bytes);
        w.i32s(l.pos);
        w.i32s(l.cell);
        w.bytes(l.k.data(), l.k.size());
        w.bytes(l.v.data(), l.v.size());
    }
    w.zeros(kChecksumBytes);
    TANDEM_CHECK(out.size() == total, "sequence state: size miscounted");
    reseal_sequence_state(out);
    return out;
}

SequenceState decode_sequence_state(std::span<const uint8_t> blob) {
    const size_t min_bytes = kSequenceStateHeaderBytes + kChecksumBytes;
    if (blob.size() < sizeof kSequenceStateMagic ||
        std::memcmp(blob.data(), kSequenceStateMagic, sizeof kSequenceStateMagic) != 0) {
        throw Error("not a Tandem sequence state: expected the magic \"TNDMSEQ\" at offset 0");
    }
    if (blob.size() < min_bytes) {
        throw Error(fmt::format("sequence state truncated: expected at least {} bytes, found {}", min_bytes,
                                blob.size()));
    }
    const uint32_t version = load_u32(blob.data() + 8);
    if (version != kSequenceStateVersion) {
        throw Error(fmt::format("sequence state version: expected {}, found {}", kSequenceStateVersion, version));
    }
    const uint32_t header_bytes = load_u32(blob.data() + 12);
    if (header_bytes != kSequenceStateHeaderBytes) {
        throw Error(fmt::format("sequence state header size: expected {}, found {}", kSequenceStateHeaderBytes,
                                header_bytes));
    }
    const uint64_t total = load_u64(blob.data() + 16);
    if (total != blob.size()) {
        throw Error(fmt::format("sequence state {}: the header says {} bytes, found {}",
                                total > blob.size() ? "truncated" : "size mismatch", total, blob.size()));
    }
    const size_t body = blob.size() - kChecksumBytes;
    const uint64_t stored_sum = load_u64(blob.data() + body);
    const uint64_t sum = sequence_state_checksum(blob.first(body));
    if (stored_sum != sum) {
        throw Error(fmt::format("sequence state corrupted: checksum expected {:016x}, found {:016x}", sum, stored_sum));
    }

    SequenceState s;
    const uint8_t* h = blob.data();
    const char* arch = reinterpret_cast<const char*>(h + 24);
    const size_t arch_len = static_cast<size_t>(std::find(arch, arch + kArchBytes, '\0') - arch);
    if (arch_len == kArchBytes) throw Error("sequence state: the architecture name is not NUL-terminated");
    for (size_t i = arch_len; i < kArchBytes; ++i) {
        if (arch[i] != '\0') throw Error("sequence state: bytes after the architecture name are not zero");
    }
    s.model.arch.assign(arch, arch_len);
    s.model.n_vocab = load_u64(h + 56);
    s.model.n_tensors = load_u64(h + 64);
    s.model.layout_hash = load_u64(h + 72);
    s.model.weights_hash = load_u64(h + 80);
    s.n_layer = load_u32(h + 88);
    s.cache_type = load_u32(h + 92);
    const uint32_t n_tokens = load_u32(h + 96);
    for (size_t i = 100; i < kSequenceStateHeaderBytes; ++i) {
        if (h[i] != 0) throw Error(fmt::format("sequence state: reserved header byte {} is {}, expected 0", i, h[i]));
    }

    Reader r(blob, body);
    r.raw(kSequenceStateHeaderBytes, 1, "the header");
    s.tokens = r.i32s(n_tokens, "the token ids");
    for (size_t i = 0; i < s.tokens.size(); ++i) {
        const int32_t t = s.tokens[i];
        if (t < 0 || static_cast<uint64_t>(t) >= s.model.n_vocab) {
            throw Error(fmt::format("sequence state: token {} has id {}, outside the vocabulary [0, {})", i, t,
                                    s.model.n_vocab));
        }
    }
    // Each layer takes at least its 16-byte header: a count past that is
    // refused before anything is allocated for it.
    r.need_array(s.n_layer, kLayerHeaderBytes, "the layers");
    s.layers.resize(s.n_layer);
    for (uint32_t il = 0; il < s.n_layer; ++il) {
        const std::string where = fmt::format("layer {}", il);
        const uint32_t index = r.u32(where);
        if (index != il) throw Error(fmt::format("sequence state: expected layer {} at offset {}, found layer {}", il,
                                                 r.offset() - 4, index));
        KvSeqRows& l = s.layers[il];
        const uint32_t n_rows = r.u32(where);
        l.k_row_bytes = r.u32(where);
        l.v_row_bytes = r.u32(where);
        // V rows of 0 bytes: a latent cache (MLA), whose V is in K.
        if (l.k_row_bytes == 0) {
            throw Error(fmt::format("sequence state: {} has rows of 0 (K) and {} (V) bytes; expected K rows > 0", where,
                                    l.v_row_bytes));
        }
        // The whole layer is checked against what is left before any part of it is read.
        const uint64_t row = 8ull + l.k_row_bytes + l.v_row_bytes;
        r.need_array(n_rows, row, where + "'s rows");
        l.pos = r.i32s(n_rows, where + " positions");
        l.cell = r.i32s(n_rows, where + " cells");
        l.k = r.raw(n_rows, l.k_row_bytes, where + " K rows");
        l.v = r.raw(n_rows, l.v_row_bytes, where + " V rows");
        std::vector<int32_t> sorted = l.pos;
        std::sort(sorted.begin(), sorted.end());
        if (!sorted.empty() && sorted.front() < 0) {
            throw Error(fmt::format("sequence state: {} holds the negative position {}", where, sorted.front()));
        }
        if (const auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end()) {
            throw Error(fmt::format("sequence state: {} holds position {} twice", where, *dup));
        }
    }
    if (r.left() != 0) {
        throw Error(fmt::format("sequence state: {} bytes after the last layer, expected none", r.left()));
    }
    return s;
}

}  // namespace tandem
