// The importance matrix behind `tandem imatrix`, as llama.cpp's
// llama-imatrix computes and stores it, kept apart from the CLI so tests
// can feed it hand-made activations.
//
// The math. For each weight matrix W of a layer multiplied by activations
// (the "blk.*" products; the output head and the token embedding have no
// entry), with x_t the float input row of token t:
//   in_sum2[j] = sum over the calibration tokens t of x_t[j]^2  (float, in token order)
//   counts     = the number of those tokens.
// For a 3-D expert tensor, one row of sums and one count per expert e, over
// the (token, slot) rows routed to e. The quantizer's importance of column
// j is in_sum2[j] / counts (runtime/quant/imatrix_file.h reads it back).
//
// The sums are floats added token after token, so their last bits depend
// on the order the tokens come in: Tandem evaluates the chunks in
// llama-imatrix's batches and micro-batches (pack, micro_batches below),
// and skips, as it does, dense products of fewer than 16 tokens.
//
// --in-file: the sums and counts of earlier files are the starting point
// (Collector::add_stored), as llama-imatrix adds them up; a legacy `.dat`
// file's values (means times a call count) count as ncall * chunk_size
// tokens. --process-output: the output head's sums as well.
//
// The file (llama-imatrix's GGUF format): keys general.type = "imatrix",
// imatrix.datasets (string array: the text files), imatrix.chunk_count and
// imatrix.chunk_size (u32); then, for each weight in name order, two F32
// tensors: "<weight>.in_sum2" of shape [n_per_row, n_mat] and
// "<weight>.counts" of shape [1, n_mat], stored as ggml stores them: a
// trailing dimension of 1 dropped ([n_per_row] and [1] for a 2-D weight).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine/activation_observer.h"
#include "runtime/engine/session.h"
#include "runtime/quant/imatrix_file.h"

namespace tandem::tools::imatrix {

struct Entry {
    int64_t n_per_row = 0;        // the weight's columns (its input width)
    std::vector<float> in_sum2;   // n_mat rows of n_per_row sums of squares
    std::vector<int64_t> counts;  // tokens seen, per matrix (one for a 2-D weight)
    int64_t n_mat() const { return static_cast<int64_t>(counts.size()); }
};

using Entries = std::map<std::string, Entry>;

// An ActivationObserver that accumulates the sums. A non-finite activation
// is a tandem::Error naming the weight (llama-imatrix stops there too).
class Collector final : public ActivationObserver {
public:
    // process_output: also the output head's product ("output.weight").
    explicit Collector(bool process_output = false) : process_output_(process_output) {}

    // Adds a file's sums and counts, as llama-imatrix's --in-file (its
    // load_imatrix): a legacy file's values times chunk_size, its call
    // count times chunk_size tokens. A weight whose sums have another
    // length than what is there already is an Error naming `source`.
    void add_stored(const quant::StoredImatrix& m, int64_t chunk_size, const std::string& source);

    void on_matmul(const gguf::TensorInfo& w, int64_t expert, const float* x, int64_t n_rows, int64_t n_in) override;
    void on_head_matmul(const gguf::TensorInfo& w, int64_t head, const float* x, int64_t n_rows, int64_t n_in) override;

    const Entries& entries() const { return entries_; }
    // llama-imatrix's chunk count: the most tokens any matrix saw, in chunks.
    uint32_t chunk_count(int64_t chunk_size) const;
    // Entries with an expert that saw no token (stored all the same, as
    // llama-imatrix does: the reader gives such a matrix weights of 1).
    std::vector<std::string> partial_entries() const;

private:
    bool collected(const std::string& name) const;  // a dense product llama-imatrix collects

    bool process_output_ = false;
    Entries entries_;
};

// ---- llama-imatrix's batches -------------------------------------------------
// llama-imatrix evaluates n_seq = n_batch / n_ctx chunks side by side, one
// sequence each with its own cache cells (llama.cpp's non-unified cache),
// in batches of seq_batch tokens of each; llama.cpp cuts a batch into
// micro-batches holding an equal share of every sequence (n_ubatch / n_seqs
// tokens each), one sequence after the other; with one sequence, into
// n_ubatch tokens at a time.
struct Packing {
    int64_t n_ctx = 0;      // tokens per chunk
    int64_t n_seq = 1;      // chunks side by side (at most kMaxSequences)
    int64_t seq_batch = 0;  // tokens of each sequence per batch
    int64_t n_ubatch = 0;   // tokens per micro-batch
};
Packing pack(int64_t n_ctx, int64_t n_batch, int64_t n_ubatch);

// The micro-batches that evaluate `chunks` (at most p.n_seq, each of
// p.n_ctx tokens, BOS in place) as sequences 0, 1, ...; the tokens at
// positions [logits_from, n_ctx - 1) ask for logits, or with all_logits
// every token (as llama-imatrix asks: the output head then multiplies
// every row, which --process-output collects).
std::vector<std::vector<BatchToken>> micro_batches(std::span<const std::vector<int32_t>> chunks, const Packing& p,
                                                   int64_t logits_from, bool all_logits = false);

struct FileInfo {
    std::vector<std::string> datasets;
    uint32_t chunk_count = 0;
    uint32_t chunk_size = 0;
};

// Writes the entries as llama-imatrix's GGUF through an AtomicFile (a temp
// file renamed over `path` once complete). Throws tandem::Error when there
// is nothing to write or the file cannot be written.
void write_file(const std::filesystem::path& path, const Entries& entries, const FileInfo& info);

// llama-imatrix's legacy `.dat` file (--output-format dat): per weight in
// name order, ncall = ceil(most tokens of its matrices / chunk_size) and its
// values in_sum2 / count * ncall (1 * ncall for a matrix that saw no token);
// weights no token reached are left out. Then the chunk count and one
// dataset name (info.datasets' last, or none).
void write_legacy_file(const std::filesystem::path& path, const Entries& entries, const FileInfo& info);

}  // namespace tandem::tools::imatrix
