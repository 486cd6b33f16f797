// `tandem perplexity`: perplexity of a model over a text, in llama-perplexity's
// windows (tools/perplexity.h) so the numbers compare with llama.cpp's; can
// save the scored log-probabilities and compare a run against saved ones
// (KL divergence, top-token agreement), like llama-perplexity
// --kl-divergence-base / --kl-divergence.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/planner.h"
#include "runtime/common/memory_ledger.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/engine/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/field_flags.h"
#include "tools/commands.h"
#include "tools/session_open.h"
#include "tools/split.h"
#include "tools/text_input.h"
#include "tools/stream_flags.h"
#include "tools/perplexity.h"
#include "tools/progress.h"

namespace tandem::tools {
namespace {

// SplitFlags: --device, --vram, -ngl, --cache-type, streaming and placement.
struct PerplexityOptions : SplitFlags {
    bool check_tensors = false;
    std::string model;
    std::string text_file;
    int64_t n_ctx = 512;
    int64_t n_batch = 2048;  // llama.cpp's default; capped at n_ctx
    int64_t n_ubatch = 512;
    int n_threads = 0;
    int64_t chunks = 0;  // 0: every whole chunk of the text
    std::string save_logits;
    std::string save_logits_type = "f16";
    std::string kl_base;
    bool json = false;
};

void perplexity(const PerplexityOptions& o) {
    // Cheap checks first, so bad flags fail before the model is loaded.
    if (o.n_ctx < ppl::kMinContext) {
        throw Error(fmt::format("-c: expected a context of at least {} tokens, found {}", ppl::kMinContext, o.n_ctx));
    }
    if (o.n_batch <= 0) throw Error(fmt::format("-b: expected a positive batch size, found {}", o.n_batch));
    if (o.chunks < 0) throw Error(fmt::format("--chunks: expected a count >= 0, found {}", o.chunks));
    const ppl::RowType row_type = ppl::parse_row_type(o.save_logits_type);
    const std::string text = read_llama_text_file(o.text_file);

    const gguf::File file = gguf::File::open(o.model);
    const model::ModelSpec spec = model::load_model_spec(file);
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);
    const bool add_bos = tokenizer.add_bos_by_default();
    // As llama-perplexity: the whole text once, special tokens not parsed.
    const std::vector<int32_t> tokens = tokenizer.encode(text, add_bos);
    // The base file is read and validated before the session is built, so a
    // damaged file fails fast; whether it matches this run is checked once
    // the session says how wide the output rows are.
    std::optional<ppl::LogitsReader> base;
    if (!o.kl_base.empty()) base.emplace(o.kl_base);
    // Without --chunks, a comparison covers the chunks the base holds (a base
    // saved with --chunks N is compared over those N).
    const int64_t max_chunks = o.chunks == 0 && base ? base->header().n_chunk : o.chunks;
    const ppl::Windows w = ppl::make_windows(static_cast<int64_t>(tokens.size()), o.n_ctx, max_chunks);

    // As `run`, without the tune cache: its entries are measured for
    // generation, and perplexity is all prompt processing at one context.
    SplitRequest req = split_request(o, w.n_ctx, o.n_ubatch);
    SessionOptions so = resolve_split(req, file, spec, warn_on_stderr).so;
    so.n_threads = o.n_threads;
    const std::unique_ptr<Session> session_ptr = open_session_stepping_down(file, spec, so, o.check_tensors);
    Session& session = *session_ptr;
    const int64_t n_vocab = session.n_vocab();
    if (base) ppl::check_base_matches(base->header(), o.kl_base, n_vocab, w, tokens);
    const int64_t n_batch = std::min(o.n_batch, w.n_ctx);

    std::optional<ppl::LogitsWriter> writer;
    if (!o.save_logits.empty()) {
        ppl::LogitsHeader h;
        h.row_type = row_type;
        h.n_vocab = n_vocab;
        h.n_ctx = w.n_ctx;
        h.n_chunk = w.n_chunk;
        h.first = w.first;
        h.tokens = tokens;
        // Full rows add up (13 chunks of Gemma 3 are 1.7 GB in f16): say so
        // before the run, not after the disk fills.
        fmt::print(stderr, "perplexity: writing {} of log-probabilities to {}\n", format_bytes(h.file_bytes()),
                   o.save_logits);
        writer.emplace(o.save_logits, std::move(h));
    }

