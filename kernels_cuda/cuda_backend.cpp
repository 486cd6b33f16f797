// The CUDA backend: the layers it holds live on one GPU as the GGUF blocks
// of the file (uploaded once), the KV caches as F16 rows, and one
// micro-batch of activations. run_layer launches the kernels in the order of
// CpuBackend::run_layer, with the same math (see kernels_cuda/*.cu), so the
// split changes where a layer runs and not what it computes. Compiled into
// tandem_engine (it implements Backend) only when CUDA is available.
#include "kernels_cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/cuda_device_alloc.h"
#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/cuda_staging.h"
#include "kernels_cuda/device_matmul.h"
#include "kernels_cuda/cuda_weight_stream.h"
#include "kernels_cuda/matmul_types.h"

namespace tandem::cuda {
namespace {

using model::GlobalTensor;
using model::LayerTensor;

struct DeviceWeights {
    quant::Type type = quant::Type::F32;
    const void* data = nullptr;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    uint64_t row_bytes = 0;
};

using DeviceLayerTensors = LayerTensors<DeviceWeights, const float*>;

struct LayerWeights : DeviceLayerTensors {
    kernels::KvCache kv;
};

float* as_floats(const DeviceAlloc* a) { return static_cast<float*>(a->get()); }

void check_launch() { TANDEM_CUDA_CHECK(cudaGetLastError()); }

class CudaBackend final : public Backend {
public:
    CudaBackend(int device, std::optional<uint64_t> capacity, const gguf::File& f, const model::ModelSpec& s,
                const BackendConfig& c)
        : device_(device),
          ledger_(fmt::format("cuda{}", device), capacity_of(device, capacity)),
          file_(f),
          spec_(s),
          hp_(s.hp),
          config_(c) {
        if (!kernels::attention_head_supported(hp_.head_dim_k) || !kernels::attention_head_supported(hp_.head_dim_v)) {
            throw Error(fmt::format("{}: attention heads of {} not supported on CUDA yet", ledger_.device(),
                                    hp_.head_dim_k));
        }
        rope_freqs_ = floats(spec_.get(GlobalTensor::RopeFreqs));
    }

    const std::string& name() const override { return ledger_.device(); }
    bool is_accelerator() const override { return true; }
    const MemoryLedger& ledger() const override { return ledger_; }

    void load_layer(int64_t il) override {
        TANDEM_CHECK(il >= 0 && il < hp_.n_layer && !layers_.count(il), "load_layer: bad or repeated layer");
        select();
        LayerWeights w;
        static_cast<DeviceLayerTensors&>(w) = bind_layer_tensors<DeviceWeights, const float*>(
            spec_, il, [this](const gguf::TensorInfo& t) { return weights(t); },
            [this](const gguf::TensorInfo* t) { return floats(t); });

        // K and V rows (fp16 or Q8_0 blocks, as the CPU's cache) per cell,
        // and the position of each cell; the reservation is the planner's
        // figure, the allocation the real one.
        const int64_t n_cells = model::kv_cells_for_layer(spec_, il, config_.n_ctx, config_.n_ubatch);
        w.kv.q8_0 = config_.cache_type == model::CacheType::Q8_0;
        w.kv.k_dim = hp_.k_dim();
        w.kv.v_dim = hp_.v_dim();
        const uint64_t k_bytes = static_cast<uint64_t>(n_cells * w.kv.k_row_bytes());
        const uint64_t v_bytes = static_cast<uint64_t>(n_cells * w.kv.v_row_bytes());
        const uint64_t pos_bytes = static_cast<uint64_t>(n_cells) * sizeof(int32_t);
        const uint64_t planned = model::kv_bytes_for_layer(spec_, il, config_.n_ctx, config_.n_ubatch,
                                                           config_.cache_type);
        const uint64_t real = k_bytes + v_bytes + pos_bytes;
        auto* block = alloc(MemoryCategory::KvCache, std::max(planned, real), fmt::format("the KV cache of layer {}", il));
        auto* base = static_cast<uint8_t*>(block->get());
        w.kv.k = base;
        w.kv.v = base + k_bytes;
        w.kv.cell_pos = reinterpret_cast<int32_t*>(base + k_bytes + v_bytes);
        w.kv.n_cells = n_cells;
        kernels::launch_kv_clear(w.kv, nullptr);
        check_launch();
        kv_bytes_ += real;
        uploader().finish();  // the layer's weights are on the device before it runs
        layers_.emplace(il, w);
    }

