// `tandem synth`: writes a GGUF of any supported architecture and size
// (Llama, Mixtral, Qwen2.5, Qwen3 MoE, Phi-3, gpt-oss, GLM-4.5, DeepSeek
// presets, or explicit Llama dimensions) with seeded random weights,
// quantized with the same per-tensor mix rules as a real quantized file.
// It lets the planner, loaders and kernels be exercised on 8B to 671B
// shapes without downloading them (--header-only writes only the header,
// which is enough for planning and takes a second).
//
// Weights are generated a chunk of rows at a time and quantized on the fly,
// so memory stays bounded whatever the shape. Every row has its own random
// stream derived from (seed, tensor index, row index): the bytes depend on
// the seed alone, not on the thread count or chunk size.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "runtime/common/atomic_file.h"
#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"
#include "runtime/model/model_shapes.h"
#include "runtime/model/synth_vocab.h"
#include "runtime/quant/quant_mix.h"
#include "runtime/quant/quant_types.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "tools/synth_model.h"

namespace tandem::tools {
namespace {

// Like a freshly initialized model: N(0, 0.02) matrices (the usual
// initializer_range), norm weights near 1 so activations keep their scale.
constexpr double kWeightStd = 0.02;
constexpr double kNormMean = 1.0;
constexpr double kNormStd = 0.02;
// Bytes of quantized output produced per parallel step; bounds memory and
// keeps the progress bar moving on the largest tensors.
constexpr uint64_t kChunkBytes = 32ull << 20;
// Below this many weights a chunk is generated on the calling thread:
// starting threads would cost more than the work.
constexpr int64_t kMinParallelElems = 1 << 16;

struct SynthOptions {
    std::string shape;
    std::string out;
    std::string type = "Q4_K_M";
    std::string vocab;
    uint64_t seed = 42;
    bool header_only = false;
    unsigned threads = 0;
    int64_t embd = 0, ff = 0, layers = 0, heads = 0, kv_heads = 0, vocab_size = 0, ctx = 0;
    int64_t experts = 0, experts_used = 0, expert_ff = 0;
    bool tied = false, untied = false;
    // Set after parsing: which overrides the user actually gave.
    CLI::Option *o_embd = nullptr, *o_ff = nullptr, *o_layers = nullptr, *o_heads = nullptr, *o_kv = nullptr,
                *o_vocab_size = nullptr, *o_ctx = nullptr, *o_experts = nullptr, *o_experts_used = nullptr,
                *o_expert_ff = nullptr;
};

// ---- random numbers -----------------------------------------------------

// splitmix64's output function: a strong 64-bit mixer, used both to derive
// the per-row seeds and as the generator itself.
uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

class RowRng {
public:
    RowRng(uint64_t seed, uint64_t tensor, uint64_t row)
        : state_(mix64(mix64(mix64(seed) ^ (tensor + 0x9e3779b97f4a7c15ull)) ^ (row + 0x632be59bd9b4e019ull))) {}

