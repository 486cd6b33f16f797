// `tandem inspect FILE`: what a GGUF holds, for people (default) and for
// scripts (--json). Everything comes from the validated reader, so a file
// that inspect accepts is one the runtime accepts too; a malformed file
// fails with the reader's one-line error.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/model_shapes.h"
#include "runtime/quant/quant_mix.h"
#include "runtime/quant/quant_types.h"
#include "tools/commands.h"

namespace tandem::tools {
namespace {

using nlohmann::json;

// Arrays longer than this are summarized in JSON: a vocabulary would
// otherwise be megabytes of output nobody asked for.
constexpr size_t kJsonArrayLimit = 16;
constexpr size_t kJsonArrayHead = 8;
// Long strings (chat templates) are cut in the human output.
constexpr size_t kDisplayStringLimit = 96;

struct InspectOptions {
    std::string path;
    std::string model;  // -m FILE, as every other command takes it
    bool json = false;
    bool no_tensors = false;
};

// Byte totals, computed once and shared by both output formats.
struct Summary {
    std::vector<uint64_t> per_layer;  // index = layer number
    uint64_t non_layer = 0;
    struct TypeTotal {
        uint64_t tensors = 0;
        uint64_t bytes = 0;
        uint64_t params = 0;
    };
    std::map<std::string, TypeTotal> per_type;  // by type name, sorted for stable output
    uint64_t n_params = 0;
    uint64_t total_bytes = 0;

