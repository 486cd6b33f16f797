#include "tools/field_flags.h"

#include <array>
#include <utility>

#include <fmt/format.h>

namespace tandem::tools {

std::string flag_for_field(std::string_view field) {
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 21> kFlags{{
        {"n_slots", "--parallel"},
        {"n_ctx", "-c"},
        {"n_ubatch", "-ub"},
        {"n_threads", "-t"},
        {"draft_max", "--draft-max"},
        {"draft_min", "--draft-min"},
        {"p_min", "--draft-p-min"},
        {"spec_ngram", "--spec-ngram"},
        {"model_draft", "--model-draft (-md)"},
        {"draft", "--model-draft (-md)"},
        {"device", "--device"},
        {"vram", "--vram"},
        {"n_gpu_layers", "-ngl"},
        {"draft_ngl", "-ngld"},
        {"model_path", "-m"},
        {"temperature", "--temp"},
        {"top_k", "--top-k"},
        {"top_p", "--top-p"},
        {"min_p", "--min-p"},
        {"repeat_penalty", "--repeat-penalty"},
        {"repeat_last_n", "--repeat-last-n"},
    }};
    for (const auto& [name, flag] : kFlags) {
        if (name == field) return std::string(flag);
    }
    return std::string(field);
}

std::string in_flags(const FieldError& e) { return e.render(flag_for_field); }

std::string in_flags(std::string_view message) { return spell_fields(message, flag_for_field); }

void warn_on_stderr(const std::string& message) { fmt::print(stderr, "tandem: warning: {}\n", in_flags(message)); }

}  // namespace tandem::tools