    // Uniform in (0, 1]: never 0, so log() below is finite.
    double uniform() {
        state_ += 0x9e3779b97f4a7c15ull;
        return static_cast<double>((mix64(state_) >> 11) + 1) * 0x1.0p-53;
    }

private:
    uint64_t state_;
};

// Gaussian values by Box-Muller, two per pair of uniforms.
void fill_gaussian(float* dst, int64_t n, double mean, double stddev, RowRng& rng) {
    for (int64_t i = 0; i < n; i += 2) {
        const double r = std::sqrt(-2.0 * std::log(rng.uniform()));
        const double theta = 2.0 * std::numbers::pi * rng.uniform();
        dst[i] = static_cast<float>(mean + stddev * r * std::cos(theta));
        if (i + 1 < n) dst[i + 1] = static_cast<float>(mean + stddev * r * std::sin(theta));
    }
}

// ---- shape and metadata -------------------------------------------------

model::ModelShape resolve_shape(const SynthOptions& o, int64_t vocab_from_file) {
    model::ModelShape s;
    if (!o.shape.empty()) {
        const model::ModelShape* preset = model::find_preset(o.shape);
        if (preset == nullptr) {
            throw Error(fmt::format("unknown shape '{}' (known: {})", o.shape, model::preset_names()));
        }
        s = *preset;
    } else {
        const struct {
            const CLI::Option* opt;
            const char* flag;
        } required[] = {{o.o_embd, "--embd"}, {o.o_ff, "--ff"},         {o.o_layers, "--layers"},
                        {o.o_heads, "--heads"}, {o.o_kv, "--kv-heads"}, {o.o_ctx, "--ctx"}};
        for (const auto& r : required) {
            if (r.opt->count() == 0) throw Error(fmt::format("without --shape, {} is required", r.flag));
        }
        if (o.o_vocab_size->count() == 0 && vocab_from_file == 0) {
            throw Error("without --shape, --vocab-size or --vocab is required");
        }
        s.name = "custom";
    }
    if (o.o_embd->count()) s.n_embd = o.embd;
    if (o.o_ff->count()) s.n_ff = o.ff;
    if (o.o_layers->count()) s.n_layer = o.layers;
    if (o.o_heads->count()) s.n_head = o.heads;
    if (o.o_kv->count()) s.n_head_kv = o.kv_heads;
    if (o.o_ctx->count()) s.n_ctx = o.ctx;
    if (o.o_vocab_size->count()) s.n_vocab = o.vocab_size;
    if (o.o_experts->count()) s.n_expert = o.experts;
    if (o.o_experts_used->count()) s.n_expert_used = o.experts_used;
    if (o.o_expert_ff->count()) s.n_ff_exp = o.expert_ff;
    if (vocab_from_file > 0) {
        if (o.o_vocab_size->count() && o.vocab_size != vocab_from_file) {
            throw Error(fmt::format("--vocab-size {} conflicts with {} tokens in {}", o.vocab_size, vocab_from_file,
                                    o.vocab));
        }
        s.n_vocab = vocab_from_file;
    }
    if (o.tied) s.tied_embeddings = true;
    if (o.untied) s.tied_embeddings = false;
    model::validate_shape(s);
    return s;
}

quant::FileType parse_file_type(const std::string& name) {
    if (auto ft = quant::file_type_from_name(name)) return *ft;
    std::string known;
    for (const auto& m : quant::all_mixes()) known += (known.empty() ? "" : ", ") + std::string(m.name);
    throw Error(fmt::format("unknown --type '{}' (known: {})", name, known));
}

// ---- tensor data --------------------------------------------------------

struct TensorPlan {
    size_t index;
    quant::Type type;
    int64_t row_len;
    int64_t n_rows;
    uint64_t row_bytes;
    double mean;
    double stddev;
};

// Generates and quantizes rows [first, first + count) of one tensor into
// dst, splitting the rows over up to n_threads threads.
void generate_rows(const TensorPlan& t, uint64_t seed, int64_t first, int64_t count, uint8_t* dst,
                   unsigned n_threads) {
    auto work = [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(t.row_len));
        for (int64_t r = begin; r < end; ++r) {
            RowRng rng(seed, t.index, static_cast<uint64_t>(first + r));
            fill_gaussian(row.data(), t.row_len, t.mean, t.stddev, rng);
            quant::quantize_row(t.type, row.data(), dst + static_cast<uint64_t>(r) * t.row_bytes, t.row_len);
        }
    };
    const int64_t elems = count * t.row_len;
    const int64_t n_workers = std::min<int64_t>({static_cast<int64_t>(n_threads), count,
                                                 std::max<int64_t>(1, elems / kMinParallelElems)});
    if (n_workers <= 1) {
        work(0, count);
        return;
    }
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n_workers));
    {
        std::vector<std::jthread> pool;
        for (int64_t w = 0; w < n_workers; ++w) {
            const int64_t begin = count * w / n_workers;
            const int64_t end = count * (w + 1) / n_workers;
            pool.emplace_back([&, w, begin, end] {
                try {
                    work(begin, end);
                } catch (...) {
                    errors[static_cast<size_t>(w)] = std::current_exception();
                }
            });
        }
    }
    for (const auto& e : errors) {
        if (e) std::rethrow_exception(e);
    }
}

void write_tensor(gguf::Writer& writer, const TensorPlan& t, uint64_t seed, unsigned n_threads,
                  ProgressBar* progress) {
    // Generated and written one chunk of rows at a time: memory stays at
    // one chunk of quantized bytes plus one row of floats per thread,
    // whatever the tensor's size.
    const int64_t rows_per_chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / t.row_bytes));
    std::vector<uint8_t> bytes(static_cast<size_t>(t.row_bytes * static_cast<uint64_t>(std::min(rows_per_chunk, t.n_rows))));
    for (int64_t r0 = 0; r0 < t.n_rows; r0 += rows_per_chunk) {
        const int64_t count = std::min(rows_per_chunk, t.n_rows - r0);
        const size_t n_bytes = static_cast<size_t>(static_cast<uint64_t>(count) * t.row_bytes);
        generate_rows(t, seed, r0, count, bytes.data(), n_threads);
        writer.write_tensor_chunk(std::span<const uint8_t>(bytes.data(), n_bytes));
        if (progress) progress->advance(n_bytes, writer.tensors()[t.index].name);
    }
}

}  // namespace

