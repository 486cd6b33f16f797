#include "runtime/engine/cpu_device.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "kernels_cpu/attention.h"
#include "runtime/quant/hadamard.h"
#include "kernels_cpu/elementwise.h"
#include "kernels_cpu/moe.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/engine/host_weight_arena.h"
#include "runtime/common/error.h"
#include "runtime/engine/kv_cache.h"
#include "runtime/model/device_layout.h"

namespace tandem {
namespace {

using model::GlobalTensor;

}  // namespace

struct CpuDevice::Impl {
    CpuDevice& self;  // its hooks (matrix_bytes, vector_read)
    MemoryLedger ledger;
    const gguf::File& file;
    const model::ModelSpec& spec;
    const model::HParams& hp;
    DeviceConfig config;
    cpu::ThreadPool& pool;
    cpu::SimdLevel level;
    // Products' order: batch_order, or SingleToken while set_single_token_order.
    cpu::MatmulOrder batch_order = config.cpu_blas ? cpu::MatmulOrder::Fastest : cpu::MatmulOrder::LlamaCpu;
    cpu::MatmulOrder order = batch_order;
    // Copies of the weight matrices in huge-page memory: the host's, when
    // config.copy_host_weights; the stand-in's uploads always (so that
    // bench --calibrate's host rates are its rates).
    HostWeightArena copies;
    std::vector<LedgerReservation> reservations;
    std::unordered_map<const gguf::TensorInfo*, cpu::WeightView> matrices;
    std::unordered_map<const gguf::TensorInfo*, std::vector<float>> vectors;
    std::map<int64_t, LayerKvCache> kv;
    std::vector<float> rope_freqs;
    std::array<std::vector<float>, kActCount> act;
    std::vector<float> q_rows, out_rows;  // one sequence's queries in a mixed batch
    std::vector<int32_t> pos_rows;
    std::vector<cpu::KvCacheView> token_views;  // a serving step's views, one per stream
    cpu::ExpertGroups expert_groups;                // the experts' rows of one batch
    std::vector<float> expert_x, expert_y[2], slot_y;  // gathered inputs and outputs of one expert
    std::vector<cpu::WeightView> decode_views;      // a decode step's expert slices
    std::vector<cpu::MatmulTarget> decode_targets;  // and their products
    bool workspace = false;  // allocate_workspace ran

    Impl(CpuDevice& owner, std::string name, std::optional<uint64_t> capacity, const gguf::File& f,
         const model::ModelSpec& s, const DeviceConfig& c, cpu::ThreadPool& p, cpu::SimdLevel l)
        : self(owner), ledger(std::move(name), capacity), file(f), spec(s), hp(s.hp), config(c), pool(p), level(l) {}

    void reserve(MemoryCategory c, uint64_t bytes, const std::string& what) {
        reservations.emplace_back(ledger, c, bytes, what);
    }

    static cpu::WeightView view_of(const gguf::TensorInfo& t, const uint8_t* data) {
        return cpu::WeightView{t.type, data, t.n_rows(), t.row_length(), *quant::row_bytes(t.type, t.row_length())};
    }

    void load_matrix(const gguf::TensorInfo& t) {
        TANDEM_CHECK(!matrices.count(&t), "load_matrix: tensor loaded twice");
        // The tied head on the host is the embedding table the host
        // already counts (a copy when the host copies its matrices: every
        // decode step streams all of it).
        const bool counted = self.counts_token_embd() && &t == spec.get(GlobalTensor::TokenEmbd);
        if (!counted) reserve(MemoryCategory::Weights, t.n_bytes, fmt::format("tensor '{}'", t.name));
        matrices[&t] = view_of(t, self.matrix_bytes(t));
    }

    // Norm weights and RoPE factors are small; a float copy frees the
    // kernels from caring whether the file stored them as F32 or F16.
    std::vector<float> floats(const gguf::TensorInfo& t) {
        reserve(MemoryCategory::Weights, t.n_bytes, fmt::format("tensor '{}'", t.name));
        std::vector<float> v = tensor_floats(file, t);
        self.vector_read(t);
        return v;
    }

    const cpu::WeightView& matrix(const gguf::TensorInfo* t) const { return held_tensor(matrices, t, "matmul"); }
    const float* vector(const gguf::TensorInfo& t) const { return held_tensor(vectors, &t, "norm").data(); }

