// `tandem quantize IN OUT TYPE`: rewrite a GGUF model in one of the
// quantization mixes (Q4_K_M, Q8_0...), choosing each tensor's type the way
// llama.cpp's quantizer does (runtime/quant/quant_mix.h).
//
// Memory stays bounded by one tensor: the input is mmapped, each tensor is
// converted row by row (dequantize one row to float, quantize it) into a
// buffer the size of that tensor's output, written, and the buffer reused.
// Tensors whose type does not change are copied straight from the mapping.
#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/gguf/gguf_writer.h"
#include "runtime/model/model_shapes.h"
#include "runtime/quant/imatrix_file.h"
#include "runtime/quant/quant_mix.h"
#include "runtime/quant/quant_types.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;
using quant::Type;

// GGML_QNT_VERSION: the K-quant/legacy block layouts Tandem writes.
constexpr uint32_t kQuantizationVersion = 2;
// Rows per work item handed to a thread: big enough that scheduling is
// noise, small enough that threads finish together.
constexpr int64_t kRowsPerItem = 16;
// Below this many weights a tensor is converted on the calling thread.
constexpr uint64_t kMinParallelElements = 1 << 16;

// Keys that describe the input's layout, not the model: the writer manages
// the alignment, and the output is one file even if the input was a shard.
constexpr std::string_view kDroppedKeys[] = {
    "general.alignment", "split.no", "split.count", "split.tensors.count",
};

struct Options {
    std::string input;
    std::string output;
    std::string type;
    std::string imatrix;  // llama-imatrix's file; empty: none
    unsigned threads = 0;
    bool allow_requantize = false;
    bool dry_run = false;
    bool json = false;
};

struct TensorPlan {
    const gguf::TensorInfo* info = nullptr;
    Type type = Type::F32;
    uint64_t bytes = 0;  // output size
    // Importance weights, n_per_row for each 2-D matrix of the tensor (one
    // per expert); null: quantized without.
    const std::vector<float>* weights = nullptr;
    bool converted() const { return info->type != type; }
};

std::string mix_names() {
    std::string names;
    for (const auto& m : quant::all_mixes()) {
        if (!names.empty()) names += ", ";
        names += m.name;
    }
    return names;
}

// TYPE is a mix name ("q4_k_m" too) or its llama_ftype number ("15"), as
// llama-quantize accepts both.
quant::FileType parse_mix(const std::string& text) {
    if (auto ft = quant::file_type_from_name(text)) return *ft;
    uint32_t number = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (ec == std::errc{} && ptr == text.data() + text.size()) {
        const auto ft = static_cast<quant::FileType>(number);
        if (quant::find_mix(ft) != nullptr) return ft;
    }
    throw Error(fmt::format("unknown quantization type '{}'; valid types: {}", text, mix_names()));
}

// A hyperparameter that some models store per layer as an array: the first
// layer's value is the one llama.cpp's mix rules look at.
int64_t read_count(const gguf::File& file, const std::string& key, int64_t fallback) {
    const gguf::Value* v = file.find(key);
    if (v == nullptr) return fallback;
    if (const gguf::Array* a = v->as_array(); a != nullptr && !a->items.empty()) v = &a->items.front();
    const auto n = v->as_int();
    if (!n || *n < 0) {
        throw Error(fmt::format("{}: key '{}': expected a non-negative integer, found {}", file.name(), key,
                                gguf::to_display_string(*v)));
    }
    return *n;
}

quant::MixModelInfo model_info(const gguf::File& file) {
    const std::string& arch = file.architecture();
    int64_t max_layer = -1;
    for (const auto& t : file.tensors()) max_layer = std::max(max_layer, tandem::model::layer_of_tensor(t.name));

    quant::MixModelInfo info;
    info.n_layer = read_count(file, arch + ".block_count", max_layer + 1);
    info.n_head = read_count(file, arch + ".attention.head_count", 0);
    info.n_head_kv = read_count(file, arch + ".attention.head_count_kv", info.n_head);
    info.n_expert = read_count(file, arch + ".expert_count", 0);
    info.has_output_tensor = file.find_tensor("output.weight") != nullptr;
    return info;
}

std::vector<TensorPlan> plan_tensors(const gguf::File& file, quant::FileType ft, const quant::MixModelInfo& model) {
    std::vector<TensorPlan> plan;
    plan.reserve(file.tensors().size());
    for (const auto& t : file.tensors()) {
        TensorPlan p;
        p.info = &t;
        p.type = quant::choose_tensor_type(ft, model, t.name, t.shape);
        const auto row = quant::row_bytes(p.type, t.row_length());
        TANDEM_CHECK(row.has_value(), "choose_tensor_type gave a type that does not fit the row");
        p.bytes = *row * static_cast<uint64_t>(t.n_rows());
        plan.push_back(p);
    }
    return plan;
}