SynthStats write_synth_model(const model::ModelShape& shape, quant::FileType file_type,
                             std::vector<gguf::KeyValue> vocab_keys, const std::string& out, uint64_t seed,
                             bool header_only, unsigned threads, bool progress) {
    gguf::Writer writer(out);
    for (auto& kv : model::model_hparams(shape)) {
        writer.set(kv.key, std::move(kv.value));
        if (kv.key == "general.architecture") writer.set("general.name", gguf::Value::str("synth-" + shape.name));
    }
    writer.set("general.file_type", gguf::Value::u32(static_cast<uint32_t>(file_type)));
    for (auto& kv : vocab_keys) writer.set(kv.key, std::move(kv.value));
    writer.set("general.quantization_version", gguf::Value::u32(2));
    writer.set("tandem.synth.shape", gguf::Value::str(shape.name));
    writer.set("tandem.synth.seed", gguf::Value::u64(seed));
    if (header_only) writer.set(std::string(gguf::kHeaderOnlyKey), gguf::Value::boolean(true));

    const quant::MixInfo& mix_info = *quant::find_mix(file_type);
    quant::MixModelInfo mix;
    mix.n_layer = shape.n_layer;
    mix.n_head = shape.n_head;
    mix.n_head_kv = shape.n_head_kv;
    mix.n_expert = shape.n_expert;
    mix.has_output_tensor = !shape.tied_embeddings;
    // i-quant files are made with an importance matrix (llama-quantize
    // refuses the lowest ones without), so the header gets the types such
    // a file has; the K-quant and legacy mixes are the plain ones.
    mix.imatrix = mix_info.name.starts_with("IQ");
    std::vector<TensorPlan> plans;
    uint64_t n_params = 0;
    uint64_t total_bytes = 0;
    for (auto& ts : model::model_tensors(shape)) {
        const quant::Type type = quant::choose_tensor_type(file_type, mix, ts.name, ts.shape);
        if (!header_only && quant::requires_imatrix(ts.name, type)) {
            // Refused before the output is opened: nothing is written.
            throw Error(fmt::format("--type {}: {} needs an importance matrix, which random weights do not have "
                                    "(--header-only writes a header to plan with; or synth F16, then `tandem "
                                    "imatrix` and `tandem quantize --imatrix`)",
                                    mix_info.name, quant::traits(type).name));
        }
        TensorPlan p{};
        p.index = plans.size();
        p.type = type;
        p.row_len = ts.shape[0];
        p.n_rows = 1;
        for (size_t d = 1; d < ts.shape.size(); ++d) p.n_rows *= ts.shape[d];
        // Norm weights near 1; biases, like matrices, near 0.
        const bool is_norm = ts.shape.size() == 1 && !ts.name.ends_with(".bias");
        p.mean = is_norm ? kNormMean : 0.0;
        p.stddev = is_norm ? kNormStd : kWeightStd;
        writer.add_tensor({ts.name, ts.shape, type});  // throws if the shape does not fit the type
        p.row_bytes = quant::row_bytes(type, p.row_len).value();
        n_params += static_cast<uint64_t>(p.row_len) * static_cast<uint64_t>(p.n_rows);
        total_bytes += p.row_bytes * static_cast<uint64_t>(p.n_rows);
        plans.push_back(p);
    }

    writer.write_header();
    if (!header_only) {
        const unsigned n_threads = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
        std::optional<ProgressBar> bar;
        if (progress) bar.emplace("synth", total_bytes, true);
        for (const auto& p : plans) write_tensor(writer, p, seed, n_threads, bar ? &*bar : nullptr);
        if (bar) bar->finish();
    }
    writer.finish();
    return {plans.size(), n_params, total_bytes};
}