    LayerKvCache& cache(int64_t il) {
        const auto it = kv.find(il);
        TANDEM_CHECK(it != kv.end(), "attention: the layer's cache is not on this device");
        return it->second;
    }
    const LayerKvCache& cache(int64_t il) const {
        const auto it = kv.find(il);
        TANDEM_CHECK(it != kv.end(), "the layer's KV cache is not on this device");
        return it->second;
    }

    float* buf(Act a) {
        auto& v = act[static_cast<size_t>(a)];
        TANDEM_CHECK(!v.empty(), "activation buffer used before allocate_workspace");
        return v.data();
    }

    // fn(begin, end) over rows [0, n_rows) of a per-row operation (norms,
    // RoPE, residual adds, the FFN activation), split over the threads for
    // a batch: single-threaded they were ~8% of a 512-token prompt's time
    // with the second core idle. Rows are independent, so the split moves
    // no bits. A few rows (a decode step) stay on the calling thread.
    void for_rows(int64_t n_rows, const std::function<void(int64_t, int64_t)>& fn) {
        constexpr int64_t kRowsPerThreadMin = 4;
        if (n_rows < 2 * kRowsPerThreadMin) {
            fn(0, n_rows);
        } else {
            pool.parallel_for(n_rows, kRowsPerThreadMin, fn);
        }
    }

    // Attention of the tokens of one sequence (rows `rows` of the batch).
    void attend(LayerKvCache& c, int32_t seq, std::span<const int32_t> pos, std::span<const int64_t> rows,
                const cpu::AttentionShape& shape) {
        const int64_t qd = hp.q_dim(), od = hp.out_dim(), n = static_cast<int64_t>(rows.size());
        const bool contiguous = rows.back() - rows.front() + 1 == n;
        if (contiguous) {
            const int64_t r0 = rows.front();
            cpu::attention(buf(Act::Q) + r0 * qd, pos.data() + r0, n, shape, c.attention_view(seq),
                           buf(Act::Attn) + r0 * od, pool, level);
            return;
        }
        q_rows.resize(static_cast<size_t>(n * qd));
        out_rows.resize(static_cast<size_t>(n * od));
        pos_rows.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            std::memcpy(q_rows.data() + i * qd, buf(Act::Q) + rows[i] * qd, static_cast<size_t>(qd) * sizeof(float));
            pos_rows[static_cast<size_t>(i)] = pos[static_cast<size_t>(rows[i])];
        }
        cpu::attention(q_rows.data(), pos_rows.data(), n, shape, c.attention_view(seq), out_rows.data(), pool, level);
        for (int64_t i = 0; i < n; ++i) {
            std::memcpy(buf(Act::Attn) + rows[i] * od, out_rows.data() + i * od, static_cast<size_t>(od) * sizeof(float));
        }
    }
};

CpuDevice::CpuDevice(std::string name, std::optional<uint64_t> capacity, const gguf::File& file,
                     const model::ModelSpec& spec, const DeviceConfig& config, cpu::ThreadPool& pool,
                     cpu::SimdLevel level)
    : impl_(std::make_unique<Impl>(*this, std::move(name), capacity, file, spec, config, pool, level)) {}

CpuDevice::~CpuDevice() = default;

const std::string& CpuDevice::name() const { return impl_->ledger.device(); }
bool CpuDevice::is_accelerator() const { return false; }
const MemoryLedger& CpuDevice::ledger() const { return impl_->ledger; }
MemoryLedger& CpuDevice::mutable_ledger() { return impl_->ledger; }

const uint8_t* CpuDevice::matrix_bytes(const gguf::TensorInfo& t) {
    // A copy in the arena when the host copies its matrices (reported to
    // on_upload), else the mapping itself.
    const auto bytes = impl_->file.tensor_data(t);
    if (!impl_->config.copy_host_weights) return bytes.data();
    const uint8_t* data = impl_->copies.copy(bytes, &impl_->pool);
    if (impl_->config.on_upload) impl_->config.on_upload(t.n_bytes);
    return data;
}

