// One sequence's KV cache state as bytes (Session::save_sequence and
// restore_sequence, `tandem run --prompt-cache`): every layer's cache rows
// of the sequence as stored (blocks of the cache's K and V types) with their positions, the
// token ids the caller says they hold, and what the model and cache were,
// so a state is never restored into another model.
//
// The blob is read from files a user passes: every length is checked
// against the bytes left before anything is read or allocated, and a
// malformed, truncated or corrupted blob is a tandem::Error, never a crash.
//
// Format, version 1, every field little-endian:
//   header, 128 bytes:
//     0  u8[8]  magic "TNDMSEQ\0"
//     8  u32    version (1)
//     12 u32    header bytes (128)
//     16 u64    total bytes of the blob, checksum included
//     24 u8[32] architecture, NUL-padded (at least one NUL)
//     56 u64    n_vocab
//     64 u64    tensor count
//     72 u64    hash of the tensors' names, types and shapes
//     80 u64    hash of the first 64 bytes of every tensor's data
//     88 u32    n_layer
//     92 u32    cache type (model::cache_type_code: the quant::Type of K and
//               V when equal, e.g. 1 F16, 8 Q8_0; else K | (V + 1) << 16)
//     96 u32    n_tokens
//     100 u8[28] reserved, zero
//   tokens: n_tokens x i32
//   per layer il = 0 .. n_layer-1:
//     u32 il, u32 n_rows, u32 k_row_bytes, u32 v_row_bytes
//     n_rows x i32 positions (in the order the cache held them)
//     n_rows x i32 the cell each row was in (where a restore puts it if free)
//     n_rows x k_row_bytes K rows, then n_rows x v_row_bytes V rows
//   u64 checksum of every byte before it (sequence_state_checksum)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tandem {

namespace gguf {
class File;
}

inline constexpr char kSequenceStateMagic[8] = {'T', 'N', 'D', 'M', 'S', 'E', 'Q', '\0'};
inline constexpr uint32_t kSequenceStateVersion = 1;
inline constexpr size_t kSequenceStateHeaderBytes = 128;

// What a state records of the model that made it.
struct ModelFingerprint {
    std::string arch;           // at most 31 bytes kept
    uint64_t n_vocab = 0;
    uint64_t n_tensors = 0;
    uint64_t layout_hash = 0;   // tensor names, types and shapes
    uint64_t weights_hash = 0;  // the first 64 bytes of each tensor's data
};

// Reads the first bytes of each tensor (one page each for a mapped file).
ModelFingerprint model_fingerprint(const gguf::File& file, uint64_t n_vocab);

// One layer's cells of one sequence, as the cache stores them.
struct KvSeqRows {
    uint32_t k_row_bytes = 0;
    uint32_t v_row_bytes = 0;
    std::vector<int32_t> pos;   // position of each row, in cell order
    std::vector<int32_t> cell;  // the cell each row was read from
    std::vector<uint8_t> k;     // pos.size() rows of k_row_bytes
    std::vector<uint8_t> v;     // pos.size() rows of v_row_bytes
    size_t n_rows() const { return pos.size(); }
};

struct SequenceState {
    ModelFingerprint model;
    uint32_t n_layer = 0;
    uint32_t cache_type = 0;  // quant::Type
    std::vector<int32_t> tokens;
    std::vector<KvSeqRows> layers;  // n_layer
};

std::vector<uint8_t> encode_sequence_state(const SequenceState& state);

// Parses a blob and checks it is whole and consistent: magic, version,
// size, checksum, every length, positions >= 0 and distinct per layer,
// token ids below n_vocab. Not whether it fits a model: the caller compares
// model, n_layer, cache type and row sizes. Throws tandem::Error saying
// what was expected and what was found.
SequenceState decode_sequence_state(std::span<const uint8_t> blob);

// The checksum of blob[0, n): 64-bit, over 8-byte little-endian words.
uint64_t sequence_state_checksum(std::span<const uint8_t> bytes);
// Rewrites the trailing checksum after an edit (tests that corrupt fields
// on purpose, to reach the checks behind the checksum). No-op on a blob
// shorter than a header.
void reseal_sequence_state(std::span<uint8_t> blob);

}  // namespace tandem
