#include "tools/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/quant/fp16.h"

namespace tandem::tools::ppl {

// ---- Windows -----------------------------------------------------------------

Windows make_windows(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks) {
    if (n_ctx < kMinContext) {
        throw Error(fmt::format("-c: expected a context of at least {} tokens, found {}", kMinContext, n_ctx));
    }
    if (n_tokens < 2 * n_ctx) {
        throw Error(fmt::format("the text gives {} tokens; perplexity with -c {} needs at least {} (2 * n_ctx): use a "
                                "longer text or a smaller -c",
                                n_tokens, n_ctx, 2 * n_ctx));
    }
    Windows w;
    w.n_ctx = n_ctx;
    w.first = n_ctx / 2;
    w.n_chunk = n_tokens / n_ctx;
    if (max_chunks > 0) w.n_chunk = std::min(w.n_chunk, max_chunks);
    return w;
}

std::vector<int32_t> chunk_tokens(std::span<const int32_t> text, const Windows& w, int64_t chunk, int32_t bos) {
    const auto start = static_cast<size_t>(chunk * w.n_ctx);
    const auto n = static_cast<size_t>(w.n_ctx);
    TANDEM_CHECK(chunk >= 0 && chunk < w.n_chunk && start + n <= text.size(), "chunk outside the text");
    std::vector<int32_t> out(text.begin() + static_cast<ptrdiff_t>(start),
                             text.begin() + static_cast<ptrdiff_t>(start + n));
    // Each chunk starts a fresh context, so it starts as a text would.
    if (bos >= 0) out[0] = bos;
    return out;
}

// ---- Per-row math --------------------------------------------------------------

double log_sum_exp(std::span<const float> x) {
    TANDEM_CHECK(!x.empty(), "empty row");
    const float mx = *std::max_element(x.begin(), x.end());
    if (std::isinf(mx)) return mx;  // all -inf (or an +inf logit): nothing finite to subtract
    // Float exponentials summed in double, as llama-perplexity does: each
    // term is exact to an ulp, and a 256k row costs half as much as with
    // double exp (this loop is a tenth of a run on a small model).
    double sum = 0.0;
    for (float v : x) sum += std::exp(v - mx);
    return mx + std::log(sum);
}

double token_nll(std::span<const float> logits, int32_t token) {
    TANDEM_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(), "token outside the row");
    return log_sum_exp(logits) - static_cast<double>(logits[static_cast<size_t>(token)]);
}

void log_softmax(std::span<const float> logits, std::span<float> out) {
    TANDEM_CHECK(out.size() == logits.size(), "row sizes differ");
    const double lse = log_sum_exp(logits);
    for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(static_cast<double>(logits[i]) - lse);
}

double NllStats::mean() const { return count_ > 0 ? sum_ / static_cast<double>(count_) : 0.0; }

double NllStats::ppl() const { return std::exp(mean()); }

double NllStats::ppl_unc() const {
    if (count_ < 2) return 0.0;
    const double m = mean();
    const double var = sum2_ / static_cast<double>(count_) - m * m;
    // llama.cpp reports an error instead when rounding makes this negative;
    // no spread means no uncertainty.
    if (!(var > 0.0)) return 0.0;
    return ppl() * std::sqrt(var / static_cast<double>(count_ - 1));
}

namespace {

size_t argmax(std::span<const float> x) {
    return static_cast<size_t>(std::max_element(x.begin(), x.end()) - x.begin());
}

}  // namespace

