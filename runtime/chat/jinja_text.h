// Python str operations on UTF-8 text, shared by the filters and the
// string methods of the Jinja subset. Case mapping is ASCII only.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::chat::jinja::text {

enum class Side { Both, Left, Right };
// str.strip([chars]): whitespace when chars is nullopt.
std::string strip(std::string_view s, const std::optional<std::string>& chars, Side side);
// str.split([sep[, maxsplit]]): runs of whitespace when sep is nullopt.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.replace(old, new[, count]); count < 0 means all.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
std::string upper(std::string_view s);
std::string lower(std::string_view s);
// str.capitalize(), str.title() (Python's), and jinja2's title filter.
std::string capitalize(std::string_view s);
std::string py_title(std::string_view s);
std::string jinja_title(std::string_view s);
// HTML escaping as markupsafe does it.
std::string html_escape(std::string_view s);

}  // namespace tandem::chat::jinja::text