const gguf::File& CpuDevice::file() const { return impl_->file; }
const model::ModelSpec& CpuDevice::spec() const { return impl_->spec; }
const DeviceConfig& CpuDevice::config() const { return impl_->config; }
cpu::ThreadPool& CpuDevice::pool() const { return impl_->pool; }
cpu::SimdLevel CpuDevice::level() const { return impl_->level; }
HostWeightArena& CpuDevice::arena() { return impl_->copies; }
void CpuDevice::reserve(MemoryCategory c, uint64_t bytes, const std::string& what) { impl_->reserve(c, bytes, what); }

void CpuDevice::load_matrix(const gguf::TensorInfo& t) { impl_->load_matrix(t); }

void CpuDevice::load_vector(const gguf::TensorInfo& t) {
    TANDEM_CHECK(!impl_->vectors.count(&t), "load_vector: tensor loaded twice");
    impl_->vectors[&t] = impl_->floats(t);
}

void CpuDevice::load_kv(int64_t il, const KvCells& cells) {
    const auto& hp = impl_->hp;
    const model::CacheType type = impl_->config.cache_type;
    const uint64_t bytes =
        model::kv_bytes_for_cells(impl_->spec, cells.n_cells(), impl_->config.n_ubatch, impl_->config.cache_type);
    impl_->reserve(MemoryCategory::KvCache, bytes, fmt::format("the KV cache of layer {}", il));
    // Rows stored as llama.cpp's CPU backend stores them, the same bytes at
    // every SIMD level.
    impl_->kv.try_emplace(il, type, cells, hp.k_dim(), hp.kv_v_dim(),
                          KvRowWriters{cpu::detail::cache_row_quantizer(type.k, impl_->level),
                                       cpu::detail::cache_row_quantizer(type.v, impl_->level)});
}

void CpuDevice::allocate_workspace(bool with_logits) {
    reserve_product_buffers();
    // RoPE factors (a few hundred floats) are read by every layer; each
    // device keeps its own.
    if (!impl_->workspace) {
        if (const gguf::TensorInfo* t = impl_->spec.get(GlobalTensor::RopeFreqs)) impl_->rope_freqs = impl_->floats(*t);
        impl_->workspace = true;
    }
    const auto& hp = impl_->hp;
    const int64_t ub = impl_->config.n_ubatch;
    impl_->reserve(MemoryCategory::Compute, model::compute_bytes(impl_->spec, ub, with_logits),
                   "activations of one micro-batch");
    for (int a = 0; a < kActCount; ++a) {
        if (static_cast<Act>(a) == Act::Logits && !with_logits) continue;
        impl_->act[static_cast<size_t>(a)].resize(static_cast<size_t>(ub * act_width(hp, static_cast<Act>(a))));
    }
}

void CpuDevice::write_act(Act a, const float* host, int64_t n_floats) {
    std::memcpy(impl_->buf(a), host, static_cast<size_t>(n_floats) * sizeof(float));
}

void CpuDevice::read_act(Act a, float* host, int64_t n_floats) {
    std::memcpy(host, impl_->buf(a), static_cast<size_t>(n_floats) * sizeof(float));
}

float* CpuDevice::host_act(Act a) {
    auto& v = impl_->act[static_cast<size_t>(a)];
    return v.empty() ? nullptr : v.data();
}

void CpuDevice::rms_norm(Act x, RowView xv, const gguf::TensorInfo& w, Act y, RowView yv, int64_t rows, float eps) {
    TANDEM_CHECK(xv.len == yv.len && (x != y || (xv.col0 == yv.col0 && xv.stride == yv.stride)),
                 "rms_norm: rows of one length, in place only on the same rows");
    const float* in = impl_->buf(x) + xv.col0;
    float* out = impl_->buf(y) + yv.col0;
    const float* weight = impl_->vector(w);
    const int64_t len = xv.len;
    const bool packed = xv.stride == len && yv.stride == len;
    impl_->for_rows(rows, [&](int64_t b, int64_t e) {
        if (packed) return cpu::rms_norm_rows(in + b * len, weight, out + b * len, len, e - b, eps, impl_->level);
        for (int64_t r = b; r < e; ++r) {
            cpu::rms_norm_rows(in + r * xv.stride, weight, out + r * yv.stride, len, 1, eps, impl_->level);
        }
    });
}

