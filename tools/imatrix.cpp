#include "tools/imatrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include "runtime/common/atomic_file.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_writer.h"

namespace tandem::tools::imatrix {
namespace {

// The matrices of a weight: its experts (ne[2]) for a 3-D tensor, else one.
int64_t matrices_of(const gguf::TensorInfo& w) { return w.shape.size() > 2 ? w.shape[2] : 1; }

// The entry of `w` for a product of n_mat matrices of n_in columns, made on
// first sight. One that --in-file made is fitted as llama-imatrix fits it:
// a dense weight's equal counts become one, one count of an expert tensor
// is every expert's. Sums of another length are an Error (llama-imatrix
// stops there too).
Entry& entry_for(Entries& entries, const gguf::TensorInfo& w, int64_t n_in, int64_t n_mat, bool dense) {
    Entry& e = entries[w.name];
    if (e.counts.empty()) {
        e.n_per_row = n_in;
        e.in_sum2.assign(static_cast<size_t>(n_in * n_mat), 0.0f);
        e.counts.assign(static_cast<size_t>(n_mat), 0);
        return e;
    }
    if (dense && e.counts.size() > 1 && std::all_of(e.counts.begin(), e.counts.end(), [&](int64_t c) {
            return c == e.counts[0];
        })) {
        e.counts.resize(1);
    }
    if (!dense && e.counts.size() == 1 && n_mat > 1) e.counts.resize(static_cast<size_t>(n_mat), e.counts[0]);
    if (e.in_sum2.size() != static_cast<size_t>(n_in * n_mat) || (!dense && e.n_mat() != n_mat)) {
        throw Error(fmt::format("imatrix: weight '{}': expected {} sums in {} counts ({} matrices of {} columns), "
                                "found {} in {} (from --in-file?)",
                                w.name, n_in * n_mat, dense ? 1 : n_mat, n_mat, n_in, e.in_sum2.size(),
                                e.counts.size()));
    }
    e.n_per_row = static_cast<int64_t>(e.in_sum2.size()) / e.n_mat();
    return e;
}

void check_finite(std::span<const float> sums, const std::string& name) {
    if (std::all_of(sums.begin(), sums.end(), [](float v) { return std::isfinite(v); })) return;
    throw Error(
        fmt::format("imatrix: non-finite activations reached weight '{}' (the model's output overflows on this "
                    "text)",
                    name));
}

// Columns [col, col + n_in) of e's sums gain the squares of n_rows rows.
void add_squares(Entry& e, int64_t col, const float* x, int64_t n_rows, int64_t n_in, const std::string& name) {
    float* acc = e.in_sum2.data() + col;
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* row = x + r * n_in;
        for (int64_t j = 0; j < n_in; ++j)
            acc[j] += row[j] * row[j];  // rounded product, then the sum: no FMA, as llama-imatrix
    }
    check_finite(std::span<const float>(acc, static_cast<size_t>(n_in)), name);
}

// A shape as ggml stores it: trailing dimensions of 1 dropped (ggml_n_dims),
// so a 2-D weight's sums are [n_per_row] and its count [1].
std::vector<int64_t> ggml_shape(int64_t ne0, int64_t ne1) {
    if (ne1 == 1) return {ne0};
    return {ne0, ne1};
}

std::vector<uint8_t> f32_bytes(std::span<const float> v) {
    std::vector<uint8_t> out(v.size_bytes());
    std::memcpy(out.data(), v.data(), out.size());
    return out;
}

}  // namespace

// llama-imatrix ignores dense products of fewer tokens (generation steps).
constexpr int64_t kMinDenseRows = 16;

void Collector::on_matmul(const gguf::TensorInfo& w, int64_t expert, const float* x, int64_t n_rows, int64_t n_in) {
    // Dense products are collected for the layers' weights only (as
    // llama-imatrix's "blk." filter); expert products for every weight.
    if (expert < 0 && (n_rows < kMinDenseRows || !collected(w.name))) return;
    const bool dense = expert < 0;
    const int64_t n_mat = dense ? 1 : matrices_of(w);
    const int64_t mat = std::max<int64_t>(expert, 0);
    TANDEM_CHECK(mat < n_mat, fmt::format("imatrix: expert {} of weight '{}' out of range", expert, w.name));
    Entry& e = entry_for(entries_, w, n_in, n_mat, dense);
    add_squares(e, mat * n_in, x, n_rows, n_in, w.name);
    if (!dense) {
        e.counts[static_cast<size_t>(mat)] += n_rows;
        return;
    }
    // Several counts only from an --in-file's; each gains the rows, as in llama-imatrix.
    for (int64_t& c : e.counts) c += n_rows;
}

