// The 256-element i-quants' single-row products (IqLanesOrder, dot_order_iq.h)
// on the GPU, with the CPU's bits: the integers of each block and lane are
// the CPU's (exact; summed in any order), and each (row, lane, token)
// chain steps its blocks in the CPU's order.
//
// block_dot_kernel (matmul.cu) gives a whole block to one thread, which
// runs part() for every token: 64 four-element groups of decoding (grid
// row, signs, multiplier) per block and token, each grid row looked up
// twice and each multiplier four times, the activations read a byte at a
// time and each load instruction spread over 32 blocks. Here a block's
// work is spread over four threads and decoded once for every token:
// - thread (r, g) of a warp holds row r (kIqRows a warp) and lanes 2g and
//   2g + 1, elements 8g..8g+7 of each 32-element chunk: one grid group a
//   chunk, so its grid row (or two), its sign set and its multiplier are
//   read once (IqLanesOrder::group) and serve both lanes and every token;
// - the warp's 8 blocks of a step are first copied to shared memory in
//   consecutive 16-bit words (a load instruction reads 64 bytes of one or
//   two rows), and decoded from there;
// - the grid is copied to shared memory once per CUDA block (kIqWarps x
//   kIqRows rows): the lookups are random, and a shared-memory gather costs
//   its bank conflicts, a cached global one a pass per 128-byte line;
// - per token the thread takes two aligned activation words, two dp4a and
//   two multiplies a chunk (add_group), then steps its two lanes' chains
//   (step_lane) with the block scale weight_scale * a.d, as part() and
//   step() do;
// - IQ1_S's shift chain (a block integer from the activation sums) is
//   summed over the four threads, two chunks each, by shuffles; IQ1_M's
//   shift lanes come with the thread's lanes;
// - at the end thread (r, 0) gathers the row's eight lanes by shuffles and
//   finishes as the CPU does.
// docs/performance.md counts the work a block against block_dot_kernel's.
#include <cuda_runtime.h>

#include "kernels_cuda/cuda_kernels.h"
#include "runtime/quant/dot_order.h"

