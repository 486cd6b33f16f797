// The CUDA device: the tensors placed on it live on one GPU, matrices as the
// GGUF blocks of the file (uploaded once) and norms as floats, the K/V rows
// of its layers' caches in F16 or Q8_0 blocks, and one micro-batch of
// activation buffers. Each op launches the kernel of kernels_cuda/*.cu that
// does the CPU's math, so placing an op here changes where it runs and not
// what it computes. Cells are chosen on the host by KvCells, as the CPU's
// caches choose them (cuda_kv_cache.h). Compiled into tandem_engine (it implements Device)
// only when CUDA is available; every kernel runs on the legacy default
// stream, so ops run in the order they are called.
#include "runtime/engine_cuda/cuda_device.h"
#include "runtime/engine_cuda/cuda_plugin.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "kernels_cpu/moe.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/cuda_device_alloc.h"
#include "kernels_cuda/cuda_kernels.h"
#include "runtime/engine_cuda/cuda_kv_cache.h"
#include "runtime/engine_cuda/cuda_staging.h"
#include "runtime/engine_cuda/cuda_uploads.h"
#include "runtime/engine_cuda/cuda_weight_stream.h"
#include "kernels_cuda/device_matmul.h"
#include "kernels_cuda/expert_matmul.h"
#include "kernels_cuda/matmul_types.h"
#include "kernels_cuda/op_math.h"

#ifdef TANDEM_CUDA_EMULATED
#include "kernels_cuda/emulator/emu.h"
#endif

namespace tandem::cuda {
namespace {

using model::GlobalTensor;

struct DeviceWeights {
    quant::Type type = quant::Type::F32;
    const void* data = nullptr;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    uint64_t row_bytes = 0;
};

float* as_floats(const DeviceAlloc* a) { return static_cast<float*>(a->get()); }

void check_launch() { TANDEM_CUDA_CHECK(cudaGetLastError()); }

class CudaDevice final : public Device {
public:
    CudaDevice(int device, std::optional<uint64_t> capacity, const gguf::File& f, const model::ModelSpec& s,
               const DeviceConfig& c)
        : device_(device),
          ledger_(fmt::format("cuda{}", device), capacity_of(device, capacity)),
          file_(f),
          spec_(s),
          hp_(s.hp),
          config_(c) {
#ifdef TANDEM_CUDA_EMULATED
        emu::reset_peak(device_);
        emu_base_ = emu::used_bytes(device_);
#endif
        if (!kernels::attention_head_supported(hp_.head_dim_k, hp_.head_dim_v)) {
            throw Error(fmt::format("{}: attention heads of {} (K) and {} (V) not supported on CUDA yet",
                                    ledger_.device(), hp_.head_dim_k, hp_.head_dim_v));
        }
        // The pinned buffers the planner counts for every accelerator in use
        // (model::kAcceleratorStagingBytes), kept for the device's life.
        select();
        uploader_ = std::make_unique<StagingUploader>(config_.host_ledger);
        uploads_ = std::make_unique<AsyncUploads>(config_.host_ledger);
        // RoPE factors (a few hundred floats) are read by every layer; each
        // device keeps its own.
        if (const gguf::TensorInfo* t = spec_.get(GlobalTensor::RopeFreqs)) rope_freqs_ = floats(*t);
    }

    const std::string& name() const override { return ledger_.device(); }
#ifdef TANDEM_CUDA_EMULATED
    std::optional<uint64_t> host_waits() const override { return emu::host_waits(); }
    std::optional<uint64_t> peak_bytes() const override { return emu::peak_bytes(device_) - emu_base_; }
#endif
    bool is_accelerator() const override { return true; }
    const MemoryLedger& ledger() const override { return ledger_; }

    // ---- loading
    // The tied head is uploaded as a copy like any other matrix.
    void load_matrix(const gguf::TensorInfo& t) override {
        TANDEM_CHECK(!matrices_.count(&t), "load_matrix: tensor loaded twice");
        select();
        matrices_[&t] = weights(t);
    }

