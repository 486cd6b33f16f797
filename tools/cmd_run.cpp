// `tandem run`: evaluate a prompt and generate, streaming text, then print
// prompt and generation speed and the GB/s of weights read.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <fmt/format.h>

#include "kernels_cpu/cpu_info.h"
#include "planner/calibration.h"
#include "planner/planner.h"
#include "planner/tune_cache.h"
#include "runtime/common/atomic_file.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/sampler/sampler.h"
#include "runtime/serving/generate.h"
#include "runtime/serving/loader.h"
#include "runtime/serving/text_stream.h"
#include "runtime/engine/session.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/field_flags.h"
#include "tools/commands.h"
#include "tools/llama_flags.h"
#include "tools/session_open.h"
#include "tools/sampling_flags.h"
#include "tools/spec_flags.h"
#include "tools/split.h"
#include "tools/text_input.h"
#include "tools/stream_flags.h"

namespace tandem::tools {
namespace {

// SplitFlags: --device, --vram, -ngl, --cache-type, streaming and placement.
struct RunOptions : SplitFlags {
    bool check_tensors = false;
    std::string model;
    std::optional<std::string> prompt;
    std::optional<std::string> prompt_file;
    int n_predict = 128;  // -1: until the end of the text or the context
    int64_t n_ctx = 0;
    int n_threads = 0;
    int64_t n_ubatch = 512;
    int64_t n_batch = 0;  // accepted for llama.cpp compatibility; micro-batches are what matter on the CPU
    std::string dump_logits;
    bool no_bos = false;
    bool no_mmap = false;
    bool mlock = false;
    bool verbose = false;
    bool ignore_eos = false;
    bool no_display_prompt = false;
    bool parse_special = false;     // control tokens' text in the prompt becomes the tokens
    std::string prompt_cache;       // llama-cli's --prompt-cache FILE
    bool prompt_cache_ro = false;   // use the file, do not update it
    SamplingFlags sampling;
    SpecFlags spec;  // --spec-ngram, -md and the --draft-* flags
};

std::string read_prompt(const RunOptions& o) {
    if (o.prompt && o.prompt_file) throw Error("give the prompt with -p or -f, not both");
    if (o.prompt) return *o.prompt;
    if (!o.prompt_file) throw Error("no prompt: give -p TEXT or -f FILE");
    return read_text_input(*o.prompt_file, "prompt file");  // "-": standard input, as llama.cpp
}

void write_logits(AtomicFile& out, std::span<const float> logits) {
    out.write(logits.data(), logits.size() * sizeof(float));
}

// The bytes of a prompt-cache file; nullopt when there is none. A file
// larger than any state this session could hold is refused before it is
// read (a state is at most the KV cache, each cell's position and cell
// index, and the tokens; twice that for a ring saved with a larger
// micro-batch).
std::optional<std::vector<uint8_t>> read_prompt_cache(const std::string& path, const Session& session,
                                                      const model::HParams& hp) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    if (std::filesystem::is_directory(path, ec)) throw Error(fmt::format("--prompt-cache {}: is a directory", path));
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) throw Error(fmt::format("--prompt-cache {}: {}", path, ec.message()));
    const auto n_ctx = static_cast<uint64_t>(session.n_ctx());
    const uint64_t limit = 2 * (session.kv_cache_bytes() + static_cast<uint64_t>(hp.n_layer) * (16 + 8 * n_ctx)) +
                           4 * n_ctx + (1 << 20);
    if (size > limit) {
        throw Error(fmt::format("--prompt-cache {}: {} bytes, more than a state of this model and context can be "
                                "({} at most); delete the file to start a new cache",
                                path, size, limit));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("--prompt-cache {}: cannot be opened for reading", path));
    std::vector<uint8_t> bytes(static_cast<size_t>(size));
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
    if (static_cast<uint64_t>(in.gcount()) != size) {
        throw Error(fmt::format("--prompt-cache {}: read {} of its {} bytes", path, in.gcount(), size));
    }
    return bytes;
}

// Restores sequence 0 from the prompt cache and keeps the longest prefix
// of it the prompt shares that every layer can continue from; returns how
// many prompt tokens need no evaluation (at most all but the last one,
// which is evaluated again for its logits).
size_t reuse_prompt_cache(const std::string& path, const std::vector<uint8_t>& bytes, Session& session,
                          const std::vector<int32_t>& tokens) {
    std::vector<int32_t> cached;
    try {
        cached = session.restore_sequence(0, bytes);
    } catch (const Error& e) {
        throw Error(fmt::format("--prompt-cache {}: {}; delete the file to start a new cache", path, e.what()));
    }
    size_t common = 0;
    while (common < cached.size() && common < tokens.size() && cached[common] == tokens[common]) ++common;
    common = std::min<size_t>(common, static_cast<size_t>(session.seq_pos_max(0) + 1));
    // The last token is evaluated again at least: its logits start the generation.
    const auto n = static_cast<int32_t>(std::min(common, tokens.size() - 1));
    const auto keep = static_cast<size_t>(session.held_prefix(0, n));
    session.remove_positions(0, static_cast<int32_t>(keep), -1);
    fmt::print(stderr, "prompt cache: reused {} of the prompt's {} tokens from {} ({} cached, {} in common)\n", keep,
               tokens.size(), path, cached.size(), common);
    return keep;
}

