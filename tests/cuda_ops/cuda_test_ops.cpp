// Host-data wrappers around single kernels (cuda_test_ops.h), so tests
// compiled by g++ compare each CUDA kernel with its CPU twin without seeing
// a CUDA type. Slow by design: every call copies its inputs in and its
// output out.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "tests/cuda_ops/cuda_test_ops.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/cuda_kernels.h"
#include "runtime/quant/attention_order.h"
#include "kernels_cpu/moe.h"
#include "kernels_cuda/device_matmul.h"
#include "kernels_cuda/expert_matmul.h"
#include "runtime/model/model_spec.h"

namespace tandem::cuda {
namespace {

class Buf {
public:
    explicit Buf(size_t bytes) { TANDEM_CUDA_CHECK(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes)); }
    Buf(const void* host, size_t bytes) : Buf(bytes) {
        if (host && bytes) TANDEM_CUDA_CHECK(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
    }
    ~Buf() { cudaFree(ptr_); }
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
    template <class T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    void to_host(void* host, size_t bytes) const {
        TANDEM_CUDA_CHECK(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost));
    }

private:
    void* ptr_ = nullptr;
};

void finish() {
    TANDEM_CUDA_CHECK(cudaGetLastError());
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
}

size_t floats(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

// A cache of n_cells in cache_type, its arrays not yet set.
kernels::KvCache cache_shape(const char* what, model::CacheType cache_type, int64_t n_cells, int64_t k_dim,
                             int64_t v_dim) {
    for (const quant::Type t : {cache_type.k, cache_type.v}) {
        if (!kernels::kv_type_supported(t)) throw Error(fmt::format("{}: no {} cache", what, quant::traits(t).name));
    }
    kernels::KvCache kv;
    kv.k_type = cache_type.k;
    kv.v_type = cache_type.v;
    kv.n_cells = n_cells;
    kv.k_dim = k_dim;
    kv.v_dim = v_dim;
    return kv;
}

}  // namespace

void dequantize_row_on_device(int device, quant::Type type, const void* host_src, float* host_dst, int64_t n) {
    const quant::TypeTraits& tr = quant::traits(type);
    const auto bytes = quant::row_bytes(type, n);
    if (!bytes) {
        throw Error(fmt::format("dequantize on device: {} elements is not a multiple of {}'s block of {}", n, tr.name,
                                tr.block_elems));
    }
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    const Buf src(host_src, *bytes);
    const Buf dst(static_cast<size_t>(n) * sizeof(float));
    if (!kernels::launch_dequantize(type, src.as<void>(), dst.as<float>(), n, nullptr)) {
        throw Error(fmt::format("dequantize on device: no CUDA kernel for type {}", tr.name));
    }
    TANDEM_CUDA_CHECK(cudaGetLastError());
    dst.to_host(host_dst, static_cast<size_t>(n) * sizeof(float));
}

namespace {

// One weight matrix and one batch of activations on the device, multiplied
// through the backend's dispatch (device_matmul.h): the block-sum kernels,
// or for float weights in batches the tile and cuBLAS.
class DeviceProduct {
public:
    DeviceProduct(int device, quant::Type w_type, const void* host_w, int64_t n_rows, int64_t n_cols,
                  const float* host_x, int64_t n_tokens, const char* what)
        : type_(w_type),
          rows_(n_rows),
          cols_(n_cols),
          tokens_(n_tokens),
          row_bytes_(checked_row_bytes(device, w_type, n_cols, n_tokens, what)),
          w_(host_w, row_bytes_ * static_cast<size_t>(n_rows)),
          x_(host_x, floats(n_tokens * n_cols)),
          scratch_(kernels::matmul_scratch_bytes(w_type, n_cols, n_tokens)),
          y_(floats(n_tokens * n_rows)),
          tile_(model::kMaxGemmTileBytes),
          mm_(tile_.as<void>(), model::kMaxGemmTileBytes) {}

