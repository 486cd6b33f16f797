#include "runtime/engine/sequence_fit.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/engine/session.h"
#include "runtime/quant/quant_types.h"

namespace tandem {

void check_seq_id(int32_t s) {
    if (s < 0 || s >= kMaxSequences) throw Error(fmt::format("sequence id {} is outside [0, {})", s, kMaxSequences));
}

void check_state_fits(const SequenceState& st, const ModelFingerprint& fp, const model::HParams& hp,
                      model::CacheType cache) {
    const char* fix = "; it was saved by another model or cache type";
    if (st.model.arch != fp.arch) {
        throw Error(fmt::format("sequence state for another model: architecture '{}', this model is '{}'{}",
                                st.model.arch, fp.arch, fix));
    }
    if (st.model.n_vocab != fp.n_vocab) {
        throw Error(fmt::format("sequence state for another model: vocabulary of {} tokens, this model has {}{}",
                                st.model.n_vocab, fp.n_vocab, fix));
    }
    if (st.model.n_tensors != fp.n_tensors) {
        throw Error(fmt::format("sequence state for another model: {} tensors, this model has {}{}",
                                st.model.n_tensors, fp.n_tensors, fix));
    }
    if (st.n_layer != static_cast<uint64_t>(hp.n_layer)) {
        throw Error(fmt::format("sequence state for another model: {} layers, this model has {}{}", st.n_layer,
                                hp.n_layer, fix));
    }
    if (st.model.layout_hash != fp.layout_hash) {
        throw Error(fmt::format("sequence state for another model: tensor names, types or shapes differ (layout "
                                "hash {:016x}, this model's {:016x}){}",
                                st.model.layout_hash, fp.layout_hash, fix));
    }
    if (st.model.weights_hash != fp.weights_hash) {
        throw Error(fmt::format("sequence state for another model: same tensor layout but different weights "
                                "(weights hash {:016x}, this model's {:016x}){}",
                                st.model.weights_hash, fp.weights_hash, fix));
    }
    const uint32_t code = model::cache_type_code(cache);
    if (st.cache_type != code) {
        throw Error(fmt::format("sequence state cache type: expected {} (this session's), found {}; use the same "
                                "cache type",
                                model::cache_type_code_name(code), model::cache_type_code_name(st.cache_type)));
    }
    const uint64_t kb = *quant::row_bytes(cache.k, hp.k_dim()), vb = *quant::row_bytes(cache.v, hp.kv_v_dim());
    for (size_t il = 0; il < st.layers.size(); ++il) {
        const KvSeqRows& l = st.layers[il];
        if (l.k_row_bytes != kb || l.v_row_bytes != vb) {
            throw Error(fmt::format("sequence state layer {}: rows of {} (K) and {} (V) bytes expected, found {} "
                                    "and {}{}",
                                    il, kb, vb, l.k_row_bytes, l.v_row_bytes, fix));
        }
    }
}

void keep_ring_span(KvSeqRows& l, int64_t span) {
    if (span <= 0 || l.pos.empty()) return;
    const int64_t newest = *std::max_element(l.pos.begin(), l.pos.end());
    KvSeqRows kept;
    kept.k_row_bytes = l.k_row_bytes;
    kept.v_row_bytes = l.v_row_bytes;
    for (size_t i = 0; i < l.pos.size(); ++i) {
        if (l.pos[i] <= newest - span) continue;
        kept.pos.push_back(l.pos[i]);
        kept.cell.push_back(l.cell[i]);
        kept.k.insert(kept.k.end(), l.k.begin() + static_cast<std::ptrdiff_t>(i * l.k_row_bytes),
                      l.k.begin() + static_cast<std::ptrdiff_t>((i + 1) * l.k_row_bytes));
        kept.v.insert(kept.v.end(), l.v.begin() + static_cast<std::ptrdiff_t>(i * l.v_row_bytes),
                      l.v.begin() + static_cast<std::ptrdiff_t>((i + 1) * l.v_row_bytes));
    }
    l = std::move(kept);
}

int32_t held_prefix(std::span<const std::unique_ptr<KvCells>> cells, int64_t sliding_window, int32_t s, int32_t n) {
    check_seq_id(s);
    if (n <= 0) return 0;
    // Per layer: how many of [0, i) the sequence holds, for i in [0, n].
    std::vector<std::vector<int32_t>> counts;
    std::vector<int64_t> windows;
    for (const auto& layer : cells) {
        const KvCells& c = *layer;
        std::vector<uint8_t> held(static_cast<size_t>(n), 0);
        const int32_t* cp = c.cell_pos(s);
        for (int64_t i = 0; i < c.n_cells(); ++i) {
            if (cp[i] >= 0 && cp[i] < n) held[static_cast<size_t>(cp[i])] = 1;
        }
        std::vector<int32_t> cnt(static_cast<size_t>(n) + 1, 0);
        for (int32_t i = 0; i < n; ++i) cnt[static_cast<size_t>(i) + 1] = cnt[static_cast<size_t>(i)] + held[static_cast<size_t>(i)];
        counts.push_back(std::move(cnt));
        windows.push_back(c.ring_span() > 0 ? sliding_window : 0);
    }
    for (int32_t m = n; m > 0; --m) {
        bool ok = true;
        for (size_t il = 0; il < counts.size() && ok; ++il) {
            const int32_t a = windows[il] > 0 ? static_cast<int32_t>(std::max<int64_t>(0, m - windows[il])) : 0;
            ok = counts[il][static_cast<size_t>(m)] - counts[il][static_cast<size_t>(a)] == m - a;
        }
        if (ok) return m;
    }
    return 0;
}

}  // namespace tandem
