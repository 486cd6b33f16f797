#include "tools/llama_flags.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "tools/split.h"

namespace tandem::tools {
namespace {

// Exact tokens only; the long names are what the commands register.
const std::vector<LlamaSpelling> kSpellings = {
    {"-ub", "--ubatch-size"},      {"-ngl", "--n-gpu-layers"},   {"-ot", "--override-tensor"},
    {"-nkvo", "--no-kv-offload"},  {"-pg", "--prompt-gen"},      {"-fa", "--flash-attn"},
    {"-ctk", "--cache-type-k"},    {"-ctv", "--cache-type-v"},   {"-ts", "--tensor-split"},
    {"-sm", "--split-mode"},       {"-mg", "--main-gpu"},        {"-dev", "--device"},
    {"-cmoe", "--cpu-moe"},        {"-ncmoe", "--n-cpu-moe"},    {"-mmp", "--mmap"},
    {"-cnv", "--conversation"},    {"-no-cnv", "--no-conversation"}, {"-st", "--single-turn"},
    {"-if", "--interactive-first"}, {"-sys", "--system-prompt"}, {"-md", "--model-draft"},
    {"-ngld", "--n-gpu-layers-draft"},
    {"-tb", "--threads-batch"},    {"-hf", "--hf-repo"},         {"-mu", "--model-url"},
    {"-np", "--parallel"},         {"-cb", "--cont-batching"},   {"-co", "--color"},
    {"-embd", "--embeddings"},     {"-oe", "--output-err"},
};

constexpr unsigned kRun = 1, kBench = 2, kBoth = kRun | kBench;

enum class Arity { Flag, Value, Optional };
enum class Kind {
    Ignore,   // accepted; nothing to change in Tandem (the help says why)
    Warn,     // accepted; one warning line says it has no effect
    Trivial,  // accepted for the values `check` passes, refused otherwise
    Refuse,   // refused: one line naming the Tandem equivalent
};

// "" when `value` is accepted, else the rest of the error line.
using Check = std::string (*)(const std::string& value);

struct CompatFlag {
    std::string_view names;  // as CLI11 takes them
    unsigned tools;
    Arity arity;
    Kind kind;
    std::string_view text;  // the help (Ignore, Warn, Trivial) or the error (Refuse)
    Check check = nullptr;  // Trivial only
};

std::string check_flash_attn(const std::string& v) {
    if (v == "auto") return "";
    try {
        parse_switch("-fa", v);
    } catch (const Error&) {
        return fmt::format("expected on, off or auto, found '{}'", v);
    }
    return "";
}

// One GPU: a split that puts everything on one device is trivial.
std::string check_tensor_split(const std::string& v) {
    int nonzero = -1;
    std::vector<double> parts;
    try {
        parts = parse_tensor_split(v);
    } catch (const Error&) {
        return fmt::format("expected proportions such as 1 or 3,1, found '{}'", v);
    }
    for (size_t i = 0; i < parts.size(); ++i) {
        if (parts[i] == 0) continue;
        if (nonzero >= 0) {
            return fmt::format("'{}' splits across several GPUs; Tandem uses one GPU (--device cudaN) and the CPU, "
                               "with -ngl for the share",
                               v);
        }
        nonzero = static_cast<int>(i);
    }
    if (nonzero > 0) return fmt::format("'{}' puts everything on GPU {}; give --device cuda{}", v, nonzero, nonzero);
    return "";
}

std::string check_split_mode(const std::string& v) {
    if (v == "none" || v == "layer") return "";
    if (v == "row") return "row is not supported; Tandem uses one GPU (--device cudaN) and splits by layers with -ngl";
    return fmt::format("expected none, layer or row, found '{}'", v);
}

std::string check_main_gpu(const std::string& v) {
    if (v == "0") return "";
    return fmt::format("Tandem uses one GPU; choose it with --device cuda{} instead of -mg {}", v, v);
}

std::string check_zero(const std::string& v) {
    if (v == "0") return "";
    return "embeddings are not supported; tandem bench measures generation";
}

constexpr std::string_view kNoChat =
    "tandem run completes one prompt (-p TEXT or -f FILE); for a conversation, use tandem chat -m MODEL";
constexpr std::string_view kNoServer =
    "a server flag: tandem serve -m MODEL takes it (--host, --port, -np, --api-key)";
constexpr std::string_view kPerRequestGrammar =
    "a server-wide grammar is not supported; each request gives its own (grammar, json_schema or response_format)";
constexpr std::string_view kSampler =
    "not supported; Tandem's sampler has --temp, --top-k, --top-p, --min-p and --repeat-penalty";

const CompatFlag kCompat[] = {
    {"--flash-attn", kBoth, Arity::Optional, Kind::Trivial,
     "-fa [on|off|auto]: accepted; Tandem's CPU attention is already flash-style (one pass over the KV cache with "
     "an online softmax), whatever the value",
     check_flash_attn},
    {"--numa", kBoth, Arity::Value, Kind::Warn,
     "Tandem does no NUMA placement of its own (run it under numactl instead)"},
    {"--tensor-split", kBoth, Arity::Value, Kind::Trivial,
     "-ts: accepted when everything goes to one GPU; Tandem uses one (--device cudaN)", check_tensor_split},
    {"--split-mode", kBoth, Arity::Value, Kind::Trivial,
     "-sm none|layer: accepted (one GPU, split by layers with -ngl); row is refused", check_split_mode},
    {"--main-gpu", kBoth, Arity::Value, Kind::Trivial, "-mg 0: accepted; choose another GPU with --device cudaN",
     check_main_gpu},
    {"--no-warmup", kRun, Arity::Flag, Kind::Ignore, "accepted; tandem run does no warm-up pass"},
    {"--mmap", kRun, Arity::Flag, Kind::Ignore, "accepted; the model is mapped unless --no-mmap"},
    {"--no-conversation", kRun, Arity::Flag, Kind::Ignore, "-no-cnv: accepted; tandem run is never a conversation"},
    {"--single-turn", kRun, Arity::Flag, Kind::Ignore, "-st: accepted; tandem run completes one prompt"},
    {"--color", kRun, Arity::Optional, Kind::Ignore, "accepted; the output is not coloured"},
    {"--embeddings", kBench, Arity::Value, Kind::Trivial, "-embd 0: accepted; 1 is refused", check_zero},
    // Refused: one line each, naming what Tandem does instead.
    {"--conversation", kRun, Arity::Flag, Kind::Refuse, kNoChat},
    {"-i,--interactive", kRun, Arity::Flag, Kind::Refuse, kNoChat},
    {"--interactive-first", kRun, Arity::Flag, Kind::Refuse, kNoChat},
    {"--system-prompt", kRun, Arity::Value, Kind::Refuse,
     "tandem run takes the prompt as it is: tandem chat -sys TEXT takes a system prompt (or format it yourself and "
     "give --parse-special)"},
    {"--chat-template", kRun, Arity::Value, Kind::Refuse,
     "tandem run takes the prompt as it is (format it yourself and give --parse-special); tandem chat and tandem "
     "serve apply the model's template"},
    {"--jinja", kRun, Arity::Flag, Kind::Ignore,
     "accepted; tandem chat and tandem serve always render the model's Jinja chat template"},
    {"--threads-batch", kBoth, Arity::Value, Kind::Refuse,
     "Tandem uses one thread count for prompt and generation; give -t"},
    {"--hf-repo", kBoth, Arity::Value, Kind::Refuse,
     "downloading models is not supported; download the GGUF file and give it with -m"},
    {"--model-url", kBoth, Arity::Value, Kind::Refuse,
     "downloading models is not supported; download the GGUF file and give it with -m"},
    {"--lora", kRun, Arity::Value, Kind::Refuse, "LoRA adapters are not supported"},
    {"--mmproj", kRun, Arity::Value, Kind::Refuse, "multimodal projectors are not supported"},
    // tandem run and tandem chat define these; tandem serve takes them per request.
    {"--grammar", kRun, Arity::Value, Kind::Refuse, kPerRequestGrammar},
    {"--grammar-file", kRun, Arity::Value, Kind::Refuse, kPerRequestGrammar},
    {"--json-schema", kRun, Arity::Value, Kind::Refuse, kPerRequestGrammar},
    {"--mirostat", kRun, Arity::Value, Kind::Refuse, kSampler},
    {"--typical", kRun, Arity::Value, Kind::Refuse, kSampler},
    {"--presence-penalty", kRun, Arity::Value, Kind::Refuse, kSampler},
    {"--frequency-penalty", kRun, Arity::Value, Kind::Refuse, kSampler},
    {"--samplers", kRun, Arity::Value, Kind::Refuse, kSampler},
    {"--host", kRun, Arity::Value, Kind::Refuse, kNoServer},
    {"--port", kRun, Arity::Value, Kind::Refuse, kNoServer},
    {"--parallel", kRun, Arity::Value, Kind::Refuse, kNoServer},
    {"--cont-batching", kRun, Arity::Flag, Kind::Ignore, "-cb: accepted; tandem serve always batches its slots"},
    {"--api-key", kRun, Arity::Value, Kind::Refuse, kNoServer},
    {"--output-err", kBench, Arity::Value, Kind::Refuse, "a second output is not supported; give one format with -o"},
};

// "-cnv (--conversation)" for a long name that has a llama.cpp spelling.
std::string shown_name(std::string_view names) {
    std::string longest;
    for (std::string_view n : split_items(names, ",")) {
        if (n.size() > longest.size()) longest = std::string(n);
    }
    for (const LlamaSpelling& s : kSpellings) {
        if (s.tandem == longest) return fmt::format("{} ({})", s.llama, longest);
    }
    return longest;
}

bool defined(const CLI::App& cmd, std::string_view names) {
    for (std::string_view n : split_items(names, ",")) {
        if (cmd.get_option_no_throw(std::string(n)) != nullptr) return true;
    }
    return false;
}

void act(const CompatFlag& f, const std::string& shown, const std::string& value, LlamaTool tool) {
    switch (f.kind) {
        case Kind::Ignore: return;
        case Kind::Warn: fmt::print(stderr, "tandem: warning: {} is ignored: {}\n", shown, f.text); return;
        case Kind::Refuse: throw Error(fmt::format("{}: {}", shown, f.text));
        case Kind::Trivial: {
            // llama-bench takes a comma list of values: each must pass.
            const auto items = tool == LlamaTool::Bench ? split_items(value, ",") : std::vector<std::string_view>{value};
            for (std::string_view item : items) {
                const std::string why = f.check(std::string(item));
                if (!why.empty()) throw Error(fmt::format("{}: {}", shown, why));
            }
            return;
        }
    }
}

bool is_word_flag(const std::string& a) {
    return a.size() >= 3 && a[0] == '-' && a[1] != '-' &&
           std::all_of(a.begin() + 1, a.end(), [](unsigned char c) { return std::isalpha(c) || c == '-'; });
}

}  // namespace

const std::vector<LlamaSpelling>& llama_spellings() { return kSpellings; }

std::vector<std::string_view> split_items(std::string_view s, std::string_view seps) {
    std::vector<std::string_view> out;
    size_t start = 0;
    while (true) {
        const size_t end = s.find_first_of(seps, start);
        out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
        if (end == std::string_view::npos) return out;
        start = end + 1;
    }
}

std::vector<std::string> rewrite_llama_flags(std::vector<std::string> args) {
    for (auto& a : args) {
        for (const LlamaSpelling& s : kSpellings) {
            if (a == s.llama) a = s.tandem;
        }
    }
    return args;
}

std::string parse_error_line(const CLI::ParseError& e, const std::string& command,
                             const std::vector<std::string>& args) {
    const std::string cmd = command.empty() ? "tandem" : "tandem " + command;
    if (command.empty() && !args.empty() && !args.front().empty() && args.front()[0] != '-') {
        return fmt::format("unknown command '{}'; see tandem --help", args.front());
    }
    // A one-dash word left after the rewrite is an unknown llama-style flag,
    // whatever CLI11 made of it.
    for (const std::string& a : rewrite_llama_flags(args)) {
        if (is_word_flag(a)) return fmt::format("unknown flag '{}'; see {} --help", a, cmd);
    }
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
        const size_t colon = what.find(": ");
        std::string first = colon == std::string::npos ? what : what.substr(colon + 2);
        first = first.substr(0, first.find(' '));
        if (!first.empty() && first[0] == '-') return fmt::format("unknown flag '{}'; see {} --help", first, cmd);
        return fmt::format("unexpected argument '{}'; see {} --help", first, cmd);
    }
    if (const size_t at = what.find(": At Most 1 required but received"); at != std::string::npos) {
        return fmt::format("{} given more than once; give it once; see {} --help", what.substr(0, at), cmd);
    }
    return fmt::format("{}; see {} --help", what, cmd);
}