void CpuDevice::set_single_token_order(bool on) {
    impl_->order = on ? cpu::MatmulOrder::SingleToken : impl_->batch_order;
}

void CpuDevice::matmul(std::span<const MatmulOut> outs, Act in, int64_t n) {
    std::array<cpu::MatmulTarget, 3> targets{};
    TANDEM_CHECK(outs.size() <= targets.size(), "matmul: more than three products of one input");
    for (size_t i = 0; i < outs.size(); ++i) targets[i] = {&impl_->matrix(outs[i].w), impl_->buf(outs[i].out)};
    if (outs.size() == 1) {
        const cpu::WeightView& w = *targets[0].w;
        cpu::matmul(w, impl_->buf(in), w.n_cols, n, targets[0].y, w.n_rows, impl_->pool, impl_->level, impl_->order);
        return;
    }
    cpu::matmul_shared_input(std::span(targets.data(), outs.size()), impl_->buf(in), n, impl_->pool, impl_->level,
                             impl_->order);
}

void CpuDevice::rope(Act a, RowView v, int64_t n_heads, std::span<const int32_t> pos, const RopeOp& op) {
    cpu::RopeParams p;
    p.mode = op.neox ? cpu::RopeMode::Neox : cpu::RopeMode::Norm;
    p.n_rot = op.n_rot;
    p.freq_base = op.freq_base;
    p.freq_scale = op.freq_scale;
    p.freq_factors = impl_->rope_freqs.empty() ? nullptr : impl_->rope_freqs.data();
    p.ext_factor = op.ext_factor;
    p.attn_factor = op.attn_factor;
    std::copy(std::begin(op.corr_dims), std::end(op.corr_dims), p.corr_dims);
    TANDEM_CHECK(op.n_rot <= v.len && v.len <= v.stride && v.col0 + v.len <= v.stride * n_heads,
                 "rope: rotated dims outside the rows");
    // Head h's row starts stride floats after head h - 1's: the kernel's
    // heads of `stride` floats, from the first row's start.
    const int64_t width = v.stride * n_heads;
    float* x = impl_->buf(a) + v.col0;
    impl_->for_rows(static_cast<int64_t>(pos.size()), [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            cpu::rope_heads(x + t * width, n_heads, v.stride, pos[static_cast<size_t>(t)], p, impl_->level);
        }
    });
}

void CpuDevice::attention(int64_t il, std::span<const int32_t> cells, std::span<const int32_t> pos,
                          std::span<const int32_t> seq, const AttentionOp& op) {
    LayerKvCache& c = impl_->cache(il);
    const auto& hp = impl_->hp;
    const auto n = static_cast<int64_t>(pos.size());
    TANDEM_CHECK(cells.size() == pos.size() && seq.size() == pos.size(), "attention: a cell per token");
    TANDEM_CHECK(op.v_in_k == (hp.kv_v_dim() == 0), "attention: V in K only with a cache that stores no V");
    const float* v_rows = op.v_in_k ? nullptr : impl_->buf(Act::V);
    for (int64_t t = 0; t < n; ++t) {
        c.store_at(cells[static_cast<size_t>(t)], impl_->buf(Act::K) + t * hp.k_dim(),
                   v_rows ? v_rows + t * hp.v_dim() : nullptr);
    }
    cpu::AttentionShape shape;
    shape.n_head = op.n_head;
    shape.n_head_kv = op.n_head_kv;
    shape.head_dim_k = op.head_dim_k;
    shape.head_dim_v = op.head_dim_v;
    shape.window = op.window;
    shape.scale = op.scale;
    shape.softcap = op.softcap;
    shape.sinks = op.sinks ? impl_->vector(*op.sinks) : nullptr;
    // Each sequence attends to its own cells: the batch's tokens grouped
    // by sequence, in order; one sequence (the usual case) in one call.
    if (std::all_of(seq.begin(), seq.end(), [&](int32_t s) { return s == seq[0]; })) {
        cpu::attention(impl_->buf(Act::Q), pos.data(), n, shape, c.attention_view(seq[0]), impl_->buf(Act::Attn), impl_->pool,
                       impl_->level);
        return;
    }
    std::map<int32_t, std::vector<int64_t>> groups;
    for (int64_t t = 0; t < n; ++t) groups[seq[static_cast<size_t>(t)]].push_back(t);
    // A serving step (one token per stream): every stream's query in one
    // call, each against its own cells.
    if (groups.size() == static_cast<size_t>(n)) {
        auto& views = impl_->token_views;
        views.clear();
        for (int64_t t = 0; t < n; ++t) views.push_back(c.attention_view(seq[static_cast<size_t>(t)]));
        cpu::attention_per_token(impl_->buf(Act::Q), pos.data(), shape, views, impl_->buf(Act::Attn), impl_->pool,
                                 impl_->level);
        return;
    }
    for (const auto& [s, rows] : groups) impl_->attend(c, s, pos, rows, shape);
}

