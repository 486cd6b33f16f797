// What a session may take from a saved sequence state (sequence_state.h),
// and what its caches already hold of a sequence: pure checks over the
// state, the model's fingerprint and the KV cells, apart from the session
// that reads and writes the rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "runtime/engine/kv_cells.h"
#include "runtime/engine/sequence_state.h"
#include "runtime/model/model_spec.h"

namespace tandem {

// Throws tandem::Error unless sequence id s is in [0, kMaxSequences).
void check_seq_id(int32_t s);

// The model and cache a state was made for, against a session's: its
// fingerprint, layer count, K and V types and row sizes. Throws
// tandem::Error naming the first field that differs and how.
void check_state_fits(const SequenceState& st, const ModelFingerprint& fp, const model::HParams& hp,
                      model::CacheType cache);

// Drops the rows a ring of `span` cells does not keep: those `span` or more
// positions behind the newest.
void keep_ring_span(KvSeqRows& rows, int64_t span);

// The longest prefix [0, m), m <= n, whose cached rows every layer still
// holds for sequence s: all of them in a global layer, the last `window`
// positions in a sliding-window one (a layer with a ring span).
int32_t held_prefix(std::span<const std::unique_ptr<KvCells>> cells, int64_t sliding_window, int32_t s, int32_t n);

}  // namespace tandem