bool parse_switch(std::string_view flag, const std::string& value) {
    std::string v = value;
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    if (v.empty() || v == "1" || v == "on" || v == "true" || v == "enabled") return true;
    if (v == "0" || v == "off" || v == "false" || v == "disabled") return false;
    throw Error(fmt::format("{}: expected 0 or 1 (on or off), found '{}'", flag, value));
}

void add_llama_compat_flags(CLI::App& cmd, LlamaTool tool) {
    const unsigned bit = tool == LlamaTool::Run ? kRun : kBench;
    for (const CompatFlag& f : kCompat) {
        if ((f.tools & bit) == 0 || defined(cmd, f.names)) continue;
        const std::string shown = shown_name(f.names);
        const std::string help = f.kind == Kind::Refuse ? fmt::format("refused: {}", f.text)
                                 : f.kind == Kind::Warn ? fmt::format("accepted and ignored: {}", f.text)
                                                        : std::string(f.text);
        CLI::Option* opt = nullptr;
        if (f.arity == Arity::Flag) {
            opt = cmd.add_flag_function(std::string(f.names), [&f, shown, tool](int64_t) { act(f, shown, "", tool); },
                                        help);
        } else {
            opt = cmd.add_option_function<std::string>(
                std::string(f.names), [&f, shown, tool](const std::string& v) { act(f, shown, v, tool); }, help);
            opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
            if (f.arity == Arity::Optional) opt->expected(0, 1);
        }
        opt->group("llama.cpp flags");
    }
}

std::string llama_spellings_help(const CLI::App& cmd) {
    std::string list;
    for (const LlamaSpelling& s : kSpellings) {
        if (cmd.get_option_no_throw(std::string(s.tandem)) == nullptr) continue;
        list += fmt::format("{}{} ({})", list.empty() ? "" : ", ", s.llama, s.tandem);
    }
    return "llama.cpp spellings: " + list +
           ". The flags under \"llama.cpp flags\" are accepted as llama.cpp users type them, or refused with one "
           "line naming what Tandem does instead.";
}

}  // namespace tandem::tools