bool Collector::collected(const std::string& name) const {
    return name.starts_with("blk.") || (process_output_ && name == "output.weight");
}

// A per-head product is a MUL_MAT to llama-imatrix: the dense products'
// filter, and one count for the whole tensor (its "single count per dense
// tensor"): the heads' sums side by side in one row, the tokens counted
// with head 0.
void Collector::on_head_matmul(const gguf::TensorInfo& w, int64_t head, const float* x, int64_t n_rows, int64_t n_in) {
    if (n_rows < kMinDenseRows || !collected(w.name)) return;
    const int64_t n_heads = matrices_of(w);
    TANDEM_CHECK(head >= 0 && head < n_heads, fmt::format("imatrix: head {} of weight '{}' out of range", head, w.name));
    Entry& e = entry_for(entries_, w, n_in * n_heads, 1, true);
    add_squares(e, head * n_in, x, n_rows, n_in, w.name);
    if (head != 0) return;
    for (int64_t& c : e.counts) c += n_rows;
}

void Collector::add_stored(const quant::StoredImatrix& m, int64_t chunk_size, const std::string& source) {
    const auto mismatch = [&](const std::string& name, const char* what, size_t found, size_t have) {
        return Error(fmt::format("{}: weight '{}': expected {} {} (as the matrices before it), found {}", source,
                                 name, have, what, found));
    };
    for (const auto& [name, in] : m.entries) {
        Entry& e = entries_[name];
        if (e.in_sum2.empty()) {
            e.in_sum2.assign(in.sums.size(), 0.0f);
        } else if (e.in_sum2.size() != in.sums.size()) {
            throw mismatch(name, "sums", in.sums.size(), e.in_sum2.size());
        }
        if (m.legacy) {
            // Means times ncall: back to sums of ncall chunks' tokens.
            if (e.counts.empty()) e.counts.assign(1, 0);
            const auto scale = static_cast<float>(chunk_size);
            for (size_t j = 0; j < in.sums.size(); ++j) e.in_sum2[j] += in.sums[j] * scale;
            for (int64_t& c : e.counts) c += in.counts[0] * chunk_size;
        } else {
            if (e.counts.empty()) {
                e.counts.assign(in.counts.size(), 0);
            } else if (e.counts.size() == 1 && in.counts.size() > 1) {
                e.counts.resize(in.counts.size(), e.counts[0]);
            } else if (e.counts.size() != in.counts.size()) {
                throw mismatch(name, "counts", in.counts.size(), e.counts.size());
            }
            for (size_t j = 0; j < in.sums.size(); ++j) e.in_sum2[j] += in.sums[j];
            for (size_t j = 0; j < in.counts.size(); ++j) e.counts[j] += in.counts[j];
        }
        e.n_per_row = static_cast<int64_t>(e.in_sum2.size()) / e.n_mat();
    }
}

uint32_t Collector::chunk_count(int64_t chunk_size) const {
    int64_t most = 0;
    for (const auto& [name, e] : entries_) {
        for (const int64_t c : e.counts) most = std::max(most, c);
    }
    return chunk_size > 0 ? static_cast<uint32_t>(most / chunk_size) : 0;
}

std::vector<std::string> Collector::partial_entries() const {
    std::vector<std::string> out;
    for (const auto& [name, e] : entries_) {
        if (std::find(e.counts.begin(), e.counts.end(), 0) != e.counts.end()) out.push_back(name);
    }
    return out;
}

Packing pack(int64_t n_ctx, int64_t n_batch, int64_t n_ubatch) {
    Packing p;
    p.n_ctx = n_ctx;
    p.n_seq = std::clamp<int64_t>(n_batch / n_ctx, 1, kMaxSequences);
    const int64_t batch = std::min(n_batch, p.n_seq * n_ctx);  // llama.cpp caps -b at its cache
    p.seq_batch = std::min(batch, n_ctx);
    p.n_ubatch = std::min(n_ubatch, batch);
    return p;
}