RowComparison compare_rows(std::span<const float> base_logp, std::span<const float> cur_logp, int32_t token) {
    TANDEM_CHECK(base_logp.size() == cur_logp.size() && !base_logp.empty(), "row sizes differ");
    TANDEM_CHECK(token >= 0 && static_cast<size_t>(token) < base_logp.size(), "token outside the row");
    const double lse_b = log_sum_exp(base_logp);
    const double lse_c = log_sum_exp(cur_logp);
    double kl = 0.0;
    for (size_t i = 0; i < base_logp.size(); ++i) {
        const double lb = static_cast<double>(base_logp[i]) - lse_b;
        const double pb = std::exp(lb);
        if (pb == 0.0) continue;  // 0 * log 0 is 0; skipping also avoids 0 * -inf
        kl += pb * (lb - (static_cast<double>(cur_logp[i]) - lse_c));
    }
    RowComparison r;
    r.kl = kl;
    r.same_top = argmax(base_logp) == argmax(cur_logp);
    r.base_nll = lse_b - static_cast<double>(base_logp[static_cast<size_t>(token)]);
    return r;
}

double percentile(std::span<const double> sorted, double q) {
    if (sorted.empty()) return 0.0;
    if (q <= 0.0) return sorted.front();
    if (q >= 1.0) return sorted.back();
    const double p = q * static_cast<double>(sorted.size() - 1);
    const auto i = static_cast<size_t>(p);
    const double f = p - static_cast<double>(i);
    const size_t j = std::min(i + 1, sorted.size() - 1);
    return (1.0 - f) * sorted[i] + f * sorted[j];
}

void KlStats::add(const RowComparison& r) {
    kl_.push_back(r.kl);
    sum_ += r.kl;
    sum2_ += r.kl * r.kl;
    if (r.same_top) ++same_top_;
    base_nll_.add(r.base_nll);
}

KlSummary KlStats::summarize() const {
    KlSummary s;
    s.count = count();
    if (s.count == 0) return s;
    const auto n = static_cast<double>(s.count);
    s.mean = sum_ / n;
    if (s.count > 1) {
        const double var = sum2_ / n - s.mean * s.mean;
        s.unc = var > 0.0 ? std::sqrt(var / (n - 1.0)) : 0.0;
    }
    std::vector<double> sorted = kl_;
    std::sort(sorted.begin(), sorted.end());
    s.max = sorted.back();
    s.p99 = percentile(sorted, 0.99);
    s.median = percentile(sorted, 0.5);
    s.top1 = static_cast<double>(same_top_) / n;
    if (s.count > 1) s.top1_unc = std::sqrt(s.top1 * (1.0 - s.top1) / (n - 1.0));
    s.base_ppl = base_nll_.ppl();
    s.base_ppl_unc = base_nll_.ppl_unc();
    return s;
}

// ---- Logits files --------------------------------------------------------------