    void load_output() override {
        select();
        output_norm_ = floats(spec_.get(GlobalTensor::OutputNorm));
        head_ = weights(spec_.output_head());  // a tied head is uploaded as a copy
        uploader().finish();
        has_output_ = true;
    }

    void allocate_workspace(bool with_logits) override {
        select();
        // One block of model::compute_bytes, carved in its order: the
        // planner's figure is the allocation.
        const int64_t ub = config_.n_ubatch;
        auto* block = alloc(MemoryCategory::Compute, model::compute_bytes(spec_, ub, with_logits),
                            "activations of one micro-batch");
        float* next = as_floats(block);
        auto take = [&](int64_t n_floats) {
            float* p = next;
            next += ub * n_floats;
            return p;
        };
        x_ = take(hp_.n_embd);
        cur_ = take(hp_.n_embd);
        q_ = take(hp_.q_dim());
        k_ = take(hp_.k_dim());
        v_ = take(hp_.v_dim());
        attn_ = take(std::max(hp_.out_dim(), hp_.n_embd));
        gate_ = take(hp_.n_ff);
        up_ = take(hp_.n_ff);
        pos_ = reinterpret_cast<int32_t*>(take(1));
        // Quantized activations of the widest matmul input: compute_bytes
        // allows 4 bytes an element, more than any activation format needs.
        const int64_t widest = std::max({hp_.n_embd, hp_.out_dim(), hp_.n_ff});
        uint64_t scratch = 0;
        for (const int64_t cols : {hp_.n_embd, hp_.out_dim(), hp_.n_ff}) {
            for (const quant::Type t : weight_types_) {
                scratch = std::max(scratch, kernels::matmul_scratch_bytes(t, cols, ub));
            }
        }
        TANDEM_CHECK(scratch <= static_cast<uint64_t>(ub * widest) * sizeof(float),
                     "matmul scratch larger than model::compute_bytes allows");
        scratch_ = take(widest);
        if (with_logits) logits_ = take(hp_.n_vocab);
        (void)device_matmul();
    }

    WeightStream* enable_weight_stream(int64_t first_layer) override {
        select();
        if (!stream_) {
            stream_ = std::make_unique<CudaWeightStream>(device_, ledger_, uploader(), device_matmul(), file_, spec_,
                                                         first_layer, config_.n_ubatch);
        }
        return stream_.get();
    }

    void set_hidden(const float* host, int64_t n) override {
        select();
        TANDEM_CUDA_CHECK(
            cudaMemcpy(x_, host, static_cast<size_t>(n * hp_.n_embd) * sizeof(float), cudaMemcpyHostToDevice));
    }

    void get_hidden(float* host, int64_t n) const override {
        select();
        TANDEM_CUDA_CHECK(
            cudaMemcpy(host, x_, static_cast<size_t>(n * hp_.n_embd) * sizeof(float), cudaMemcpyDeviceToHost));
    }

