// Single CUDA kernels run on host data (copied to GPU `device` and back),
// for the tests that compare each kernel with its CPU twin and for the
// kernel benchmarks: test code, kept out of the kernel library the plugin
// ships (tests/cuda_ops/CMakeLists.txt builds it, or, without CUDA, stubs
// that say so). No CUDA type crosses this header.
#pragma once

#include <cstdint>

#include "kernels_cuda/cuda_kernels.h"
#include "runtime/model/model_spec.h"
#include "runtime/quant/quant_types.h"

namespace tandem::cuda {

// Dequantizes `n` elements of one row on GPU `device` and copies the floats
// back: the CUDA twin of quant::dequantize_row, used by tests and benches.
// Throws tandem::Error when a CUDA call fails.
void dequantize_row_on_device(int device, quant::Type type, const void* host_src, float* host_dst, int64_t n);

// Single kernels run on host data (copied to GPU `device` and back), for
// tests that compare them with the CPU kernels. Same shapes as the launchers
// of cuda_kernels.h; every function throws tandem::Error on a CUDA failure.
// w: n_rows rows of n_cols in w_type; x: n_tokens rows of n_cols; y: n_tokens
// rows of n_rows. Matmuls go through the backend's dispatch (device_matmul.h):
// the block-sum kernels, and for float weights in batches a tile and cuBLAS.
// single_token_order: DeviceMatmul::set_single_token_order.
void matmul_on_device(int device, quant::Type w_type, const void* host_w, int64_t n_rows, int64_t n_cols,
                      const float* host_x, int64_t n_tokens, float* host_y, bool single_token_order = false);
void rms_norm_on_device(int device, const float* x, const float* w, float* y, int64_t n, int64_t n_rows, float eps);
// For benchmarks: uploads once, runs the matmul `iterations` times on the
// device and returns the mean seconds of one run (CUDA events, no copies).
double time_matmul_on_device(int device, quant::Type w_type, const void* host_w, int64_t n_rows, int64_t n_cols,
                             const float* host_x, int64_t n_tokens, int iterations);
// x: n_tokens rows of n_heads * head_dim, rotated in place; freq_factors:
// host, n_rot/2 floats, or null.
void rope_on_device(int device, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    const int32_t* pos, const kernels::RopeArgs& args);
// out = swiglu (gelu = false) or geglu (gelu = true) of gate and up.
void glu_on_device(int device, bool gelu, const float* gate, const float* up, float* out, int64_t n);
// Attention of n_tokens queries over a cache of K and V types cache_type
// given as host arrays (k: n_cells rows of k_dim elements in K's type, v
// likewise in V's, cell_pos: n_cells; args.sinks, if set: n_head floats).
void attention_on_device(int device, const float* q, const int32_t* pos, int64_t n_tokens,
                         const kernels::AttentionArgs& args, model::CacheType cache_type, const void* k, const void* v,
                         const int32_t* cell_pos, int64_t n_cells, int64_t k_dim, int64_t v_dim, float* out);
// Stores n_tokens rows of K (k_dim floats) and V (v_dim floats) into cells
// cells[t] of a device cache of n_cells in cache_type, as the CUDA device
// stores them (launch_kv_store), and copies back the stored bytes of those
// cells: k_out and v_out get n_tokens rows of each side's row size.
void kv_store_on_device(int device, model::CacheType cache_type, const float* k, const float* v, int64_t n_tokens,
                        const int32_t* cells, int64_t n_cells, int64_t k_dim, int64_t v_dim, uint8_t* k_out,
                        uint8_t* v_out);
// x (n_rows rows of len) += v (len floats) in place, the bias add.
void add_rows_on_device(int device, float* x, const float* v, int64_t len, int64_t n_rows);
// dst (n_rows rows of width) = columns [col0, col0 + width) of src's rows
// of src_width: the split of a fused product (launch_gather_rows, no index).
void copy_cols_on_device(int device, const float* src, int64_t src_width, int64_t col0, float* dst, int64_t width,
                         int64_t n_rows);
// The experts' products as the CUDA device runs them
// (expert_matmul.h): w is n_expert experts of `rows` rows of n_cols in
// w_type back to back; x holds a row per (token, slot) when in_per_slot,
// else a row per token; route n_tokens rows of n_used (expert id, weight)
// pairs. out: a row of `rows` per (token, slot), or per token when
// sum_slots. The grouping is cpu::group_by_expert's.
void matmul_experts_on_device(int device, quant::Type w_type, const void* host_w, int64_t n_expert, int64_t rows,
                              int64_t n_cols, const float* x, const float* route, int64_t n_used, int64_t n_tokens,
                              bool in_per_slot, bool sum_slots, float* out);

}  // namespace tandem::cuda
