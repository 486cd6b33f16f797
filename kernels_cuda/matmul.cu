// Matrix products on the GPU with the CPU's bits: activations are quantized
// on the device to the weight type's partner with the host's own functions
// (act_element.h), so the codes and scales are the CPU's, and every block's
// integer sum and float step is runtime/quant/dot_order.h, the function the
// CPU's scalar reference runs (block_dot_kernel below says how a warp
// spreads it). Float weights take dot_order.h's sixteen-lane order. The
// cuBLAS path's activations (act_roundtrip_kernel) live here too.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels_cuda/cuda_kernels.h"
#include "kernels_cuda/matmul_types.h"
#include "kernels_cuda/device_matmul.h"
#include "kernels_cuda/matmul_math.h"
#include "kernels_cuda/mma.h"
#include "runtime/quant/dot_order.h"

namespace tandem::cuda::kernels {
namespace {

using math::Elem;
namespace el = quant::element;
namespace dot = quant::dot;

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

// ---- Quantized weights: integer block sums in the CPU's order (dot_order.h)
// (The 256-element i-quants' single-row order has a kernel of its own,
// matmul_iq.cu, which spreads a block over four threads.)
// A warp takes kRows rows and up to kT tokens (1, 2, 4 or 8: a decode
// step of one sequence keeps one token's state, not eight). The row's blocks go in
// chunks of 8: thread (r, j) computes O::part of block j of row r for every
// token (exact integers, dp4a) into shared memory; then thread (r, l) steps
// float lane l of row r through the chunk's 8 blocks in order (one fused
// multiply-add a block and token, as the CPU). Lanes, rows and tokens are
// independent chains, so the float work spreads over the warp while each
// chain keeps the CPU's order; finish then sums the lanes as the CPU does.
constexpr int kRows = 4;    // rows a warp
constexpr int kChunk = 8;   // blocks a chunk
constexpr int kTokens = 8;  // tokens a warp at most (a decode step of up to 8 streams reads each weight once)
constexpr int kWarps = 2;   // warps a CUDA block
static_assert(kRows * kChunk == 32, "a thread per (row, block of the chunk)");

template <class O, int kT>
__global__ void __launch_bounds__(32 * kWarps)
    block_dot_kernel(const void* __restrict__ w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_blocks,
                     const void* __restrict__ a, uint64_t a_row_bytes, int64_t n_tokens, float* __restrict__ y,
                     int64_t ldy) {
    using Part = typename O::Part;
    using WBlock = typename O::WBlock;
    using ABlock = typename O::ABlock;
    __shared__ Part parts[kWarps][kRows][kChunk][kT];
    __shared__ float lanes[kWarps][kRows][kT][8];
    __shared__ float lanes2[kWarps][kRows][kT][8];  // the second chains (lane 0's, or IQ1_M's eight)
    const int warp = static_cast<int>(threadIdx.y);
    const int r = static_cast<int>(threadIdx.x) / kChunk;
    const int j = static_cast<int>(threadIdx.x) % kChunk;  // block of the chunk, then float lane
    const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRows;
    if (row0 >= n_rows) return;  // whole warps leave together
    // Rows past the end repeat the last row: computed, never stored.
    const int64_t row = row0 + r < n_rows ? row0 + r : n_rows - 1;
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kT;
    const int nt = static_cast<int>(n_tokens - t0 < kT ? n_tokens - t0 : kT);
    const auto* wrow = reinterpret_cast<const WBlock*>(static_cast<const char*>(w) + row * w_row_bytes);
    const char* act = static_cast<const char*>(a) + t0 * a_row_bytes;
    float acc[kT] = {}, acc2[kT] = {};
    for (int64_t c = 0; c < n_blocks; c += kChunk) {
        const int nb = static_cast<int>(n_blocks - c < kChunk ? n_blocks - c : kChunk);
        if (j < nb) {
            const WBlock& wb = wrow[c + j];  // read in place: a copy would sit in local memory
            for (int t = 0; t < kT; ++t) {
                if (t < nt) {
                    const auto* arow = reinterpret_cast<const ABlock*>(act + t * a_row_bytes);
                    parts[warp][r][j][t] = O::part(wb, arow[c + j]);
                }
            }
        }
        __syncwarp();
        if (j < O::kLanes) {
            for (int b = 0; b < nb; ++b) {
                for (int t = 0; t < kT; ++t) {
                    if (t < nt) O::step(acc[t], acc2[t], parts[warp][r][b][t], j);
                }
            }
        }
        __syncwarp();
    }
    if constexpr (O::kLanes == 8) {
        for (int t = 0; t < kT; ++t) {
            lanes[warp][r][t][j] = acc[t];
            lanes2[warp][r][t][j] = acc2[t];
        }
        __syncwarp();
    }
    if (j != 0 || row0 + r >= n_rows) return;
    for (int t = 0; t < kT; ++t) {
        if (t < nt) {
            const float v = O::kLanes == 8 ? O::finish(lanes[warp][r][t], lanes2[warp][r][t]) : O::finish(&acc[t], &acc2[t]);
            y[(t0 + t) * ldy + row0 + r] = v;
        }
    }
}

// ---- Batches on the int8 tensor cores, for the orders whose integers are
// sums of 16-element groups (dot::HasGroupSums: Q4_0, and the K orders of
// one chain). A warp takes 16 rows and kMmaTiles tiles of 8 tokens. For
// each block in order it loads the 16 rows' codes of every group once as
// A fragments (mma.h), and for each tile of tokens one mma a group gives
// each lane the raw group sums of its four (row, token) pairs: rows g and
// g + 8, tokens 2t and 2t + 1. The lane then builds each pair's part from
// them (part_of_groups, the integers part() would give) and steps the
// pair's chain, so every chain runs its blocks in the CPU's order: the
// products are the CPU's bits, as block_dot_kernel's.
constexpr int kMmaWarps = 4;
constexpr int kMmaTiles = 4;
constexpr int kMmaTokens = 8 * kMmaTiles;

// A warp's share of an mma kernel: 16 rows from blockIdx.x and threadIdx.y,
// up to kTileTokens tokens from blockIdx.y. Lane (g, t) of the fragments
// (mma.h) reads rows g and g + 8; rows and tokens past the end repeat the
// last, computed and never stored. `done`: the warp has no row (whole
// warps leave together).
template <class O, int kTileTokens>
struct MmaTile {
    using WBlock = typename O::WBlock;
    using ABlock = typename O::ABlock;
    int g, t;
    int64_t row0, t0;
    int nt;
    bool done;
    const WBlock* rows[2];
    const char* act;
    uint64_t a_row_bytes;
    __device__ MmaTile(const void* w, uint64_t w_row_bytes, int64_t n_rows, const void* a, uint64_t a_bytes,
                       int64_t n_tokens)
        : g(static_cast<int>(threadIdx.x) / 4),
          t(static_cast<int>(threadIdx.x) % 4),
          row0((static_cast<int64_t>(blockIdx.x) * kMmaWarps + threadIdx.y) * 16),
          t0(static_cast<int64_t>(blockIdx.y) * kTileTokens),
          nt(static_cast<int>(n_tokens - t0 < kTileTokens ? n_tokens - t0 : kTileTokens)),
          done(row0 >= n_rows),
          act(static_cast<const char*>(a) + t0 * a_bytes),
          a_row_bytes(a_bytes) {
        for (int h = 0; h < 2; ++h) {
            const int64_t row = row0 + g + 8 * h < n_rows ? row0 + g + 8 * h : n_rows - 1;
            rows[h] = reinterpret_cast<const WBlock*>(static_cast<const char*>(w) + row * w_row_bytes);
        }
    }
    __device__ const ABlock* token(int tok) const {
        return reinterpret_cast<const ABlock*>(act + (tok < nt ? tok : nt - 1) * a_row_bytes);
    }
};

// The grid of an mma kernel: kMmaWarps warps of 16 rows a CUDA block, and
// tiles of tile_tokens tokens.
dim3 mma_grid(int64_t n_rows, int64_t n_tokens, int64_t tile_tokens) {
    return dim3(static_cast<unsigned>((n_rows + 16 * kMmaWarps - 1) / (16 * kMmaWarps)),
                static_cast<unsigned>((n_tokens + tile_tokens - 1) / tile_tokens));
}

template <class O>
__global__ void __launch_bounds__(32 * kMmaWarps)
    mma_dot_kernel(const void* __restrict__ w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_blocks,
                   const void* __restrict__ a, uint64_t a_row_bytes, int64_t n_tokens, float* __restrict__ y,
                   int64_t ldy) {
    using ABlock = typename O::ABlock;
    constexpr int kGroups = O::kGroups;
    const MmaTile<O, kMmaTokens> tile(w, w_row_bytes, n_rows, a, a_row_bytes, n_tokens);
    if (tile.done) return;
    const int g = tile.g, t = tile.t, nt = tile.nt;
    const auto& rows = tile.rows;
    float acc[kMmaTiles][4] = {}, acc2[kMmaTiles][4] = {};
    for (int64_t i = 0; i < n_blocks; ++i) {
        uint32_t codes[2][kGroups];
        for (int gr = 0; gr < kGroups; ++gr) {
            for (int h = 0; h < 2; ++h) codes[h][gr] = O::group_codes4(rows[h][i], 16 * gr + 4 * t);
        }
        for (int j = 0; j < kMmaTiles && 8 * j < nt; ++j) {
            const ABlock& b = tile.token(8 * j + g)[i];
            int sums[4][kGroups];
            for (int gr = 0; gr < kGroups; ++gr) {
                int32_t c[4] = {0, 0, 0, 0};
                mma_s8_16x8x16(c, codes[0][gr], codes[1][gr], dot::load4(b.qs + 16 * gr + 4 * t));
                for (int q = 0; q < 4; ++q) sums[q][gr] = c[q];
            }
            for (int q = 0; q < 4; ++q) {
                const auto p = O::part_of_groups(rows[q / 2][i], tile.token(8 * j + 2 * t + q % 2)[i], sums[q]);
                O::step(acc[j][q], acc2[j][q], p, 0);
            }
        }
    }
    for (int j = 0; j < kMmaTiles; ++j) {
        for (int q = 0; q < 4; ++q) {
            const int64_t row = tile.row0 + g + 8 * (q / 2);
            const int tok = 8 * j + 2 * t + q % 2;
            if (row < n_rows && tok < nt) y[(tile.t0 + tok) * ldy + row] = O::finish(&acc[j][q], &acc2[j][q]);
        }
    }
}

// ---- Batches of the eight-lane orders (Q4_1, Q5_0, Q5_1, Q8_0: LegacyLanesOrder)
// on the tensor cores. The CPU keeps eight chains per (row, token), lane l
// summing elements 4l..4l+3 of each block, so the mma must keep each
// lane's four products apart: column n of B is token n / 4 holding only
// the four elements of lane n % 4 of the 16-element half (zeros
// elsewhere). One m16n8k16 then gives 16 rows x 2 tokens x 4 lanes, and
// the block's two halves its 8 lanes. Lane (g, t) receives rows g and
// g + 8, token t / 2 of the pair, and lanes 2 (t % 2) + {0, 1} of each
// half; it steps those four chains of its two (row, token) pairs (and
// t % 2 == 0 the minimum's chain), and finish gathers the partner t ^ 1's
// four lanes by shuffle. Four times the group kernel's mmas for the same
// weight reads: the tensor cores have them to spare, and the bits are the
// CPU's.
constexpr int kLanePairs = 8;  // pairs of tokens a warp

template <class O>
__global__ void __launch_bounds__(32 * kMmaWarps)
    mma_lanes_kernel(const void* __restrict__ w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_blocks,
                     const void* __restrict__ a, uint64_t a_row_bytes, int64_t n_tokens, float* __restrict__ y,
                     int64_t ldy) {
    using ABlock = typename O::ABlock;
    const MmaTile<O, 2 * kLanePairs> tile(w, w_row_bytes, n_rows, a, a_row_bytes, n_tokens);
    if (tile.done) return;
    const int g = tile.g, t = tile.t, nt = tile.nt;
    const auto& rows = tile.rows;
    const int mine = t / 2;  // this lane's token of each pair
    float acc[kLanePairs][2][4] = {};  // [pair][row g, g + 8][half * 2 + e]: lane 4 half + 2 (t % 2) + e
    float acc2[kLanePairs][2] = {};
    for (int64_t i = 0; i < n_blocks; ++i) {
        uint32_t codes[2][2];  // [half][row]
        for (int half = 0; half < 2; ++half) {
            for (int h = 0; h < 2; ++h) codes[half][h] = O::lane_codes4(rows[h][i], 4 * half + t);
        }
        for (int p = 0; p < kLanePairs && 2 * p < nt; ++p) {
            const ABlock& column = tile.token(2 * p + g / 4)[i];
            const ABlock& own = tile.token(2 * p + mine)[i];
            int32_t c[2][4] = {};
            for (int half = 0; half < 2; ++half) {
                const uint32_t b = t == g % 4 ? dot::load4(column.qs + 16 * half + 4 * t) : 0u;
                mma_s8_16x8x16(c[half], codes[half][0], codes[half][1], b);
            }
            for (int h = 0; h < 2; ++h) {
                const float d = O::scale(rows[h][i], own);
                for (int half = 0; half < 2; ++half) {
                    for (int e = 0; e < 2; ++e) O::step_lane(acc[p][h][2 * half + e], d, c[half][2 * h + e]);
                }
                if (t % 2 == 0) O::step_min(acc2[p][h], dot::min_of(rows[h][i]), O::act_sum(own));
            }
        }
    }
    for (int p = 0; p < kLanePairs; ++p) {
        for (int h = 0; h < 2; ++h) {
            float lanes[8];
            for (int half = 0; half < 2; ++half) {
                for (int e = 0; e < 2; ++e) {
                    const float other = __shfl_xor_sync(0xffffffffu, acc[p][h][2 * half + e], 1);
                    lanes[4 * half + e] = acc[p][h][2 * half + e];
                    lanes[4 * half + 2 + e] = other;
                }
            }
            const int64_t row = tile.row0 + g + 8 * h;
            const int tok = 2 * p + mine;
            if (t % 2 == 0 && row < n_rows && tok < nt) y[(tile.t0 + tok) * ldy + row] = O::finish(lanes, &acc2[p][h]);
        }
    }
}

// ---- Float weights (F32, F16, BF16 against the same type): dot::float_dot's
// sixteen lanes, thread (r, l) of kFloatRows rows running lane l.
constexpr int kFloatRows = 2;

template <class T>
__global__ void __launch_bounds__(32 * kWarps)
    float_dot_kernel(const void* __restrict__ w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols,
                     const void* __restrict__ a, uint64_t a_row_bytes, int64_t n_tokens, float* __restrict__ y,
                     int64_t ldy) {
    __shared__ float lanes[kWarps][kFloatRows][kTokens][16];
    const int warp = static_cast<int>(threadIdx.y);
    const int r = static_cast<int>(threadIdx.x) / 16;
    const int l = static_cast<int>(threadIdx.x) % 16;
    const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kFloatRows;
    if (row0 >= n_rows) return;
    const int64_t row = row0 + r < n_rows ? row0 + r : n_rows - 1;
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokens;
    const int nt = static_cast<int>(n_tokens - t0 < kTokens ? n_tokens - t0 : kTokens);
    const T* x = reinterpret_cast<const T*>(static_cast<const char*>(w) + row * w_row_bytes);
    const char* act = static_cast<const char*>(a) + t0 * a_row_bytes;
    float acc[kTokens] = {};
    dot::for_lane_elements(n_cols, l, [&](int64_t e) {
        const float wv = dot::widen(x[e]);
        for (int t = 0; t < kTokens; ++t) {
            if (t < nt) acc[t] = dot::fma_f(wv, dot::widen(reinterpret_cast<const T*>(act + t * a_row_bytes)[e]), acc[t]);
        }
    });
    for (int t = 0; t < kTokens; ++t) lanes[warp][r][t][l] = acc[t];
    __syncwarp();
    if (l != 0 || row0 + r >= n_rows) return;
    for (int t = 0; t < nt; ++t) {
        y[(t0 + t) * ldy + row0 + r] =
            dot::float_finish(n_cols, x, reinterpret_cast<const T*>(act + t * a_row_bytes), lanes[warp][r][t]);
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

template <quant::Type A>
void launch_quantize(const float* x, int64_t ldx, int64_t n_cols, int64_t n_tokens, void* scratch,
                     cudaStream_t stream) {
    const int64_t n_blocks = n_cols / Elem<A>::qk() * n_tokens;
    constexpr int kThreads = 256;
    quantize_act_kernel<A><<<static_cast<unsigned>((n_blocks + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        x, ldx, n_cols, n_tokens, scratch, *quant::row_bytes(A, n_cols));
}

dim3 grid_for(int64_t n_rows, int64_t rows_a_warp, int64_t n_tokens, int64_t tokens_a_warp = kTokens) {
    return dim3(static_cast<unsigned>((n_rows + kWarps * rows_a_warp - 1) / (kWarps * rows_a_warp)),
                static_cast<unsigned>((n_tokens + tokens_a_warp - 1) / tokens_a_warp));
}

template <class O, int kT>
void launch_block_dot_kernel(const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_blocks, const char* act,
                             uint64_t a_row_bytes, int64_t n, float* y, int64_t ldy, cudaStream_t stream) {
    block_dot_kernel<O, kT><<<grid_for(n_rows, kRows, n, kT), dim3(32, kWarps), 0, stream>>>(
        w, w_row_bytes, n_rows, n_blocks, act, a_row_bytes, n, y, ldy);
}

// The 256-element i-quants' orders, whose dp4a form is matmul_iq.cu's.
template <class O>
struct IsIq {
    static constexpr bool kSingle = false, kBatch = false;
};
template <class T>
struct IsIq<dot::IqLanesOrder<T>> {
    static constexpr bool kSingle = true, kBatch = false;
};
template <class T>
struct IsIq<dot::IqTiledOrder<T>> {
    static constexpr bool kSingle = false, kBatch = true;
};

// Tokens [t_begin, t_end) of the quantized activations in order O (of
// weight type w_type): on the tensor cores (group sums or eight lanes) when
// there are more tokens than one block_dot warp takes (which reads each
// weight once for up to kTokens); the KLanesOrder types' single form stays
// on dp4a, and the i-quants' take matmul_iq.cu's kernel. The kernel changes
// no bit.
template <class O>
void launch_block_dot(quant::Type w_type, const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols,
                      const void* a, uint64_t a_row_bytes, int64_t t_begin, int64_t t_end, float* y, int64_t ldy,
                      cudaStream_t stream) {
    const int64_t n = t_end - t_begin;
    if (n <= 0) return;
    const char* act = static_cast<const char*>(a) + t_begin * a_row_bytes;
    if constexpr (dot::HasGroupSums<O>::value) {
        if (n > kTokens) {
            mma_dot_kernel<O><<<mma_grid(n_rows, n, kMmaTokens), dim3(32, kMmaWarps), 0, stream>>>(
                w, w_row_bytes, n_rows, n_cols / O::kElems, act, a_row_bytes, n, y + t_begin * ldy, ldy);
            return;
        }
    } else if constexpr (dot::HasLaneSums<O>::value) {
        if (n > kTokens) {
            mma_lanes_kernel<O><<<mma_grid(n_rows, n, 2 * kLanePairs), dim3(32, kMmaWarps), 0, stream>>>(
                w, w_row_bytes, n_rows, n_cols / O::kElems, act, a_row_bytes, n, y + t_begin * ldy, ldy);
            return;
        }
    }
    if constexpr (IsIq<O>::kBatch || IsIq<O>::kSingle) {
        launch_iq_dot(w_type, IsIq<O>::kBatch, w, w_row_bytes, n_rows, n_cols, a, a_row_bytes, t_begin, t_end, y, ldy,
                      stream);
    } else {
        // The fewest tokens a warp that cover the step: per-token state is
        // registers and shared memory, so a single sequence's decode keeps one.
        const auto run = n == 1   ? launch_block_dot_kernel<O, 1>
                         : n == 2 ? launch_block_dot_kernel<O, 2>
                         : n <= 4 ? launch_block_dot_kernel<O, 4>
                                  : launch_block_dot_kernel<O, kTokens>;
        run(w, w_row_bytes, n_rows, n_cols / O::kElems, act, a_row_bytes, n, y + t_begin * ldy, ldy, stream);
    }
}

template <quant::Type W>
void launch_pair(const void* w, uint64_t w_row_bytes, int64_t n_rows, int64_t n_cols, const float* x, int64_t ldx,
                 int64_t n_tokens, void* scratch, float* y, int64_t ldy, bool single_order, cudaStream_t stream) {
    constexpr quant::Type A = quant::dot_type(W);
    launch_quantize<A>(x, ldx, n_cols, n_tokens, scratch, stream);
    const uint64_t a_row_bytes = *quant::row_bytes(A, n_cols);
    if constexpr (quant::is_float_weight(W)) {
        using T = std::conditional_t<W == quant::Type::F32, float,
                                     std::conditional_t<W == quant::Type::F16, quant::fp16_bits, dot::Bf16>>;
        float_dot_kernel<T><<<grid_for(n_rows, kFloatRows, n_tokens), dim3(32, kWarps), 0, stream>>>(
            w, w_row_bytes, n_rows, n_cols, scratch, a_row_bytes, n_tokens, y, ldy);
    } else {
        // Tokens [0, batch_end) in the batch form, as the CPU multiplies them.
        const int64_t batch_end = single_order ? 0 : dot::batch_end(W, n_tokens);
        using Batch = typename dot::OrderOf<W, dot::Form::Batch>::type;
        using Single = typename dot::OrderOf<W, dot::Form::Single>::type;
        launch_block_dot<Batch>(W, w, w_row_bytes, n_rows, n_cols, scratch, a_row_bytes, 0, batch_end, y, ldy, stream);
        launch_block_dot<Single>(W, w, w_row_bytes, n_rows, n_cols, scratch, a_row_bytes, batch_end, n_tokens, y, ldy,
                                 stream);
    }
}

}  // namespace

uint64_t matmul_scratch_bytes(quant::Type w_type, int64_t n_cols, int64_t n_tokens) {
    quant::Type a = quant::Type::F32;
    if (!matmul_activation_type(w_type, a)) return 0;
    const auto bytes = quant::row_bytes(a, n_cols);
    if (!bytes) return 0;
    const uint64_t quantized = *bytes * static_cast<uint64_t>(n_tokens);
    // The batch path reads its activations back as floats (4 bytes an
    // element, what model::compute_bytes and stream_bytes allow), for any
    // matrix of kCublasMinRows or more.
    if (uses_cublas(w_type, kCublasMinRows, n_tokens) && a != quant::Type::F32) {
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
                   bool single_order, void* stream) {
    quant::Type a = quant::Type::F32;
    if (!matmul_activation_type(w_type, a) || !quant::row_bytes(a, n_cols)) return false;
    if (n_rows <= 0 || n_tokens <= 0) return true;
    const auto s = static_cast<cudaStream_t>(stream);
#define TANDEM_MATMUL_CASE(Wt)                                                                                  \
    if (w_type == quant::Type::Wt) {                                                                            \
        launch_pair<quant::Type::Wt>(w, w_row_bytes, n_rows, n_cols, x, ldx, n_tokens, scratch, y, ldy,         \
                                     single_order, s);                                                       \
        return true;                                                                                            \
    }
    TANDEM_CUDA_MATMUL_TYPES(TANDEM_MATMUL_CASE)
#undef TANDEM_MATMUL_CASE
    return false;
}

}  // namespace tandem::cuda::kernels