void CpuDevice::matmul_experts(std::span<const MatmulOut> outs, Act in, const ExpertOp& op, int64_t n) {
    Impl& m = *impl_;
    const int64_t n_expert = m.hp.n_expert, k = op.n_used;
    TANDEM_CHECK(!outs.empty() && outs.size() <= 2 && !(op.sum_slots && outs.size() != 1),
                 "matmul_experts: one or two products, one when summing the slots");
    const cpu::WeightView& w0 = m.matrix(outs[0].w);
    const int64_t cols = w0.n_cols, rows = w0.n_rows / n_expert;
    // Expert e's slice of a 3-D weight: rows [e * rows, (e + 1) * rows).
    const auto slice = [&](const MatmulOut& o, int64_t e) {
        cpu::WeightView v = m.matrix(o.w);
        TANDEM_CHECK(v.n_cols == cols && v.n_rows == rows * n_expert, "matmul_experts: products of other shapes");
        v.data = static_cast<const uint8_t*>(v.data) + static_cast<uint64_t>(e * rows) * v.row_stride_bytes;
        v.n_rows = rows;
        return v;
    };
    const float* route = m.buf(Act::Route);
    const float* x = m.buf(in);
    float* slot_out = nullptr;  // where a row per (token, slot) goes
    if (op.sum_slots) {
        m.slot_y.resize(static_cast<size_t>(n * k * rows));
        slot_out = m.slot_y.data();
    }
    if (n == 1) {
        // A decode step: no gathering. Every chosen expert's products (of
        // the token's row, or of its slot's row) in one hand-off to the threads.
        // (Kept between calls: a decode step makes these for every layer.)
        std::vector<cpu::WeightView>& views = m.decode_views;
        std::vector<cpu::MatmulTarget>& targets = m.decode_targets;
        views.clear();
        targets.clear();
        for (int64_t j = 0; j < k; ++j) {
            const auto e = static_cast<int64_t>(route[2 * j]);
            TANDEM_CHECK(e >= 0 && e < n_expert, "matmul_experts: expert id out of range");
            for (const MatmulOut& o : outs) {
                views.push_back(slice(o, e));
                float* y = (op.sum_slots ? slot_out : m.buf(o.out)) + j * rows;
                targets.push_back({nullptr, y, op.in_per_slot ? x + j * cols : nullptr});
            }
        }
        for (size_t i = 0; i < targets.size(); ++i) targets[i].w = &views[i];
        cpu::matmul_shared_input(targets, x, 1, m.pool, m.level);
    } else {
        // A batch: each expert's rows gathered, multiplied, scattered.
        cpu::group_by_expert(route, k, n, n_expert, m.expert_groups);
        m.expert_x.resize(static_cast<size_t>(n * k * cols));
        for (size_t i = 0; i < outs.size(); ++i) m.expert_y[i].resize(static_cast<size_t>(n * k * rows));
        for (int64_t e = 0; e < n_expert; ++e) {
            const int64_t count = m.expert_groups.count(e);
            if (count == 0) continue;  // an expert nobody chose is not read
            const int64_t* slot_rows = m.expert_groups.begin(e);
            for (int64_t i = 0; i < count; ++i) {
                const int64_t r = slot_rows[i];  // token * k + slot
                const float* src = x + (op.in_per_slot ? r : r / k) * cols;
                std::memcpy(m.expert_x.data() + i * cols, src, static_cast<size_t>(cols) * sizeof(float));
            }
            cpu::WeightView views[2];
            cpu::MatmulTarget targets[2];
            for (size_t i = 0; i < outs.size(); ++i) {
                views[i] = slice(outs[i], e);
                targets[i] = {&views[i], m.expert_y[i].data()};
            }
            if (outs.size() == 1) {
                cpu::matmul(views[0], m.expert_x.data(), cols, count, targets[0].y, rows, m.pool, m.level, m.order);
            } else {
                cpu::matmul_shared_input(std::span(targets, outs.size()), m.expert_x.data(), count, m.pool, m.level, m.order);
            }
            for (size_t i = 0; i < outs.size(); ++i) {
                float* dst = op.sum_slots ? slot_out : m.buf(outs[i].out);
                for (int64_t j = 0; j < count; ++j) {
                    std::memcpy(dst + slot_rows[j] * rows, m.expert_y[i].data() + j * rows,
                                static_cast<size_t>(rows) * sizeof(float));
                }
            }
        }
    }
    // Each (token, slot) product + its expert's bias row (ggml's add_id).
    for (const MatmulOut& o : outs) {
        if (!o.bias) continue;
        const float* bias = m.vector(*o.bias);
        float* y = op.sum_slots ? slot_out : m.buf(o.out);
        for (int64_t r = 0; r < n * k; ++r) cpu::add(y + r * rows, bias + static_cast<int64_t>(route[2 * r]) * rows, rows);
    }
    if (!op.sum_slots) return;
    // out = w_0 * y_0 + w_1 * y_1 + ..., each product rounded, added in
    // slot order (llama.cpp multiplies by the weights, then adds the slots).
    float* out = m.buf(outs[0].out);
    for (int64_t t = 0; t < n; ++t) {
        float* o = out + t * rows;
        for (int64_t j = 0; j < k; ++j) {
            const float wj = cpu::route_weight(route, t * k + j);
            const float* y = slot_out + (t * k + j) * rows;
            for (int64_t c = 0; c < rows; ++c) {
                const float v = y[c] * wj;
                o[c] = j == 0 ? v : o[c] + v;
            }
        }
    }
}

