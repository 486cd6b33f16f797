#include "tools/bench_spec.h"

#include <chrono>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels_cpu/cpu_info.h"
#include "runtime/chat/chat_template.h"
#include "runtime/common/error.h"
#include "runtime/engine/session.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_spec.h"
#include "runtime/sampler/sampler.h"
#include "runtime/serving/generate.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/field_flags.h"
#include "tools/bench_report.h"

namespace tandem::tools {
namespace {

constexpr const char* kParagraph =
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a brass lantern and a "
    "notebook in which he recorded the colour of the sky, the direction of the wind and the ships that passed. "
    "In winter the storms came in from the west, and he wrote of waves that broke over the rocks and of gulls "
    "that sheltered in the lee of the tower. In summer he wrote of fishing boats, of children on the beach and "
    "of the long evenings when the light was hardly needed before ten. He kept the notebooks on a shelf by the "
    "stove, one for each year, and when the keeper who came after him found them, she read them all in a week.";

struct Run {
    std::vector<int32_t> tokens;
    double seconds = 0.0;
    spec::Stats stats;
};

// Greedy generation of n tokens after `prompt`, plainly (proposer null) or
// speculatively; only the generation is timed.
Run generate(Session& s, const std::vector<int32_t>& prompt, int64_t n, spec::Proposer* proposer,
             const spec::Config& cfg, int64_t n_ubatch) {
    SamplerParams sp;
    sp.temperature = 0.0f;
    s.reset();
    std::vector<float> logits;
    s.eval(prompt, false, logits);
    if (proposer) proposer->prepare(prompt);
    Run r;
    r.tokens.reserve(static_cast<size_t>(n));
    const auto t0 = std::chrono::steady_clock::now();
    serving::GenerateOptions go;
    go.sampling = sp;
    go.max_tokens = n;
    go.proposer = proposer;
    go.spec = cfg;
    go.n_ubatch = n_ubatch;
    r.stats = serving::generate(s, prompt, std::move(logits), go, [&](int32_t t) {
        r.tokens.push_back(t);
        return true;
    });
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

std::vector<int32_t> prompt_tokens(const gguf::File& file, const Tokenizer& tok, const std::string& text,
                                   bool apply_template) {
    const bool add_bos = tok.add_bos_by_default();
    if (!apply_template) return tok.encode(text, add_bos);
    bool fallback = false;
    const chat::ChatTemplate tmpl = chat::template_from_gguf(file, &fallback);
    if (fallback) return tok.encode(text, add_bos);  // no template: the text as it is
    chat::TemplateInputs in;
    in.bos_token = chat::bos_text(tok);
    in.eos_token = chat::eos_text(tok);
    in.tokenizer_adds_bos = add_bos;
    const chat::Message messages[] = {{"user", text}};
    return tok.encode(tmpl.render(messages, in), add_bos, true);
}

}  // namespace

// The paragraph, then a cue to copy it: a chat model (through its template)
// and a plain one continuing the text both repeat it.
std::string default_spec_prompt_text() {
    return std::string("Repeat the following paragraph exactly, word for word.\n\n") + kParagraph +
           "\n\nThe same paragraph, repeated word for word:\n\n";
}

std::vector<SpecBenchRow> run_spec_bench(const BenchConfig& c, const SpecFlags& f, const std::string& prompt_text,
                                         bool apply_template, const std::function<void(const std::string&)>& note) {
    int64_t n_gen = 128;
    for (const BenchTest& t : c.tests) {
        if (t.n_gen > 0) {
            n_gen = t.n_gen;
            break;
        }
    }
    const int threads = c.threads.empty() || c.threads.front() <= 0 ? cpu::physical_core_count() : c.threads.front();
    const int64_t n_ubatch = c.n_ubatch.empty() ? 512 : c.n_ubatch.front();
    const spec::Config cfg = spec_config(f);
    cfg.check_fits(n_ubatch);
    check_spec_flags(f);
    const std::unique_ptr<DraftHeader> draft_header = read_draft_header(f);
    std::vector<SpecBenchRow> rows;
    for (const std::string& path : c.models) {
        if (!std::filesystem::exists(path)) throw Error(fmt::format("bench: model file {} does not exist", path));
        const gguf::File file = gguf::File::open(path);
        const model::ModelSpec spec = model::load_model_spec(file);
        const Tokenizer tok = Tokenizer::from_gguf(file);
        const std::vector<int32_t> prompt = prompt_tokens(file, tok, prompt_text, apply_template);
        // Placed as run places it: the draft first, the model beside it.
        SplitRequest req;
        req.device = c.device;
        req.vram = c.vram;
        req.tensor_split = c.tensor_split;
        req.ngl = c.n_gpu_layers.empty() ? std::nullopt : c.n_gpu_layers.front();
        if (c.device.empty()) req.ngl = 0;
        req.n_ctx = static_cast<int64_t>(prompt.size()) + n_gen + cfg.draft_max + 8;
        req.n_ubatch = n_ubatch;
        req.cache_type = c.cache_types.empty() ? model::kCacheF16 : c.cache_types.front();
        req.placement = placement_options(c.placement);
        request_draft(f, draft_header.get(), req);
        Split split = resolve_split(req, file, spec, warn_on_stderr);
        SessionOptions& so = split.so;
        so.n_threads = threads;
        Session session(file, spec, so);
        SamplerParams sp;
        sp.temperature = 0.0f;
        std::unique_ptr<spec::Proposer> proposer = make_proposer(f, tok, session, n_ubatch, so.cache_type, sp, split.draft);
        const std::string name = std::filesystem::path(path).filename().string();
        SpecBenchRow plain;
        plain.model = name;
        plain.mode = "plain";
        plain.threads = threads;
        plain.n_prompt = static_cast<int64_t>(prompt.size());
        plain.n_gen = n_gen;
        SpecBenchRow sped = plain;
        sped.mode = proposer->name();
        int64_t passes = 0, generated = 0;
        if (note) note(fmt::format("{}: {} prompt tokens, {} generated, {} + 1 uncounted runs of each", name,
                                   prompt.size(), n_gen, c.repetitions));
        for (int rep = -1; rep < c.repetitions; ++rep) {
            Run a, b;
            // Alternating which goes first, so neither always runs on the
            // warmer (or the throttled) machine.
            if (rep % 2 == 0) {
                a = generate(session, prompt, n_gen, nullptr, cfg, n_ubatch);
                b = generate(session, prompt, n_gen, proposer.get(), cfg, n_ubatch);
            } else {
                b = generate(session, prompt, n_gen, proposer.get(), cfg, n_ubatch);
                a = generate(session, prompt, n_gen, nullptr, cfg, n_ubatch);
            }
            sped.same_tokens = sped.same_tokens && a.tokens == b.tokens;
            if (rep < 0) continue;  // the warm-up
            plain.tps.push_back(static_cast<double>(a.tokens.size()) / a.seconds);
            sped.tps.push_back(static_cast<double>(b.tokens.size()) / b.seconds);
            sped.proposed += b.stats.proposed;
            sped.accepted += b.stats.accepted;
            passes += b.stats.target_passes;
            generated += b.stats.generated;
        }
        sped.acceptance = sped.proposed > 0 ? static_cast<double>(sped.accepted) / static_cast<double>(sped.proposed) : 0.0;
        sped.tokens_per_pass = passes > 0 ? static_cast<double>(generated) / static_cast<double>(passes) : 0.0;
        sped.speedup = mean_of(plain.tps) > 0 ? mean_of(sped.tps) / mean_of(plain.tps) : 0.0;
        rows.push_back(plain);
        rows.push_back(sped);
    }
    return rows;
}

std::string format_spec_rows(const std::vector<SpecBenchRow>& rows, OutputFormat format) {
    if (format == OutputFormat::Json || format == OutputFormat::JsonLines) {
        nlohmann::json all = nlohmann::json::array();
        std::string lines;
        for (const SpecBenchRow& r : rows) {
            nlohmann::json j = {{"model", r.model},         {"mode", r.mode},
                                {"threads", r.threads},     {"n_prompt", r.n_prompt},
                                {"n_gen", r.n_gen},         {"tps_mean", mean_of(r.tps)},
                                {"tps_sd", sample_sd_of(r.tps)}, {"samples_tps", r.tps},
                                {"speedup", r.speedup}};
            if (r.mode != "plain") {
                j["acceptance"] = r.acceptance;
                j["proposed"] = r.proposed;
                j["accepted"] = r.accepted;
                j["tokens_per_pass"] = r.tokens_per_pass;
                j["same_tokens"] = r.same_tokens;
            }
            lines += j.dump() + "\n";
            all.push_back(std::move(j));
        }
        return format == OutputFormat::JsonLines ? lines : all.dump(2) + "\n";
    }
    if (format == OutputFormat::Csv) {
        std::string out = "model,mode,threads,n_prompt,n_gen,tps_mean,tps_sd,acceptance,tokens_per_pass,speedup,same_tokens\n";
        for (const SpecBenchRow& r : rows) {
            out += fmt::format("{},{},{},{},{},{:.3f},{:.3f},{:.4f},{:.3f},{:.3f},{}\n", r.model, r.mode, r.threads,
                               r.n_prompt, r.n_gen, mean_of(r.tps), sample_sd_of(r.tps), r.acceptance, r.tokens_per_pass,
                               r.speedup, r.same_tokens ? 1 : 0);
        }
        return out;
    }
    std::string out =
        "| model | mode | threads | test | t/s | accepted | tokens/pass | speed-up | same tokens |\n"
        "| ----- | ---- | ------: | ---- | --: | -------: | ----------: | -------: | ----------- |\n";
    for (const SpecBenchRow& r : rows) {
        const bool plain = r.mode == "plain";
        out += fmt::format("| {} | {} | {} | tg{} @ p{} | {:.2f} ± {:.2f} | {} | {} | {:.2f}x | {} |\n", r.model, r.mode,
                           r.threads, r.n_gen, r.n_prompt, mean_of(r.tps), sample_sd_of(r.tps),
                           plain ? "-" : fmt::format("{:.1f}% ({}/{})", 100.0 * r.acceptance, r.accepted, r.proposed),
                           plain ? "1.00" : fmt::format("{:.2f}", r.tokens_per_pass), r.speedup,
                           plain ? "-" : (r.same_tokens ? "yes" : "NO"));
    }
    return out;
}

}  // namespace tandem::tools
