// The math and the file format behind `tandem perplexity`, kept apart from
// the CLI so tests can check them on hand-built logits.
//
// Windows and scoring follow llama.cpp's llama-perplexity (default mode), so
// the numbers are comparable with it: the text is cut into chunks of n_ctx
// tokens, each evaluated from an empty cache with its first token replaced
// by BOS (when the model adds BOS), and only the second half of each chunk
// is scored, so every scored token sees at least n_ctx/2 tokens of context.
//
// A logits file (--save-logits, read back by --kl-base) holds the
// log-probabilities of every scored position, one full n_vocab row each,
// little-endian:
//   offset 0   char[8]  magic "TNDMLOGP"
//          8   u32      version (1)
//          12  u32      row type: 0 float32, 1 float16
//          16  u32      n_vocab
//          20  u32      n_ctx
//          24  u32      n_chunk
//          28  u32      first scored position of a chunk (n_ctx / 2)
//          32  u64      n_tokens of the text
//          40  i32[n_tokens]  the text's token ids (BOS included when added)
//   then n_chunk * (n_ctx - 1 - first) rows of n_vocab values, chunk-major,
//   positions first .. n_ctx - 2 of each chunk.
// The token ids make a base file self-checking: a comparison against logits
// of a different text or tokenizer is refused instead of giving nonsense.
#pragma once

#include "runtime/common/atomic_file.h"

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace tandem::tools::ppl {

// ---- Windows -----------------------------------------------------------------

inline constexpr int64_t kMinContext = 4;  // at least one scored position per chunk, and n_ctx/2 of context

struct Windows {
    int64_t n_ctx = 0;
    int64_t n_chunk = 0;
    int64_t first = 0;  // n_ctx / 2
    int64_t scored_per_chunk() const { return n_ctx - 1 - first; }
    int64_t scored_total() const { return n_chunk * scored_per_chunk(); }
};

// n_chunk = n_tokens / n_ctx, capped at max_chunks when max_chunks > 0.
// Throws tandem::Error when n_ctx < kMinContext or the text has fewer than
// 2 * n_ctx tokens (llama-perplexity's requirement), naming both counts.
Windows make_windows(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks);

// The n_ctx tokens of chunk i, the first replaced by `bos` when bos >= 0.
std::vector<int32_t> chunk_tokens(std::span<const int32_t> text, const Windows& w, int64_t chunk, int32_t bos);

// ---- Per-row math (double, max-subtracted) -----------------------------------

// log(sum exp(x)) of a row.
double log_sum_exp(std::span<const float> x);
// -log softmax(logits)[token]: float exponentials, summed in double.
double token_nll(std::span<const float> logits, int32_t token);
// out[i] = logits[i] - log_sum_exp(logits), computed in double, stored as float.
void log_softmax(std::span<const float> logits, std::span<float> out);

// Running sums of negative log-likelihoods: perplexity exp(mean) and
// llama.cpp's uncertainty ppl * sqrt((E[nll^2] - E[nll]^2) / (n - 1)).
class NllStats {
public:
    void add(double nll) {
        sum_ += nll;
        sum2_ += nll * nll;
        ++count_;
    }
    int64_t count() const { return count_; }
    double mean() const;
    double ppl() const;
    double ppl_unc() const;  // 0 when fewer than two values or no spread

private:
    double sum_ = 0.0;
    double sum2_ = 0.0;
    int64_t count_ = 0;
};

// One scored position compared with a base: KL(base || current) over the
// renormalized rows, whether both put the most probability on the same
// token, and the base's nll of the actual next token. Rows are
// log-probabilities (as stored); both are renormalized in double so a base
// rounded to float16 still sums to one, and identical rows give exactly 0.
struct RowComparison {
    double kl = 0.0;
    bool same_top = false;
    double base_nll = 0.0;
};
RowComparison compare_rows(std::span<const float> base_logp, std::span<const float> cur_logp, int32_t token);

// Linear interpolation between the two nearest ranks of `sorted` (as
// llama-perplexity --kl-divergence reports its percentiles); q in [0, 1].
double percentile(std::span<const double> sorted, double q);

struct KlSummary {
    int64_t count = 0;
    double mean = 0.0, unc = 0.0;  // mean KL and its standard error
    double max = 0.0, p99 = 0.0, median = 0.0;
    double top1 = 0.0, top1_unc = 0.0;  // fraction of positions with the same top token
    double base_ppl = 0.0, base_ppl_unc = 0.0;
};

class KlStats {
public:
    void add(const RowComparison& r);
    int64_t count() const { return static_cast<int64_t>(kl_.size()); }
    KlSummary summarize() const;

private:
    std::vector<double> kl_;  // every value, for the percentiles
    double sum_ = 0.0, sum2_ = 0.0;
    int64_t same_top_ = 0;
    NllStats base_nll_;
};

// ---- Logits files --------------------------------------------------------------

inline constexpr char kLogitsMagic[8] = {'T', 'N', 'D', 'M', 'L', 'O', 'G', 'P'};
inline constexpr uint32_t kLogitsVersion = 1;

enum class RowType : uint32_t { F32 = 0, F16 = 1 };
RowType parse_row_type(const std::string& s);  // "f32" / "f16"; throws tandem::Error otherwise

struct LogitsHeader {
    RowType row_type = RowType::F16;
    int64_t n_vocab = 0;
    int64_t n_ctx = 0;
    int64_t n_chunk = 0;
    int64_t first = 0;
    std::vector<int32_t> tokens;

    int64_t rows() const { return n_chunk * (n_ctx - 1 - first); }
    uint64_t row_bytes() const;
    uint64_t header_bytes() const;
    uint64_t file_bytes() const;
};

// Writes through an AtomicFile (a temp file renamed to PATH in finish()),
// so an interrupted run never leaves a file that looks complete. A writer
// destroyed before finish() removes the temp file.
class LogitsWriter {
public:
    LogitsWriter(std::string path, LogitsHeader header);
    ~LogitsWriter();
    LogitsWriter(const LogitsWriter&) = delete;
    LogitsWriter& operator=(const LogitsWriter&) = delete;

    void write_row(std::span<const float> logp);
    void finish();  // throws tandem::Error unless exactly header.rows() rows were written

private:
    std::string path_;
    LogitsHeader header_;
    AtomicFile out_;
    int64_t rows_written_ = 0;
    bool finished_ = false;
    std::vector<uint16_t> half_;
};

// Opens and validates a logits file: magic, version, row type, sizes that
// agree with each other and with the file's length (a truncated or padded
// file is refused here, before any row is read). Every failure is a
// tandem::Error naming the file and what was wrong.
class LogitsReader {
public:
    explicit LogitsReader(const std::string& path);
    const LogitsHeader& header() const { return header_; }
    void read_row(std::span<float> out);  // the next row, converted to float

private:
    std::string path_;
    LogitsHeader header_;
    std::ifstream in_;
    int64_t rows_read_ = 0;
    std::vector<uint16_t> half_;
};

// Throws tandem::Error naming the first difference between a base file and
// the run about to compare with it: n_vocab, n_ctx, the text's tokens, or
// more chunks than the base holds (fewer are fine: the base's leading
// chunks are used).
void check_base_matches(const LogitsHeader& base, const std::string& base_path, int64_t n_vocab, const Windows& w,
                        std::span<const int32_t> tokens);

}  // namespace tandem::tools::ppl