namespace tandem::cuda::kernels {
namespace {

namespace dot = quant::dot;
namespace iq = quant::iq;

// nvcc's unroll pragmas (the emulator's host compiler has none).
#if defined(__CUDACC__)
#define TANDEM_UNROLL(x) _Pragma(#x)
#else
#define TANDEM_UNROLL(x)
#endif

constexpr int kIqRows = 8;   // rows a warp, four threads a row
constexpr int kIqWarps = 4;  // warps a CUDA block: the grid copy serves 32 rows
constexpr unsigned kFull = 0xffffffffu;

// Four activation codes: on the device one aligned word (Q8_K rows are
// 292-byte blocks with their codes at offset 4, from a cudaMalloc'd
// scratch), on the host the portable load.
__device__ __forceinline__ uint32_t act_word(const int8_t* p) {
#if defined(__CUDA_ARCH__)
    return *reinterpret_cast<const uint32_t*>(p);
#else
    return dot::load4(p);
#endif
}

// The lanes order whose groups O's integers come from: O itself, or the
// batch form's IqTiledOrder::Lanes.
template <class O>
struct LanesOf {
    using type = O;
};
template <class T>
struct LanesOf<dot::IqTiledOrder<T>> {
    using type = dot::IqLanesOrder<T>;
};

template <class O, int kT>
__global__ void __launch_bounds__(32 * kIqWarps)
    iq_dot_kernel(const void* __restrict__ w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_blocks,
                    const void* __restrict__ a, uint64_t a_row_bytes, int64_t n_tokens, float* __restrict__ y,
                    int64_t ldy) {
    using L = typename LanesOf<O>::type;
    using D = typename O::D;
    using WBlock = typename O::WBlock;
    using ABlock = typename O::ABlock;
    using Row = iq::GridRow<D>;
    constexpr bool kTiled = !std::is_same_v<L, O>;  // one chain a (row, token): the block's total
    constexpr bool kChain = O::kShift == dot::IqShift::Chain;
    // Chunks unrolled: all eight for one token; fewer with more tokens,
    // whose loads the compiler would hoist into too many registers.
    [[maybe_unused]] constexpr int kUnroll = kT == 1 ? 8 : kT == 2 ? 4 : 2;
    // The grid in shared memory, copied by the whole CUDA block before any
    // warp may leave.
    const Row* grid = nullptr;
    if constexpr (iq::kHasGrid<D>) {
        __shared__ Row shared_grid[D::kGridRows];
        const Row* table = D::grid();
        const int tid = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
        for (int i = tid; i < D::kGridRows; i += static_cast<int>(blockDim.x * blockDim.y)) shared_grid[i] = table[i];
        __syncthreads();
        grid = shared_grid;
    }
    const int lane_id = static_cast<int>(threadIdx.x);
    const int r = lane_id >> 2;
    const int g = lane_id & 3;  // lanes 2g, 2g + 1
    const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kIqWarps + threadIdx.y) * kIqRows;
    if (row0 >= n_rows) return;  // whole warps leave together
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kT;
    const int nt = static_cast<int>(n_tokens - t0 < kT ? n_tokens - t0 : kT);
    // The warp's 8 blocks i, staged in shared memory word by word: word e
    // of the tile (this thread's e = lane_id + 32m) is word e % kW of row
    // e / kW's block, so each load instruction reads 64 consecutive bytes
    // of one or two rows, where the decoders' own reads (a few bytes of
    // each of 8 rows an instruction) would touch 8 rows' lines.
    static_assert(sizeof(WBlock) % 2 == 0, "blocks of 16-bit words");
    constexpr int kW = static_cast<int>(sizeof(WBlock) / 2);
    constexpr int kTile = kIqRows * kW;
    constexpr int kCopies = (kTile + 31) / 32;
    __shared__ uint16_t stage[kIqWarps][kTile];
    uint16_t* tile = stage[threadIdx.y];
    const char* wbase = static_cast<const char*>(w) + row0 * w_row_bytes;
    // This thread's byte offsets from wbase's block 0; rows past the end
    // repeat the last (computed, never stored).
    uint32_t src[kCopies];
    TANDEM_UNROLL(unroll)
    for (int m = 0; m < kCopies; ++m) {
        const int e = lane_id + 32 * m < kTile ? lane_id + 32 * m : kTile - 1;
        const int64_t rr = row0 + e / kW < n_rows ? e / kW : n_rows - 1 - row0;
        src[m] = static_cast<uint32_t>(rr * static_cast<int64_t>(w_row_bytes)) + 2u * static_cast<uint32_t>(e % kW);
    }
    const auto& wb = *reinterpret_cast<const WBlock*>(tile + r * kW);
    const char* act = static_cast<const char*>(a) + t0 * a_row_bytes;
    const ABlock* arows[kT];
    TANDEM_UNROLL(unroll)
    for (int t = 0; t < kT; ++t) arows[t] = reinterpret_cast<const ABlock*>(act + (t < nt ? t : 0) * a_row_bytes);
    float acc[kT][2] = {}, acc2[kT][2] = {};
    for (int64_t i = 0; i < n_blocks; ++i) {
        const char* blocks = wbase + i * static_cast<int64_t>(sizeof(WBlock));
        __syncwarp();  // the last block's reads are done
    TANDEM_UNROLL(unroll)
        for (int m = 0; m < kCopies; ++m) {
            if (m + 1 < kCopies || lane_id + 32 * m < kTile) {
                tile[lane_id + 32 * m] = *reinterpret_cast<const uint16_t*>(blocks + src[m]);
            }
        }
        __syncwarp();
        int lane[kT][2] = {}, shift[kT][2] = {};
    TANDEM_UNROLL(unroll kUnroll)
        for (int c = 0; c < 8; ++c) {
            const typename L::Group q = L::group(wb, c, g, grid);
    TANDEM_UNROLL(unroll)
            for (int t = 0; t < kT; ++t) {
                if (kT == 1 || t < nt) {  // one token a warp: nt is 1
                    const int8_t* qs = arows[t][i].qs + 32 * c + 8 * g;
                    L::add_group(q, act_word(qs), act_word(qs + 4), lane[t], shift[t]);
                }
            }
        }
        if constexpr (kChain) {
            // Chunks g and g + 4 here, the other six on the row's other
            // threads: the block's integer on all four.
    TANDEM_UNROLL(unroll)
            for (int t = 0; t < kT; ++t) {
                const ABlock& ab = arows[t][i];
                int s = kT == 1 || t < nt ? L::chunk_shift(wb, ab, g) + L::chunk_shift(wb, ab, g + 4) : 0;
                s += __shfl_xor_sync(kFull, s, 1);
                s += __shfl_xor_sync(kFull, s, 2);
                shift[t][0] = s;
            }
        }
        const float dw = O::weight_scale(wb);  // the batch form's with its factor
    TANDEM_UNROLL(unroll)
        for (int t = 0; t < kT; ++t) {
            if constexpr (kTiled) {
                // The block's total: the row's four threads' shares (and
                // IQ1_S's chain, already the block's), then one step.
                int total = O::total_of(lane[t][0] + lane[t][1], shift[t][0] + shift[t][1]);
                total += __shfl_xor_sync(kFull, total, 1);
                total += __shfl_xor_sync(kFull, total, 2);
                if constexpr (kChain) total += shift[t][0];
                if (kT == 1 || t < nt) O::step_total(acc[t][0], dw, arows[t][i].d, total);
            } else if (kT == 1 || t < nt) {
                const float d = dw * arows[t][i].d;
                for (int e = 0; e < 2; ++e) L::step_lane(acc[t][e], acc2[t][e], d, lane[t][e], shift[t][e], 2 * g + e);
            }
        }
    }
    for (int t = 0; t < kT; ++t) {
        const bool store = g == 0 && t < nt && row0 + r < n_rows;
        float* out = y + (t0 + t) * ldy + row0 + r;
        if constexpr (kTiled) {
            if (store) *out = O::finish(&acc[t][0], &acc2[t][0]);
        } else {
            float lanes[8], lanes2[8];
            for (int h = 0; h < 4; ++h) {
                for (int e = 0; e < 2; ++e) {
                    lanes[2 * h + e] = __shfl_sync(kFull, acc[t][e], 4 * r + h);
                    lanes2[2 * h + e] = __shfl_sync(kFull, acc2[t][e], 4 * r + h);
                }
            }
            if (store) *out = O::finish(lanes, lanes2);
        }
    }
}

template <class O, int kT>
void launch_iq_kernel(const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_blocks, const char* act,
                            uint64_t a_row_bytes, int64_t n, float* y, int64_t ldy, cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>((n_rows + kIqWarps * kIqRows - 1) / (kIqWarps * kIqRows)),
                    static_cast<unsigned>((n + kT - 1) / kT));
    iq_dot_kernel<O, kT><<<grid, dim3(32, kIqWarps), 0, stream>>>(w, w_row_bytes, n_rows, n_blocks, act,
                                                                   a_row_bytes, n, y, ldy);
}