// llama.cpp refuses too: each requantization rounds already-rounded
// weights again, and the result is worse than quantizing the original.
void check_requantize(const gguf::File& file, const std::vector<TensorPlan>& plan, bool allowed) {
    if (allowed) return;
    for (const auto& p : plan) {
        const auto& src = quant::traits(p.info->type);
        if (src.is_quantized && p.info->type != p.type) {
            throw Error(fmt::format(
                "{}: already quantized (tensor '{}' is {}); requantizing compounds the rounding error, "
                "quantize the F16/BF16/F32 original instead or pass --allow-requantize",
                file.name(), p.info->name, src.name));
        }
    }
}

// Gives each converted tensor its importance weights, as llama-quantize
// does: by name; a tensor without an entry goes without (token_embd and
// output never have one); an entry of the wrong size is an error, except for
// token_embd (old matrices of other shapes name it too).
void attach_imatrix(const quant::ImportanceMatrix& imatrix, const std::string& path, std::vector<TensorPlan>& plan) {
    for (auto& p : plan) {
        const std::vector<float>* w = imatrix.find(p.info->name);
        if (!p.converted() || w == nullptr) continue;
        const uint64_t expected = static_cast<uint64_t>(p.info->n_elements) / static_cast<uint64_t>(
                                      p.info->shape.size() > 1 ? p.info->shape[1] : 1);
        if (w->size() != expected) {
            if (p.info->name == "token_embd.weight") continue;
            throw Error(fmt::format("{}: weight '{}': expected {} importance values (one a column of each matrix), "
                                    "found {}; was the matrix made for another model?",
                                    path, p.info->name, expected, w->size()));
        }
        p.weights = w;
    }
}

// The very low-bit i-quants are refused without importance weights, as
// llama-quantize refuses them: the result would be unusable.
void check_importance(quant::FileType ft, const std::vector<TensorPlan>& plan, bool have_imatrix) {
    for (const auto& p : plan) {
        if (!p.converted() || p.weights != nullptr || !quant::requires_imatrix(p.info->name, p.type)) continue;
        const std::string_view type = quant::traits(p.type).name;
        if (have_imatrix) {
            throw Error(fmt::format("{}: the importance matrix has no entry for '{}', which would be {}; make the "
                                    "matrix on this model",
                                    quant::find_mix(ft)->name, p.info->name, type));
        }
        throw Error(fmt::format("{} needs an importance matrix ('{}' would be {}): make one with `tandem imatrix -m "
                                "MODEL -f TEXT -o FILE` and pass --imatrix FILE",
                                quant::find_mix(ft)->name, p.info->name, type));
    }
}

// Converts a tensor row by row into `out` (resized to the output size).
// Rows are independent, so threads take work items of kRowsPerItem rows.
void convert_tensor(std::span<const uint8_t> src, const TensorPlan& p, unsigned threads, std::vector<uint8_t>& out) {
    const gguf::TensorInfo& t = *p.info;
    const int64_t row = t.row_length();
    const int64_t n_rows = t.n_rows();
    const uint64_t src_row = *quant::row_bytes(t.type, row);
    const uint64_t dst_row = *quant::row_bytes(p.type, row);
    const int64_t rows_per_matrix = t.shape.size() > 1 ? t.shape[1] : 1;
    out.resize(p.bytes);

    std::atomic<int64_t> next{0};
    auto work = [&] {
        std::vector<float> buf(static_cast<size_t>(row));
        for (;;) {
            const int64_t first = next.fetch_add(kRowsPerItem);
            if (first >= n_rows) return;
            const int64_t last = std::min(n_rows, first + kRowsPerItem);
            for (int64_t r = first; r < last; ++r) {
                const auto ur = static_cast<uint64_t>(r);
                quant::dequantize_row(t.type, src.data() + ur * src_row, buf.data(), row);
                const float* qw = p.weights ? p.weights->data() + (r / rows_per_matrix) * row : nullptr;
                quant::quantize_row_weighted(p.type, buf.data(), out.data() + ur * dst_row, row, qw);
            }
        }
    };

    const unsigned n_threads = t.n_elements < kMinParallelElements
                                   ? 1u
                                   : std::min<unsigned>(threads, static_cast<unsigned>((n_rows + kRowsPerItem - 1) / kRowsPerItem));
    if (n_threads <= 1) {
        work();
        return;
    }
    // A worker's exception (an internal check) is rethrown here, after all
    // threads have joined.
    std::exception_ptr failure;
    std::mutex failure_mutex;
    std::vector<std::thread> pool;
    pool.reserve(n_threads - 1);
    auto guarded = [&] {
        try {
            work();
        } catch (...) {
            std::lock_guard lock(failure_mutex);
            if (!failure) failure = std::current_exception();
            next.store(n_rows);  // stop the others early
        }
    };
    for (unsigned i = 1; i < n_threads; ++i) pool.emplace_back(guarded);
    guarded();
    for (auto& th : pool) th.join();
    if (failure) std::rethrow_exception(failure);
}