    void load_vector(const gguf::TensorInfo& t) override {
        TANDEM_CHECK(!vectors_.count(&t), "load_vector: tensor loaded twice");
        select();
        vectors_[&t] = floats(t);
    }

    void load_kv(int64_t il, const KvCells& cells) override {
        TANDEM_CHECK(!caches_.count(il), "load_kv: layer loaded twice");
        select();
        auto cache = std::make_unique<CudaKvCache>(ledger_, uploads(), fmt::format("the KV cache of layer {}", il),
                                                   config_.cache_type, hp_.k_dim(), hp_.kv_v_dim(), cells,
                                                   config_.n_ubatch);
        kv_bytes_ += cache->bytes();
        caches_.emplace(il, std::move(cache));
    }

    void allocate_workspace(bool with_logits) override {
        select();
        // One block of model::compute_bytes, carved in the order of its
        // width table (model::workspace_widths): one buffer per Act but
        // Logits (none for a width of 0: an Act the model does not use),
        // the positions, the matmul scratch, the experts' room, then the
        // logits. The planner's figure is the allocation.
        const int64_t ub = config_.n_ubatch;
        const model::WorkspaceWidths w = model::workspace_widths(hp_);
        const uint64_t bytes = model::compute_bytes(spec_, ub, with_logits);
        auto* block = alloc(MemoryCategory::Compute, bytes, "activations of one micro-batch");
        float* next = as_floats(block);
        auto take = [&](int64_t n_floats) {
            float* p = next;
            next += ub * n_floats;
            return p;
        };
        for (int a = 0; a < kActCount; ++a) {
            if (static_cast<Act>(a) == Act::Logits) continue;
            const int64_t width = w.act[static_cast<size_t>(a)];
            float* p = take(width);
            act_[a] = width > 0 ? p : nullptr;
        }
        pos_ = reinterpret_cast<int32_t*>(take(w.positions));
        shown_pos_.clear();
        // Quantized activations of the widest matmul input: the table
        // allows 4 bytes an element, more than any activation format needs.
        // An expert's product has at most one row per token (a token
        // chooses an expert once), so ub rows cover it too.
        uint64_t scratch = 0;
        for (const int64_t cols : model::matmul_input_widths(hp_)) {
            if (cols <= 0) continue;
            for (const quant::Type t : weight_types_) {
                scratch = std::max(scratch, kernels::matmul_scratch_bytes(t, cols, ub));
            }
        }
        TANDEM_CHECK(scratch <= static_cast<uint64_t>(ub * w.matmul_input) * sizeof(float),
                     "matmul scratch larger than the workspace's matmul_input allows");
        scratch_ = take(w.matmul_input);
        scratch_floats_ = ub * w.matmul_input;
        // The experts' room: a call's gathered inputs and its products side
        // by side, and its two row index lists (2 * n_used int32s).
        TANDEM_CHECK(2 * hp_.n_expert_used <= w.expert_index,
                     "more experts used per token than the experts' room indexes");
        expert_floats_ = ub * w.expert_rows;
        expert_ = w.expert_rows > 0 ? take(w.expert_rows) : nullptr;
        expert_indices_ = ub * w.expert_index;
        expert_idx_ = w.expert_index > 0 ? reinterpret_cast<int32_t*>(take(w.expert_index)) : nullptr;
        if (with_logits) act_[static_cast<int>(Act::Logits)] = take(w.act[static_cast<size_t>(Act::Logits)]);
        TANDEM_CHECK(static_cast<uint64_t>(next - as_floats(block)) * sizeof(float) == bytes,
                     "workspace carved differently from model::compute_bytes");
        (void)device_matmul();
    }

    void finish_loading() override {
        if (uploader_) uploader_->finish();
    }

