// `tandem imatrix`: the importance matrix of a model over a calibration
// text, as llama.cpp's llama-imatrix computes it and in its GGUF file
// format (tools/imatrix.h), for `tandem quantize --imatrix`.
//
// The run, as llama-imatrix's: the text is tokenized once (BOS first when
// the model adds it), cut into chunks of -c tokens (at least two chunks'
// worth are needed), each with its first token replaced by BOS; -b / -c
// chunks at a time are evaluated side by side from an empty cache, in
// llama.cpp's micro-batches (imatrix::micro_batches), so the float sums
// come in its order. Every token of a chunk is counted. The perplexity of
// each chunk's second half is reported as llama-imatrix does (--no-ppl
// skips its output-head rows). Always on the CPU, without BLAS (llama.cpp's
// CPU-backend bits): -ngl is accepted and ignored.
//
// llama-imatrix's other modes: --in-file matrices are the starting sums
// (without -f, only added up and written: combining or converting);
// --process-output collects the output head too (every token then asks
// for logits, as llama-imatrix always does); --output-format dat writes the
// legacy format; --show-statistics prints one file's statistics
// (tools/imatrix_stats.h) and exits.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/field_flags.h"
#include "tools/imatrix.h"
#include "tools/imatrix_stats.h"
#include "tools/perplexity.h"
#include "tools/progress.h"
#include "tools/session_open.h"
#include "tools/text_input.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;

struct ImatrixOptions {
    std::string model;
    std::string text_file;
    std::string out_file = "imatrix.gguf";  // llama-imatrix's default
    int64_t n_ctx = 512;
    int64_t n_batch = 2048;  // n_batch / n_ctx chunks side by side (llama.cpp's default)
    int64_t n_ubatch = 512;
    int n_threads = 0;
    int64_t chunks = -1;      // <= 0: every whole chunk of the text
    int64_t first_chunk = 0;  // --chunk: chunks of the text skipped first
    int64_t output_frequency = 10;
    int64_t save_frequency = 0;
    bool no_ppl = false;
    std::vector<std::string> in_files;
    bool process_output = false;
    bool show_statistics = false;
    bool json = false;
    std::string output_format;  // "gguf", "dat" or unset (GGUF, warning on another suffix)
    std::string n_gpu_layers;   // accepted for llama.cpp command lines, ignored
};

// The matrix written, as llama-imatrix writes it: the --in-file datasets
// then the text's.
struct Output {
    const ImatrixOptions& o;
    std::vector<std::string> datasets;

    void save(const fs::path& path, const imatrix::Entries& entries, uint32_t chunk_count) const {
        imatrix::FileInfo info;
        info.datasets = datasets;
        info.chunk_size = static_cast<uint32_t>(o.n_ctx);
        info.chunk_count = chunk_count;
        if (o.output_format == "dat") {
            imatrix::write_legacy_file(path, entries, info);
        } else {
            imatrix::write_file(path, entries, info);
        }
    }
};

// The --in-file matrices added up in order, as llama-imatrix loads them
// (a legacy file's chunks of -c tokens); their datasets into `datasets`.
imatrix::Collector load_in_files(const ImatrixOptions& o, std::vector<std::string>& datasets) {
    imatrix::Collector collector(o.process_output);
    for (const std::string& path : o.in_files) {
        const quant::StoredImatrix m = quant::read_stored_imatrix(path);
        collector.add_stored(m, o.n_ctx, path);
        datasets.insert(datasets.end(), m.datasets.begin(), m.datasets.end());
    }
    return collector;
}

void check_flags(const ImatrixOptions& o) {
    if (o.n_ctx < ppl::kMinContext) {
        throw Error(fmt::format("-c: expected a chunk of at least {} tokens, found {}", ppl::kMinContext, o.n_ctx));
    }
    if (o.n_batch <= 0) throw Error(fmt::format("-b: expected a positive batch size, found {}", o.n_batch));
    if (o.n_ubatch <= 0) throw Error(fmt::format("-ub: expected a positive micro-batch size, found {}", o.n_ubatch));
    if (o.first_chunk < 0) throw Error(fmt::format("--chunk: expected a count >= 0, found {}", o.first_chunk));
    if (o.show_statistics && o.in_files.size() != 1) {
        throw Error(fmt::format("--show-statistics: expected one importance matrix (--in-file), found {}",
                                o.in_files.size()));
    }
    if (o.json && !o.show_statistics) throw Error("--json: expected --show-statistics (the only output it formats)");
    if (!o.show_statistics && o.text_file.empty() && o.in_files.empty()) {
        throw Error("imatrix: expected a calibration text (-f) or matrices to combine (--in-file), found neither");
    }
    if (!o.show_statistics && !o.text_file.empty() && o.model.empty()) {
        throw Error(fmt::format("-m: expected the model to run over {}, found none", o.text_file));
    }
    if (o.output_frequency < 0 || o.save_frequency < 0) {
        throw Error(fmt::format("--output-frequency/--save-frequency: expected counts >= 0, found {}/{}",
                                o.output_frequency, o.save_frequency));
    }
}

