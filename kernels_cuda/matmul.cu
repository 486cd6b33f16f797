// Matrix products on the GPU, correct by construction rather than fast:
// activations are quantized on the device to the weight type's partner with
// the host's own functions (act_element.h), so the codes and scales are the
// CPU's, and both sides are read element by element through quant_element.h
// (the indexing the CPU tests check). One warp per (weight row, up to
// kMatmulTokens tokens), float products summed per lane (matmul_math.h)
// and reduced by shuffles: only the summation order differs from the CPU's
// integer block sums. Q4_1/Q5_1 add m * s once per block, as the CPU does.
// The batch path's activations (act_roundtrip_kernel) live here too.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/matmul_types.h"
#include "kernels_cuda/device_matmul.h"
#include "kernels_cuda/matmul_math.h"

namespace tandem::cuda::kernels {
namespace {

using math::Elem;
using math::kMatmulTokens;
namespace el = quant::element;

// One thread per activation block.
template <quant::Type A>
__global__ void quantize_act_kernel(const float* __restrict__ x, int64_t ldx, int64_t n_cols, int64_t n_tokens,
                                    void* __restrict__ out, uint64_t out_row_bytes) {
    using B = typename Elem<A>::block;
    constexpr int qk = Elem<A>::qk();
    const int64_t nb = n_cols / qk;
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= nb * n_tokens) return;
    const int64_t t = idx / nb;
    const int64_t b = idx % nb;
    B* row = reinterpret_cast<B*>(static_cast<char*>(out) + t * out_row_bytes);
    const float* src = x + t * ldx + b * qk;
    if constexpr (A == quant::Type::BF16) {
        el::act_block_bf16(src, row[b]);
    } else {
        el::act_block(src, row[b]);
    }
}

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

template <quant::Type W, quant::Type A>
__global__ void matmul_kernel(const void* __restrict__ w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols,
                              const void* __restrict__ a, uint64_t a_row_bytes, int64_t n_tokens,
                              float* __restrict__ y, int64_t ldy) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kMatmulTokens;
    if (r >= n_rows) return;  // whole warps leave together
    const int nt = static_cast<int>(n_tokens - t0 < kMatmulTokens ? n_tokens - t0 : kMatmulTokens);
    const void* wrow = static_cast<const char*>(w) + r * w_row_bytes;
    float acc[kMatmulTokens] = {0.0f, 0.0f, 0.0f, 0.0f};
    math::matmul_lane<W, A>(wrow, static_cast<const char*>(a) + t0 * a_row_bytes, a_row_bytes, nt, n_cols,
                            static_cast<int>(threadIdx.x), acc);
    for (int t = 0; t < kMatmulTokens; ++t) {
        const float s = warp_sum(acc[t]);
        if (t < nt && threadIdx.x == 0) y[(t0 + t) * ldy + r] = s;
    }
}

// One thread per activation block: x quantized to A and read back
// (math::act_roundtrip) into out, rows of n_cols.
template <quant::Type A>
__global__ void act_roundtrip_kernel(const float* __restrict__ x, int64_t ldx, int64_t n_cols, int64_t n_tokens,
                                     float* __restrict__ out) {
    constexpr int qk = math::act_block_elems<A>();
    const int64_t nb = n_cols / qk;
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= nb * n_tokens) return;
    const int64_t t = idx / nb;
    const int64_t b = idx % nb;
    math::act_roundtrip<A>(x + t * ldx + b * qk, out + t * n_cols + b * qk);
}