    // ---- activations
    void write_act(Act a, const float* host, int64_t n_floats) override {
        select();
        uploads().upload(buf(a), host, static_cast<size_t>(n_floats) * sizeof(float));
        // A route chosen on another device: matmul_experts groups by it here.
        if (a == Act::Route) route_host_.assign(host, host + n_floats);
    }

    void read_act(Act a, float* host, int64_t n_floats) override {
        select();
        TANDEM_CUDA_CHECK(cudaMemcpy(host, buf(a), static_cast<size_t>(n_floats) * sizeof(float), cudaMemcpyDeviceToHost));
    }

    // ---- ops
    void rms_norm(Act x, RowView xv, const gguf::TensorInfo& w, Act y, RowView yv, int64_t rows,
                  float eps) override {
        select();
        TANDEM_CHECK(xv.len == yv.len && (x != y || (xv.col0 == yv.col0 && xv.stride == yv.stride)),
                     "rms_norm: rows of one length, in place only on the same rows");
        kernels::launch_rms_norm(buf(x) + xv.col0, xv.stride, vector(w), buf(y) + yv.col0, yv.stride, xv.len, rows,
                                 eps, nullptr);
        check_launch();
    }

    // One product per head: head h's rows of all tokens are every
    // n_heads-th row, which the kernels take as rows ldx and ldy apart.
    void matmul_heads(const MatmulOut& o, Act in, RowView iv, RowView ov, int64_t n_heads, int64_t n) override {
        select();
        const DeviceWeights& w = matrix(o.w);
        TANDEM_CHECK(n_heads > 0 && w.n_rows % n_heads == 0 && w.n_rows / n_heads == ov.len && w.n_cols == iv.len,
                     "matmul_heads: a weight of n_heads slices of the rows' lengths");
        for (int64_t h = 0; h < n_heads; ++h) {
            const void* slice = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(h * ov.len) * w.row_bytes;
            device_matmul().run(w.type, slice, w.row_bytes, ov.len, w.n_cols, buf(in) + iv.col0 + h * iv.stride,
                                n_heads * iv.stride, n, scratch_, buf(o.out) + ov.col0 + h * ov.stride,
                                n_heads * ov.stride);
        }
    }

    // One product per output; the kernel quantizes its input each time.
    void matmul(std::span<const MatmulOut> outs, Act in, int64_t n) override {
        select();
        for (const MatmulOut& o : outs) {
            const DeviceWeights& w = matrix(o.w);
            device_matmul().run(w.type, w.data, w.row_bytes, w.n_rows, w.n_cols, buf(in), w.n_cols, n, scratch_,
                                buf(o.out), w.n_rows);
        }
    }

    // Head h's row starts stride floats after head h - 1's: the kernel's
    // heads of `stride` floats, from the first row's start.
    void rope(Act a, RowView v, int64_t n_heads, std::span<const int32_t> pos, const RopeOp& op) override {
        select();
        const auto n = static_cast<int64_t>(pos.size());
        upload_positions(pos);
        kernels::RopeArgs args;
        args.neox = op.neox;
        args.n_rot = op.n_rot;
        // The CPU computes this factor on the host with the same call.
        args.theta_scale = std::pow(op.freq_base, -2.0f / static_cast<float>(op.n_rot));
        args.freq_scale = op.freq_scale;
        args.freq_factors = rope_freqs_;
        args.ext_factor = op.ext_factor;
        args.mscale = math::rope_mscale(op.attn_factor, op.ext_factor, op.freq_scale);
        std::copy(std::begin(op.corr_dims), std::end(op.corr_dims), args.corr_dims);
        TANDEM_CHECK(op.n_rot <= v.len && v.len <= v.stride && v.col0 + v.len <= v.stride * n_heads,
                     "rope: rotated dims outside the rows");
        kernels::launch_rope(buf(a) + v.col0, n, n_heads, v.stride, v.stride * n_heads, pos_, args, nullptr);
        check_launch();
    }