namespace {

constexpr uint64_t kFixedHeaderBytes = 40;

uint64_t element_bytes(RowType t) { return t == RowType::F32 ? 4 : 2; }

template <class T>
void put(std::string& buf, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    buf.append(b, sizeof(T));
}

template <class T>
T get(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

}  // namespace

RowType parse_row_type(const std::string& s) {
    if (s == "f32") return RowType::F32;
    if (s == "f16") return RowType::F16;
    throw Error(fmt::format("--save-logits-type: expected f16 or f32, found {}", s));
}

uint64_t LogitsHeader::row_bytes() const { return static_cast<uint64_t>(n_vocab) * element_bytes(row_type); }

uint64_t LogitsHeader::header_bytes() const { return kFixedHeaderBytes + 4 * static_cast<uint64_t>(tokens.size()); }

uint64_t LogitsHeader::file_bytes() const { return header_bytes() + static_cast<uint64_t>(rows()) * row_bytes(); }

LogitsWriter::LogitsWriter(std::string path, LogitsHeader header)
    : path_(std::move(path)), header_(std::move(header)), out_(path_) {
    TANDEM_CHECK(header_.n_vocab > 0 && header_.n_ctx >= kMinContext && header_.first == header_.n_ctx / 2,
                 "bad logits header");
    std::string buf(kLogitsMagic, sizeof(kLogitsMagic));
    put<uint32_t>(buf, kLogitsVersion);
    put<uint32_t>(buf, static_cast<uint32_t>(header_.row_type));
    put<uint32_t>(buf, static_cast<uint32_t>(header_.n_vocab));
    put<uint32_t>(buf, static_cast<uint32_t>(header_.n_ctx));
    put<uint32_t>(buf, static_cast<uint32_t>(header_.n_chunk));
    put<uint32_t>(buf, static_cast<uint32_t>(header_.first));
    put<uint64_t>(buf, static_cast<uint64_t>(header_.tokens.size()));
    for (int32_t t : header_.tokens) put<int32_t>(buf, t);
    out_.write(buf);
}

LogitsWriter::~LogitsWriter() = default;

void LogitsWriter::write_row(std::span<const float> logp) {
    TANDEM_CHECK(static_cast<int64_t>(logp.size()) == header_.n_vocab, "row width differs from n_vocab");
    TANDEM_CHECK(rows_written_ < header_.rows(), "more rows than the header announces");
    if (header_.row_type == RowType::F32) {
        out_.write(logp.data(), logp.size_bytes());
    } else {
        half_.resize(logp.size());
        for (size_t i = 0; i < logp.size(); ++i) half_[i] = quant::fp32_to_fp16(logp[i]);
        out_.write(half_.data(), half_.size() * 2);
    }
    ++rows_written_;
}

void LogitsWriter::finish() {
    if (rows_written_ != header_.rows()) {
        throw InternalError(fmt::format("logits file {}: {} rows written, {} announced", path_, rows_written_,
                                        header_.rows()));
    }
    out_.commit();
    finished_ = true;
}

LogitsReader::LogitsReader(const std::string& path) : path_(path) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path_, ec);
    if (ec) throw Error(fmt::format("cannot read base logits file {}: {}", path_, ec.message()));
    in_.open(path_, std::ios::binary);
    if (!in_) throw Error(fmt::format("cannot read base logits file {}", path_));
    if (size < kFixedHeaderBytes) {
        throw Error(fmt::format("{} is not a Tandem logits file: {} bytes, shorter than the {}-byte header", path_,
                                size, kFixedHeaderBytes));
    }
    char fixed[kFixedHeaderBytes];
    in_.read(fixed, kFixedHeaderBytes);
    if (!in_) throw Error(fmt::format("cannot read the header of {}", path_));
    if (std::memcmp(fixed, kLogitsMagic, sizeof(kLogitsMagic)) != 0) {
        throw Error(fmt::format("{} is not a Tandem logits file (no TNDMLOGP magic; write one with "
                                "perplexity --save-logits)",
                                path_));
    }
    const auto version = get<uint32_t>(fixed + 8);
    if (version != kLogitsVersion) {
        throw Error(fmt::format("{} is logits format version {}; this build reads version {}", path_, version,
                                kLogitsVersion));
    }
    const auto row_type = get<uint32_t>(fixed + 12);
    if (row_type > 1) throw Error(fmt::format("{}: unknown row type {} (0 f32, 1 f16)", path_, row_type));
    header_.row_type = static_cast<RowType>(row_type);
    header_.n_vocab = get<uint32_t>(fixed + 16);
    header_.n_ctx = get<uint32_t>(fixed + 20);
    header_.n_chunk = get<uint32_t>(fixed + 24);
    header_.first = get<uint32_t>(fixed + 28);
    const auto n_tokens = get<uint64_t>(fixed + 32);
    if (header_.n_vocab == 0 || header_.n_ctx < kMinContext || header_.first != header_.n_ctx / 2 ||
        header_.n_chunk == 0) {
        throw Error(fmt::format("{} has an invalid header: n_vocab {}, n_ctx {}, first {}, n_chunk {}", path_,
                                header_.n_vocab, header_.n_ctx, header_.first, header_.n_chunk));
    }
    // Sizes are checked before anything is allocated from them, in 128 bits
    // so a corrupt header cannot overflow its way past the check.
    using u128 = unsigned __int128;
    const u128 token_bytes = static_cast<u128>(n_tokens) * 4;
    if (token_bytes > size - kFixedHeaderBytes) {
        throw Error(fmt::format("{} is truncated: its header lists {} tokens, the file has {} bytes", path_, n_tokens,
                                size));
    }
    if (static_cast<u128>(header_.n_chunk) * static_cast<u128>(header_.n_ctx) > n_tokens) {
        throw Error(fmt::format("{} has an invalid header: {} chunks of {} tokens but only {} tokens", path_,
                                header_.n_chunk, header_.n_ctx, n_tokens));
    }
    const u128 expected = kFixedHeaderBytes + token_bytes +
                          static_cast<u128>(header_.n_chunk) * static_cast<u128>(header_.n_ctx - 1 - header_.first) *
                              static_cast<u128>(header_.n_vocab) * element_bytes(header_.row_type);
    if (expected != size) {
        throw Error(fmt::format("{} is {}: {} bytes, {} expected for {} chunks of n_ctx {}, n_vocab {}", path_,
                                size < expected ? "truncated" : "longer than its header says", size,
                                static_cast<uint64_t>(std::min<u128>(expected, std::numeric_limits<uint64_t>::max())),
                                header_.n_chunk, header_.n_ctx, header_.n_vocab));
    }
    header_.tokens.resize(static_cast<size_t>(n_tokens));
    in_.read(reinterpret_cast<char*>(header_.tokens.data()), static_cast<std::streamsize>(n_tokens * 4));
    if (!in_) throw Error(fmt::format("cannot read the token ids of {}", path_));
}