    void run_layer(int64_t il, std::span<const int32_t> pos) override {
        const auto it = layers_.find(il);
        TANDEM_CHECK(it != layers_.end(), "run_layer: layer not loaded on this backend");
        select();
        const LayerWeights& w = it->second;
        const auto n = static_cast<int64_t>(pos.size());
        const float eps = static_cast<float>(hp_.rms_eps);
        const int64_t E = hp_.n_embd;
        TANDEM_CUDA_CHECK(cudaMemcpy(pos_, pos.data(), pos.size() * sizeof(int32_t), cudaMemcpyHostToDevice));

        rms_norm(x_, w.attn_norm, cur_, E, n, eps);
        matmul(w.q, cur_, n, q_);
        matmul(w.k, cur_, n, k_);
        matmul(w.v, cur_, n, v_);
        if (w.q_norm) rms_norm(q_, w.q_norm, q_, hp_.head_dim_k, n * hp_.n_head, eps);
        if (w.k_norm) rms_norm(k_, w.k_norm, k_, hp_.head_dim_k, n * hp_.n_head_kv, eps);
        kernels::RopeArgs rope;
        rope.neox = spec_.arch->rope_style == model::RopeStyle::Neox;
        rope.n_rot = hp_.n_rot;
        // The CPU computes this factor on the host with the same call.
        rope.theta_scale = std::pow(w.rope_base, -2.0f / static_cast<float>(hp_.n_rot));
        rope.freq_scale = static_cast<float>(hp_.rope_freq_scale);
        rope.freq_factors = rope_freqs_;
        kernels::launch_rope(q_, n, hp_.n_head, hp_.head_dim_k, hp_.q_dim(), pos_, rope, nullptr);
        check_launch();
        kernels::launch_rope(k_, n, hp_.n_head_kv, hp_.head_dim_k, hp_.k_dim(), pos_, rope, nullptr);
        check_launch();
        kernels::launch_kv_store(k_, v_, n, pos_, w.kv, nullptr);
        check_launch();
        kernels::AttentionArgs shape;
        shape.n_head = hp_.n_head;
        shape.n_head_kv = hp_.n_head_kv;
        shape.head_dim_k = hp_.head_dim_k;
        shape.head_dim_v = hp_.head_dim_v;
        shape.window = w.sliding_window ? hp_.sliding_window : 0;
        shape.scale = 1.0f / std::sqrt(static_cast<float>(
                                 spec_.arch->query_scale_by_embd_per_head ? hp_.n_embd / hp_.n_head : hp_.head_dim_k));
        if (spec_.arch->scale_query_before_attention) {  // as the CPU backend (see arch.h)
            kernels::launch_scale(q_, n * hp_.q_dim(), shape.scale, nullptr);
            check_launch();
            shape.scale = 1.0f;
        }
        kernels::launch_attention(q_, pos_, n, shape, w.kv, attn_, nullptr);
        check_launch();
        matmul(w.o, attn_, n, cur_);
        if (w.attn_post_norm) rms_norm(cur_, w.attn_post_norm, cur_, E, n, eps);
        kernels::launch_add(x_, cur_, n * E, nullptr);
        check_launch();

        rms_norm(x_, w.ffn_norm, cur_, E, n, eps);
        matmul(w.gate, cur_, n, gate_);
        matmul(w.up, cur_, n, up_);
        if (spec_.arch->ffn_activation == model::FfnActivation::Silu) {
            kernels::launch_swiglu(gate_, up_, gate_, n * hp_.n_ff, nullptr);
        } else {
            kernels::launch_geglu(gate_, up_, gate_, n * hp_.n_ff, nullptr);
        }
        check_launch();
        matmul(w.down, gate_, n, cur_);
        if (w.ffn_post_norm) rms_norm(cur_, w.ffn_post_norm, cur_, E, n, eps);
        kernels::launch_add(x_, cur_, n * E, nullptr);
        check_launch();
    }

    void run_output(int64_t first, int64_t count, float* host_logits) override {
        TANDEM_CHECK(has_output_ && logits_, "run_output: the head is not on this backend");
        select();
        rms_norm(x_ + first * hp_.n_embd, output_norm_, cur_, hp_.n_embd, count, static_cast<float>(hp_.rms_eps));
        matmul(head_, cur_, count, logits_);
        if (hp_.final_logit_softcap > 0.0) {
            kernels::launch_softcap(logits_, count * hp_.n_vocab, static_cast<float>(hp_.final_logit_softcap), nullptr);
            check_launch();
        }
        TANDEM_CUDA_CHECK(cudaMemcpy(host_logits, logits_, static_cast<size_t>(count * hp_.n_vocab) * sizeof(float),
                                     cudaMemcpyDeviceToHost));
    }