// Refused before the model loads: an output that is one of the inputs, or
// whose directory does not exist (found only after the whole run otherwise).
void check_output_path(const ImatrixOptions& o) {
    const fs::path out(o.out_file);
    std::error_code ec;
    for (const std::string& input : {o.model, o.text_file}) {
        if (!input.empty() && fs::equivalent(out, input, ec)) {
            throw Error(fmt::format("-o {}: expected a new file, found one of the inputs ({})", o.out_file, input));
        }
    }
    const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
    if (!fs::is_directory(dir, ec)) {
        throw Error(
            fmt::format("-o {}: expected an existing directory, found no directory {}", o.out_file, dir.string()));
    }
    if (fs::is_directory(out, ec)) throw Error(fmt::format("-o {}: expected a file, found a directory", o.out_file));
}

std::string read_calibration_text(const std::string& path) {
    std::string text = read_llama_text_file(path);
    if (text.empty()) throw Error(fmt::format("{}: expected a calibration text, found an empty file", path));
    return text;
}

// The text's tokens after --chunk's skipped chunks, and its chunks.
ppl::Windows windows_for(std::vector<int32_t>& tokens, const ImatrixOptions& o) {
    const auto n_tokens = static_cast<int64_t>(tokens.size());
    if (o.first_chunk > 0) {
        if ((o.first_chunk + 2) * o.n_ctx >= n_tokens) {
            throw Error(
                fmt::format("--chunk {}: the text gives {} tokens, too few left for two chunks of {} after "
                            "skipping {} chunks",
                            o.first_chunk, n_tokens, o.n_ctx, o.first_chunk));
        }
        tokens.erase(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(o.first_chunk * o.n_ctx));
    }
    if (static_cast<int64_t>(tokens.size()) < 2 * o.n_ctx) {
        throw Error(
            fmt::format("the text gives {} tokens; an importance matrix with -c {} needs at least {} (2 * "
                        "n_ctx, as llama-imatrix): use a longer text or a smaller -c",
                        tokens.size(), o.n_ctx, 2 * o.n_ctx));
    }
    return ppl::make_windows(static_cast<int64_t>(tokens.size()), o.n_ctx, std::max<int64_t>(o.chunks, 0));
}

class ImatrixRun {
public:
    ImatrixRun(const ImatrixOptions& o, Session& session, const ppl::Windows& w, const imatrix::Packing& p,
               imatrix::Collector collector)
        : o_(o), session_(session), w_(w), p_(p), collector_(std::move(collector)) {
        session_.set_activation_observer(&collector_);
    }
    ~ImatrixRun() { session_.set_activation_observer(nullptr); }
    ImatrixRun(const ImatrixRun&) = delete;
    ImatrixRun& operator=(const ImatrixRun&) = delete;

    // Chunks [c0, c0 + n) side by side from an empty cache, in
    // llama-imatrix's micro-batches; with the perplexity, logits for the
    // second half of each chunk.
    void chunks(std::span<const int32_t> tokens, int64_t c0, int64_t n, int32_t bos) {
        session_.reset();
        std::vector<std::vector<int32_t>> ids;
        for (int64_t c = c0; c < c0 + n; ++c) ids.push_back(ppl::chunk_tokens(tokens, w_, c, bos));
        const int64_t n_vocab = session_.n_vocab();
        for (const std::vector<BatchToken>& mb :
             imatrix::micro_batches(ids, p_, o_.no_ppl ? w_.n_ctx : w_.first, o_.process_output)) {
            session_.eval_batch(mb, logits_);
            const float* row = logits_.data();
            for (const BatchToken& t : mb) {
                if (!t.logits) continue;
                // With --process-output every token has logits; the second halves' count.
                if (o_.no_ppl || t.pos < w_.first || t.pos >= w_.n_ctx - 1) {
                    row += n_vocab;
                    continue;
                }
                // The text's next token, never the BOS put in its place.
                const auto next = static_cast<size_t>((c0 + t.seq) * w_.n_ctx + t.pos + 1);
                nll_.add(ppl::token_nll(std::span<const float>(row, static_cast<size_t>(n_vocab)), tokens[next]));
                row += n_vocab;
            }
        }
    }