    void launch() {
        mm_.run(type_, w_.as<void>(), row_bytes_, rows_, cols_, x_.as<float>(), cols_, tokens_, scratch_.as<void>(),
                y_.as<float>(), rows_);
    }
    void set_single_token_order(bool on) { mm_.set_single_token_order(on); }
    void result(float* host_y) const { y_.to_host(host_y, floats(tokens_ * rows_)); }

private:
    static size_t checked_row_bytes(int device, quant::Type w_type, int64_t n_cols, int64_t n_tokens,
                                    const char* what) {
        TANDEM_CUDA_CHECK(cudaSetDevice(device));
        const auto row_bytes = quant::row_bytes(w_type, n_cols);
        if (!row_bytes || kernels::matmul_scratch_bytes(w_type, n_cols, n_tokens) == 0) {
            throw Error(fmt::format("{}: no CUDA kernel for {} rows of {}", what, quant::traits(w_type).name, n_cols));
        }
        return *row_bytes;
    }

    quant::Type type_;
    int64_t rows_, cols_, tokens_;
    size_t row_bytes_;
    Buf w_, x_, scratch_, y_, tile_;
    DeviceMatmul mm_;
};

}  // namespace

void matmul_on_device(int device, quant::Type w_type, const void* host_w, int64_t n_rows, int64_t n_cols,
                      const float* host_x, int64_t n_tokens, float* host_y, bool single_token_order) {
    DeviceProduct product(device, w_type, host_w, n_rows, n_cols, host_x, n_tokens, "matmul on device");
    product.set_single_token_order(single_token_order);
    product.launch();
    finish();
    product.result(host_y);
}

double time_matmul_on_device(int device, quant::Type w_type, const void* host_w, int64_t n_rows, int64_t n_cols,
                             const float* host_x, int64_t n_tokens, int iterations) {
    if (iterations <= 0) throw Error(fmt::format("matmul timing: expected at least one iteration, found {}", iterations));
    DeviceProduct product(device, w_type, host_w, n_rows, n_cols, host_x, n_tokens, "matmul timing");
    product.launch();  // warm-up: first-launch costs and clocks
    finish();
    cudaEvent_t start = nullptr, stop = nullptr;
    TANDEM_CUDA_CHECK(cudaEventCreate(&start));
    TANDEM_CUDA_CHECK(cudaEventCreate(&stop));
    TANDEM_CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < iterations; ++i) product.launch();
    TANDEM_CUDA_CHECK(cudaEventRecord(stop));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    TANDEM_CUDA_CHECK(cudaEventDestroy(start));
    TANDEM_CUDA_CHECK(cudaEventDestroy(stop));
    finish();
    return static_cast<double>(ms) * 1e-3 / iterations;
}

void rms_norm_on_device(int device, const float* x, const float* w, float* y, int64_t n, int64_t n_rows, float eps) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    Buf dx(x, floats(n * n_rows));
    Buf dw(w, w ? floats(n) : 0);
    Buf dy(floats(n * n_rows));
    kernels::launch_rms_norm(dx.as<float>(), n, w ? dw.as<float>() : nullptr, dy.as<float>(), n, n, n_rows, eps, nullptr);
    finish();
    dy.to_host(y, floats(n * n_rows));
}

void rope_on_device(int device, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                    const kernels::RopeArgs& args) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    const int64_t n = n_tokens * n_heads * head_dim;
    Buf dx(x, floats(n));
    Buf dpos(pos, static_cast<size_t>(n_tokens) * sizeof(int32_t));
    Buf dff(args.freq_factors, args.freq_factors ? floats(args.n_rot / 2) : 0);
    kernels::RopeArgs a = args;
    a.freq_factors = args.freq_factors ? dff.as<float>() : nullptr;
    kernels::launch_rope(dx.as<float>(), n_tokens, n_heads, head_dim, n_heads * head_dim, dpos.as<int32_t>(), a,
                         nullptr);
    finish();
    dx.to_host(x, floats(n));
}