namespace {

void run_synth(const SynthOptions& o) {
    const auto start = std::chrono::steady_clock::now();
    const quant::FileType file_type = parse_file_type(o.type);

    std::vector<gguf::KeyValue> vocab_keys;
    int64_t vocab_from_file = 0;
    if (!o.vocab.empty()) {
        const gguf::File vf = gguf::File::open(o.vocab);
        model::CopiedVocab copied = model::copy_vocab(vf);
        vocab_keys = std::move(copied.keys);
        vocab_from_file = copied.n_vocab;
    }
    // The vocabulary's file stays an input until the output is written: the
    // output may not replace it.
    const InputFile vocab_input = o.vocab.empty() ? InputFile() : InputFile(o.vocab);
    const model::ModelShape shape = resolve_shape(o, vocab_from_file);
    if (o.vocab.empty()) vocab_keys = model::synthetic_llama_vocab(shape.n_vocab);
    const SynthStats st = write_synth_model(shape, file_type, std::move(vocab_keys), o.out, o.seed, o.header_only,
                                            o.threads, true);

    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("wrote {} ({}, {}{})\n", o.out, shape.name, quant::find_mix(file_type)->name,
               o.header_only ? ", header only" : "");
    fmt::print("  {}: layers {}, n_embd {}, n_ff {}, heads {}/{} of {}, vocab {}, ctx {}{}\n", shape.arch,
               shape.n_layer, shape.n_embd, shape.n_ff, shape.n_head, shape.n_head_kv, shape.head_dim_k(),
               shape.n_vocab, shape.n_ctx, shape.tied_embeddings ? ", tied embeddings" : "");
    if (shape.n_expert > 0) {
        fmt::print("  experts {} ({} used), expert n_ff {}\n", shape.n_expert, shape.n_expert_used, shape.expert_ff());
    }
    if (shape.mla()) {
        fmt::print("  latent attention: q_lora {}, kv_lora {}, head [nope {} | rope {}], v {}\n", shape.q_lora_rank,
                   shape.kv_lora_rank, shape.qk_nope_head_dim, shape.n_rot, shape.v_head_dim);
    }
    fmt::print("  tensors {}, params {:.3f} B\n", st.n_tensors, static_cast<double>(st.n_params) / 1e9);
    fmt::print("  tensor bytes {} ({:.2f} GB, {:.2f} GiB), {:.3f} bits/weight\n", st.total_bytes,
               static_cast<double>(st.total_bytes) / 1e9, static_cast<double>(st.total_bytes) / (1ull << 30),
               static_cast<double>(st.total_bytes) * 8.0 / static_cast<double>(st.n_params));
    fmt::print("  time {:.2f} s\n", secs);
}

// One line per preset for --help: architecture, size, experts.
std::string preset_help() {
    std::string out = "Presets:\n";
    for (const auto& p : model::model_presets()) {
        const double params = static_cast<double>(model::param_count(p));
        const std::string size = params < 1e9 ? fmt::format("{:.0f}M", params / 1e6) : fmt::format("{:.1f}B", params / 1e9);
        out += fmt::format("  {:<16} {:<9} {:>7} params, {} layers, n_embd {}", p.name, p.arch, size, p.n_layer,
                           p.n_embd);
        if (p.n_expert > 0) out += fmt::format(", {} experts ({} used)", p.n_expert, p.n_expert_used);
        out += "\n";
    }
    out += "Without --shape: a Llama of --embd, --ff, --layers, --heads, --kv-heads, --ctx and --vocab-size/--vocab.";
    return out;
}

}  // namespace

void add_synth_command(CLI::App& app) {
    auto opts = std::make_shared<SynthOptions>();
    CLI::App* cmd = app.add_subcommand("synth", "Write a GGUF model of a preset or explicit shape with seeded random weights");
    cmd->add_option("--shape", opts->shape, "Preset (listed below); the size flags override its fields");
    cmd->footer(preset_help());
    cmd->add_option("-o,--output", opts->out, "Output GGUF path")->required();
    cmd->add_option("--type", opts->type, "Quantization mix (Q4_K_M, Q8_0, F16, ...; IQ* mixes with --header-only)")->capture_default_str();
    cmd->add_option("--vocab", opts->vocab, "Copy tokenizer.* keys from this GGUF (n_vocab = its token count)");
    cmd->add_option("--seed", opts->seed, "Random seed")->capture_default_str();
    cmd->add_flag("--header-only", opts->header_only, "Metadata and tensor infos only: plannable, not runnable");
    cmd->add_option("-t,--threads", opts->threads, "Worker threads (default: all cores)");
    opts->o_embd = cmd->add_option("--embd", opts->embd, "Embedding length (overrides the preset)");
    opts->o_ff = cmd->add_option("--ff", opts->ff, "Feed-forward length");
    opts->o_layers = cmd->add_option("--layers", opts->layers, "Number of layers");
    opts->o_heads = cmd->add_option("--heads", opts->heads, "Attention heads");
    opts->o_kv = cmd->add_option("--kv-heads", opts->kv_heads, "KV heads");
    opts->o_vocab_size = cmd->add_option("--vocab-size", opts->vocab_size, "Vocabulary size");
    opts->o_ctx = cmd->add_option("--ctx", opts->ctx, "Context length");
    opts->o_experts = cmd->add_option("--experts", opts->experts, "Experts per MoE layer (0: dense FFN)");
    opts->o_experts_used = cmd->add_option("--experts-used", opts->experts_used, "Experts each token uses");
    opts->o_expert_ff = cmd->add_option("--expert-ff", opts->expert_ff, "One expert's hidden size (default: --ff)");
    auto* tied = cmd->add_flag("--tied", opts->tied, "Tie the output head to token_embd (no output.weight)");
    cmd->add_flag("--untied", opts->untied, "Write a separate output.weight")->excludes(tied);
    cmd->callback([opts] { run_synth(*opts); });
}

}  // namespace tandem::tools
