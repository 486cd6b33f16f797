#include "runtime/common/error.h"

#include <algorithm>

#include <fmt/format.h>

namespace tandem {
namespace {

bool field_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

}  // namespace

std::string spell_fields(std::string_view message, std::string (*spell)(std::string_view)) {
    std::string out;
    size_t i = 0;
    while (i < message.size()) {
        const size_t open = message.find('{', i);
        if (open == std::string_view::npos) break;
        size_t end = open + 1;
        while (end < message.size() && field_char(message[end])) ++end;
        out.append(message.substr(i, open - i));
        if (end < message.size() && message[end] == '}' && end > open + 1) {
            out += spell(message.substr(open + 1, end - open - 1));
            i = end + 1;
        } else {
            out += '{';
            i = open + 1;
        }
    }
    out.append(message.substr(std::min(i, message.size())));
    return out;
}

namespace {

std::string own_name(std::string_view field) { return std::string(field); }

}  // namespace

FieldError::FieldError(std::string field, std::string message)
    : Error(spell_fields(message, own_name)), field_(std::move(field)), message_(std::move(message)) {}

std::string FieldError::render(std::string (*spell)(std::string_view field)) const {
    return spell_fields(message_, spell);
}

void fail_check(const char* expr, const char* file, int line, const std::string& msg) {
    throw InternalError(fmt::format("internal error at {}:{}: check `{}` failed: {}", file, line, expr, msg));
}

}  // namespace tandem