    void attention(int64_t il, std::span<const int32_t> cells, std::span<const int32_t> pos,
                   std::span<const int32_t> seq, const AttentionOp& op) override {
        CudaKvCache& c = cache(il);
        select();
        upload_positions(pos);
        // The matmul scratch is free between products: the split partials.
        TANDEM_CHECK(op.v_in_k == (hp_.kv_v_dim() == 0), "attention: V in K only with a cache that stores no V");
        c.store_and_attend(buf(Act::K), op.v_in_k ? nullptr : buf(Act::V), buf(Act::Q), pos_, cells, pos, seq, op,
                           op.sinks ? vector(*op.sinks) : nullptr, buf(Act::Attn), static_cast<float*>(scratch_),
                           scratch_floats_);
    }

    // The router's few logits read back and routed by the CPU's function
    // (one implementation of the choice, as llama.cpp reads its expert ids
    // back); the route goes to the device and stays on the host for
    // matmul_experts' grouping.
    void moe_route(const MoeRouteOp& op, int64_t n) override {
        select();
        TANDEM_CHECK(op.n_expert == act_width(hp_, Act::Router) && 2 * op.n_used == act_width(hp_, Act::Route) &&
                         n >= 0 && n <= config_.n_ubatch,
                     "moe_route: experts or tokens other than the workspace was made for");
        router_host_.resize(static_cast<size_t>(n * op.n_expert));
        route_host_.resize(static_cast<size_t>(n * 2 * op.n_used));
        TANDEM_CUDA_CHECK(cudaMemcpy(router_host_.data(), buf(Act::Router), router_host_.size() * sizeof(float),
                                     cudaMemcpyDeviceToHost));
        cpu::moe_route(router_host_.data(), route_params(op, op.bias ? route_bias(*op.bias, op.n_expert) : nullptr),
                       route_host_.data(), n);
        uploads().upload(buf(Act::Route), route_host_.data(), route_host_.size() * sizeof(float));
    }

    // The selection bias t (n_expert floats) on the host: read back from
    // the device the first time a router uses it.
    const float* route_bias(const gguf::TensorInfo& t, int64_t n_expert) {
        auto [it, fresh] = route_bias_host_.try_emplace(&t);
        if (fresh) {
            it->second.resize(static_cast<size_t>(n_expert));
            TANDEM_CUDA_CHECK(cudaMemcpy(it->second.data(), vector(t), it->second.size() * sizeof(float),
                                         cudaMemcpyDeviceToHost));
        }
        return it->second.data();
    }

    // Grouped by expert on the host from the route's host copy; the rows
    // gathered, multiplied by each chosen expert's slice and put back on
    // the device (kernels_cuda/expert_matmul.h).
    void set_single_token_order(bool on) override {
        single_order_ = on;
        if (matmul_) matmul_->set_single_token_order(on);
    }

