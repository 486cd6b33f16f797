// Search tables of the 8-wide grids (layout in iq_grid_search.h), as
// ggml's iq2xs_init_impl builds them for IQ2_XXS (256 points), IQ2_XS
// (512), IQ2_S (1024) and IQ1_S/IQ1_M (one shared 2048-point grid).
//
// A grid point is 8 values, each one of 3 distinct values (IQ2: the
// magnitudes 8, 25, 43; IQ1: -1, 0, 1); the level l of a value is its rank
// among them (0..2), and the quantizers work with positions 2*l+1. An
// 8-tuple of levels packs into a 16-bit key (coordinate k at bits
// 2k..2k+1). The map covers keys 0..43691 (0xAAAA, all levels 2, plus one),
// which includes keys with a coordinate of level 3 (position 7): ggml lays
// out their neighbour lists too, and the offsets of later lists depend on
// them. Keys on the grid map to their point; every other key maps to a
// list of the grid points nearest to it in squared distance of positions,
//   d2(key, j) = sum_k (pos_j[k] - pos_key[k])^2,
// ordered by (d2, index), holding every point of the nearest `nwant`
// distinct distances: 2 for IQ2_XXS and IQ2_XS, 1 for IQ2_S, 3 for IQ1.
// The lists are laid out one after another in increasing key order, each
// as a count followed by the indices, so offsets and order match ggml's
// exactly; the order matters because the quantizers keep the first of
// equally good points.
#include <array>
#include <cstdint>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/quant/iq_grid_search.h"
#include "runtime/quant/iq_tables.h"

namespace tandem::quant::iq {
namespace {

constexpr int kLevels = 3;
constexpr int kKeyBits = 2;
constexpr int kKeys = 43692;       // ggml's kmap_size
constexpr int kMaxD2 = 8 * 6 * 6;  // positions 1..7 against 1..5

// value (as a signed byte + 128) -> level (-1: not a value of the grid),
// from the distinct values of the grid in ascending signed order (IQ1's
// -1, 0, 1 are the bytes 0xff, 0x00, 0x01).
std::array<int, 256> levels_of(const uint64_t* values, int n) {
    std::array<bool, 256> seen{};
    for (int j = 0; j < n; ++j) {
        for (int k = 0; k < 8; ++k) seen[static_cast<int8_t>(grid_byte(values[j], k)) + 128] = true;
    }
    std::array<int, 256> level{};
    level.fill(-1);
    int next = 0;
    for (int v = 0; v < 256; ++v) {
        if (seen[v]) level[v] = next++;
    }
    TANDEM_CHECK(next == kLevels, "an IQ2/IQ1 grid must use exactly 3 distinct values");
    return level;
}

int level_of(const std::array<int, 256>& level, uint64_t row, int k) {
    return level[static_cast<int8_t>(grid_byte(row, k)) + 128];
}

// Position 2*l+1 of coordinate k of a key.
int key_position(int key, int k) { return 2 * ((key >> (kKeyBits * k)) & 3) + 1; }

int position_byte(uint64_t packed, int k) { return static_cast<int>((packed >> (8 * k)) & 0xFFu); }

// The nearest points to a key: all points of the `nwant` smallest distinct
// squared distances, ordered by (distance, index). Equal to sorting all
// (d2, j) pairs and cutting after the nwant-th distinct distance.
void append_neighbours(const std::vector<uint64_t>& grid, int key, int nwant, std::vector<int>& d2,
                       std::vector<uint16_t>& out) {
    std::array<bool, kMaxD2 + 1> present{};
    for (size_t j = 0; j < grid.size(); ++j) {
        int s = 0;
        for (int k = 0; k < 8; ++k) {
            const int diff = position_byte(grid[j], k) - key_position(key, k);
            s += diff * diff;
        }
        d2[j] = s;
        present[s] = true;
    }
    const size_t count_at = out.size();
    out.push_back(0);
    int distinct = 0;
    for (int dist = 0; dist <= kMaxD2 && distinct < nwant; ++dist) {
        if (!present[dist]) continue;
        ++distinct;
        for (size_t j = 0; j < grid.size(); ++j) {
            if (d2[j] == dist) out.push_back(static_cast<uint16_t>(j));
        }
    }
    out[count_at] = static_cast<uint16_t>(out.size() - count_at - 1);
}

Iq2Search build(const uint64_t* values, int n, int nwant) {
    const std::array<int, 256> level = levels_of(values, n);
    Iq2Search s;
    s.grid.resize(n);
    s.map.assign(kKeys, -1);
    for (int j = 0; j < n; ++j) {
        uint64_t packed = 0;
        int key = 0;
        for (int k = 0; k < 8; ++k) {
            const int l = level_of(level, values[j], k);
            packed |= static_cast<uint64_t>(2 * l + 1) << (8 * k);
            key |= l << (kKeyBits * k);
        }
        s.grid[j] = packed;
        s.map[key] = j;
    }
    std::vector<int> d2(n);
    for (int key = 0; key < kKeys; ++key) {
        if (s.map[key] >= 0) continue;
        s.map[key] = -static_cast<int32_t>(s.neighbours.size()) - 1;
        append_neighbours(s.grid, key, nwant, d2, s.neighbours);
    }
    return s;
}

}  // namespace

const Iq2Search& iq2_search(Type t) {
    switch (t) {
        case Type::IQ2_XXS: {
            static const Iq2Search xxs = build(kIq2xxsGrid, 256, 2);
            return xxs;
        }
        case Type::IQ2_XS: {
            static const Iq2Search xs = build(kIq2xsGrid, 512, 2);
            return xs;
        }
        case Type::IQ2_S: {
            static const Iq2Search s = build(kIq2sGrid, 1024, 1);
            return s;
        }
        case Type::IQ1_S:
        case Type::IQ1_M: {
            static const Iq2Search iq1 = build(kIq1sGrid, 2048, 3);
            return iq1;
        }
        default:
            break;
    }
    fail_check("iq2_search(t)", __FILE__, __LINE__, "iq2_search: not an IQ2 or IQ1 type");
}

}  // namespace tandem::quant::iq