std::vector<std::vector<BatchToken>> micro_batches(std::span<const std::vector<int32_t>> chunks, const Packing& p,
                                                   int64_t logits_from, bool all_logits) {
    const auto n_seqs = static_cast<int64_t>(chunks.size());
    TANDEM_CHECK(n_seqs >= 1 && n_seqs <= p.n_seq, "imatrix: chunks for more sequences than the packing holds");
    const int64_t share = std::max<int64_t>(1, p.n_ubatch / n_seqs);  // of each sequence, per micro-batch
    std::vector<std::vector<BatchToken>> out;
    for (int64_t b0 = 0; b0 < p.n_ctx; b0 += p.seq_batch) {
        const int64_t b1 = std::min(b0 + p.seq_batch, p.n_ctx);
        for (int64_t u0 = b0; u0 < b1; u0 += share) {
            const int64_t u1 = std::min(u0 + share, b1);
            std::vector<BatchToken>& mb = out.emplace_back();
            for (int64_t s = 0; s < n_seqs; ++s) {
                const std::vector<int32_t>& chunk = chunks[static_cast<size_t>(s)];
                TANDEM_CHECK(static_cast<int64_t>(chunk.size()) == p.n_ctx, "imatrix: a chunk of another length");
                for (int64_t pos = u0; pos < u1; ++pos) {
                    const bool logits = all_logits || (pos >= logits_from && pos < p.n_ctx - 1);
                    mb.push_back(
                        {chunk[static_cast<size_t>(pos)], static_cast<int32_t>(pos), static_cast<int32_t>(s), logits});
                }
            }
        }
    }
    return out;
}

void write_file(const std::filesystem::path& path, const Entries& entries, const FileInfo& info) {
    if (entries.empty()) {
        throw Error(fmt::format("{}: no weight product was observed, so there is no importance matrix to write",
                                path.string()));
    }
    gguf::Writer out(path);
    out.set("general.type", gguf::Value::str("imatrix"));
    out.set("imatrix.datasets", gguf::Value::string_array(info.datasets));
    out.set("imatrix.chunk_count", gguf::Value::u32(info.chunk_count));
    out.set("imatrix.chunk_size", gguf::Value::u32(info.chunk_size));
    // std::map keeps the names sorted, as llama-imatrix stores them.
    for (const auto& [name, e] : entries) {
        out.add_tensor({name + ".in_sum2", ggml_shape(e.n_per_row, e.n_mat()), quant::Type::F32});
        out.add_tensor({name + ".counts", ggml_shape(1, e.n_mat()), quant::Type::F32});
    }
    out.write_header();
    for (const auto& [name, e] : entries) {
        out.write_tensor_data(f32_bytes(e.in_sum2));
        const std::vector<float> counts(e.counts.begin(), e.counts.end());
        out.write_tensor_data(f32_bytes(counts));
    }
    out.finish();
}

void write_legacy_file(const std::filesystem::path& path, const Entries& entries, const FileInfo& info) {
    const int64_t chunk_size = std::max<uint32_t>(info.chunk_size, 1);
    std::vector<const std::pair<const std::string, Entry>*> stored;
    for (const auto& kv : entries) {
        const auto& c = kv.second.counts;
        if (std::any_of(c.begin(), c.end(), [](int64_t n) { return n != 0; })) stored.push_back(&kv);
    }
    if (stored.empty()) {
        throw Error(fmt::format("{}: no weight product was observed, so there is no importance matrix to write",
                                path.string()));
    }
    AtomicFile out(path);
    const auto i32 = [&out](int64_t v) {
        const auto x = static_cast<int32_t>(v);
        out.write(&x, sizeof x);
    };
    i32(static_cast<int64_t>(stored.size()));
    for (const auto* kv : stored) {
        const auto& [name, e] = *kv;
        i32(static_cast<int64_t>(name.size()));
        out.write(name);
        const int64_t ncall = (*std::max_element(e.counts.begin(), e.counts.end()) + chunk_size - 1) / chunk_size;
        i32(ncall);
        i32(static_cast<int64_t>(e.in_sum2.size()));
        std::vector<float> values(e.in_sum2.size());
        const size_t per_mat = e.in_sum2.size() / e.counts.size();
        for (size_t i = 0; i < values.size(); ++i) {
            auto count = static_cast<float>(e.counts[i / per_mat]);
            float value = e.in_sum2[i];
            if (count == 0.0f) value = count = 1.0f;  // an expert no token reached
            values[i] = (value / count) * static_cast<float>(static_cast<int32_t>(ncall));
        }
        out.write(values.data(), values.size() * sizeof(float));
    }
    i32(info.chunk_count);
    const std::string dataset = info.datasets.empty() ? std::string() : info.datasets.back();
    i32(static_cast<int64_t>(dataset.size()));
    out.write(dataset);
    out.commit();
}

}  // namespace tandem::tools::imatrix