template <quant::Type W, quant::Type A>
void launch_pair(const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols, const float* x, int64_t ldx,
                 int64_t n_tokens, void* scratch, float* y, int64_t ldy, cudaStream_t stream) {
    const uint64_t a_row_bytes = *quant::row_bytes(A, n_cols);
    const int64_t n_blocks = n_cols / Elem<A>::qk() * n_tokens;
    constexpr int kThreads = 256;
    quantize_act_kernel<A><<<static_cast<unsigned>((n_blocks + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        x, ldx, n_cols, n_tokens, scratch, a_row_bytes);
    const dim3 block(32, kWarpsPerBlock);
    const dim3 grid(static_cast<unsigned>((n_rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                    static_cast<unsigned>((n_tokens + kMatmulTokens - 1) / kMatmulTokens));
    matmul_kernel<W, A><<<grid, block, 0, stream>>>(w, w_row_bytes, n_rows, n_cols, scratch, a_row_bytes, n_tokens,
                                                    y, ldy);
}

}  // namespace

uint64_t matmul_scratch_bytes(quant::Type w_type, int64_t n_cols, int64_t n_tokens) {
    quant::Type a = quant::Type::F32;
    if (!matmul_activation_type(w_type, a)) return 0;
    const auto bytes = quant::row_bytes(a, n_cols);
    if (!bytes) return 0;
    const uint64_t quantized = *bytes * static_cast<uint64_t>(n_tokens);
    // The batch path reads its activations back as floats (4 bytes an
    // element, what model::compute_bytes and stream_bytes allow).
    if (uses_cublas(w_type, n_tokens) && a != quant::Type::F32) {
        return std::max(quantized, static_cast<uint64_t>(n_cols) * static_cast<uint64_t>(n_tokens) * sizeof(float));
    }
    return quantized;
}

bool launch_act_roundtrip(quant::Type w_type, const float* x, int64_t ldx, int64_t n_cols, int64_t n_tokens,
                          float* out, void* stream) {
    quant::Type a = quant::Type::F32;
    if (!matmul_activation_type(w_type, a) || !quant::row_bytes(a, n_cols)) return false;
    if (n_tokens <= 0 || n_cols <= 0) return true;
    const auto s = static_cast<cudaStream_t>(stream);
    constexpr int kThreads = 128;
#define TANDEM_ROUNDTRIP_CASE(At)                                                                          \
    if (a == quant::Type::At) {                                                                           \
        const int64_t n = n_cols / math::act_block_elems<quant::Type::At>() * n_tokens;                   \
        act_roundtrip_kernel<quant::Type::At>                                                             \
            <<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, s>>>(x, ldx, n_cols, n_tokens, out); \
        return true;                                                                                      \
    }
    TANDEM_ROUNDTRIP_CASE(F32)
    TANDEM_ROUNDTRIP_CASE(F16)
    TANDEM_ROUNDTRIP_CASE(BF16)
    TANDEM_ROUNDTRIP_CASE(Q8_0)
    TANDEM_ROUNDTRIP_CASE(Q8_1)
    TANDEM_ROUNDTRIP_CASE(Q8_K)
#undef TANDEM_ROUNDTRIP_CASE
    return false;
}

bool launch_matmul(quant::Type w_type, const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols,
                   const float* x, int64_t ldx, int64_t n_tokens, void* scratch, float* y, int64_t ldy,
                   void* stream) {
    quant::Type a = quant::Type::F32;
    if (!matmul_activation_type(w_type, a) || !quant::row_bytes(a, n_cols)) return false;
    if (n_rows <= 0 || n_tokens <= 0) return true;
    const auto s = static_cast<cudaStream_t>(stream);
#define TANDEM_MATMUL_CASE(Wt)                                                                                  \
    if (w_type == quant::Type::Wt) {                                                                            \
        launch_pair<quant::Type::Wt, quant::dot_type(quant::Type::Wt)>(w, w_row_bytes, n_rows, n_cols, x, ldx,   \
                                                                        n_tokens, scratch, y, ldy, s);          \
        return true;                                                                                            \
    }
    TANDEM_CUDA_MATMUL_TYPES(TANDEM_MATMUL_CASE)
#undef TANDEM_MATMUL_CASE
    return false;
}

}  // namespace tandem::cuda::kernels
