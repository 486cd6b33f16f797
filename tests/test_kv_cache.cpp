// LayerKvCache with several sequences: the single-sequence layout stays
// pos % n_cells, removed tails are stored again in the same cells, and
// attention through view(seq) equals attention over a cache holding only
// that sequence (bit for bit where the kernel visits the same rows in the
// same order), for F16 and Q8_0 caches at every SIMD level this CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels_cpu/attention.h"
#include "kernels_cpu/vec_dot.h"
#include "runtime/common/error.h"
#include "runtime/engine/kv_cache.h"

namespace tc = tandem::cpu;
namespace tq = tandem::quant;
using tandem::LayerKvCache;

namespace {

constexpr int64_t kHead = 4, kHeadKv = 2, kDim = 64, kRow = kHeadKv * kDim;

// Row `pos` of sequence `seq`: random, the same on every call.
std::vector<float> row(int32_t seq, int32_t pos, uint32_t salt) {
    std::mt19937 rng(1000003u * static_cast<uint32_t>(seq + 1) + 7919u * static_cast<uint32_t>(pos) + salt);
    std::normal_distribution<float> dist(0.0f, 1.5f);
    std::vector<float> v(static_cast<size_t>(kRow));
    for (auto& x : v) x = dist(rng);
    return v;
}

// Stores the rows of sequence `as` (default: seq itself) as seq's.
void put(LayerKvCache& cache, int32_t seq, int32_t pos, uint32_t salt = 0, int32_t as = -1) {
    const int32_t src = as < 0 ? seq : as;
    cache.store(seq, pos, row(src, pos, salt).data(), row(src, pos, salt + 1).data());
}

std::vector<int32_t> cells(const tc::KvCacheView& v) { return {v.cell_pos, v.cell_pos + v.n_cells}; }

std::string lvl(tc::SimdLevel l) { return std::string(tc::simd_level_name(l)); }

std::vector<tc::SimdLevel> levels() {
    std::vector<tc::SimdLevel> out{tc::SimdLevel::Scalar};
    for (tc::SimdLevel l : {tc::SimdLevel::Avx2, tc::SimdLevel::Avx512}) {
        if (tc::simd_level_supported(l)) out.push_back(l);
    }
    return out;
}

// Attention of queries at positions p_last - n + 1 .. p_last (random Q).
std::vector<float> attend(const tc::KvCacheView& kv, int32_t p_last, int64_t n, tc::SimdLevel level, int64_t window = 0) {
    std::mt19937 rng(static_cast<uint32_t>(77 + n + p_last));
    std::normal_distribution<float> dist(0.0f, 2.0f);
    std::vector<float> q(static_cast<size_t>(n * kHead * kDim));
    for (auto& x : q) x = dist(rng);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(p_last - n + 1 + t);
    const tc::AttentionShape shape{kHead, kHeadKv, kDim, kDim, window, 0.125f};
    std::vector<float> out(q.size());
    tc::ThreadPool pool(2, false);
    tc::attention(q.data(), pos.data(), n, shape, kv, out.data(), pool, level);
    return out;
}

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << what << ", output " << i;
    }
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, float tol, const std::string& what) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(a[i], b[i], tol * std::max(1.0f, std::fabs(b[i]))) << what << ", output " << i;
    }
}

}  // namespace

// One sequence stored at 0, 1, 2, ...: cell == pos (global), cell == pos %
// n_cells (ring, four wraps), with the same rows as the single-sequence store.
TEST(KvCache, SingleSequenceLayoutIsTodays) {
    for (const int64_t span : {int64_t{0}, int64_t{24}}) {
        const int64_t n_cells = 24, n_pos = span > 0 ? 4 * n_cells + 7 : n_cells;
        LayerKvCache seq(tq::Type::F16, n_cells, kRow, kRow, span), old(tq::Type::F16, n_cells, kRow, kRow);
        for (int32_t p = 0; p < n_pos; ++p) {
            put(seq, 0, p);
            old.store(p, row(0, p, 0).data(), row(0, p, 1).data());
            ASSERT_EQ(seq.view(0).cell_pos[p % n_cells], p) << "span " << span;
            ASSERT_EQ(cells(seq.view()), cells(old.view())) << "span " << span << ", position " << p;
            ASSERT_EQ(cells(seq.view(0)), cells(seq.view()));
        }
        const auto a = seq.view(), b = old.view();
        EXPECT_EQ(0, std::memcmp(a.k, b.k, static_cast<size_t>(n_cells * a.k_row_bytes)));
        EXPECT_EQ(0, std::memcmp(a.v, b.v, static_cast<size_t>(n_cells * a.v_row_bytes)));
        EXPECT_EQ(seq.seq_pos_min(0), span > 0 ? n_pos - n_cells : 0);
        EXPECT_EQ(seq.seq_pos_max(0), n_pos - 1);
    }
}