    void save(const Output& out, const fs::path& path) const {
        out.save(path, collector_.entries(), collector_.chunk_count(w_.n_ctx));
    }

    const imatrix::Collector& collector() const { return collector_; }
    const ppl::NllStats& nll() const { return nll_; }

private:
    const ImatrixOptions& o_;
    Session& session_;
    const ppl::Windows& w_;
    const imatrix::Packing& p_;
    imatrix::Collector collector_;
    ppl::NllStats nll_;
    std::vector<float> logits_;
};

// --show-statistics: llama-imatrix's tables of the one --in-file.
void show_statistics(const ImatrixOptions& o) {
    std::vector<std::string> datasets;
    const imatrix::Collector loaded = load_in_files(o, datasets);
    const imatrix::Statistics s = imatrix::compute_statistics(loaded.entries());
    if (o.json) {
        fmt::print("{}\n", imatrix::statistics_json(s, o.in_files[0]).dump(2));
    } else {
        fmt::print("{}", imatrix::format_statistics(s, o.in_files[0]));
    }
}

void imatrix_command(const ImatrixOptions& o) {
    // Cheap checks first, so bad flags fail before the model is loaded.
    check_flags(o);
    if (o.show_statistics) return show_statistics(o);
    check_output_path(o);
    if (o.output_format.empty() && !o.out_file.ends_with(".gguf")) {
        warn_on_stderr(fmt::format("imatrix: writing GGUF to {} (not named .gguf); --output-format dat writes the "
                                   "legacy format",
                                   o.out_file));
    }
    Output output{o, {}};
    imatrix::Collector loaded = load_in_files(o, output.datasets);
    if (o.text_file.empty()) {
        // As llama-imatrix without a text: the --in-file matrices combined.
        output.save(o.out_file, loaded.entries(), loaded.chunk_count(o.n_ctx));
        fmt::print("imatrix: {} weights from {} files ({} chunks of {} tokens), written to {}\n",
                   loaded.entries().size(), o.in_files.size(), loaded.chunk_count(o.n_ctx), o.n_ctx, o.out_file);
        return;
    }
    output.datasets.push_back(o.text_file);
    const std::string text = read_calibration_text(o.text_file);
    if (!o.n_gpu_layers.empty()) warn_on_stderr("imatrix: -ngl ignored: the importance matrix is computed on the CPU");

    const gguf::File file = gguf::File::open(o.model);
    const model::ModelSpec spec = model::load_model_spec(file);
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);
    const bool add_bos = tokenizer.add_bos_by_default();
    // As llama-imatrix: the whole text once, special tokens not parsed.
    std::vector<int32_t> tokens = tokenizer.encode(text, add_bos);
    const ppl::Windows w = windows_for(tokens, o);

    // llama-imatrix's cache: n_seq chunks side by side, each sequence in
    // cells of its own. No accelerator: the CPU multiplies every weight.
    const imatrix::Packing p = imatrix::pack(w.n_ctx, o.n_batch, o.n_ubatch);
    SessionOptions so;
    so.n_ctx = p.n_seq * w.n_ctx;
    so.n_seq_max = p.n_seq;
    so.kv_per_sequence = true;
    so.n_ubatch = std::max(p.n_ubatch, p.n_seq);  // a micro-batch holds at least a token of each sequence
    so.n_threads = o.n_threads;
    so.cpu_blas = false;  // llama.cpp's CPU-backend bits at every batch size, so the sums compare with llama-imatrix's
    const std::unique_ptr<Session> session = open_session_stepping_down(file, spec, so);
    fmt::print(stderr, "imatrix: {} tokens, {} chunks of {}, {} side by side, {} threads, on the CPU\n", tokens.size(),
               w.n_chunk, w.n_ctx, p.n_seq, session->n_threads());

    using clock = std::chrono::steady_clock;
    const auto t_start = clock::now();
    ImatrixRun run(o, *session, w, p, std::move(loaded));
    {
        ProgressBar bar("imatrix", static_cast<uint64_t>(w.n_chunk));
        for (int64_t c = 0; c < w.n_chunk; c += p.n_seq) {
            const int64_t n = std::min(p.n_seq, w.n_chunk - c);
            const int64_t before = run.collector().chunk_count(w.n_ctx);
            run.chunks(tokens, c, n, add_bos ? tokenizer.bos() : -1);
            // As llama-imatrix: every --output-frequency chunks, the output
            // so far (checked as a group of n_seq chunks completes); the
            // chunks counted include the --in-file matrices'.
            const int64_t done = run.collector().chunk_count(w.n_ctx);
            const auto crossed = [&](int64_t every) { return every > 0 && done / every > before / every; };
            if (crossed(o.output_frequency) && c + n < w.n_chunk) run.save(output, o.out_file);
            if (crossed(o.save_frequency)) run.save(output, fmt::format("{}.at_{}", o.out_file, done));
            bar.advance(static_cast<uint64_t>(n),
                        o.no_ppl ? std::string() : fmt::format("PPL {:.4f}", run.nll().ppl()));
        }
        bar.finish();
    }
    run.save(output, o.out_file);
    const double seconds = std::chrono::duration<double>(clock::now() - t_start).count();

    for (const std::string& name : run.collector().partial_entries()) {
        warn_on_stderr(
            fmt::format("imatrix: '{}' has experts that no token was routed to (stored with count 0)", name));
    }
    const int64_t n_eval = w.n_chunk * w.n_ctx;
    if (!o.no_ppl) fmt::print("Final estimate: PPL = {:.4f} +/- {:.5f}\n", run.nll().ppl(), run.nll().ppl_unc());
    fmt::print(
        "imatrix: {} weights from {} chunks of {} tokens ({} tokens) in {:.2f} s ({:.1f} tok/s), written to {}\n",
        run.collector().entries().size(), w.n_chunk, w.n_ctx, n_eval, seconds,
        seconds > 0.0 ? static_cast<double>(n_eval) / seconds : 0.0, o.out_file);
}

}  // namespace