void write_model(const gguf::File& file, const Options& opt, quant::FileType ft, const std::vector<TensorPlan>& plan,
                 const quant::ImportanceMatrix* imatrix, unsigned threads) {
    gguf::Writer writer(opt.output, file.alignment());
    for (const auto& kv : file.metadata()) {
        const bool dropped = std::find(std::begin(kDroppedKeys), std::end(kDroppedKeys), kv.key) != std::end(kDroppedKeys);
        if (!dropped) writer.set(kv.key, kv.value);
    }
    writer.set("general.file_type", gguf::Value::u32(static_cast<uint32_t>(ft)));
    writer.set("general.quantization_version", gguf::Value::u32(kQuantizationVersion));
    if (imatrix != nullptr) {  // the keys llama-quantize records
        writer.set("quantize.imatrix.file", gguf::Value::str(opt.imatrix));
        if (!imatrix->datasets.empty()) writer.set("quantize.imatrix.dataset", gguf::Value::str(imatrix->datasets[0]));
        writer.set("quantize.imatrix.entries_count", gguf::Value::i32(static_cast<int32_t>(imatrix->weights.size())));
        writer.set("quantize.imatrix.chunks_count", gguf::Value::i32(static_cast<int32_t>(imatrix->chunk_count)));
    }
    for (const auto& p : plan) writer.add_tensor({p.info->name, p.info->shape, p.type});
    writer.write_header();

    ProgressBar bar("quantize", file.total_tensor_bytes(), /*unit_bytes=*/true);
    std::vector<uint8_t> buffer;
    for (const auto& p : plan) {
        const auto src = file.tensor_data(*p.info);
        if (!p.converted()) {
            writer.write_tensor_data(src);  // nothing to convert: copy from the mapping
        } else {
            convert_tensor(src, p, threads, buffer);
            writer.write_tensor_data(buffer);
        }
        bar.advance(p.info->n_bytes, p.info->name);
    }
    bar.finish();
    writer.finish();
}


constexpr double kMiB = 1024.0 * 1024.0;

void print_summary(const gguf::File& file, const Options& opt, quant::FileType ft, const std::vector<TensorPlan>& plan,
                   double seconds) {
    uint64_t before = 0, after = 0, elements = 0;
    size_t converted = 0, weighted = 0;
    std::map<std::string_view, size_t> type_counts;
    for (const auto& p : plan) {
        before += p.info->n_bytes;
        after += p.bytes;
        elements += p.info->n_elements;
        converted += p.converted() ? 1 : 0;
        weighted += p.weights != nullptr ? 1 : 0;
        ++type_counts[quant::traits(p.type).name];
    }
    const double weights = std::max<double>(1.0, static_cast<double>(elements));
    const double bpw_before = 8.0 * static_cast<double>(before) / weights;
    const double bpw_after = 8.0 * static_cast<double>(after) / weights;
    const std::string_view mix = quant::find_mix(ft)->name;

    if (opt.json) {
        nlohmann::json tensors = nlohmann::json::array();
        for (const auto& p : plan) {
            tensors.push_back({{"name", p.info->name},
                               {"shape", p.info->shape},
                               {"from", quant::traits(p.info->type).name},
                               {"to", quant::traits(p.type).name},
                               {"imatrix", p.weights != nullptr},
                               {"bytes_before", p.info->n_bytes},
                               {"bytes_after", p.bytes}});
        }
        nlohmann::json j = {{"input", opt.input},         {"output", opt.output},
                            {"type", mix},                {"file_type", static_cast<uint32_t>(ft)},
                            {"dry_run", opt.dry_run},     {"n_tensors", plan.size()},
                            {"imatrix", opt.imatrix},     {"n_weighted", weighted},
                            {"n_converted", converted},   {"bytes_before", before},
                            {"bytes_after", after},       {"bpw_before", bpw_before},
                            {"bpw_after", bpw_after},     {"seconds", seconds},
                            {"tensors", std::move(tensors)}};
        fmt::print("{}\n", j.dump(2));
        return;
    }

    if (opt.dry_run) {
        for (const auto& p : plan) {
            fmt::print("{:<36} {:<20} {:>5} -> {:<5} {:9.2f} MiB -> {:9.2f} MiB\n", p.info->name,
                       gguf::shape_string(p.info->shape), quant::traits(p.info->type).name, quant::traits(p.type).name,
                       static_cast<double>(p.info->n_bytes) / kMiB, static_cast<double>(p.bytes) / kMiB);
        }
    }
    std::string types;
    for (const auto& [name, count] : type_counts) types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", name, count);
    fmt::print("{} {} -> {} as {}\n", opt.dry_run ? "would quantize" : "quantized", file.name(), opt.output, mix);
    fmt::print("  tensors: {} ({} converted, {} copied)\n", plan.size(), converted, plan.size() - converted);
    fmt::print("  types:   {}\n", types);
    if (!opt.imatrix.empty()) fmt::print("  imatrix: {} ({} tensors weighted)\n", opt.imatrix, weighted);
    fmt::print("  size:    {:.2f} MiB -> {:.2f} MiB ({:.2f} -> {:.2f} bits per weight)\n",
               static_cast<double>(before) / kMiB, static_cast<double>(after) / kMiB, bpw_before, bpw_after);
    fmt::print("  time:    {:.2f} s\n", seconds);
}