    fmt::print(stderr, "perplexity: {} tokens, {} chunks of {}, {} scored per chunk, {} threads{}\n", tokens.size(),
               w.n_chunk, w.n_ctx, w.scored_per_chunk(), session.n_threads(),
               so.device.empty() ? "" : fmt::format(", {} layers on {}", session.n_device_layers(), so.device));

    // In a terminal the bar shows the running estimate and the llama.cpp
    // line is printed once at the end (the bar's redraws would erase a line
    // printed beside it); in a log each estimate is printed as it comes.
    const bool stream_estimates = !o.json && isatty(STDOUT_FILENO) == 0;
    std::string estimates;
    ppl::NllStats nll;
    ppl::KlStats kl;
    std::vector<float> logits;
    std::vector<float> cur_row(static_cast<size_t>(n_vocab));
    std::vector<float> base_row(base ? static_cast<size_t>(n_vocab) : 0);
    const bool need_logp = writer.has_value() || base.has_value();
    double eval_s = 0.0;
    using clock = std::chrono::steady_clock;
    const auto t_start = clock::now();
    ProgressBar bar("perplexity", static_cast<uint64_t>(w.n_chunk));

    for (int64_t c = 0; c < w.n_chunk; ++c) {
        session.reset();
        const std::vector<int32_t> chunk = ppl::chunk_tokens(tokens, w, c, add_bos ? tokenizer.bos() : -1);
        const size_t text_start = static_cast<size_t>(c * w.n_ctx);
        for (int64_t start = 0, n = 0; start < w.n_ctx; start += n) {
            // Pieces of -b tokens, cut at the scored half: the first half
            // needs no logits rows, and the output head over 256 rows of a
            // 256k vocabulary costs more than all the layers of Gemma 3 270M.
            // (llama.cpp asks for logits only from `first` on, likewise.)
            n = std::min(n_batch, w.n_ctx - start);
            if (start < w.first) n = std::min(n, w.first - start);
            const bool scored = start >= w.first;
            const auto t0 = clock::now();
            session.eval(std::span<const int32_t>(chunk).subspan(static_cast<size_t>(start), static_cast<size_t>(n)),
                         scored, logits);
            eval_s += std::chrono::duration<double>(clock::now() - t0).count();
            if (!scored) continue;
            for (int64_t j = std::max(start, w.first); j < std::min(start + n, w.n_ctx - 1); ++j) {
                const std::span<const float> row(logits.data() + (j - start) * n_vocab, static_cast<size_t>(n_vocab));
                // The next token of the text, never the BOS put in its place.
                const int32_t target = tokens[text_start + static_cast<size_t>(j) + 1];
                nll.add(ppl::token_nll(row, target));
                if (!need_logp) continue;
                ppl::log_softmax(row, cur_row);
                if (writer) writer->write_row(cur_row);
                if (base) {
                    base->read_row(base_row);
                    kl.add(ppl::compare_rows(base_row, cur_row, target));
                }
            }
        }
        const std::string est = fmt::format("[{}]{:.4f},", c + 1, nll.ppl());
        estimates += est;
        if (stream_estimates) {
            fmt::print("{}", est);
            std::fflush(stdout);
        }
        bar.advance(1, est.substr(0, est.size() - 1));
    }
    bar.finish();
    if (writer) writer->finish();
    const double total_s = std::chrono::duration<double>(clock::now() - t_start).count();
    const int64_t n_eval = w.n_chunk * w.n_ctx;
    const double tps = eval_s > 0.0 ? static_cast<double>(n_eval) / eval_s : 0.0;
    const ppl::KlSummary ks = kl.summarize();