// Sequence 0's tail removed and stored again (first with other rows, then
// those removed, then the right ones) lands in the cells it had, and
// attention gives the bits of a cache that never removed it: a global cache
// shared with an interleaved sequence 1, and a ring.
TEST(KvCache, RemovedTailStoredAgainTakesTheSameCells) {
    struct Case { int64_t n_cells, span, window; int32_t n_pos, cut; };
    for (const Case c : {Case{200, 0, 0, 80, 57}, Case{24, 24, 16, 60, 50}}) {
        LayerKvCache ref(tq::Type::F16, c.n_cells, kRow, kRow, c.span), cut(tq::Type::F16, c.n_cells, kRow, kRow, c.span);
        for (int32_t p = 0; p < c.n_pos; ++p) {
            for (LayerKvCache* k : {&ref, &cut}) {
                put(*k, 0, p);
                if (c.span == 0 && p % 3 != 1) put(*k, 1, p);  // sequence 1 between
            }
        }
        cut.remove(0, c.cut, -1);
        EXPECT_EQ(cut.seq_pos_max(0), c.cut - 1);
        for (int32_t p = c.cut; p < c.n_pos; ++p) put(cut, 0, p, 50);
        cut.remove(0, c.cut, -1);
        for (int32_t p = c.cut; p < c.n_pos; ++p) put(cut, 0, p);
        ASSERT_EQ(cells(cut.view()), cells(ref.view()));
        ASSERT_EQ(cells(cut.view(0)), cells(ref.view(0)));
        // Then on past the end, where a ring reuses its oldest cells.
        for (int32_t p = c.n_pos; p < c.n_pos + 10; ++p) put(ref, 0, p), put(cut, 0, p);
        ASSERT_EQ(cells(cut.view(0)), cells(ref.view(0)));
        for (tc::SimdLevel level : levels()) {
            for (int64_t n : {1, 8}) {
                expect_bits(attend(cut.view(0), c.n_pos + 9, n, level, c.window),
                            attend(ref.view(0), c.n_pos + 9, n, level, c.window),
                            lvl(level) + ", span " + std::to_string(c.span));
            }
        }
    }
}

