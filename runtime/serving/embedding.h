// Sentence embeddings from a decoder's final hidden states (the rows after
// the output norm, Session::eval_batch_hidden), as llama.cpp makes them:
// one sequence's rows pooled into one vector (mean over its tokens, the
// first token's row, or the last one's), then normalized as llama-server
// does for /v1/embeddings (by default to unit Euclidean length: its
// --embd-normalize 2, or the request's embd_normalize).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tandem::serve {

// llama.cpp's pooling types, by its flag names (--pooling).
enum class Pooling { None, Mean, Cls, Last };

// "none", "mean", "cls" or "last"; throws tandem::Error for another name
// (llama.cpp's "rank" needs a classifier head this runtime does not run).
Pooling parse_pooling(std::string_view name);
std::string_view pooling_name(Pooling p);
// The value of a GGUF's <arch>.pooling_type (llama.cpp's enum
// llama_pooling_type: 0 none, 1 mean, 2 cls, 3 last, 4 rank); throws
// tandem::Error for rank and for values it does not know.
Pooling pooling_from_gguf(uint64_t value);

// v normalized as llama.cpp's common_embd_normalize(v, norm) does: -1
// none, 0 the largest magnitude to 32760 (int16's range), 2 Euclidean
// length 1, any other p >= 1 p-norm 1 (sums in double, as there); a zero
// vector stays zero. Throws tandem::Error for norm < -1.
std::vector<float> normalize_embedding(std::span<const float> v, int norm = 2);

// One sequence's pooling: rows are fed in position order, a chunk at a
// time, only those wants() asks for.
class Pooler {
public:
    // pooling: not None (a sequence pooled to one vector); n_tokens >= 1.
    Pooler(Pooling pooling, int64_t n_embd, int64_t n_tokens);
    // Whether the row of position pos (0 .. n_tokens - 1) is needed.
    bool wants(int64_t pos) const;
    // The row of position pos, which wants() asked for (n_embd floats).
    void add(int64_t pos, std::span<const float> row);
    // The pooled vector, not normalized; every wanted row must be in.
    std::vector<float> pooled() const;

private:
    Pooling pooling_;
    int64_t n_embd_, n_tokens_;
    int64_t added_ = 0;
    std::vector<double> sum_;  // Mean: the rows' sum; Cls, Last: the row
};

}  // namespace tandem::serve