    if (o.json) {
        nlohmann::json j{{"ppl", nll.ppl()},
                         {"ppl_unc", nll.ppl_unc()},
                         {"n_ctx", w.n_ctx},
                         {"n_chunk", w.n_chunk},
                         {"n_tokens", tokens.size()},
                         {"n_tokens_scored", nll.count()},
                         {"tokens_per_second", tps},
                         {"seconds", total_s}};
        if (base) {
            j["kl_mean"] = ks.mean;
            j["kl_unc"] = ks.unc;
            j["kl_max"] = ks.max;
            j["kl_p99"] = ks.p99;
            j["kl_median"] = ks.median;
            j["top1_agreement"] = ks.top1;
            j["top1_agreement_unc"] = ks.top1_unc;
            j["base_ppl"] = ks.base_ppl;
            j["base_ppl_unc"] = ks.base_ppl_unc;
        }
        if (!o.save_logits.empty()) j["saved_logits"] = o.save_logits;
        fmt::print("{}\n", j.dump(2));
        return;
    }
    fmt::print("{}\n", stream_estimates ? "" : estimates);
    fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", nll.ppl(), nll.ppl_unc());
    fmt::print("{} tokens evaluated in {:.2f} s ({:.2f} s in the model): {:.2f} tok/s; {} positions scored\n", n_eval,
               total_s, eval_s, tps, nll.count());
    if (writer) fmt::print("log-probabilities of the scored positions written to {}\n", o.save_logits);
    if (base) {
        fmt::print("\n====== compared with {} ======\n", o.kl_base);
        fmt::print("PPL(base)      : {:.4f} +/- {:.5f}\n", ks.base_ppl, ks.base_ppl_unc);
        fmt::print("PPL(current)   : {:.4f} +/- {:.5f}\n", nll.ppl(), nll.ppl_unc());
        fmt::print("Mean KLD       : {:.6f} +/- {:.6f}\n", ks.mean, ks.unc);
        fmt::print("Maximum KLD    : {:.6f}\n", ks.max);
        fmt::print("99.0%   KLD    : {:.6f}\n", ks.p99);
        fmt::print("Median KLD     : {:.6f}\n", ks.median);
        fmt::print("Same top token : {:.3f} +/- {:.3f} %\n", 100.0 * ks.top1, 100.0 * ks.top1_unc);
    }
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
    auto opts = std::make_shared<PerplexityOptions>();
    CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity over a text in llama-perplexity's windows; KL "
                                                     "divergence against saved log-probabilities");
    cmd->add_option("-m,--model", opts->model, "GGUF model file")->required();
    cmd->add_option("-f,--file", opts->text_file, "the text to score")->required();
    cmd->add_option("-c,--ctx-size", opts->n_ctx, "tokens per chunk; the second half of each is scored")
        ->capture_default_str();
    cmd->add_option("-b,--batch-size", opts->n_batch,
                    "tokens per eval call (capped at -c; a chunk is also cut where scoring starts, so the unscored "
                    "first half computes no logits rows)")
        ->capture_default_str();
    cmd->add_option("--ubatch-size", opts->n_ubatch, "tokens per micro-batch (-ub)")->capture_default_str();
    cmd->add_option("-t,--threads", opts->n_threads, "threads (0: physical cores)")->capture_default_str();
    cmd->add_flag("--check-tensors", opts->check_tensors,
                  "check every row of every weight for NaN and Inf at load (by default: norms, biases and the first and "
                  "last row of each matrix)");
    add_cache_type_flags(*cmd, opts->cache);
    add_device_flags(*cmd, *opts);
    add_stream_flags(*cmd, opts->stream);
    add_placement_flags(*cmd, opts->placement);
    cmd->add_option("--chunks", opts->chunks, "score at most this many chunks (0: all)")->capture_default_str();
    cmd->add_option("--save-logits", opts->save_logits,
                    "write the log-probabilities of every scored position to FILE (for a later --kl-base)");
    cmd->add_option("--save-logits-type", opts->save_logits_type, "row type of --save-logits: f16 or f32")
        ->capture_default_str();
    cmd->add_option("--kl-base", opts->kl_base,
                    "compare with a file from --save-logits: KL(base || this run), top-token agreement, both PPLs");
    cmd->add_flag("--json", opts->json, "print one JSON object");
    cmd->callback([opts] { perplexity(*opts); });
}

}  // namespace tandem::tools