    double bits_per_weight() const {
        return n_params ? static_cast<double>(total_bytes) * 8.0 / static_cast<double>(n_params) : 0.0;
    }
};

Summary summarize(const gguf::File& f) {
    Summary s;
    for (const auto& t : f.tensors()) {
        const int64_t layer = model::layer_of_tensor(t.name);
        if (layer >= 0) {
            if (static_cast<size_t>(layer) >= s.per_layer.size()) s.per_layer.resize(static_cast<size_t>(layer) + 1, 0);
            s.per_layer[static_cast<size_t>(layer)] += t.n_bytes;
        } else {
            s.non_layer += t.n_bytes;
        }
        auto& tt = s.per_type[std::string(quant::traits(t.type).name)];
        tt.tensors += 1;
        tt.bytes += t.n_bytes;
        tt.params += t.n_elements;
        s.n_params += t.n_elements;
        s.total_bytes += t.n_bytes;
    }
    return s;
}

std::string type_name(quant::Type t) { return std::string(quant::traits(t).name); }


std::string human_bytes(uint64_t n) {
    const double d = static_cast<double>(n);
    if (n >= 1000000000ull) return fmt::format("{:.2f} GB", d / 1e9);
    if (n >= 1000000ull) return fmt::format("{:.2f} MB", d / 1e6);
    if (n >= 1000ull) return fmt::format("{:.2f} kB", d / 1e3);
    return fmt::format("{} B", n);
}

// One line, bounded: newlines escaped, long strings cut.
std::string short_display(const gguf::Value& v) {
    std::string s = gguf::to_display_string(v);
    std::string out;
    for (char c : s) {
        if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else out += c;
    }
    if (out.size() > kDisplayStringLimit) out = out.substr(0, kDisplayStringLimit) + "...";
    return out;
}

json value_to_json(const gguf::Value& v) {
    if (const gguf::Array* arr = v.as_array()) {
        if (arr->items.size() > kJsonArrayLimit) {
            json head = json::array();
            for (size_t i = 0; i < kJsonArrayHead; ++i) head.push_back(value_to_json(arr->items[i]));
            return json{{"type", "array"},
                        {"elem_type", std::string(gguf::value_type_name(arr->elem_type))},
                        {"count", arr->items.size()},
                        {"head", std::move(head)}};
        }
        json out = json::array();
        for (const auto& item : arr->items) out.push_back(value_to_json(item));
        return out;
    }
    if (const std::string* s = v.as_string()) return *s;
    if (v.type == gguf::ValueType::BOOL) return std::get<bool>(v.data);
    if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
    if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
    if (const auto* d = std::get_if<double>(&v.data)) return *d;
    return nullptr;
}

// ---- tokenizer summary ----------------------------------------------------

struct TokenizerSummary {
    std::optional<std::string> model, pre;
    const gguf::Array* tokens = nullptr;
    bool has_merges = false;
    struct Special {
        std::string_view role;
        std::optional<uint64_t> id;
        std::optional<std::string> text;
    };
    std::vector<Special> specials;
};

TokenizerSummary summarize_tokenizer(const gguf::File& f) {
    TokenizerSummary t;
    t.model = f.find_string("tokenizer.ggml.model");
    t.pre = f.find_string("tokenizer.ggml.pre");
    if (const gguf::Value* v = f.find("tokenizer.ggml.tokens")) t.tokens = v->as_array();
    if (const gguf::Value* v = f.find("tokenizer.ggml.merges")) {
        const gguf::Array* m = v->as_array();
        t.has_merges = m != nullptr && !m->items.empty();
    }
    constexpr std::pair<std::string_view, std::string_view> kSpecials[] = {
        {"bos", "tokenizer.ggml.bos_token_id"},
        {"eos", "tokenizer.ggml.eos_token_id"},
        {"unk", "tokenizer.ggml.unknown_token_id"},
        {"pad", "tokenizer.ggml.padding_token_id"},
    };
    for (const auto& [role, key] : kSpecials) {
        TokenizerSummary::Special s{role, f.find_uint(key), std::nullopt};
        if (s.id && t.tokens && *s.id < t.tokens->items.size()) {
            if (const std::string* text = t.tokens->items[*s.id].as_string()) s.text = *text;
        }
        if (s.id) t.specials.push_back(std::move(s));
    }
    return t;
}

std::optional<std::string> file_type_name(const gguf::File& f) {
    const auto ft = f.find_uint("general.file_type");
    if (!ft) return std::nullopt;
    return quant::file_type_name(*ft);
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// ---- JSON -------------------------------------------------------------------

void print_json(const gguf::File& f, const Summary& s, bool with_tensors) {
    json out;
    out["path"] = f.name();
    out["version"] = f.version();
    out["file_size"] = f.file_size();
    out["alignment"] = f.alignment();
    out["data_offset"] = f.data_offset();
    out["header_only"] = f.header_only();
    out["architecture"] = f.architecture();
    if (auto ft = file_type_name(f)) out["file_type"] = *ft;

    json metadata = json::object();
    for (const auto& kv : f.metadata()) metadata[kv.key] = value_to_json(kv.value);
    out["metadata"] = std::move(metadata);

    const TokenizerSummary tok = summarize_tokenizer(f);
    json jt = json::object();
    if (tok.model) jt["model"] = *tok.model;
    if (tok.pre) jt["pre"] = *tok.pre;
    jt["vocab_size"] = tok.tokens ? tok.tokens->items.size() : 0;
    jt["has_merges"] = tok.has_merges;
    for (const auto& sp : tok.specials) {
        jt[std::string(sp.role) + "_id"] = *sp.id;
        if (sp.text) jt[std::string(sp.role)] = *sp.text;
    }
    out["tokenizer"] = std::move(jt);

    out["n_tensors"] = f.tensors().size();
    if (with_tensors) {
        json tensors = json::array();
        for (const auto& t : f.tensors()) {
            tensors.push_back({{"name", t.name},
                               {"type", type_name(t.type)},
                               {"shape", t.shape},
                               {"n_elements", t.n_elements},
                               {"bytes", t.n_bytes},
                               {"offset", f.data_offset() + t.offset},
                               {"data_offset_rel", t.offset}});
        }
        out["tensors"] = std::move(tensors);
    }
    out["bytes_per_layer"] = s.per_layer;
    out["non_layer_bytes"] = s.non_layer;
    json per_type = json::object();
    json per_type_detail = json::object();
    for (const auto& [name, tt] : s.per_type) {
        per_type[name] = tt.bytes;
        per_type_detail[name] = {{"tensors", tt.tensors}, {"bytes", tt.bytes}, {"n_params", tt.params}};
    }
    out["bytes_per_type"] = std::move(per_type);
    out["types"] = std::move(per_type_detail);
    out["n_params"] = s.n_params;
    out["total_tensor_bytes"] = s.total_bytes;
    out["bits_per_weight"] = s.bits_per_weight();
    // Token strings need not be valid UTF-8; replace rather than throw.
    fmt::print("{}\n", out.dump(2, ' ', false, json::error_handler_t::replace));
}

// ---- human output -------------------------------------------------------------

void print_tensor_table(const gguf::File& f) {
    size_t name_w = 4, shape_w = 5;
    for (const auto& t : f.tensors()) {
        name_w = std::max(name_w, t.name.size());
        shape_w = std::max(shape_w, gguf::shape_string(t.shape).size());
    }
    fmt::print("\ntensors ({}):\n", f.tensors().size());
    fmt::print("  {:>4}  {:<{}}  {:<{}}  {:<5}  {:>14}  {:>14}\n", "#", "name", name_w, "shape", shape_w, "type",
               "bytes", "offset");
    size_t i = 0;
    for (const auto& t : f.tensors()) {
        fmt::print("  {:>4}  {:<{}}  {:<{}}  {:<5}  {:>14}  {:>#14x}\n", i++, t.name, name_w, gguf::shape_string(t.shape),
                   shape_w, type_name(t.type), t.n_bytes, f.data_offset() + t.offset);
    }
}

void print_human(const gguf::File& f, const Summary& s, bool with_tensors) {
    fmt::print("file: {}\n", f.name());
    fmt::print("  GGUF v{}, {} bytes ({}), alignment {}, data at {:#x}{}\n", f.version(), f.file_size(),
               human_bytes(f.file_size()), f.alignment(), f.data_offset(),
               f.header_only() ? ", HEADER ONLY (no tensor data: can be planned, not run)" : "");

    const std::string& arch = f.architecture();
    fmt::print("architecture: {}\n", arch);
    if (auto name = f.find_string("general.name")) fmt::print("name: {}\n", *name);
    if (auto ft = file_type_name(f)) fmt::print("file type: {}\n", *ft);

    fmt::print("\nhyperparameters:\n");
    const std::string arch_prefix = arch + ".";
    for (const auto& kv : f.metadata()) {
        if (starts_with(kv.key, arch_prefix)) fmt::print("  {} = {}\n", kv.key, short_display(kv.value));
    }

    const TokenizerSummary tok = summarize_tokenizer(f);
    fmt::print("\ntokenizer:\n");
    fmt::print("  model {}, pre {}, {} tokens, merges: {}\n", tok.model.value_or("(none)"), tok.pre.value_or("(none)"),
               tok.tokens ? tok.tokens->items.size() : 0, tok.has_merges ? "yes" : "no");
    for (const auto& sp : tok.specials) {
        fmt::print("  {} {} {}\n", sp.role, *sp.id, sp.text ? fmt::format("'{}'", *sp.text) : "(out of range)");
    }

    // Everything else, so no key is hidden: general.*, tokenizer scalars,
    // tool-specific keys.
    bool header = false;
    for (const auto& kv : f.metadata()) {
        if (starts_with(kv.key, arch_prefix) || kv.key == "general.architecture") continue;
        if (!header) fmt::print("\nother metadata:\n");
        header = true;
        fmt::print("  {} = {}\n", kv.key, short_display(kv.value));
    }

    if (with_tensors) print_tensor_table(f);

    fmt::print("\nbytes per layer:\n");
    fmt::print("  {:<10} {:>14}  {}\n", "non-layer", s.non_layer, human_bytes(s.non_layer));
    for (size_t l = 0; l < s.per_layer.size(); ++l) {
        fmt::print("  {:<10} {:>14}  {}\n", fmt::format("blk.{}", l), s.per_layer[l], human_bytes(s.per_layer[l]));
    }

    fmt::print("\nbytes per type:\n");
    for (const auto& [name, tt] : s.per_type) {
        const double share = s.total_bytes ? 100.0 * static_cast<double>(tt.bytes) / static_cast<double>(s.total_bytes)
                                           : 0.0;
        fmt::print("  {:<5} {:>5} tensors {:>14}  {:>10}  {:5.1f}%\n", name, tt.tensors, tt.bytes,
                   human_bytes(tt.bytes), share);
    }

    fmt::print("\ntotal: {} tensors, {} params ({:.3f} B), {} bytes ({}), {:.3f} bits/weight\n", f.tensors().size(),
               s.n_params, static_cast<double>(s.n_params) / 1e9, s.total_bytes, human_bytes(s.total_bytes),
               s.bits_per_weight());
}

void run_inspect(const InspectOptions& o) {
    if (!o.path.empty() && !o.model.empty()) throw Error("inspect: give the file once, as FILE or as -m FILE");
    if (o.path.empty() && o.model.empty()) throw Error("inspect: no file; give tandem inspect FILE or -m FILE");
    const gguf::File f = gguf::File::open(o.path.empty() ? o.model : o.path);
    const Summary s = summarize(f);
    if (o.json) print_json(f, s, !o.no_tensors);
    else print_human(f, s, !o.no_tensors);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
    auto opts = std::make_shared<InspectOptions>();
    CLI::App* cmd = app.add_subcommand("inspect", "Show what a GGUF file holds");
    cmd->add_option("file", opts->path, "GGUF file (or -m FILE)");
    cmd->add_option("-m,--model", opts->model, "GGUF file, as the other commands take it");
    cmd->add_flag("--json", opts->json, "Print JSON instead of text");
    cmd->add_flag("--no-tensors", opts->no_tensors, "Leave out the tensor table");
    cmd->callback([opts] { run_inspect(*opts); });
}

}  // namespace tandem::tools