void glu_on_device(int device, bool gelu, const float* gate, const float* up, float* out, int64_t n) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    Buf dg(gate, floats(n));
    Buf du(up, floats(n));
    Buf dout(floats(n));
    if (gelu) {
        kernels::launch_geglu(dg.as<float>(), du.as<float>(), dout.as<float>(), n, nullptr);
    } else {
        kernels::launch_swiglu(dg.as<float>(), du.as<float>(), dout.as<float>(), n, nullptr);
    }
    finish();
    dout.to_host(out, floats(n));
}

void attention_on_device(int device, const float* q, const int32_t* pos, int64_t n_tokens,
                         const kernels::AttentionArgs& args, model::CacheType cache_type, const void* k, const void* v,
                         const int32_t* cell_pos, int64_t n_cells, int64_t k_dim, int64_t v_dim, float* out) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    if (!kernels::attention_head_supported(args.head_dim_k, args.head_dim_v)) {
        throw Error(fmt::format("attention on device: heads of {} not supported", args.head_dim_k));
    }
    kernels::KvCache kv = cache_shape("attention on device", cache_type, n_cells, k_dim, v_dim);
    Buf dq(q, floats(n_tokens * args.n_head * args.head_dim_k));
    Buf dpos(pos, static_cast<size_t>(n_tokens) * sizeof(int32_t));
    Buf dk(k, static_cast<size_t>(n_cells * kv.k_row_bytes()));
    Buf dv(v, static_cast<size_t>(n_cells * kv.v_row_bytes()));
    Buf dcell(cell_pos, static_cast<size_t>(n_cells) * sizeof(int32_t));
    Buf dout(floats(n_tokens * args.n_head * args.head_dim_v));
    // Room for every chunk's state (runtime/quant/attention_order.h), so
    // that the launcher splits every span of several chunks.
    const int64_t n_chunks = (n_cells + quant::attn::kAttentionChunkCells - 1) / quant::attn::kAttentionChunkCells;
    const int64_t room = n_tokens * args.n_head * std::max<int64_t>(n_chunks, 1) * (args.head_dim_v + 2);
    Buf dpart(floats(room));
    kv.k = dk.as<uint8_t>();
    kv.v = dv.as<uint8_t>();
    kv.cell_pos = dcell.as<int32_t>();
    Buf dsinks(args.sinks, args.sinks ? floats(args.n_head) : 0);
    kernels::AttentionArgs a = args;
    if (args.sinks) a.sinks = dsinks.as<float>();
    a.partials = dpart.as<float>();
    a.partial_floats = room;
    kernels::launch_attention(dq.as<float>(), dpos.as<int32_t>(), n_tokens, a, kv, dout.as<float>(), nullptr);
    finish();
    dout.to_host(out, floats(n_tokens * args.n_head * args.head_dim_v));
}

void kv_store_on_device(int device, model::CacheType cache_type, const float* k, const float* v, int64_t n_tokens,
                        const int32_t* cells, int64_t n_cells, int64_t k_dim, int64_t v_dim, uint8_t* k_out,
                        uint8_t* v_out) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    kernels::KvCache kv = cache_shape("kv store on device", cache_type, n_cells, k_dim, v_dim);
    const auto kb = static_cast<size_t>(kv.k_row_bytes()), vb = static_cast<size_t>(kv.v_row_bytes());
    Buf dk(kb * static_cast<size_t>(n_cells)), dv(vb * static_cast<size_t>(n_cells));
    Buf dkin(k, floats(n_tokens * k_dim)), dvin(v, floats(n_tokens * v_dim));
    Buf dcells(cells, static_cast<size_t>(n_tokens) * sizeof(int32_t));
    kv.k = dk.as<uint8_t>();
    kv.v = dv.as<uint8_t>();
    kernels::launch_kv_store(dkin.as<float>(), dvin.as<float>(), n_tokens, dcells.as<int32_t>(), kv, nullptr);
    finish();
    for (int64_t t = 0; t < n_tokens; ++t) {
        const auto c = static_cast<size_t>(cells[t]);
        TANDEM_CUDA_CHECK(cudaMemcpy(k_out + t * kb, kv.k + c * kb, kb, cudaMemcpyDeviceToHost));
        TANDEM_CUDA_CHECK(cudaMemcpy(v_out + t * vb, kv.v + c * vb, vb, cudaMemcpyDeviceToHost));
    }
}