    void matmul_experts(std::span<const MatmulOut> outs, Act in, const ExpertOp& op, int64_t n) override {
        select();
        const int64_t n_expert = hp_.n_expert, k = op.n_used;
        TANDEM_CHECK(!outs.empty() && outs.size() <= 2 && !(op.sum_slots && outs.size() != 1),
                     "matmul_experts: one or two products, one when summing the slots");
        TANDEM_CHECK(2 * k == act_width(hp_, Act::Route) && n >= 0 && n <= config_.n_ubatch &&
                         route_host_.size() >= static_cast<size_t>(n * 2 * k),
                     "matmul_experts: no route for these tokens");
        cpu::group_by_expert(route_host_.data(), k, n, n_expert, groups_);
        // The matmul scratch holds ub rows: a token names an expert once.
        for (int64_t e = 0; e < n_expert; ++e) {
            TANDEM_CHECK(groups_.count(e) <= n, "matmul_experts: a route names an expert twice for one token");
        }
        plan_expert_rows(groups_.offsets, groups_.rows, k, op.in_per_slot, plan_);
        ExpertWeight weights[2];
        int64_t cols = 0, widest_rows = 0;
        for (size_t i = 0; i < outs.size(); ++i) {
            const DeviceWeights& w = matrix(outs[i].w);
            TANDEM_CHECK(w.n_rows % n_expert == 0 && (i == 0 || w.n_cols == cols),
                         "matmul_experts: products of other shapes");
            cols = w.n_cols;
            weights[i] = {w.type, w.data, w.row_bytes, w.n_rows / n_expert, buf(outs[i].out),
                          outs[i].bias ? vector(*outs[i].bias) : nullptr};
            widest_rows = std::max(widest_rows, weights[i].rows);
        }
        TANDEM_CHECK(plan_.total * (cols + widest_rows) <= expert_floats_ &&
                         static_cast<int64_t>(plan_.indices.size()) <= expert_indices_,
                     "matmul_experts: products larger than the experts' room in model::compute_bytes");
        uploads().upload(expert_idx_, plan_.indices.data(), plan_.indices.size() * sizeof(int32_t));
        ExpertCall call;
        call.plan = &plan_;
        call.indices = expert_idx_;
        call.x = buf(in);
        call.n_cols = cols;
        call.route = buf(Act::Route);
        call.n_used = k;
        call.n_tokens = n;
        call.sum_slots = op.sum_slots;
        call.x_grouped = expert_;
        call.y_grouped = expert_ + plan_.total * cols;  // right after the inputs: the room holds both
        call.scratch = scratch_;
        run_expert_products(device_matmul(), call, std::span(weights, outs.size()));
    }

    void add_vector(Act a, const gguf::TensorInfo& b, int64_t len, int64_t rows) override {
        select();
        // A bias of another length is the file's fault: an Error naming it.
        if (static_cast<int64_t>(b.n_elements) != len) {
            throw Error(fmt::format("{}: bias '{}' has {} values, expected {}", ledger_.device(), b.name, b.n_elements,
                                    len));
        }
        kernels::launch_add_rows(buf(a), vector(b), len, rows, nullptr);
        check_launch();
    }

    void copy_rows(Act src, RowView sv, Act dst, RowView dv, int64_t rows) override {
        select();
        TANDEM_CHECK(sv.len == dv.len && sv.col0 >= 0 && dv.col0 >= 0, "copy_rows: rows of one length");
        kernels::launch_gather_rows(buf(src) + sv.col0, sv.stride, nullptr, rows, sv.len, buf(dst) + dv.col0,
                                    dv.stride, nullptr);
        check_launch();
    }

    // Row by row, as the CPU: SwiGLU's 16-element rule counts within each
    // row of n_ff (launch_swiglu_rows); GELU is element by element.
    void glu(model::FfnActivation act, int64_t n_ff, int64_t n) override {
        select();
        float* gate = buf(Act::Gate);
        const float* up = buf(Act::Up);
        if (act == model::FfnActivation::Silu) {
            kernels::launch_swiglu_rows(gate, up, gate, n_ff, n, nullptr);
        } else if (act == model::FfnActivation::SwigluOai) {
            kernels::launch_swiglu_oai(gate, up, gate, n * n_ff, nullptr);
        } else {
            kernels::launch_geglu(gate, up, gate, n * n_ff, nullptr);
        }
        check_launch();
    }

    void add(Act y, Act x, int64_t len, int64_t rows) override {
        select();
        kernels::launch_add(buf(y), buf(x), len * rows, nullptr);
        check_launch();
    }

    void scale(Act a, int64_t n_floats, float s) override {
        select();
        kernels::launch_scale(buf(a), n_floats, s, nullptr);
        check_launch();
    }

    void softcap(Act a, int64_t n_floats, float cap) override {
        select();
        kernels::launch_softcap(buf(a), n_floats, cap, nullptr);
        check_launch();
    }

    void hadamard(Act a, int64_t n_floats, int64_t block) override {
        TANDEM_CHECK(block > 0 && (block & (block - 1)) == 0 && n_floats % block == 0,
                     "hadamard: blocks of a power of two that divides the rows");
        select();
        kernels::launch_hadamard(buf(a), n_floats, block, nullptr);
        check_launch();
    }

