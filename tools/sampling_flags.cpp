#include "tools/sampling_flags.h"

#include <charconv>
#include <chrono>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "runtime/grammar/json_schema.h"
#include "tools/text_input.h"

namespace tandem::tools {

std::optional<uint64_t> parse_seed(const std::string& text) {
    if (text == "-1") return std::nullopt;
    uint64_t v = 0;
    const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || p != text.data() + text.size()) {
        throw Error(fmt::format("--seed: expected a number (or -1: from the clock), found '{}'", text));
    }
    return v;
}

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f) {
    cmd.add_option("--temp", f.params.temperature, "temperature (0: greedy)")->capture_default_str();
    cmd.add_option("--top-k", f.params.top_k, "top-k (0: off)")->capture_default_str();
    cmd.add_option("--top-p", f.params.top_p, "top-p (1: off)")->capture_default_str();
    cmd.add_option("--min-p", f.params.min_p, "min-p (0: off)")->capture_default_str();
    cmd.add_option("--repeat-penalty", f.params.repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
    cmd.add_option("--repeat-last-n", f.params.repeat_last_n, "tokens the penalty looks back over")
        ->capture_default_str();
    cmd.add_option_function<std::string>(
           "-s,--seed", [&f](const std::string& v) { f.seed = parse_seed(v); },
           "random seed (default, or -1: from the clock, printed as seed: N on stderr)")
        ->type_name("N");
    cmd.add_option("--grammar", f.grammar, "GBNF grammar the output must match (llama.cpp's notation)")
        ->type_name("GBNF");
    cmd.add_option("--grammar-file", f.grammar_file, "file of a GBNF grammar the output must match")
        ->type_name("FILE");
    cmd.add_option("-j,--json-schema", f.json_schema,
                   "JSON Schema the output must match (as text; OpenAI's structured-output subset, see docs/tools.md)")
        ->type_name("SCHEMA");
}

std::shared_ptr<const SamplingGrammar> flag_grammar(const SamplingFlags& f, const Tokenizer& tokenizer) {
    const int given = !f.grammar.empty() + !f.grammar_file.empty() + !f.json_schema.empty();
    if (given == 0) return nullptr;
    if (given > 1) throw Error("give one of --grammar, --grammar-file and --json-schema, not several");
    std::shared_ptr<const grammar::Grammar> g;
    try {
        if (!f.json_schema.empty()) {
            const auto schema = nlohmann::ordered_json::parse(f.json_schema, nullptr, false);
            if (schema.is_discarded()) throw Error("--json-schema: expected JSON text (a schema), found text that is not JSON");
            g = grammar::compile_json_schema(schema);
        } else {
            g = grammar::compile_grammar(f.grammar.empty() ? read_text_input(f.grammar_file, "grammar file") : f.grammar);
        }
    } catch (const grammar::SchemaError& e) {
        throw Error(fmt::format("--json-schema: {}", e.what()));
    } catch (const grammar::GrammarError& e) {
        throw Error(fmt::format("{}: {}", f.json_schema.empty() ? (f.grammar.empty() ? "--grammar-file" : "--grammar") : "--json-schema",
                                e.what()));
    }
    return std::make_shared<const SamplingGrammar>(SamplingGrammar{std::move(g), grammar_tokens(tokenizer)});
}

SamplerParams resolved_sampling(const SamplingFlags& f) {
    SamplerParams p = f.params;
    p.seed = f.seed ? *f.seed : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    validate(p);
    return p;
}

}  // namespace tandem::tools