void add_imatrix_command(CLI::App& app) {
    auto opts = std::make_shared<ImatrixOptions>();
    CLI::App* cmd = app.add_subcommand("imatrix",
                                       "Importance matrix over a calibration text, as llama-imatrix (GGUF or legacy "
                                       ".dat), for quantize --imatrix; also combines, converts or shows statistics "
                                       "of such files");
    cmd->add_option("-m,--model", opts->model, "GGUF model file (needed with -f)");
    cmd->add_option("-f,--file", opts->text_file,
                    "the calibration text (- for standard input); without it, the --in-file matrices are "
                    "only combined and written");
    cmd->add_option("-o,--output,--output-file", opts->out_file, "the importance matrix to write")
        ->capture_default_str();
    cmd->add_option("--output-format", opts->output_format,
                    "gguf, or dat for llama.cpp's legacy format (default gguf, whatever -o's suffix)")
        ->check(CLI::IsMember({"gguf", "dat"}));
    cmd->add_option("--in-file", opts->in_files,
                    "an importance matrix (GGUF or legacy .dat) to start from; repeat or separate with commas "
                    "to add several up")
        ->delimiter(',');
    cmd->add_flag("--process-output", opts->process_output,
                  "also collect the output head (output.weight; every token then asks for logits)");
    cmd->add_flag("--show-statistics", opts->show_statistics,
                  "print llama-imatrix's per-tensor statistics of the one --in-file and exit");
    cmd->add_flag("--json", opts->json, "with --show-statistics: print one JSON object");
    cmd->add_option("-c,--ctx-size", opts->n_ctx,
                    "tokens per chunk, each evaluated from an empty cache (also the chunk size of a legacy "
                    "--in-file's counts)")
        ->capture_default_str();
    cmd->add_option("--chunks", opts->chunks, "at most this many chunks (<= 0: all)")->capture_default_str();
    cmd->add_option("--chunk", opts->first_chunk, "skip this many chunks at the start of the text")
        ->capture_default_str();
    cmd->add_option("-b,--batch-size", opts->n_batch,
                    "tokens per batch, as llama-imatrix: -b / -c chunks evaluated side by side (at most 64)")
        ->capture_default_str();
    cmd->add_option("--ubatch-size", opts->n_ubatch, "tokens per micro-batch (-ub)")->capture_default_str();
    cmd->add_option("-t,--threads", opts->n_threads, "threads (0: physical cores)")->capture_default_str();
    cmd->add_option("--output-frequency", opts->output_frequency,
                    "also write the output every N chunks during the run (0: only at the end)")
        ->capture_default_str();
    cmd->add_option("--save-frequency", opts->save_frequency,
                    "every N chunks, also write a copy named OUTPUT.at_<chunks> (0: none)")
        ->capture_default_str();
    cmd->add_flag("--no-ppl", opts->no_ppl, "do not compute the perplexity (no logits rows)");
    cmd->add_option("--n-gpu-layers", opts->n_gpu_layers,
                    "accepted for llama.cpp command lines (-ngl) and ignored: "
                    "imatrix runs on the CPU");
    cmd->callback([opts] { imatrix_command(*opts); });
}

}  // namespace tandem::tools
