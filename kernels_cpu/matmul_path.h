// Internal to kernels_cpu: how matmul() multiplies one weight matrix by a
// batch of activation rows, chosen by one pure function of the weight
// type, the level, the order and the sizes. matmul.cpp runs what it says
// (activations, panels, row items); tests/test_matmul_path.cpp checks the
// choices by table.
//
// The paths, and the tokens each takes:
//   - panels (gemm_panel.h): 16-row panel GEMMs over tokens [0, panel_end),
//     a multiple of 4: at Avx512Vnni from 32 tokens (from 8 where the batch
//     form runs its AVX2 kernel there: the i-quants), at the AVX2 levels
//     from 8; only tokens whose order the panel reproduces (those of the
//     type's batch form, or every token of a type without one);
//   - decode rows (vec_dot.h DecodeRows): one token, or a small batch of up
//     to 3 * kMaxDecodeTokens without panels, several weight rows a pass;
//     tokens [rows_first, n_tokens);
//   - row kernels: one weight row against up to kMaxTileTokens tokens, the
//     batch form for tokens below batch_end, the one-row kernel after.
// Every path gives each token the bits of the kernel it stands in for.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels_cpu/kernel_table.h"
#include "kernels_cpu/matmul.h"
#include "kernels_cpu/vec_dot.h"

namespace tandem::cpu::detail {

struct MatmulQuery {
    quant::Type type = quant::Type::F32;  // the weights'
    int64_t n_cols = 0;
    int64_t n_tokens = 0;
    SimdLevel level = SimdLevel::Scalar;
    MatmulOrder order = MatmulOrder::Fastest;
};

struct MatmulPath {
    // Activations: each row quantized by `quantize` into a_row_bytes (plus
    // panel_row_extra for the panel's preparation); null: F32 weights read
    // the rows as they are.
    quant::Type a_type = quant::Type::F32;
    quant::QuantizeRowFn quantize = nullptr;
    size_t a_row_bytes = 0;
    double a_bytes_per_elem = 0;  // of an activation row as the kernels read it (column chunks' offsets)
    size_t panel_row_extra = 0;
    // Panels: tokens [0, panel_end).
    const PanelKernel* panel = nullptr;
    int64_t panel_end = 0;
    // Row kernels: batch_fn for tokens [.., batch_end) (tiles of 4 from a
    // multiple of 4), fn for the rest.
    DotFn fn = nullptr;
    DotFn batch_fn = nullptr;
    int64_t batch_end = 0;
    // Decode rows (rows.fn null: none): tokens [rows_first, n_tokens).
    DecodeRows rows;
    int64_t rows_first = 0;
    // Row kernels over column chunks of k_chunk (n_cols: unsplit), and
    // whether each row is prefetched a few rows ahead.
    int64_t k_chunk = 0;
    bool prefetch_rows = false;
    // Every remaining token through the decode rows.
    bool decode_all() const { return rows.fn != nullptr && rows_first == 0; }
};

// Throws tandem::Error for a type without CPU kernels.
MatmulPath choose_matmul_path(const MatmulQuery& q);

}  // namespace tandem::cpu::detail
