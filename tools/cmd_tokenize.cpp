// `tandem tokenize -m MODEL (-p TEXT | -f FILE)`: the token ids a model's
// tokenizer gives for a text, to compare against other runtimes and to
// check prompts. The first line of output is always the ids separated by
// spaces; --pieces adds one line per token with the text it stands for,
// --json prints one JSON object instead.
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/text_input.h"

namespace tandem::tools {
namespace {

struct TokenizeOptions {
    std::string model;
    std::string prompt;
    std::string file;
    bool no_bos = false;
    bool parse_special = false;
    bool pieces = false;
    bool json = false;
    // Set from the parsed options: -p "" is a valid (empty) prompt, so
    // "given" cannot be told from the string being empty.
    bool have_prompt = false;
    bool have_file = false;
};

// Length of the valid UTF-8 sequence at s[i], 0 when there is none.
size_t utf8_sequence_at(const std::string& s, size_t i) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
    if (b >= 0xF5 || len == 0 || i + len > s.size()) return 0;
    for (size_t k = 1; k < len; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
    return len;
}

// A piece shown between quotes on one line: control characters, quotes,
// backslashes and bytes that are not whole UTF-8 characters (a piece can
// be half a character) are escaped.
std::string escape_piece(const std::string& p) {
    std::string out;
    for (size_t i = 0; i < p.size();) {
        const auto c = static_cast<unsigned char>(p[i]);
        if (c >= 0x80) {
            if (const size_t len = utf8_sequence_at(p, i)) {
                out.append(p, i, len);
                i += len;
            } else {
                out += fmt::format("\\x{:02x}", c);
                ++i;
            }
            continue;
        }
        switch (c) {
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            case '\\': out += "\\\\"; break;
            case '\'': out += "\\'"; break;
            default:
                if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02x}", c);
                else out += static_cast<char>(c);
        }
        ++i;
    }
    return out;
}

void run_tokenize(const TokenizeOptions& o) {
    if (o.model.empty()) throw Error("tokenize: the model is missing: pass -m MODEL.gguf");
    if (o.have_prompt && o.have_file) throw Error("tokenize: give the text with -p or -f, not both");
    if (!o.have_prompt && !o.have_file) throw Error("tokenize: no text: pass -p TEXT or -f FILE");

    const gguf::File f = gguf::File::open(o.model);
    const Tokenizer tok = Tokenizer::from_gguf(f);
    const std::string text = o.have_file ? read_text_input(o.file, "text file") : o.prompt;
    const bool add_bos = !o.no_bos && tok.add_bos_by_default();
    const std::vector<int32_t> ids = tok.encode(text, add_bos, o.parse_special);

    if (o.json) {
        nlohmann::json j;
        j["ids"] = ids;
        j["n_tokens"] = ids.size();
        if (o.pieces) {
            auto& pieces = j["pieces"] = nlohmann::json::array();
            for (const int32_t id : ids) pieces.push_back(tok.token_to_piece(id, true));
        }
        // A piece may be part of a UTF-8 character; JSON cannot hold that,
        // so such bytes come out as U+FFFD.
        fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        return;
    }
    fmt::print("{}\n", fmt::join(ids, " "));
    if (o.pieces) {
        for (const int32_t id : ids) fmt::print("{:>7} '{}'\n", id, escape_piece(tok.token_to_piece(id, true)));
    }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
    auto opts = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
    cmd->add_option("-m,--model", opts->model, "GGUF file with a tokenizer (a model or a vocab-only file)");
    CLI::Option* prompt = cmd->add_option("-p,--prompt", opts->prompt, "Text to tokenize");
    CLI::Option* file = cmd->add_option("-f,--file", opts->file, "File whose bytes are the text to tokenize");
    cmd->add_flag("--no-bos", opts->no_bos, "Do not prepend BOS (default: as the model's metadata says)");
    cmd->add_flag("--parse-special", opts->parse_special, "Match control tokens such as <s> written in the text");
    cmd->add_flag("--pieces", opts->pieces, "Also print the text of each token");
    cmd->add_flag("--json", opts->json, "Print one JSON object: {\"ids\": [...], \"n_tokens\": N}");
    cmd->callback([opts, prompt, file] {
        opts->have_prompt = prompt->count() > 0;
        opts->have_file = file->count() > 0;
        run_tokenize(*opts);
    });
}

}  // namespace tandem::tools