void CpuDevice::moe_route(const MoeRouteOp& op, int64_t n) {
    const float* bias = op.bias ? impl_->vector(*op.bias) : nullptr;
    cpu::moe_route(impl_->buf(Act::Router), route_params(op, bias), impl_->buf(Act::Route), n);
}

void CpuDevice::add_vector(Act a, const gguf::TensorInfo& b, int64_t len, int64_t rows) {
    float* x = impl_->buf(a);
    const float* v = impl_->vector(b);
    impl_->for_rows(rows, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) cpu::add(x + t * len, v, len);
    });
}

void CpuDevice::copy_rows(Act src, RowView sv, Act dst, RowView dv, int64_t rows) {
    TANDEM_CHECK(sv.len == dv.len, "copy_rows: rows of one length");
    const float* from = impl_->buf(src) + sv.col0;
    float* to = impl_->buf(dst) + dv.col0;
    for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(to + r * dv.stride, from + r * sv.stride, static_cast<size_t>(sv.len) * sizeof(float));
    }
}

// Head h's rows of all tokens are every n_heads-th row: one product per
// head with the rows n_heads * stride apart; a decode step hands every
// head's product to the threads at once.
void CpuDevice::matmul_heads(const MatmulOut& o, Act in, RowView iv, RowView ov, int64_t n_heads, int64_t n) {
    Impl& m = *impl_;
    const cpu::WeightView& w = m.matrix(o.w);
    TANDEM_CHECK(n_heads > 0 && w.n_rows % n_heads == 0 && w.n_rows / n_heads == ov.len && w.n_cols == iv.len,
                 "matmul_heads: a weight of n_heads slices of the rows' lengths");
    const float* x = m.buf(in) + iv.col0;
    float* y = m.buf(o.out) + ov.col0;
    std::vector<cpu::WeightView>& views = m.decode_views;
    views.assign(static_cast<size_t>(n_heads), w);
    for (int64_t h = 0; h < n_heads; ++h) {
        views[static_cast<size_t>(h)].data =
            static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(h * ov.len) * w.row_stride_bytes;
        views[static_cast<size_t>(h)].n_rows = ov.len;
    }
    if (n == 1) {
        std::vector<cpu::MatmulTarget>& targets = m.decode_targets;
        targets.clear();
        for (int64_t h = 0; h < n_heads; ++h) {
            targets.push_back({&views[static_cast<size_t>(h)], y + h * ov.stride, x + h * iv.stride});
        }
        cpu::matmul_shared_input(targets, x, 1, m.pool, m.level, m.order);
        return;
    }
    for (int64_t h = 0; h < n_heads; ++h) {
        cpu::matmul(views[static_cast<size_t>(h)], x + h * iv.stride, n_heads * iv.stride, n, y + h * ov.stride,
                    n_heads * ov.stride, m.pool, m.level, m.order);
    }
}