    // ---- the K/V rows (the cells are the session's)
    KvSeqRows kv_read_rows(int64_t il, std::span<const int64_t> cells) const override {
        select();
        return held_cache(il).read_rows(cells);
    }

    void kv_write_rows(int64_t il, std::span<const int64_t> cells, const KvSeqRows& rows) override {
        select();
        cache(il).write_rows(cells, rows);
    }

    uint64_t kv_bytes() const override { return kv_bytes_; }

    WeightStream* enable_weight_stream(int64_t first_layer) override {
        select();
        if (!stream_) {
            stream_ = std::make_unique<CudaWeightStream>(device_, ledger_, uploader(), device_matmul(), file_, spec_,
                                                         first_layer, config_.n_ubatch);
        }
        return stream_.get();
    }

private:
    static std::optional<uint64_t> capacity_of(int device, std::optional<uint64_t> capacity) {
        int count = 0;
        TANDEM_CUDA_CHECK(cudaGetDeviceCount(&count));
        if (device < 0 || device >= count) {
            throw Error(fmt::format("--device cuda{}: no such GPU ({} found)", device, count));
        }
        TANDEM_CUDA_CHECK(cudaSetDevice(device));
        if (capacity) return capacity;
        size_t free_b = 0, total_b = 0;
        TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        return static_cast<uint64_t>(free_b);
    }

    void select() const { TANDEM_CUDA_CHECK(cudaSetDevice(device_)); }

    StagingUploader& uploader() { return *uploader_; }

    DeviceAlloc* alloc(MemoryCategory c, uint64_t bytes, const std::string& what) {
        allocs_.push_back(std::make_unique<DeviceAlloc>(ledger_, c, bytes, what));
        return allocs_.back().get();
    }

    DeviceWeights weights(const gguf::TensorInfo& t) {
        quant::Type a = quant::Type::F32;
        if (!matmul_activation_type(t.type, a)) {
            throw Error(fmt::format("{}: tensor '{}' has type {}, which has no CUDA matmul yet", ledger_.device(),
                                    t.name, quant::traits(t.type).name));
        }
        const auto bytes = file_.tensor_data(t);
        auto* buf = alloc(MemoryCategory::Weights, t.n_bytes, fmt::format("tensor '{}'", t.name));
        uploader().upload(buf->get(), bytes.data(), t.n_bytes);  // straight from the mapping, in its blocks
        if (config_.on_upload) config_.on_upload(t.n_bytes);
        weight_types_.push_back(t.type);
        DeviceWeights w;
        w.type = t.type;
        w.data = buf->get();
        w.n_cols = t.shape.empty() ? 1 : t.shape[0];
        w.n_rows = t.n_rows();
        w.row_bytes = *quant::row_bytes(t.type, w.n_cols);
        return w;
    }