    void clear_kv() override {
        select();
        for (auto& [il, w] : layers_) kernels::launch_kv_clear(w.kv, nullptr);
        check_launch();
        TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    }

    uint64_t kv_bytes() const override { return kv_bytes_; }

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

    // Made on the first upload (so a backend that never loads weights pins
    // nothing), kept for the backend's life.
    StagingUploader& uploader() {
        if (!uploader_) uploader_ = std::make_unique<StagingUploader>(config_.host_ledger);
        return *uploader_;
    }

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
    // file stored them as (the CPU backend keeps float copies too).
    const float* floats(const gguf::TensorInfo* t) {
        if (!t) return nullptr;
        std::vector<float> v(static_cast<size_t>(t->n_elements));
        const auto bytes = file_.tensor_data(*t);
        const int64_t row = t->row_length();
        const uint64_t row_bytes = *quant::row_bytes(t->type, row);
        for (int64_t r = 0; r < t->n_rows(); ++r) {
            quant::dequantize_row(t->type, bytes.data() + r * row_bytes, v.data() + r * row, row);
        }
        const uint64_t n_bytes = std::max<uint64_t>(t->n_bytes, v.size() * sizeof(float));
        auto* buf = alloc(MemoryCategory::Weights, n_bytes, fmt::format("tensor '{}'", t->name));
        TANDEM_CUDA_CHECK(cudaMemcpy(buf->get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
        if (config_.on_upload) config_.on_upload(t->n_bytes);
        return as_floats(buf);
    }

    void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t rows, float eps) {
        kernels::launch_rms_norm(x, w, y, n, rows, eps, nullptr);
        check_launch();
    }

    void matmul(const DeviceWeights& w, const float* in, int64_t n_tokens, float* out) {
        device_matmul().run(w.type, w.data, w.row_bytes, w.n_rows, w.n_cols, in, n_tokens, scratch_, out, w.n_rows);
    }

    // One per backend, made with the first workspace or stream: the GEMM
    // tile is reserved once however the device is used.
    DeviceMatmul& device_matmul() {
        if (!matmul_) {
            const uint64_t bytes = model::gemm_tile_bytes(spec_);
            auto* tile = alloc(MemoryCategory::Compute, bytes, "the GEMM dequantization tile");
            matmul_ = std::make_unique<DeviceMatmul>(tile->get(), bytes);
        }
        return *matmul_;
    }

    int device_;
    MemoryLedger ledger_;  // declared before every allocation, released after them
    const gguf::File& file_;
    const model::ModelSpec& spec_;
    const model::HParams& hp_;
    BackendConfig config_;
    std::vector<std::unique_ptr<DeviceAlloc>> allocs_;
    std::unique_ptr<StagingUploader> uploader_;
    std::unique_ptr<DeviceMatmul> matmul_;
    std::unique_ptr<CudaWeightStream> stream_;  // after uploader_ and matmul_: destroyed before them
    std::vector<quant::Type> weight_types_;
    std::map<int64_t, LayerWeights> layers_;
    const float* rope_freqs_ = nullptr;
    const float* output_norm_ = nullptr;
    DeviceWeights head_;
    bool has_output_ = false;
    uint64_t kv_bytes_ = 0;
    float *x_ = nullptr, *cur_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *attn_ = nullptr;
    float *gate_ = nullptr, *up_ = nullptr, *logits_ = nullptr;
    int32_t* pos_ = nullptr;
    void* scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, std::optional<uint64_t> capacity, const gguf::File& file,
                                           const model::ModelSpec& spec, const BackendConfig& config) {
    return std::make_unique<CudaBackend>(device, capacity, file, spec, config);
}

}  // namespace tandem::cuda
