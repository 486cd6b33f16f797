// Search tables of the IQ3 grids (layout in iq_grid_search.h), as ggml's
// iq3xs_init_impl builds them for 256 (IQ3_XXS) and 512 (IQ3_S) points.
//
// A grid point is 4 magnitudes, each one of 8 distinct values; the level l
// of a value is its rank among them (0..7), and the quantizers work with
// positions 2*l+1. A 4-tuple of levels packs into a 12-bit key (coordinate
// k at bits 3k..3k+2). Keys on the grid map to their point; every other key
// maps to a list of the grid points nearest to it in squared distance of
// positions, sorted by (distance, index), holding every point of the
// nearest 2 (IQ3_XXS) or 3 (IQ3_S) distinct distances. The lists are laid
// out one after another in increasing key order, each as a count followed
// by the indices, so offsets and order match ggml's exactly; the order
// matters because the quantizers keep the first of equally good points.
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/common/error.h"
#include "runtime/quant/iq_grid_search.h"
#include "runtime/quant/iq_tables.h"

namespace tandem::quant::iq {
namespace {

constexpr int kLevels = 8;
constexpr int kKeyBits = 3;
constexpr int kKeys = 1 << (4 * kKeyBits);  // 4096

// value -> level (-1: not a value of the grid), from the distinct byte
// values of the grid in ascending order.
std::array<int, 256> levels_of(const uint32_t* values, int n) {
    std::array<bool, 256> seen{};
    for (int j = 0; j < n; ++j) {
        for (int k = 0; k < 4; ++k) seen[grid_byte(values[j], k)] = true;
    }
    std::array<int, 256> level{};
    level.fill(-1);
    int next = 0;
    for (int v = 0; v < 256; ++v) {
        if (seen[v]) level[v] = next++;
    }
    TANDEM_CHECK(next == kLevels, "an IQ3 grid must use exactly 8 distinct values");
    return level;
}

// Position 2*l+1 of coordinate k of a key.
int key_position(int key, int k) { return 2 * ((key >> (kKeyBits * k)) & (kLevels - 1)) + 1; }

int position_byte(uint32_t packed, int k) { return static_cast<int>((packed >> (8 * k)) & 0xFFu); }

// The nearest points to a key: all points of the `nwant` smallest distinct
// squared distances, ordered by (distance, index).
void append_neighbours(const std::vector<uint32_t>& grid, int key, int nwant, std::vector<uint16_t>& out) {
    std::vector<std::pair<int, int>> by_distance(grid.size());
    for (size_t j = 0; j < grid.size(); ++j) {
        int d2 = 0;
        for (int k = 0; k < 4; ++k) {
            const int diff = position_byte(grid[j], k) - key_position(key, k);
            d2 += diff * diff;
        }
        by_distance[j] = {d2, static_cast<int>(j)};
    }
    std::sort(by_distance.begin(), by_distance.end());
    const size_t count_at = out.size();
    out.push_back(0);
    int distinct = 1;
    int current = by_distance[0].first;
    for (const auto& [d2, j] : by_distance) {
        if (d2 > current) {
            if (distinct == nwant) break;
            current = d2;
            ++distinct;
        }
        out.push_back(static_cast<uint16_t>(j));
    }
    out[count_at] = static_cast<uint16_t>(out.size() - count_at - 1);
}

Iq3Search build(const uint32_t* values, int n, int nwant) {
    const std::array<int, 256> level = levels_of(values, n);
    Iq3Search s;
    s.grid.resize(n);
    s.map.assign(kKeys, -1);
    for (int j = 0; j < n; ++j) {
        uint32_t packed = 0;
        int key = 0;
        for (int k = 0; k < 4; ++k) {
            const int l = level[grid_byte(values[j], k)];
            packed |= static_cast<uint32_t>(2 * l + 1) << (8 * k);
            key |= l << (kKeyBits * k);
        }
        s.grid[j] = packed;
        s.map[key] = j;
    }
    for (int key = 0; key < kKeys; ++key) {
        if (s.map[key] >= 0) continue;
        s.map[key] = -static_cast<int32_t>(s.neighbours.size()) - 1;
        append_neighbours(s.grid, key, nwant, s.neighbours);
    }
    return s;
}

}  // namespace

const Iq3Search& iq3_search(Type t) {
    if (t == Type::IQ3_XXS) {
        static const Iq3Search xxs = build(kIq3xxsGrid, 256, 2);
        return xxs;
    }
    TANDEM_CHECK(t == Type::IQ3_S, "iq3_search: not an IQ3 type");
    static const Iq3Search s = build(kIq3sGrid, 512, 3);
    return s;
}

}  // namespace tandem::quant::iq