// Two sequences interleaved at random in one cache against caches of one
// sequence each. The one-pass kernels skip a cell only through cell_pos
// and visit cells in storage order, so the bits match whenever the
// sequence's rows come in the same order: first in position order (as
// stored), then out of order (sequence 1 removed, sequence 0's next
// positions fill its holes), compared with a cache that stored the rows in
// that cell order. The tiled F16 kernel (64+ queries) sums within tiles of
// 64 cells, so other rows in the tiles change the rounding: near only.
TEST(KvCache, InterleavedSequencesMatchSingleSequenceCaches) {
    for (const tq::Type type : {tq::Type::F16, tq::Type::Q8_0}) {
        const std::string name(tq::traits(type).name);
        LayerKvCache both(type, 200, kRow, kRow), only0(type, 200, kRow, kRow), only1(type, 200, kRow, kRow);
        std::mt19937 rng(5);
        int32_t next[2] = {0, 0};
        while (next[0] < 90 || next[1] < 70) {
            const int32_t s = next[1] >= 70 || (next[0] < 90 && rng() % 2 == 0) ? 0 : 1;
            put(both, s, next[s]);
            put(s == 0 ? only0 : only1, 0, next[s], 0, s);
            ++next[s];
        }
        for (int32_t s : {0, 1}) EXPECT_EQ(both.seq_pos_max(s), next[s] - 1);
        std::vector<int32_t> seen = cells(both.view(0));
        std::erase(seen, -1);
        ASSERT_EQ(seen.size(), 90u);
        for (tc::SimdLevel level : levels()) {
            const std::string what = name + ", " + lvl(level);
            for (int64_t n : {1, 7, 70}) {
                const auto a0 = attend(both.view(0), 89, n, level), b0 = attend(only0.view(0), 89, n, level);
                const auto a1 = attend(both.view(1), 69, n, level), b1 = attend(only1.view(0), 69, n, level);
                if (type == tq::Type::F16 && n >= 64) {
                    expect_near(a0, b0, 5e-6f, what + ", tiled");
                    expect_near(a1, b1, 5e-6f, what + ", tiled");
                } else {
                    expect_bits(a0, b0, what + ", " + std::to_string(n) + " queries");
                    expect_bits(a1, b1, what + ", sequence 1, " + std::to_string(n) + " queries");
                }
            }
        }
        // Out of order: sequence 0's positions 90..129 go to the holes first.
        both.remove(1, 0, -1);
        EXPECT_EQ(both.seq_pos_max(1), -1);
        for (int32_t p = 90; p < 130; ++p) put(both, 0, p), put(only0, 0, p);
        const auto view = both.view(0);
        std::vector<int32_t> order = cells(view);
        std::erase(order, -1);
        ASSERT_EQ(order.size(), 130u);
        ASSERT_FALSE(std::is_sorted(order.begin(), order.end()));
        LayerKvCache same_order(type, 200, kRow, kRow);
        for (int64_t c = 0; c < view.n_cells; ++c) {
            if (view.cell_pos[c] >= 0) put(same_order, 0, view.cell_pos[c]);
        }
        for (tc::SimdLevel level : levels()) {
            const std::string what = name + ", " + lvl(level) + ", out of order";
            for (int64_t n : {1, 7, 70}) {
                const auto a = attend(view, 129, n, level), sorted = attend(only0.view(0), 129, n, level);
                // Against the sorted cache: another order of the same sums (up to
                // 6e-3 apart where F16 sums are rounded to fp16 after each cell).
                expect_near(a, sorted, type == tq::Type::F16 && n < 64 ? 1.5e-2f : 1e-5f, what + " against sorted");
                if (type == tq::Type::F16 && n >= 64) continue;
                expect_bits(a, attend(same_order.view(0), 129, n, level), what);
            }
        }
    }
}

// A copied prefix stays with the copy when the source goes; only cells no
// sequence holds any more are freed.
TEST(KvCache, CopiedPrefixOutlivesTheSource) {
    LayerKvCache cache(tq::Type::F16, 64, kRow, kRow), alone(tq::Type::F16, 64, kRow, kRow);
    for (int32_t p = 0; p < 20; ++p) put(cache, 0, p);
    cache.copy_seq(0, 1, 0, 12);
    std::vector<int32_t> first(64, -1);
    std::iota(first.begin(), first.begin() + 20, 0);
    EXPECT_EQ(cells(cache.view(0)), first);  // the source keeps its cells
    std::fill(first.begin() + 12, first.end(), -1);
    EXPECT_EQ(cells(cache.view(1)), first);
    for (int32_t p = 12; p < 18; ++p) put(cache, 1, p, 9);
    for (int32_t p = 20; p < 25; ++p) put(cache, 0, p);
    cache.remove(0, 0, -1);
    EXPECT_EQ(cache.seq_pos_max(0), -1);
    EXPECT_EQ(cache.seq_pos_min(0), -1);
    EXPECT_EQ(cache.seq_pos_min(1), 0);
    EXPECT_EQ(cache.seq_pos_max(1), 17);
    std::vector<int32_t> expect(64, -1);
    for (int32_t p = 0; p < 12; ++p) expect[static_cast<size_t>(p)] = p;  // the shared cells
    for (int32_t p = 12; p < 18; ++p) expect[static_cast<size_t>(p + 8)] = p;  // after sequence 0's 20
    EXPECT_EQ(cells(cache.view(1)), expect);
    EXPECT_EQ(cells(cache.view()), expect);
    EXPECT_EQ(cells(cache.view(0)), std::vector<int32_t>(64, -1));
    // The same rows stored once for sequence 1 alone: same attention.
    for (int32_t p = 0; p < 18; ++p) put(alone, 0, p, p < 12 ? 0 : 9, p < 12 ? 0 : 1);
    for (tc::SimdLevel level : levels()) {
        expect_bits(attend(cache.view(1), 17, 3, level), attend(alone.view(0), 17, 3, level), lvl(level));
    }
    // Freed cells 12..19 are taken again from the lowest; a new sequence
    // reads as empty until it stores.
    EXPECT_EQ(cells(cache.view(5)), std::vector<int32_t>(64, -1));
    put(cache, 5, 0);
    EXPECT_EQ(cache.view(5).cell_pos[12], 0);
    cache.clear();
    EXPECT_EQ(cache.seq_pos_max(1), -1);
    EXPECT_EQ(cells(cache.view()), std::vector<int32_t>(64, -1));
}