    // Norm weights and RoPE factors as floats on the device, whatever the
    // file stored them as (the CPU device keeps float copies too).
    const float* floats(const gguf::TensorInfo& t) {
        const std::vector<float> v = tensor_floats(file_, t);
        const uint64_t n_bytes = std::max<uint64_t>(t.n_bytes, v.size() * sizeof(float));
        auto* buf = alloc(MemoryCategory::Weights, n_bytes, fmt::format("tensor '{}'", t.name));
        TANDEM_CUDA_CHECK(cudaMemcpy(buf->get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
        if (config_.on_upload) config_.on_upload(t.n_bytes);
        return as_floats(buf);
    }

    const DeviceWeights& matrix(const gguf::TensorInfo* t) const { return held_tensor(matrices_, t, "matmul"); }
    const float* vector(const gguf::TensorInfo& t) const { return held_tensor(vectors_, &t, "norm or bias"); }

    CudaKvCache& cache(int64_t il) {
        const auto it = caches_.find(il);
        TANDEM_CHECK(it != caches_.end(), "attention: the layer's cache is not on this device");
        return *it->second;
    }
    const CudaKvCache& held_cache(int64_t il) const {
        const auto it = caches_.find(il);
        TANDEM_CHECK(it != caches_.end(), "the layer's KV cache is not on this device");
        return *it->second;
    }

    float* buf(Act a) const {
        float* p = act_[static_cast<int>(a)];
        TANDEM_CHECK(p != nullptr, "activation buffer used before allocate_workspace");
        return p;
    }

    // A micro-batch's positions go up once: every layer's RoPE and
    // attention pass the same ones.
    void upload_positions(std::span<const int32_t> pos) {
        TANDEM_CHECK(pos_ != nullptr, "positions used before allocate_workspace");
        if (std::equal(pos.begin(), pos.end(), shown_pos_.begin(), shown_pos_.end())) return;
        uploads().upload(pos_, pos.data(), pos.size() * sizeof(int32_t));
        shown_pos_.assign(pos.begin(), pos.end());
    }

    AsyncUploads& uploads() { return *uploads_; }

    // One per device, made with the first workspace or stream: the GEMM
    // tile is reserved once however the device is used.
    DeviceMatmul& device_matmul() {
        if (!matmul_) {
            const uint64_t bytes = model::gemm_tile_bytes(spec_);
            auto* room = alloc(MemoryCategory::Compute, bytes, "the GEMM tile and workspace");
            matmul_ = std::make_unique<DeviceMatmul>(room->get(), bytes);
            matmul_->set_single_token_order(single_order_);
        }
        return *matmul_;
    }

    int device_;
    MemoryLedger ledger_;  // declared before every allocation, released after them
    const gguf::File& file_;
    const model::ModelSpec& spec_;
    const model::HParams& hp_;
    DeviceConfig config_;
    std::vector<std::unique_ptr<DeviceAlloc>> allocs_;
    std::unique_ptr<StagingUploader> uploader_;
    std::unique_ptr<AsyncUploads> uploads_;  // before caches_: they hold it
    std::unique_ptr<DeviceMatmul> matmul_;
    bool single_order_ = false;  // set_single_token_order
    std::unique_ptr<CudaWeightStream> stream_;  // after uploader_ and matmul_: destroyed before them
    std::vector<quant::Type> weight_types_;
    std::unordered_map<const gguf::TensorInfo*, DeviceWeights> matrices_;
    std::unordered_map<const gguf::TensorInfo*, const float*> vectors_;
    std::map<int64_t, std::unique_ptr<CudaKvCache>> caches_;
    const float* rope_freqs_ = nullptr;
    uint64_t kv_bytes_ = 0;
#ifdef TANDEM_CUDA_EMULATED
    uint64_t emu_base_ = 0;  // the emulator's bytes held when this device opened
#endif
    float* act_[kActCount] = {};
    int32_t* pos_ = nullptr;
    std::vector<int32_t> shown_pos_;  // what pos_ holds
    void* scratch_ = nullptr;
    int64_t scratch_floats_ = 0;
    // Experts: the route's host copy, the grouping made from it, and the
    // device room of matmul_experts (carve_experts).
    // Host copies of the routers' selection biases (read back once each).
    std::unordered_map<const gguf::TensorInfo*, std::vector<float>> route_bias_host_;
    std::vector<float> router_host_, route_host_;
    cpu::ExpertGroups groups_;
    ExpertRows plan_;
    float* expert_ = nullptr;
    int64_t expert_floats_ = 0;
    int32_t* expert_idx_ = nullptr;
    int64_t expert_indices_ = 0;
};

}  // namespace

std::unique_ptr<Device> direct::make_cuda_device(int device, std::optional<uint64_t> capacity, const gguf::File& file,
                                                 const model::ModelSpec& spec, const DeviceConfig& config) {
    return std::make_unique<CudaDevice>(device, capacity, file, spec, config);
}

}  // namespace tandem::cuda