void add_rows_on_device(int device, float* x, const float* v, int64_t len, int64_t n_rows) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    Buf dx(x, floats(len * n_rows));
    Buf dv(v, floats(len));
    kernels::launch_add_rows(dx.as<float>(), dv.as<float>(), len, n_rows, nullptr);
    finish();
    dx.to_host(x, floats(len * n_rows));
}

void copy_cols_on_device(int device, const float* src, int64_t src_width, int64_t col0, float* dst, int64_t width,
                         int64_t n_rows) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    Buf dsrc(src, floats(src_width * n_rows));
    Buf ddst(floats(width * n_rows));
    kernels::launch_gather_rows(dsrc.as<float>() + col0, src_width, nullptr, n_rows, width, ddst.as<float>(), width,
                                nullptr);
    finish();
    ddst.to_host(dst, floats(width * n_rows));
}

// The host's grouping (the device's: cpu::group_by_expert, then
// plan_expert_rows) and run_expert_products over buffers of the call's size.
void matmul_experts_on_device(int device, quant::Type w_type, const void* host_w, int64_t n_expert, int64_t rows,
                              int64_t n_cols, const float* x, const float* route, int64_t n_used, int64_t n_tokens,
                              bool in_per_slot, bool sum_slots, float* out) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    const auto row_bytes = quant::row_bytes(w_type, n_cols);
    if (!row_bytes || kernels::matmul_scratch_bytes(w_type, n_cols, n_tokens) == 0) {
        throw Error(
            fmt::format("experts on device: no CUDA kernel for {} rows of {}", quant::traits(w_type).name, n_cols));
    }
    cpu::ExpertGroups groups;
    cpu::group_by_expert(route, n_used, n_tokens, n_expert, groups);
    ExpertRows plan;
    plan_expert_rows(groups.offsets, groups.rows, n_used, in_per_slot, plan);
    const int64_t total = n_tokens * n_used;
    const int64_t out_rows = sum_slots ? n_tokens : total;
    Buf dw(host_w, *row_bytes * static_cast<size_t>(n_expert * rows));
    Buf dx(x, floats((in_per_slot ? total : n_tokens) * n_cols));
    Buf droute(route, floats(2 * total));
    Buf dindices(plan.indices.data(), plan.indices.size() * sizeof(int32_t));
    Buf dxg(floats(total * n_cols)), dyg(floats(total * rows)), dout(floats(out_rows * rows));
    Buf scratch(kernels::matmul_scratch_bytes(w_type, n_cols, n_tokens));
    Buf tile(model::kMaxGemmTileBytes);
    DeviceMatmul mm(tile.as<void>(), model::kMaxGemmTileBytes);
    ExpertCall call;
    call.plan = &plan;
    call.indices = dindices.as<int32_t>();
    call.x = dx.as<float>();
    call.n_cols = n_cols;
    call.route = droute.as<float>();
    call.n_used = n_used;
    call.n_tokens = n_tokens;
    call.sum_slots = sum_slots;
    call.x_grouped = dxg.as<float>();
    call.y_grouped = dyg.as<float>();
    call.scratch = scratch.as<void>();
    const ExpertWeight w{w_type, dw.as<void>(), *row_bytes, rows, dout.as<float>()};
    run_expert_products(mm, call, std::span(&w, 1));
    finish();
    dout.to_host(out, floats(out_rows * rows));
}

}  // namespace tandem::cuda