TEST(KvCache, BadSequenceIdsAndFullCachesThrow) {
    LayerKvCache cache(tq::Type::Q8_0, 8, kRow, kRow);
    const auto k = row(0, 0, 0);
    EXPECT_THROW(cache.store(64, 0, k.data(), k.data()), tandem::Error);
    EXPECT_THROW(cache.store(-1, 0, k.data(), k.data()), tandem::Error);
    EXPECT_THROW(cache.store(0, -3, k.data(), k.data()), tandem::Error);
    EXPECT_THROW(cache.remove(64, 0, -1), tandem::Error);
    EXPECT_THROW(cache.copy_seq(0, 64, 0, -1), tandem::Error);
    EXPECT_THROW(cache.copy_seq(-2, 1, 0, -1), tandem::Error);
    EXPECT_THROW((void)cache.view(64), tandem::Error);
    EXPECT_THROW((void)cache.seq_pos_max(100), tandem::Error);
    for (int32_t p = 0; p < 8; ++p) put(cache, p % 2, p / 2);
    try {
        put(cache, 0, 4);
        FAIL() << "a ninth position fit in 8 cells";
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find("KV cache full"), std::string::npos) << e.what();
    }
    cache.remove(-1, 3, -1);  // both sequences' position 3
    put(cache, 0, 4);
    put(cache, 1, 4);
    EXPECT_THROW(put(cache, 1, 5), tandem::Error);
    // A ring never reuses a cell another sequence shares.
    LayerKvCache ring(tq::Type::F16, 4, kRow, kRow, 4);
    for (int32_t p = 0; p < 4; ++p) put(ring, 0, p);
    ring.copy_seq(0, 1, 0, 1);
    EXPECT_THROW(put(ring, 0, 4), tandem::Error);
    put(ring, 0, 5);  // position 1 is 4 behind: its cell is reused
    EXPECT_EQ(ring.view(0).cell_pos[1], 5);
}

// A ring of two spans: each sequence keeps exactly its last ring_span
// positions, whatever the order the two store in (one stores three times
// as often), and its windowed attention is that of a ring of its own.
TEST(KvCache, RingKeepsEachSequencesLastSpan) {
    const int64_t span = 12, window = 8;
    LayerKvCache ring(tq::Type::F16, 2 * span, kRow, kRow, span), own(tq::Type::F16, span, kRow, kRow, span);
    std::mt19937 rng(11);
    int32_t next[2] = {0, 0};
    for (int i = 0; i < 300; ++i) {
        const int32_t s = rng() % 4 == 0 ? 1 : 0;
        put(ring, s, next[s]);
        if (s == 0) put(own, 0, next[s]);
        ++next[s];
        for (int32_t q : {0, 1}) {
            std::vector<int32_t> held = cells(ring.view(q));
            std::erase(held, -1);
            std::sort(held.begin(), held.end());
            std::vector<int32_t> last;
            for (int32_t p = std::max<int32_t>(0, next[q] - static_cast<int32_t>(span)); p < next[q]; ++p) last.push_back(p);
            ASSERT_EQ(held, last) << "sequence " << q << " after store " << i;
        }
    }
    ASSERT_GT(next[1], static_cast<int32_t>(2 * span));
    for (tc::SimdLevel level : levels()) {
        expect_near(attend(ring.view(0), next[0] - 1, 4, level, window), attend(own.view(0), next[0] - 1, 4, level, window),
                    3e-3f, lvl(level));
    }
}

