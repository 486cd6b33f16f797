// Search tables for the lattice i-quant quantizers: for each grid, which
// grid point (or which short list of nearest grid points) an 8-tuple (IQ2,
// IQ1) or 4-tuple (IQ3) of quantization levels maps to. They are what
// ggml's iq2xs_init_impl / iq3xs_init_impl compute, built from the grids in
// iq_grid_data.h on first use (thread-safe, immutable afterwards), so that
// the quantizers choose exactly the grid points llama-quantize chooses.
//
// Layout (the format's search convention, shared by both families):
//  * grid[j]: grid point j as its per-coordinate positions 2*l+1 (l the
//    level, 0..2 for the 2-bit grids and IQ1, 0..7 for the 3-bit grids),
//    one byte per coordinate: 8 bytes (IQ2/IQ1) or 4 bytes (IQ3).
//  * map[u]: u packs the levels of a tuple (coordinate k at bits
//    bits*k.., bits = 2 for IQ2/IQ1, 3 for IQ3). map[u] >= 0: the tuple is
//    grid point map[u]. map[u] < 0: it is not on the grid, and
//    neighbours[-map[u] - 1] is a count n followed by the n grid indices
//    nearest to it (all ties of the nearest distances ggml keeps).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/quant/quant_types.h"

namespace tandem::quant::iq {

struct Iq2Search {
    std::vector<uint64_t> grid;  // 8 positions a point, byte k = coordinate k
    std::vector<int32_t> map;
    std::vector<uint16_t> neighbours;
};

struct Iq3Search {
    std::vector<uint32_t> grid;  // 4 positions a point, byte k = coordinate k
    std::vector<int32_t> map;
    std::vector<uint16_t> neighbours;
};

// IQ2_XXS (256 points), IQ2_XS (512), IQ2_S (1024), IQ1_S and IQ1_M (the
// shared 2048-point grid). Other types: an internal error.
const Iq2Search& iq2_search(Type t);
// IQ3_XXS (256 points), IQ3_S (512). Other types: an internal error.
const Iq3Search& iq3_search(Type t);

}  // namespace tandem::quant::iq
