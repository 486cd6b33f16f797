#include "runtime/engine_cuda/cuda_kv_cache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "kernels_cuda/cuda_check.h"
#include "runtime/model/device_layout.h"

namespace tandem::cuda {

CudaKvCache::CudaKvCache(MemoryLedger& ledger, AsyncUploads& uploads, const std::string& what,
                         model::CacheType type, int64_t k_dim, int64_t v_dim, const KvCells& cells, int64_t n_ubatch)
    : uploads_(&uploads), cells_(&cells), shown_(static_cast<size_t>(cells.n_cells()), -1) {
    const int64_t n_cells = cells.n_cells();
    // With V in K (MLA) V is K's type, as the CPU's cache takes it.
    kv_.k_type = type.k;
    kv_.v_type = v_dim > 0 ? type.v : type.k;
    for (const quant::Type t : {kv_.k_type, kv_.v_type}) {
        if (!kernels::kv_type_supported(t)) {
            throw Error(fmt::format("{}: the CUDA device has no KV cache of type {}", what, quant::traits(t).name));
        }
    }
    kv_.k_dim = k_dim;
    kv_.v_dim = v_dim;
    kv_.v_in_k = v_dim == 0;
    kv_.n_cells = n_cells;
    // The planner's layout (model/device_layout.h): each array on a 256-byte
    // boundary, the allocation its bytes exactly.
    const model::KvLayout layout = model::kv_layout(static_cast<uint64_t>(kv_.k_row_bytes()),
                                                    static_cast<uint64_t>(kv_.stored_v_row_bytes()), n_cells, n_ubatch);
    bytes_ = layout.bytes;
    memory_ = std::make_unique<DeviceAlloc>(ledger, MemoryCategory::KvCache, bytes_, what);
    auto* base = static_cast<uint8_t*>(memory_->get());
    kv_.k = base + layout.k;
    kv_.v = kv_.v_in_k ? kv_.k : base + layout.v;
    kv_.cell_pos = reinterpret_cast<int32_t*>(base + layout.cell_pos);
    token_cells_ = reinterpret_cast<int32_t*>(base + layout.token_cells);
    kernels::launch_kv_clear(kv_, nullptr);
    TANDEM_CUDA_CHECK(cudaGetLastError());
}

void CudaKvCache::store_and_attend(const float* k, const float* v, const float* q, const int32_t* dev_pos,
                                   std::span<const int32_t> cells, std::span<const int32_t> pos,
                                   std::span<const int32_t> seq, const AttentionOp& op, const float* sinks,
                                   float* out, float* room, int64_t room_floats) {
    const auto n = static_cast<int64_t>(pos.size());
    TANDEM_CHECK(cells.size() == pos.size() && seq.size() == pos.size(), "attention: a cell per token");
    // The cells the session placed the positions in (kept here while the
    // upload is in flight).
    host_cells_.assign(cells.begin(), cells.end());
    uploads_->upload(token_cells_, host_cells_.data(), host_cells_.size() * sizeof(int32_t));
    kernels::launch_kv_store(k, v, n, token_cells_, kv_, nullptr);
    TANDEM_CUDA_CHECK(cudaGetLastError());

    kernels::AttentionArgs args;
    args.n_head = op.n_head;
    args.n_head_kv = op.n_head_kv;
    args.head_dim_k = op.head_dim_k;
    args.head_dim_v = op.head_dim_v;
    args.window = op.window;
    args.scale = op.scale;
    args.softcap = op.softcap;
    args.sinks = sinks;
    args.partials = room;
    args.partial_floats = room_floats;
    const int64_t qd = op.n_head * op.head_dim_k, od = op.n_head * op.head_dim_v;
    // Each sequence attends to its own cells: the device's cell_pos shows
    // the sequence's positions (the other cells at -1) before its tokens
    // run, in stream order with the launches around it; the kernel reads
    // only the span of cells the sequence holds. It computes each (token,
    // head) alone, so a run of consecutive rows is one launch on the rows
    // in place: the result of gathering the sequence's rows, without the
    // copies.
    std::map<int32_t, std::vector<int64_t>> groups;
    for (int64_t t = 0; t < n; ++t) groups[seq[static_cast<size_t>(t)]].push_back(t);
    for (const auto& [s, rows] : groups) {
        show(s);
        const KvCells::Span span = cells_->cell_span(s);
        args.cell_begin = span.begin;
        args.cell_end = span.end;
        for (size_t b = 0; b < rows.size();) {
            size_t e = b + 1;
            while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
            const int64_t r0 = rows[b];
            kernels::launch_attention(q + r0 * qd, dev_pos + r0, static_cast<int64_t>(e - b), args, kv_, out + r0 * od,
                                      nullptr);
            TANDEM_CUDA_CHECK(cudaGetLastError());
            b = e;
        }
    }
}

KvSeqRows CudaKvCache::read_rows(std::span<const int64_t> cells) const {
    KvSeqRows r;
    const auto kb = static_cast<size_t>(kv_.k_row_bytes()), vb = static_cast<size_t>(kv_.stored_v_row_bytes());
    r.k_row_bytes = static_cast<uint32_t>(kb);
    r.v_row_bytes = static_cast<uint32_t>(vb);
    r.k.resize(cells.size() * kb);
    r.v.resize(cells.size() * vb);
    // One copy per run of consecutive cells (the default stream: after
    // every store launched before it).
    for (size_t b = 0; b < cells.size();) {
        size_t e = b + 1;
        while (e < cells.size() && cells[e] == cells[e - 1] + 1) ++e;
        const auto c0 = static_cast<size_t>(cells[b]);
        TANDEM_CUDA_CHECK(cudaMemcpy(r.k.data() + b * kb, kv_.k + c0 * kb, (e - b) * kb, cudaMemcpyDeviceToHost));
        if (vb > 0) {
            TANDEM_CUDA_CHECK(cudaMemcpy(r.v.data() + b * vb, kv_.v + c0 * vb, (e - b) * vb, cudaMemcpyDeviceToHost));
        }
        b = e;
    }
    for (const int64_t c : cells) {
        r.pos.push_back(cells_->cell_pos()[c]);
        r.cell.push_back(static_cast<int32_t>(c));
    }
    return r;
}

void CudaKvCache::write_rows(std::span<const int64_t> cells, const KvSeqRows& rows) {
    const auto kb = static_cast<size_t>(kv_.k_row_bytes()), vb = static_cast<size_t>(kv_.stored_v_row_bytes());
    if (rows.k_row_bytes != kb || rows.v_row_bytes != vb) {
        throw Error(fmt::format("KV cache restore: rows of {} (K) and {} (V) bytes expected, found {} and {}", kb, vb,
                                rows.k_row_bytes, rows.v_row_bytes));
    }
    TANDEM_CHECK(cells.size() == rows.n_rows() && rows.k.size() == rows.n_rows() * kb && rows.v.size() == rows.n_rows() * vb,
                 "KV cache restore: rows, cells and positions disagree");
    for (size_t b = 0; b < cells.size();) {
        size_t e = b + 1;
        while (e < cells.size() && cells[e] == cells[e - 1] + 1) ++e;
        const auto c0 = static_cast<size_t>(cells[b]);
        TANDEM_CUDA_CHECK(cudaMemcpy(kv_.k + c0 * kb, rows.k.data() + b * kb, (e - b) * kb, cudaMemcpyHostToDevice));
        if (vb > 0) {
            TANDEM_CUDA_CHECK(cudaMemcpy(kv_.v + c0 * vb, rows.v.data() + b * vb, (e - b) * vb, cudaMemcpyHostToDevice));
        }
        b = e;
    }
}

void CudaKvCache::show(int32_t seq) {
    const int32_t* want = cells_->cell_pos(seq);
    const auto n = static_cast<int64_t>(shown_.size());
    for (int64_t b = 0; b < n;) {
        if (shown_[static_cast<size_t>(b)] == want[b]) {
            ++b;
            continue;
        }
        int64_t e = b + 1;
        while (e < n && shown_[static_cast<size_t>(e)] != want[e]) ++e;
        std::copy(want + b, want + e, shown_.begin() + b);
        uploads_->upload(kv_.cell_pos + b, want + b, static_cast<size_t>(e - b) * sizeof(int32_t));
        b = e;
    }
}

}  // namespace tandem::cuda