void run(const RunOptions& o) {
    const std::string prompt = read_prompt(o);
    serving::LoadRequest load;
    load.model_path = o.model;
    load.mmap = !o.no_mmap;
    load.mlock = o.mlock;
    load.split = split_request(o, o.n_ctx, o.n_ubatch);
    load.split.tuned_model = o.model;  // -ngl auto may take what `tandem tune` measured
    load.n_threads = o.n_threads;      // an explicit -t wins over the tune entry's
    load.check_every_row = o.check_tensors;
    serving::LoadedModel m(load);
    // The logits file is opened now: an output that is the model, or a
    // folder that cannot be written, fails before the run, not after.
    std::optional<AtomicFile> dump_file;
    if (!o.dump_logits.empty()) dump_file.emplace(o.dump_logits);
    const model::ModelSpec& spec = m.spec;
    const Tokenizer& tokenizer = m.tokenizer;

    SamplerParams sp = resolved_sampling(o.sampling);
    sp.grammar = flag_grammar(o.sampling, tokenizer);
    // llama.cpp's --ignore-eos: the end tokens are banned, never drawn.
    if (o.ignore_eos) {
        for (int32_t id : tokenizer.end_of_generation_ids()) sp.logit_bias.emplace_back(id, kBanBias);
    }
    if (o.n_predict < -1) {
        throw Error(fmt::format("-n: expected a value >= 0, or -1 (until the end of the text or the context), found {}",
                                o.n_predict));
    }

    const std::vector<int32_t> tokens =
        tokenizer.encode(prompt, !o.no_bos && tokenizer.add_bos_by_default(), o.parse_special);
    if (tokens.empty()) throw Error("the prompt gives no tokens");
    // --dump-logits promises the prompt as one batch, as llama.cpp's golden
    // files were made.
    if (!o.dump_logits.empty()) {
        load.split.n_ubatch = std::max<int64_t>(load.split.n_ubatch, static_cast<int64_t>(tokens.size()));
    }
    check_spec_flags(o.spec);
    const std::unique_ptr<DraftHeader> draft_header = read_draft_header(o.spec);
    request_draft(o.spec, draft_header.get(), load.split);
    m.open_session(load, warn_on_stderr, progress_bars());
    const SessionOptions& so = m.session_options;
    Session& session = *m.session;
    if (static_cast<int64_t>(tokens.size()) > session.n_ctx()) {
        throw Error(fmt::format("the prompt has {} tokens but the context holds {}; use a larger -c", tokens.size(),
                                session.n_ctx()));
    }
    const std::unique_ptr<spec::Proposer> proposer =
        make_proposer(o.spec, tokenizer, session, so.n_ubatch, so.cache_type, sp, m.draft_placement);
    const spec::Config spec_cfg = spec_config(o.spec);
    // As llama.cpp logs it (once the input is known good): a drawn seed can
    // be given back with --seed.
    if (!o.sampling.seed && sp.temperature > 0) fmt::print(stderr, "seed: {}\n", sp.seed);
    if (o.verbose) {
        fmt::print(stderr, "model: {} ({}, {} layers, n_embd {}), context {}, {} threads, SIMD {}, KV cache {:.1f} MiB\n",
                   o.model, spec.hp.arch, spec.hp.n_layer, spec.hp.n_embd, session.n_ctx(), session.n_threads(),
                   cpu::simd_level_name(session.simd_level()), static_cast<double>(session.kv_cache_bytes()) / (1 << 20));
        fmt::print(stderr, "{}\n", in_flags(m.split_why));
        if (auto* d = dynamic_cast<spec::DraftModelProposer*>(proposer.get())) {
            fmt::print(stderr, "{}\ndraft placement: {}\n", in_flags(m.draft_why), d->session().placement_summary());
        }
        fmt::print(stderr, "split: layers [0, {}) on {}, [{}, {}) on the CPU, output head on {}\n",
                   session.n_device_layers(), so.device.empty() ? "-" : so.device, session.n_device_layers(),
                   spec.hp.n_layer, session.output_on_device() ? so.device : "cpu");
        fmt::print(stderr, "placement: {}\n", session.placement_summary());
        if (session.weight_stream_active()) {
            fmt::print(stderr, "weight streaming: prompt micro-batches of {}+ tokens multiply the CPU layers' "
                               "matrices on {}\n",
                       so.stream_min_batch, so.device);
        } else if (!session.weight_stream_note().empty()) {
            fmt::print(stderr, "{}\n", session.weight_stream_note());
        }
        if (session.host_weights_copied()) {
            fmt::print(stderr, "CPU weights: copied out of the mapping into huge pages (--no-host-copy: use the mapping)\n");
        } else if (!session.host_copy_note().empty()) {
            fmt::print(stderr, "{}\n", session.host_copy_note());
        }
        for (const MemoryLedger* l : session.ledgers()) fmt::print(stderr, "memory {}\n", l->summary());
    }

    using clock = std::chrono::steady_clock;
    std::vector<float> logits;
    const bool dump = !o.dump_logits.empty();
    // --prompt-cache: the saved state of the last prompt, its common prefix
    // with this one kept. The writer is made now, so that an output that is
    // an input (the model) fails before the run.
    size_t reused = 0;
    std::optional<AtomicFile> cache_out;
    if (!o.prompt_cache.empty()) {
        const std::optional<std::vector<uint8_t>> bytes = read_prompt_cache(o.prompt_cache, session, spec.hp);
        if (!bytes) {
            fmt::print(stderr, "prompt cache: {} does not exist{}\n", o.prompt_cache,
                       o.prompt_cache_ro ? "; --prompt-cache-ro: it is not created" : "; it will be created");
        } else if (dump) {
            fmt::print(stderr, "prompt cache: not reused: --dump-logits evaluates the whole prompt\n");
        } else {
            reused = reuse_prompt_cache(o.prompt_cache, *bytes, session, tokens);
        }
        if (!o.prompt_cache_ro) cache_out.emplace(o.prompt_cache);
    }
    const std::span<const int32_t> to_eval(tokens.data() + reused, tokens.size() - reused);
    const auto t0 = clock::now();
    session.eval(to_eval, dump, logits);
    if (proposer) proposer->prepare(tokens);
    const double prompt_s = std::chrono::duration<double>(clock::now() - t0).count();
    if (cache_out) {
        const std::vector<uint8_t> state = session.save_sequence(0, tokens);
        cache_out->write(state.data(), state.size());
        cache_out->commit();
        if (o.verbose) {
            fmt::print(stderr, "prompt cache: saved {} tokens ({:.2f} MiB) to {}\n", tokens.size(),
                       static_cast<double>(state.size()) / (1 << 20), o.prompt_cache);
        }
    }
    if (dump) {
        write_logits(*dump_file, logits);
        logits.erase(logits.begin(), logits.end() - session.n_vocab());  // keep the last row for sampling
    }

    if (!o.no_display_prompt) fmt::print("{}", prompt);
    std::fflush(stdout);
    std::string pending;  // bytes of an incomplete UTF-8 character
    int generated = 0;
    bool stopped_at_eog = false;
    // A token settled on: false ends the generation (end of generation, -n).
    auto emit = [&](int32_t next) -> bool {
        if (!o.ignore_eos && tokenizer.is_end_of_generation(next)) {
            stopped_at_eog = true;
            if (generated == 0) {
                fmt::print(stderr,
                           "\ngeneration ended at once: the model's first token was end-of-generation ({}, id {}); "
                           "--ignore-eos keeps going\n",
                           tokenizer.token_to_piece(next, true), next);
            }
            return false;
        }
        ++generated;
        pending += tokenizer.token_to_piece(next);
        const size_t ready = serve::complete_utf8_prefix(pending);
        fmt::print("{}", pending.substr(0, ready));
        std::fflush(stdout);
        pending.erase(0, ready);
        return generated != o.n_predict;
    };
    serving::GenerateOptions go;
    go.sampling = sp;
    go.max_tokens = o.n_predict;
    go.proposer = proposer.get();
    go.spec = spec_cfg;
    go.n_ubatch = so.n_ubatch;
    if (dump) go.on_step_logits = [&](std::span<const float> row) { write_logits(*dump_file, row); };
    const auto t1 = clock::now();
    const spec::Stats stats = serving::generate(session, tokens, std::move(logits), go, emit);
    const bool context_full = stats.context_full;
    if (dump) dump_file->commit();
    if (context_full) fmt::print(stderr, "\n[context of {} tokens is full; stopping]\n", session.n_ctx());
    const double gen_s = std::chrono::duration<double>(clock::now() - t1).count();
    fmt::print("{}\n", pending);

    const double bytes = static_cast<double>(session.weight_bytes_per_token());
    const double pp_tps = static_cast<double>(to_eval.size()) / prompt_s;
    // The last sampled token is not evaluated: generated - 1 decode steps.
    const int steps = std::max(0, generated - 1);
    const double tg_tps = steps > 0 && gen_s > 0 ? steps / gen_s : 0.0;
    fmt::print(stderr, "\nprompt: {} tokens in {:.3f} s, {:.2f} tok/s{}{}\n", to_eval.size(), prompt_s, pp_tps,
               reused > 0 ? fmt::format(" ({} more reused from the prompt cache)", reused) : std::string(),
               session.streamed_batches() > 0 ? " (CPU layers' weights streamed to " + so.device + ")" : "");
    fmt::print(stderr, "generation: {} tokens in {:.3f} s, {:.2f} tok/s, {:.2f} GB/s of weights read{}\n", generated,
               gen_s, tg_tps, tg_tps * bytes / 1e9, stopped_at_eog ? ", stopped at end-of-generation token" : "");
    if (proposer) fmt::print(stderr, "{}\n", spec_stats_line(*proposer, stats));
    if (o.verbose && session.activation_crossings() > 0) {
        fmt::print(stderr, "activations moved between devices: {} crossings, {:.2f} MiB\n",
                   session.activation_crossings(), static_cast<double>(session.activation_bytes_moved()) / (1 << 20));
    }
}

}  // namespace