void CpuDevice::glu(model::FfnActivation act, int64_t n_ff, int64_t n) {
    float* gate = impl_->buf(Act::Gate);
    const float* up = impl_->buf(Act::Up);
    // One call per token row, as ggml applies its activation row by row
    // (SwiGLU's 16-element groups and expf tail are counted per row).
    impl_->for_rows(n, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            float* g = gate + t * n_ff;
            if (act == model::FfnActivation::Silu) {
                cpu::swiglu(g, up + t * n_ff, g, n_ff, impl_->level);
            } else if (act == model::FfnActivation::SwigluOai) {
                cpu::swiglu_oai(g, up + t * n_ff, g, n_ff);
            } else {
                cpu::geglu(g, up + t * n_ff, g, n_ff, impl_->level);
            }
        }
    });
}

void CpuDevice::add(Act y, Act x, int64_t len, int64_t rows) {
    float* out = impl_->buf(y);
    const float* in = impl_->buf(x);
    impl_->for_rows(rows, [&](int64_t b, int64_t e) { cpu::add(out + b * len, in + b * len, (e - b) * len); });
}

void CpuDevice::scale(Act a, int64_t n_floats, float s) { cpu::scale(impl_->buf(a), n_floats, s); }
void CpuDevice::softcap(Act a, int64_t n_floats, float cap) { cpu::softcap(impl_->buf(a), n_floats, cap); }

void CpuDevice::hadamard(Act a, int64_t n_floats, int64_t block) {
    TANDEM_CHECK(block > 0 && (block & (block - 1)) == 0 && n_floats % block == 0,
                 "hadamard: blocks of a power of two that divides the rows");
    float* x = impl_->buf(a);
    for (int64_t i = 0; i < n_floats; i += block) quant::hadamard_block(x + i, block);
}

uint64_t CpuDevice::kv_bytes() const {
    uint64_t total = 0;
    for (const auto& [il, c] : impl_->kv) total += c.bytes();
    return total;
}

KvSeqRows CpuDevice::kv_read_rows(int64_t il, std::span<const int64_t> cells) const {
    return impl_->cache(il).read_rows(cells);
}

void CpuDevice::kv_write_rows(int64_t il, std::span<const int64_t> cells, const KvSeqRows& rows) {
    impl_->cache(il).write_rows(cells, rows);
}

WeightStream* CpuDevice::enable_weight_stream(int64_t) { return nullptr; }  // the host multiplies what it holds

void CpuDevice::embed(std::span<const int32_t> tokens) {
    const auto& hp = impl_->hp;
    const gguf::TensorInfo* embd = impl_->spec.get(GlobalTensor::TokenEmbd);
    const auto bytes = impl_->file.tensor_data(*embd);
    const uint64_t row = *quant::row_bytes(embd->type, hp.n_embd);
    float* x = impl_->buf(Act::X);
    impl_->for_rows(static_cast<int64_t>(tokens.size()), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            quant::dequantize_row(embd->type, bytes.data() + static_cast<uint64_t>(tokens[static_cast<size_t>(t)]) * row,
                                  x + t * hp.n_embd, hp.n_embd);
        }
    });
    if (impl_->spec.arch->scale_embeddings) {
        cpu::scale(x, static_cast<int64_t>(tokens.size()) * hp.n_embd, std::sqrt(static_cast<float>(hp.n_embd)));
    }
}

void CpuDevice::account_token_embd() {
    const gguf::TensorInfo* embd = impl_->spec.get(GlobalTensor::TokenEmbd);
    impl_->reserve(MemoryCategory::Weights, embd->n_bytes, "tensor 'token_embd.weight'");
}

}  // namespace tandem