// One part per sequence: a sequence's cells follow its own history only,
// in position order, whatever the others store or remove in between.
TEST(KvCache, PerSequencePartsKeepEachSequenceInPositionOrder) {
    tandem::KvCells shared(64, 0, 1);
    tandem::KvCells parts(64, 0, 4);
    for (tandem::KvCells* cells : {&shared, &parts}) {
        // Sequence 1 stores, then 0 interleaves, then 1 drops its tail and
        // stores again while 0 keeps going.
        for (int32_t p = 0; p < 6; ++p) cells->place(1, p);
        for (int32_t p = 0; p < 4; ++p) {
            cells->place(0, p);
            cells->place(1, 6 + p);
        }
        cells->remove(1, 3, -1);
        for (int32_t p = 4; p < 8; ++p) {
            cells->place(0, p);
            cells->place(1, p - 1);
        }
    }
    const auto in_order = [](const tandem::KvCells& c, int32_t seq) {
        std::vector<int32_t> pos;
        for (int64_t cell : c.cells_of(seq)) pos.push_back(c.cell_pos(seq)[cell]);
        return std::is_sorted(pos.begin(), pos.end());
    };
    // The shared pool interleaves them (the reason for parts)...
    EXPECT_FALSE(in_order(shared, 0) && in_order(shared, 1));
    // ...the parts never do, and each part is its sequence's alone.
    EXPECT_TRUE(in_order(parts, 0));
    EXPECT_TRUE(in_order(parts, 1));
    for (int64_t cell : parts.cells_of(0)) EXPECT_LT(cell, 16);
    for (int64_t cell : parts.cells_of(1)) {
        EXPECT_GE(cell, 16);
        EXPECT_LT(cell, 32);
    }
    // A part emptied starts again at its first cell, as a fresh cache.
    parts.remove(1, 0, -1);
    EXPECT_EQ(parts.place(1, 0), 16);
    // Sequences past the parts have no cells; a full part is full even
    // when others have room.
    EXPECT_THROW(parts.place(4, 0), tandem::Error);
    for (int32_t p = 1; p < 16; ++p) parts.place(1, p);
    EXPECT_THROW(parts.place(1, 16), tandem::Error);
}

// attention_view(seq) reads only the cells around seq's (from a multiple of
// kViewCellAlign) and gives the bits of the whole view(seq): decode (the
// grouped kernel) and a 70-token prompt (the tiled kernel), F16 and Q8_0,
// sequences in parts of their own and interleaved in one pool, after
// removals, at every SIMD level.
TEST(KvCache, AttentionViewReadsFewerCellsWithTheSameBits) {
    for (tq::Type type : {tq::Type::F16, tq::Type::Q8_0}) {
        for (int64_t parts : {1, 4}) {
            LayerKvCache cache(type, 1024, kRow, kRow, 0, parts);
            // Sequence 2 first, then 0, 1 and 2 interleaved; 1 loses a
            // middle range; 3 stays empty.
            for (int32_t p = 0; p < 40; ++p) put(cache, 2, p);
            for (int32_t p = 0; p < 150; ++p) {
                put(cache, 0, p);
                put(cache, 1, p);
                if (p < 30) put(cache, 2, 40 + p);
            }
            cache.remove(1, 20, 60);
            for (int32_t seq = 0; seq < 4; ++seq) {
                const tc::KvCacheView whole = cache.view(seq), cut = cache.attention_view(seq);
                const std::string what = std::string(tq::traits(type).name) + " parts " + std::to_string(parts) +
                                         " seq " + std::to_string(seq);
                ASSERT_EQ((cut.cell_pos - whole.cell_pos) % tc::kViewCellAlign, 0) << what;
                ASSERT_LE(cut.cell_pos - whole.cell_pos + cut.n_cells, whole.n_cells) << what;
                // Nothing visible is left out.
                int64_t held = 0, held_cut = 0;
                for (int64_t c = 0; c < whole.n_cells; ++c) held += whole.cell_pos[c] >= 0;
                for (int64_t c = 0; c < cut.n_cells; ++c) held_cut += cut.cell_pos[c] >= 0;
                EXPECT_EQ(held, held_cut) << what;
                if (seq == 3) {
                    EXPECT_EQ(cut.n_cells, 0) << what;
                    continue;
                }
                // Parts: at most a part; one pool: at most the cells used;
                // each from the multiple of kViewCellAlign below.
                EXPECT_LE(cut.n_cells, (parts > 1 ? 1024 / parts : 512) + tc::kViewCellAlign - 1) << what;
                for (tc::SimdLevel level : levels()) {
                    for (int64_t n : {int64_t{1}, int64_t{70}}) {
                        const int32_t last = seq == 2 ? 69 : 149;
                        expect_bits(attend(cut, last, n, level), attend(whole, last, n, level),
                                    what + " n " + std::to_string(n) + " " + lvl(level));
                    }
                }
            }
        }
    }
}

