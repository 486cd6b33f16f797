// A Jinja subset: what the chat templates stored in GGUF files
// (tokenizer.chat_template) use, rendered as Hugging Face transformers'
// apply_chat_template does: jinja2 with trim_blocks and lstrip_blocks, the
// loop controls ({% break %}, {% continue %}), the globals raise_exception,
// strftime_now, range, namespace and dict, and transformers' tojson
// (ensure_ascii off, keys in their order).
//
// Templates come from untrusted files: syntax errors and failures raise
// tandem::Error naming line and column; nesting, output size (16 MiB) and
// loop iterations are capped, so a hostile template fails cleanly instead
// of crashing or hanging.
//
// Not supported: extends/include/import, call blocks, filter blocks,
// recursive loops, *args/**kwargs, string formatting with '%', autoescape.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/chat/jinja_value.h"

namespace tandem::chat::jinja {

struct Program;

struct RenderOptions {
    // strftime_now(fmt) in templates; when empty, the current local time
    // formatted with std::strftime.
    std::function<std::string(const std::string& format)> strftime_now;
    size_t max_output_bytes = size_t{16} << 20;  // also caps any one string value
    size_t max_iterations = 1'000'000;           // loop iterations and range() items, per render
};

class Template {
public:
    // Throws tandem::Error "jinja syntax error at line L, column C: ...".
    static Template parse(std::string source);

    // The context's top-level keys become template variables. Throws
    // tandem::Error on a failure, with the message given to raise_exception.
    std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;
    std::string render(const nlohmann::json& context, const RenderOptions& options = {}) const;
    std::string render(const Dict& context, const RenderOptions& options = {}) const;

    const std::string& source() const { return *source_; }

private:
    std::shared_ptr<const std::string> source_;
    std::shared_ptr<const Program> program_;
};

}  // namespace tandem::chat::jinja