void add_run_command(CLI::App& app) {
    auto opts = std::make_shared<RunOptions>();
    CLI::App* cmd = app.add_subcommand("run", "Evaluate a prompt and generate text");
    cmd->add_option("-m,--model", opts->model, "GGUF model file")->required();
    cmd->add_option("-p,--prompt", opts->prompt, "prompt text");
    cmd->add_option("-f,--file", opts->prompt_file, "read the prompt from a file (-: from stdin)");
    cmd->add_option("-n,--n-predict", opts->n_predict,
                    "tokens to generate (0: only evaluate the prompt; -1: until the end of the text or the context)")
        ->capture_default_str();
    cmd->add_option("-c,--ctx-size", opts->n_ctx, "context size (0: the model's, at most 4096)")->capture_default_str();
    cmd->add_option("-t,--threads", opts->n_threads, "threads (0: physical cores)")->capture_default_str();
    cmd->add_flag("--check-tensors", opts->check_tensors,
                  "check every row of every weight for NaN and Inf at load (by default: norms, biases and the first and "
                  "last row of each matrix)");
    cmd->add_option("--ubatch-size", opts->n_ubatch, "tokens per micro-batch of the prompt (-ub)")->capture_default_str();
    cmd->add_option("-b,--batch-size", opts->n_batch, "logical batch size (accepted; the micro-batch decides)");
    add_cache_type_flags(*cmd, opts->cache);
    cmd->add_option("--dump-logits", opts->dump_logits,
                    "write float32 logits of every prompt position to FILE (the prompt is one batch), then those of "
                    "each generated token's decode step (not with a draft model or --spec-ngram)");
    cmd->add_flag("--no-bos", opts->no_bos, "do not add the BOS token");
    cmd->add_flag("--no-mmap", opts->no_mmap, "read the model into memory instead of mapping it");
    cmd->add_flag("--mlock", opts->mlock, "lock the model in RAM");
    cmd->add_flag("--verbose", opts->verbose, "print model, split and memory per device");
    cmd->add_flag("--ignore-eos", opts->ignore_eos, "never draw an end-of-generation token (banned, as llama.cpp does)");
    cmd->add_flag("--no-display-prompt", opts->no_display_prompt, "print only the generated text, not the prompt");
    cmd->add_flag("--parse-special", opts->parse_special,
                  "the prompt's special-token text (e.g. <|im_start|>) becomes those control tokens");
    cmd->add_option("--prompt-cache", opts->prompt_cache,
                    "keep the prompt's KV cache state in FILE: reuse what it shares with the next prompt, then save "
                    "this prompt's (a file from another model is an error)");
    cmd->add_flag("--prompt-cache-ro", opts->prompt_cache_ro, "use the --prompt-cache file, but do not update it");
    add_device_flags(*cmd, *opts);
    add_stream_flags(*cmd, opts->stream);
    add_placement_flags(*cmd, opts->placement);
    add_sampling_flags(*cmd, opts->sampling);
    add_spec_flags(*cmd, opts->spec);
    add_llama_compat_flags(*cmd, LlamaTool::Run);
    cmd->footer(llama_spellings_help(*cmd));
    cmd->callback([opts] { run(*opts); });
}

}  // namespace tandem::tools