// A sequence that starts past the first cells and spans several 512-cell
// chunks (attention_chunks.h): its cut view must chunk its cells where the
// whole view does, or the chunks' merge rounds differently.
TEST(KvCache, AttentionViewKeepsTheWholeViewsChunks) {
    for (tq::Type type : {tq::Type::F16, tq::Type::Q8_0}) {
        LayerKvCache cache(type, 2048, kRow, kRow);
        for (int32_t p = 0; p < 100; ++p) put(cache, 0, p);
        for (int32_t p = 0; p < 1200; ++p) put(cache, 1, p);  // cells 100 .. 1299
        const tc::KvCacheView whole = cache.view(1), cut = cache.attention_view(1);
        for (tc::SimdLevel level : levels()) {
            for (int64_t n : {int64_t{1}, int64_t{12}}) {
                expect_bits(attend(cut, 1199, n, level), attend(whole, 1199, n, level),
                            std::string(tq::traits(type).name) + " n " + std::to_string(n) + " " + lvl(level));
            }
        }
    }
}

namespace {

// Marks every byte of a row, so a test can see which conversion wrote it.
void mark_row(const float*, void* dst, int64_t n) {
    std::memset(dst, 0x5A, static_cast<size_t>(n) * sizeof(uint16_t));
}

}  // namespace

// Rows go through the conversion the cache is given (a CPU device gives
// its SIMD fp16 conversion), the reference where none is.
TEST(KvCache, RowsGoThroughTheGivenConversion) {
    LayerKvCache marked(tq::Type::F16, 8, kRow, kRow, 0, 1, {mark_row, mark_row}), plain(tq::Type::F16, 8, kRow, kRow);
    put(marked, 0, 0);
    put(plain, 0, 0);
    const tandem::KvSeqRows m = marked.read_seq(0), p = plain.read_seq(0);
    ASSERT_EQ(m.k.size(), static_cast<size_t>(kRow) * 2);
    EXPECT_TRUE(std::all_of(m.k.begin(), m.k.end(), [](uint8_t b) { return b == 0x5A; }));
    EXPECT_TRUE(std::all_of(m.v.begin(), m.v.end(), [](uint8_t b) { return b == 0x5A; }));
    std::vector<uint8_t> ref(static_cast<size_t>(kRow) * 2);
    tq::quantize_row(tq::Type::F16, row(0, 0, 0).data(), ref.data(), kRow);
    EXPECT_EQ(p.k, ref);
}

// The CPU's SIMD fp16 conversion, as a CPU device hands it to its caches,
// writes the reference's bytes: rounding ties, subnormals, overflow to
// infinity, infinities and NaN payloads included.
TEST(KvCache, SimdFp16RowsEqualTheReference) {
    std::vector<float> specials = {0.0f, -0.0f, 1e-42f, -6.1e-5f, 5.96e-8f, 2.98e-8f, 65504.0f, 65519.0f, 65520.0f,
                                   -70000.0f, 1.0f + 1.0f / 2048.0f, 1.0f + 3.0f / 2048.0f,
                                   std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                   std::bit_cast<float>(0x7fc00000u), std::bit_cast<float>(0xffa12345u),
                                   std::bit_cast<float>(0x7f800001u)};
    for (tc::SimdLevel level : levels()) {
        const tq::QuantizeRowFn simd = tc::detail::activation_quantizer(tq::Type::F16, level);
        LayerKvCache fast(tq::Type::F16, 16, kRow, kRow, 0, 1, {simd, simd}), ref(tq::Type::F16, 16, kRow, kRow);
        for (int32_t p = 0; p < 4; ++p) {
            std::vector<float> k = row(0, p, 3), v = row(0, p, 4);
            for (size_t i = 0; i < specials.size(); ++i) k[(i * 7 + static_cast<size_t>(p)) % k.size()] = specials[i];
            for (size_t i = 0; i < specials.size(); ++i) v[(i * 5 + static_cast<size_t>(p) * 3) % v.size()] = -specials[i];
            fast.store(0, p, k.data(), v.data());
            ref.store(0, p, k.data(), v.data());
        }
        const tandem::KvSeqRows a = fast.read_seq(0), b = ref.read_seq(0);
        EXPECT_EQ(a.k, b.k) << lvl(level);
        EXPECT_EQ(a.v, b.v) << lvl(level);
    }
}