template <quant::Type W, dot::Form F>
void launch_iq_type(const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols, const char* act,
                    uint64_t a_row_bytes, int64_t n, float* y, int64_t ldy, cudaStream_t stream) {
    using O = typename dot::OrderOf<W, F>::type;
    // The fewest tokens a warp that cover the step, as block_dot_kernel
    // (the batch form comes here with 8: more go to the tensor cores).
    if constexpr (F == dot::Form::Batch) {
        launch_iq_kernel<O, 8>(w, w_row_bytes, n_rows, n_cols / O::kElems, act, a_row_bytes, n, y, ldy, stream);
    } else {
        const auto run = n == 1   ? launch_iq_kernel<O, 1>
                         : n == 2 ? launch_iq_kernel<O, 2>
                         : n <= 4 ? launch_iq_kernel<O, 4>
                                  : launch_iq_kernel<O, 8>;
        run(w, w_row_bytes, n_rows, n_cols / O::kElems, act, a_row_bytes, n, y, ldy, stream);
    }
}

}  // namespace

bool launch_iq_dot(quant::Type w_type, bool batch_form, const void* w, uint64_t w_row_bytes, int64_t n_rows,
                   int64_t n_cols, const void* a, uint64_t a_row_bytes, int64_t t_begin, int64_t t_end, float* y,
                   int64_t ldy, void* stream) {
    const int64_t n = t_end - t_begin;
    const char* act = static_cast<const char*>(a) + t_begin * a_row_bytes;
    const auto s = static_cast<cudaStream_t>(stream);
#define TANDEM_IQ_DOT_CASE(Wt)                                                                                   \
    if (w_type == quant::Type::Wt) {                                                                             \
        if (n > 0 && n_rows > 0) {                                                                               \
            const auto run = batch_form ? launch_iq_type<quant::Type::Wt, dot::Form::Batch>                      \
                                        : launch_iq_type<quant::Type::Wt, dot::Form::Single>;                    \
            run(w, w_row_bytes, n_rows, n_cols, act, a_row_bytes, n, y + t_begin * ldy, ldy, s);                 \
        }                                                                                                        \
        return true;                                                                                             \
    }
    TANDEM_IQ_DOT_CASE(IQ2_XXS)
    TANDEM_IQ_DOT_CASE(IQ2_XS)
    TANDEM_IQ_DOT_CASE(IQ2_S)
    TANDEM_IQ_DOT_CASE(IQ3_XXS)
    TANDEM_IQ_DOT_CASE(IQ3_S)
    TANDEM_IQ_DOT_CASE(IQ1_S)
    TANDEM_IQ_DOT_CASE(IQ1_M)
    TANDEM_IQ_DOT_CASE(IQ4_XS)
#undef TANDEM_IQ_DOT_CASE
    return false;
}

}  // namespace tandem::cuda::kernels
