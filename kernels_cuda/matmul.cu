// Matrix products on the GPU, correct by construction rather than fast:
// activations are quantized on the device to the weight type's partner with
// the host's own functions (act_element.h), so the codes and scales are the
// CPU's, and both sides are read element by element through quant_element.h
// (the indexing the CPU tests check). One warp per (weight row, up to
// kTokens tokens), float products summed per lane and reduced by shuffles:
// only the summation order differs from the CPU's integer block sums.
#include <cuda_runtime.h>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/matmul_types.h"
#include "runtime/quant/act_element.h"

namespace tandem::cuda::kernels {
namespace {

namespace el = quant::element;

// Block layout and element access of each stored type, from the table.
template <quant::Type T>
struct Elem;

#define TANDEM_ELEM(Name, Block, Fn, QK)                                                     \
    template <>                                                                            \
    struct Elem<quant::Type::Name> {                                                       \
        using block = Block;                                                               \
        __host__ __device__ static constexpr int qk() { return QK; }                       \
        __device__ static float get(const void* row, int64_t i) {                          \
            return el::row_element<Block, el::Fn, QK>(row, i);                             \
        }                                                                                  \
    };
TANDEM_FOR_EACH_ELEMENT_TYPE(TANDEM_ELEM)
#undef TANDEM_ELEM

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
constexpr int kTokens = 4;

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

template <quant::Type W, quant::Type A>
__global__ void matmul_kernel(const void* __restrict__ w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols,
                              const void* __restrict__ a, uint64_t a_row_bytes, int64_t n_tokens,
                              float* __restrict__ y, int64_t ldy) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
    if (r >= n_rows) return;  // whole warps leave together
    const int nt = static_cast<int>(n_tokens - t0 < kTokens ? n_tokens - t0 : kTokens);
    const void* wrow = static_cast<const char*>(w) + r * w_row_bytes;
    float acc[kTokens] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = threadIdx.x; i < n_cols; i += 32) {
        const float wv = Elem<W>::get(wrow, i);
        for (int t = 0; t < kTokens; ++t) {
            if (t < nt) {
                const void* arow = static_cast<const char*>(a) + (t0 + t) * a_row_bytes;
                acc[t] += wv * Elem<A>::get(arow, i);
            }
        }
    }
    for (int t = 0; t < kTokens; ++t) {
        const float s = warp_sum(acc[t]);
        if (t < nt && threadIdx.x == 0) y[(t0 + t) * ldy + r] = s;
    }
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
                    static_cast<unsigned>((n_tokens + kTokens - 1) / kTokens));
    matmul_kernel<W, A><<<grid, block, 0, stream>>>(w, w_row_bytes, n_rows, n_cols, scratch, a_row_bytes, n_tokens,
                                                    y, ldy);
}

}  // namespace

uint64_t matmul_scratch_bytes(quant::Type w_type, int64_t n_cols, int64_t n_tokens) {
    quant::Type a = quant::Type::F32;
    if (!matmul_activation_type(w_type, a)) return 0;
    const auto bytes = quant::row_bytes(a, n_cols);
    return bytes ? *bytes * static_cast<uint64_t>(n_tokens) : 0;
}

bool launch_matmul(quant::Type w_type, const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols,
                   const float* x, int64_t ldx, int64_t n_tokens, void* scratch, float* y, int64_t ldy,
                   void* stream) {
    quant::Type a = quant::Type::F32;
    if (!matmul_activation_type(w_type, a) || !quant::row_bytes(a, n_cols)) return false;
    if (n_rows <= 0 || n_tokens <= 0) return true;
    const auto s = static_cast<cudaStream_t>(stream);
#define TANDEM_MATMUL_CASE(Wt, At)                                                                              \
    if (w_type == quant::Type::Wt) {                                                                            \
        launch_pair<quant::Type::Wt, quant::Type::At>(w, w_row_bytes, n_rows, n_cols, x, ldx, n_tokens, scratch, \
                                                      y, ldy, s);                                               \
        return true;                                                                                            \
    }
    TANDEM_CUDA_MATMUL_TYPES(TANDEM_MATMUL_CASE)
#undef TANDEM_MATMUL_CASE
    return false;
}

}  // namespace tandem::cuda::kernels