void check_paths(const Options& opt) {
    const fs::path in(opt.input), out(opt.output);
    std::error_code ec;
    if (!fs::exists(in, ec)) throw Error(fmt::format("{}: no such file", opt.input));
    if (fs::is_directory(in, ec)) throw Error(fmt::format("{}: is a directory, expected a GGUF file", opt.input));
    // equivalent() catches hard links and symlinks to an existing OUT;
    // comparing canonical forms catches "./a.gguf" vs "a.gguf".
    std::error_code ec_in, ec_out;
    const fs::path canon_in = fs::weakly_canonical(in, ec_in);
    const fs::path canon_out = fs::weakly_canonical(out, ec_out);
    const bool same = (fs::exists(out, ec) && fs::equivalent(in, out, ec)) ||
                      (!ec_in && !ec_out && canon_in == canon_out);
    if (same) {
        throw Error(fmt::format("output '{}' is the input file; write the quantized model to a new path", opt.output));
    }
}

void run_quantize(const Options& opt) {
    const auto start = std::chrono::steady_clock::now();
    const quant::FileType ft = parse_mix(opt.type);
    check_paths(opt);

    const gguf::File file = gguf::File::open(opt.input);
    if (file.header_only()) {
        throw Error(fmt::format("{}: header-only file (no tensor data), nothing to quantize", file.name()));
    }
    if (const auto splits = file.find_uint("split.count"); splits && *splits > 1) {
        throw Error(fmt::format("{}: one shard of a {}-file split model; merge the shards first", file.name(), *splits));
    }

    if (file.architecture().empty()) {
        throw Error(fmt::format("{}: an importance matrix, not a model; pass it with --imatrix", file.name()));
    }

    std::optional<quant::ImportanceMatrix> imatrix;
    if (!opt.imatrix.empty()) imatrix = quant::load_importance_matrix(opt.imatrix);
    quant::MixModelInfo model = model_info(file);
    model.imatrix = imatrix.has_value();
    std::vector<TensorPlan> plan = plan_tensors(file, ft, model);
    check_requantize(file, plan, opt.allow_requantize);
    if (imatrix) attach_imatrix(*imatrix, opt.imatrix, plan);

    if (!opt.dry_run) {
        check_importance(ft, plan, imatrix.has_value());
        const unsigned threads = opt.threads > 0 ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
        write_model(file, opt, ft, plan, imatrix ? &*imatrix : nullptr, threads);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    print_summary(file, opt, ft, plan, seconds);
}

}  // namespace

void add_quantize_command(CLI::App& app) {
    auto opt = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand(
        "quantize", "Quantize a GGUF model to a mix such as Q4_K_M, choosing per-tensor types as llama.cpp does");
    cmd->add_option("input", opt->input, "Input GGUF model (F32/F16/BF16)")->required();
    cmd->add_option("output", opt->output, "Output GGUF path (written atomically)")->required();
    cmd->add_option("type", opt->type, "Mix: " + mix_names())->required();
    cmd->add_option("--imatrix", opt->imatrix,
                    "Importance matrix (llama-imatrix or `tandem imatrix` output) for the weighted searches; "
                    "required by IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M and IQ3_XXS")
        ->check(CLI::ExistingFile);
    cmd->add_option("--threads,-t", opt->threads, "Worker threads (default: all hardware threads)");
    cmd->add_flag("--allow-requantize", opt->allow_requantize, "Allow an already quantized input (loses quality)");
    cmd->add_flag("--dry-run", opt->dry_run, "Show the per-tensor types and sizes; write nothing");
    cmd->add_flag("--json", opt->json, "Print the summary as JSON on stdout");
    cmd->callback([opt] { run_quantize(*opt); });
}

}  // namespace tandem::tools
