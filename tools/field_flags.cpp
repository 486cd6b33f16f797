#include "tools/field_flags.h"

#include <array>
#include <utility>

namespace tandem::tools {

std::string flag_for_field(std::string_view field) {
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 14> kFlags{{
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
        {"model_path", "-m"},
    }};
    for (const auto& [name, flag] : kFlags) {
        if (name == field) return std::string(flag);
    }
    return std::string(field);
}

std::string in_flags(const FieldError& e) { return e.render(flag_for_field); }

}  // namespace tandem::tools