void LogitsReader::read_row(std::span<float> out) {
    TANDEM_CHECK(static_cast<int64_t>(out.size()) == header_.n_vocab, "row width differs from n_vocab");
    if (rows_read_ >= header_.rows()) throw Error(fmt::format("{}: no rows left to read", path_));
    if (header_.row_type == RowType::F32) {
        in_.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size_bytes()));
    } else {
        half_.resize(out.size());
        in_.read(reinterpret_cast<char*>(half_.data()), static_cast<std::streamsize>(half_.size() * 2));
        for (size_t i = 0; i < out.size(); ++i) out[i] = quant::fp16_to_fp32(half_[i]);
    }
    // The length was checked at open; this catches a file changed since.
    if (!in_) throw Error(fmt::format("{} ended early, at row {} of {}", path_, rows_read_, header_.rows()));
    ++rows_read_;
}

void check_base_matches(const LogitsHeader& base, const std::string& base_path, int64_t n_vocab, const Windows& w,
                        std::span<const int32_t> tokens) {
    if (base.n_vocab != n_vocab) {
        throw Error(fmt::format("--kl-base {}: made with n_vocab {}, this model has {}", base_path, base.n_vocab,
                                n_vocab));
    }
    if (base.n_ctx != w.n_ctx) {
        throw Error(fmt::format("--kl-base {}: made with -c {}, this run uses -c {}", base_path, base.n_ctx, w.n_ctx));
    }
    if (base.tokens.size() != tokens.size()) {
        throw Error(fmt::format("--kl-base {}: its text has {} tokens, this one {} (a different text or tokenizer)",
                                base_path, base.tokens.size(), tokens.size()));
    }
    const auto diff = std::mismatch(base.tokens.begin(), base.tokens.end(), tokens.begin());
    if (diff.first != base.tokens.end()) {
        throw Error(fmt::format("--kl-base {}: token ids differ at position {} (base {}, now {}): a different text or "
                                "tokenizer",
                                base_path, diff.first - base.tokens.begin(), *diff.first, *diff.second));
    }
    if (w.n_chunk > base.n_chunk) {
        throw Error(fmt::format("--kl-base {}: holds {} chunks, this run scores {}; use --chunks {}", base_path,
                                base.n_chunk, w.n_chunk, base.n_chunk));
    }
}

}  // namespace tandem::tools::ppl
