#include "runtime/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "runtime/grammar/gbnf_text.h"
#include "runtime/grammar/grammar.h"
#include "runtime/grammar/number_range.h"
#include "runtime/grammar/regex_gbnf.h"

namespace tandem::grammar {

using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kNumberKeys[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf"};

// The building blocks, each a GBNF rule added when first used. `space`
// bounds whitespace; numbers have at most 16 digits before and after the
// point and 2 in the exponent (below 1e116: "1e999" is past a double, and
// parsers such as nlohmann refuse it).
const std::map<std::string, std::string>& primitives() {
    static const std::map<std::string, std::string> rules = {
        {"space", R"(| " " | "\n" [ \t]{0,20})"},
        {"boolean", R"(("true" | "false") space)"},
        {"null", R"("null" space)"},
        {"integer", R"(("-"? ("0" | [1-9] [0-9]{0,15})) space)"},
        {"number", R"(("-"? ("0" | [1-9] [0-9]{0,15})) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? space)"},
        // \u escapes of surrogates only in pairs (a lone one is not a character).
        {"char", R"([^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | )"
                 R"([dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2})))"},
        {"string", R"("\"" char* "\"" space)"},
        {"value", R"(object | array | string | number | boolean | null)"},
        {"object", R"("{" space (string ":" space value ("," space string ":" space value)*)? "}" space)"},
        {"array", R"("[" space (value ("," space value)*)? "]" space)"},
        // Years 0001 to 9999 (Python's date has no year 0), the days each
        // month has, February 29 in leap years only.
        {"date", R"(date-year "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | )"
                 R"(("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])) | )"
                 R"(date-leap-year "-02-29")"},
        {"date-year", R"([1-9] [0-9]{3} | "0" [1-9] [0-9]{2} | "00" [1-9] [0-9] | "000" [1-9])"},
        // Divisible by 4 and not by 100, or by 400.
        {"date-leap-year", R"([0-9] [0-9] date-by-4 | date-by-4 "00")"},
        {"date-by-4", R"([02468] [48] | [13579] [26] | [2468] "0")"},
        {"time", R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))"},
        {"date-time", R"(date "T" time)"},
        {"hex", R"([0-9a-fA-F])"},
        {"uuid", R"(hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12})"},
        {"ipv4-octet", R"("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])"},
        {"ipv4", R"(ipv4-octet "." ipv4-octet "." ipv4-octet "." ipv4-octet)"},
        {"email", R"([a-zA-Z0-9._%+-]{1,64} "@" [a-zA-Z0-9-]{1,63} ("." [a-zA-Z0-9-]{1,63}){0,8} "." [a-zA-Z]{2,24})"},
        // RFC 3339's appendix A, each number 1 to 9 digits.
        {"duration-num", R"([0-9]{1,9})"},
        {"duration-second", R"(duration-num "S")"},
        {"duration-minute", R"(duration-num "M" duration-second?)"},
        {"duration-hour", R"(duration-num "H" duration-minute?)"},
        {"duration-time", R"("T" (duration-hour | duration-minute | duration-second))"},
        {"duration-day", R"(duration-num "D")"},
        {"duration-month", R"(duration-num "M" duration-day?)"},
        {"duration-year", R"(duration-num "Y" duration-month?)"},
        {"duration", R"("P" ((duration-day | duration-month | duration-year) duration-time? | duration-time | duration-num "W"))"},
        // RFC 1123 labels of at most 30 characters, at most 8 of them (247
        // characters, under the 253 allowed), the last starting with a
        // letter (a top-level domain is not all digits).
        {"hostname-label", R"([a-zA-Z0-9] ([a-zA-Z0-9-]{0,28} [a-zA-Z0-9])?)"},
        {"hostname", R"((hostname-label "."){0,7} [a-zA-Z] ([a-zA-Z0-9-]{0,28} [a-zA-Z0-9])?)"},
        // Eight groups, or "::" with at most six beside it (never seven:
        // not every checker takes "::" for a single group).
        {"ipv6-group", R"([0-9a-fA-F]{1,4})"},
        {"ipv6", R"(ipv6-group (":" ipv6-group){7} | "::" (ipv6-group (":" ipv6-group){0,5})? | )"
                 R"(ipv6-group "::" (ipv6-group (":" ipv6-group){0,4})? | )"
                 R"(ipv6-group ":" ipv6-group "::" (ipv6-group (":" ipv6-group){0,3})? | )"
                 R"(ipv6-group (":" ipv6-group){2} "::" (ipv6-group (":" ipv6-group){0,2})? | )"
                 R"(ipv6-group (":" ipv6-group){3} "::" (ipv6-group ":" ipv6-group | ipv6-group)? | )"
                 R"(ipv6-group (":" ipv6-group){4} "::" ipv6-group? | ipv6-group (":" ipv6-group){5} "::")"},
    };
    return rules;
}

// Which primitives each one uses.
const std::map<std::string, std::vector<std::string>>& primitive_uses() {
    static const std::map<std::string, std::vector<std::string>> uses = {
        {"boolean", {"space"}},
        {"null", {"space"}},
        {"integer", {"space"}},
        {"number", {"space"}},
        {"string", {"char", "space"}},
        {"value", {"object", "array", "string", "number", "boolean", "null"}},
        {"object", {"space", "string", "value"}},
        {"array", {"space", "value"}},
        {"date", {"date-year", "date-leap-year"}},
        {"date-leap-year", {"date-by-4"}},
        {"date-time", {"date", "time"}},
        {"uuid", {"hex"}},
        {"ipv4", {"ipv4-octet"}},
        {"duration-second", {"duration-num"}},
        {"duration-minute", {"duration-num", "duration-second"}},
        {"duration-hour", {"duration-num", "duration-minute"}},
        {"duration-time", {"duration-hour", "duration-minute", "duration-second"}},
        {"duration-day", {"duration-num"}},
        {"duration-month", {"duration-num", "duration-day"}},
        {"duration-year", {"duration-num", "duration-month"}},
        {"duration", {"duration-num", "duration-day", "duration-month", "duration-year", "duration-time"}},
        {"hostname", {"hostname-label"}},
        {"ipv6", {"ipv6-group"}},
    };
    return uses;
}

const std::set<std::string>& annotations() {
    static const std::set<std::string> a = {"title",    "description", "$schema",  "$id",      "$comment",
                                            "default",  "examples",    "deprecated", "readOnly", "writeOnly",
                                            "strict",   "$defs",       "definitions"};
    return a;
}

const std::set<std::string>& handled() {
    static const std::set<std::string> h = {"type",     "properties", "required",  "additionalProperties",
                                            "items",    "minItems",   "maxItems",  "enum",
                                            "const",    "anyOf",      "oneOf",     "$ref",
                                            "format",   "minLength",  "maxLength", "pattern",
                                            "minimum",  "maximum",    "exclusiveMinimum", "exclusiveMaximum",
                                            "multipleOf"};
    return h;
}

std::string join_path(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

// A primitive's body with the primitives it names renamed by `rename`
// (literals, classes and counts skipped).
std::string renamed(const std::string& body, const std::function<std::string(const std::string&)>& rename) {
    std::string out;
    for (size_t i = 0; i < body.size();) {
        const char c = body[i];
        if (c == '"' || c == '[' || c == '{') {
            const char close = c == '"' ? '"' : c == '[' ? ']' : '}';
            size_t j = i + 1;
            while (j < body.size() && body[j] != close) j += body[j] == '\\' ? 2 : 1;
            out.append(body, i, j + 1 - i);
            i = j + 1;
        } else if (std::isalpha(static_cast<unsigned char>(c))) {
            size_t j = i;
            while (j < body.size() && (std::isalnum(static_cast<unsigned char>(body[j])) || body[j] == '-')) ++j;
            out += rename(body.substr(i, j - i));
            i = j;
        } else {
            out += c;
            ++i;
        }
    }
    return out;
}

class Converter {
public:
    // `top`: the name of the schema's rule; the others are prefixed with
    // "top-" unless it is "root".
    Converter(const ojson& root, std::string top) : root_(root), top_(std::move(top)) {}

    std::string run() {
        names_.insert(top_);
        const std::string body = visit(root_, "root", "");
        std::string out = top_ + " ::= " + body + "\n";
        for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
        return out;
    }

private:
    [[noreturn]] static void refuse(const std::string& path, const std::string& why) {
        throw SchemaError(path, fmt::format("the schema{}: {}", path.empty() ? "" : " at '" + path + "'", why));
    }

    std::string full_name(const std::string& local) const { return top_ == "root" ? local : top_ + "-" + local; }

    std::string use(const std::string& primitive) {
        const std::string name = full_name(primitive);
        if (used_.insert(primitive).second) {
            const auto u = primitive_uses().find(primitive);
            if (u != primitive_uses().end()) {
                for (const auto& p : u->second) use(p);
            }
            const std::string& body = primitives().at(primitive);
            rules_.emplace_back(name, top_ == "root" ? body : renamed(body, [this](const std::string& n) { return full_name(n); }));
            names_.insert(name);
        }
        return name;
    }

    // A rule name from `hint`, unique and in GBNF's name characters.
    std::string fresh(const std::string& hint) {
        std::string base;
        for (const char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
        if (base.empty()) base = "r";
        std::string local = base;
        for (int i = 1; names_.count(full_name(local)) || primitives().count(local); ++i) local = fmt::format("{}-{}", base, i);
        names_.insert(full_name(local));
        return full_name(local);
    }

    std::string add_rule(const std::string& hint, const std::string& body) {
        const std::string name = fresh(hint);
        rules_.emplace_back(name, body);
        return name;
    }

    // An expression matching `schema`'s values.
    std::string visit(const ojson& schema, const std::string& hint, const std::string& path) {
        if (schema.is_boolean()) {
            if (!schema.get<bool>()) refuse(path, "false (no value is valid) cannot be generated");
            return use("value");
        }
        if (!schema.is_object()) refuse(path, "expected a schema object");
        for (const auto& [key, unused] : schema.items()) {
            if (!annotations().count(key) && !handled().count(key)) {
                refuse(path, fmt::format("keyword '{}' is not supported", key));
            }
        }
        if (const auto ref = schema.find("$ref"); ref != schema.end()) return visit_ref(schema, *ref, path);
        if (const auto c = schema.find("const"); c != schema.end()) return gbnf_literal(c->dump()) + " " + use("space");
        if (const auto e = schema.find("enum"); e != schema.end()) return visit_enum(*e, path);
        for (const char* key : {"anyOf", "oneOf"}) {
            if (const auto alts = schema.find(key); alts != schema.end()) return visit_alternatives(*alts, hint, join_path(path, key));
        }
        const auto type = schema.find("type");
        if (type == schema.end()) {
            if (schema.contains("properties") || schema.contains("additionalProperties") || schema.contains("required")) {
                return visit_object(schema, hint, path);
            }
            if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems")) {
                return visit_array(schema, hint, path);
            }
            if (schema.contains("format") || schema.contains("minLength") || schema.contains("maxLength") ||
                schema.contains("pattern")) {
                return visit_string(schema, path);
            }
            // Bounds without a type: numbers within them are valid.
            for (const char* key : kNumberKeys) {
                if (schema.contains(key)) return visit_number(schema, false, path);
            }
            return use("value");
        }
        if (type->is_array()) {
            if (type->empty()) refuse(join_path(path, "type"), "expected at least one type");
            std::vector<std::string> alts;
            for (const auto& t : *type) alts.push_back(visit_type(schema, t, hint, path));
            return "(" + join(alts) + ")";
        }
        return visit_type(schema, *type, hint, path);
    }

    static std::string join(const std::vector<std::string>& alts) {
        std::string out;
        for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
        return out;
    }

    std::string visit_type(const ojson& schema, const ojson& t, const std::string& hint, const std::string& path) {
        if (!t.is_string()) refuse(join_path(path, "type"), "expected a type name or a list of them");
        const std::string name = t.get<std::string>();
        if (name == "object") return visit_object(schema, hint, path);
        if (name == "array") return visit_array(schema, hint, path);
        if (name == "string") return visit_string(schema, path);
        if (name == "integer" || name == "number") return visit_number(schema, name == "integer", path);
        if (name == "boolean" || name == "null") return use(name);
        refuse(join_path(path, "type"), fmt::format("unknown type '{}'", name));
    }

    std::string visit_ref(const ojson& schema, const ojson& ref, const std::string& path) {
        for (const auto& [key, unused] : schema.items()) {
            if (key != "$ref" && !annotations().count(key)) refuse(path, fmt::format("keyword '{}' beside $ref is not supported", key));
        }
        if (!ref.is_string()) refuse(join_path(path, "$ref"), "expected a string");
        const std::string target = ref.get<std::string>();
        if (const auto it = ref_rules_.find(target); it != ref_rules_.end()) return it->second;
        const ojson* node = resolve(target, path);
        // The name first, so a schema that refers to itself meets it.
        const std::string name = fresh(target == "#" ? "root-ref" : target.substr(target.rfind('/') + 1));
        ref_rules_[target] = name;
        const size_t at = rules_.size();
        rules_.emplace_back(name, "");
        const std::string body = visit(*node, name, target);
        rules_[at].second = body;
        return name;
    }

    const ojson* resolve(const std::string& target, const std::string& path) const {
        if (target == "#") return &root_;
        if (target.rfind("#/", 0) != 0) refuse(join_path(path, "$ref"), fmt::format("only local references (#/...) are supported, found '{}'", target));
        const ojson* node = &root_;
        size_t start = 2;
        while (start <= target.size()) {
            size_t end = target.find('/', start);
            if (end == std::string::npos) end = target.size();
            std::string part = target.substr(start, end - start);
            // JSON pointer escapes: ~1 is '/', ~0 is '~'.
            for (size_t i; (i = part.find("~1")) != std::string::npos;) part.replace(i, 2, "/");
            for (size_t i; (i = part.find("~0")) != std::string::npos;) part.replace(i, 2, "~");
            if (!node->is_object() || !node->contains(part)) {
                refuse(join_path(path, "$ref"), fmt::format("'{}' names nothing in the schema", target));
            }
            node = &(*node)[part];
            start = end + 1;
        }
        return node;
    }

    std::string visit_enum(const ojson& values, const std::string& path) {
        if (!values.is_array() || values.empty()) refuse(join_path(path, "enum"), "expected a non-empty array");
        std::vector<std::string> alts;
        for (const auto& v : values) alts.push_back(gbnf_literal(v.dump()));
        return "(" + join(alts) + ") " + use("space");
    }

    std::string visit_alternatives(const ojson& alts, const std::string& hint, const std::string& path) {
        if (!alts.is_array() || alts.empty()) refuse(path, "expected a non-empty array of schemas");
        std::vector<std::string> out;
        for (size_t i = 0; i < alts.size(); ++i) {
            out.push_back(visit(alts[i], fmt::format("{}-{}", hint, i), fmt::format("{}[{}]", path, i)));
        }
        return "(" + join(out) + ")";
    }

    int64_t count(const ojson& schema, const char* key, const std::string& path, int64_t fallback) const {
        const auto it = schema.find(key);
        if (it == schema.end()) return fallback;
        if (!it->is_number_integer() && !it->is_number_unsigned()) refuse(join_path(path, key), "expected an integer");
        const int64_t v = it->get<int64_t>();
        if (v < 0 || v > kMaxRepeat) refuse(join_path(path, key), fmt::format("expected 0..{}, found {}", kMaxRepeat, v));
        return v;
    }

    std::string visit_string(const ojson& schema, const std::string& path) {
        const int64_t lo = count(schema, "minLength", path, 0);
        const int64_t hi = count(schema, "maxLength", path, -1);
        if (hi >= 0 && hi < lo) refuse(join_path(path, "maxLength"), "is below minLength");
        const auto f = schema.find("format");
        const auto p = schema.find("pattern");
        if (f != schema.end() || p != schema.end()) {
            const int given = (f != schema.end()) + (p != schema.end()) + schema.contains("minLength") + schema.contains("maxLength");
            if (given > 1) refuse(path, "format, pattern, minLength and maxLength together are not supported (one of them at a time)");
        }
        if (f != schema.end()) {
            static const std::set<std::string> formats = {"date", "time",  "date-time", "duration", "uuid",
                                                          "ipv4", "ipv6",  "email",     "hostname"};
            if (!f->is_string() || !formats.count(f->get<std::string>())) {
                refuse(join_path(path, "format"), fmt::format("format {} is not supported (supported: date, time, "
                                                              "date-time, duration, uuid, ipv4, ipv6, email, hostname)",
                                                              f->dump()));
            }
            return "\"\\\"\" " + use(f->get<std::string>()) + " \"\\\"\" " + use("space");
        }
        if (p != schema.end()) return visit_pattern(*p, join_path(path, "pattern"));
        if (lo == 0 && hi < 0) return use("string");
        if (hi == 0) return "\"\\\"\\\"\" " + use("space");
        return "\"\\\"\" " + gbnf_times(use("char"), lo, hi) + " \"\\\"\" " + use("space");
    }

    std::string visit_pattern(const ojson& pattern, const std::string& path) {
        if (!pattern.is_string()) refuse(path, "expected a regular expression (a string)");
        std::string body;
        try {
            body = pattern_to_gbnf(pattern.get<std::string>(), use("char"), [this](const std::string& rule) {
                // The same class in several patterns is one rule.
                const auto [it, added] = pattern_rules_.emplace(rule, "");
                if (added) it->second = add_rule("pattern-chars", rule);
                return it->second;
            });
        } catch (const PatternError& e) {
            refuse(path, e.what());
        }
        return "\"\\\"\" " + body + " \"\\\"\" " + use("space");
    }

    // A bound's value: its floor, and whether it is whole.
    struct BoundValue {
        int64_t floor = 0;
        bool whole = true;
    };

    static BoundValue bound_value(const ojson& v, const std::string& path) {
        if (v.is_boolean()) refuse(path, "expected a number (draft 4's true/false form is not supported)");
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMaxBound)) {
            refuse(path, fmt::format("bounds beyond +-1e18 are not supported, found {}", v.dump()));
        }
        if (v.is_number_integer()) {
            const int64_t i = v.get<int64_t>();
            if (i > kMaxBound || i < -kMaxBound) refuse(path, fmt::format("bounds beyond +-1e18 are not supported, found {}", v.dump()));
            return {i, true};
        }
        if (!v.is_number()) refuse(path, fmt::format("expected a number, found {}", v.dump()));
        const double d = v.get<double>();
        if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(kMaxBound)) {
            refuse(path, fmt::format("bounds beyond +-1e18 are not supported, found {}", v.dump()));
        }
        const double fl = std::floor(d);
        return {static_cast<int64_t>(fl), fl == d};
    }

    // integer or number with minimum, maximum, exclusiveMinimum,
    // exclusiveMaximum and multipleOf 1 (number_range.h says how).
    std::string visit_number(const ojson& schema, bool integer, const std::string& path) {
        if (const auto m = schema.find("multipleOf"); m != schema.end()) {
            if (!m->is_number() || m->get<double>() != 1.0) {
                refuse(join_path(path, "multipleOf"), fmt::format("only multipleOf 1 (whole numbers) is supported, found {}", m->dump()));
            }
            integer = true;  // a number that is a multiple of 1: an integer
        }
        std::optional<NumberBound> lo, hi;
        const auto tighter = [](std::optional<NumberBound>& cur, NumberBound b, bool lower) {
            const bool better = !cur || (lower ? b.value > cur->value : b.value < cur->value) ||
                                (b.value == cur->value && b.exclusive);
            if (better) cur = b;
        };
        for (const char* key : kNumberKeys) {
            const auto it = schema.find(key);
            const std::string k = key;
            if (it == schema.end() || k == "multipleOf") continue;
            const BoundValue v = bound_value(*it, join_path(path, k));
            const bool lower = k == "minimum" || k == "exclusiveMinimum";
            const bool exclusive = k.rfind("exclusive", 0) == 0;
            if (integer) {
                // The integers within: fractional and exclusive bounds rounded inward.
                const int64_t ceil = v.whole ? v.floor : v.floor + 1;
                const int64_t i = lower ? (exclusive ? v.floor + 1 : ceil) : (exclusive ? ceil - 1 : v.floor);
                tighter(lo_or_hi(lo, hi, lower), NumberBound{i, false}, lower);
            } else {
                if (!v.whole) {
                    refuse(join_path(path, k), fmt::format("a number's bounds must be whole numbers, found {} (an integer's "
                                                           "may be any number)",
                                                           it->dump()));
                }
                tighter(lo_or_hi(lo, hi, lower), NumberBound{v.floor, exclusive}, lower);
            }
        }
        if (!lo && !hi) return use(integer ? "integer" : "number");
        std::string range;
        if (integer) {
            range = integer_range_gbnf(lo ? std::optional(lo->value) : std::nullopt, hi ? std::optional(hi->value) : std::nullopt);
        } else {
            range = number_range_gbnf(lo, hi);
        }
        if (range.empty()) refuse(path, fmt::format("no {} lies within the bounds", integer ? "integer" : "number"));
        return range + " " + use("space");
    }

    static std::optional<NumberBound>& lo_or_hi(std::optional<NumberBound>& lo, std::optional<NumberBound>& hi, bool lower) {
        return lower ? lo : hi;
    }

    std::string visit_array(const ojson& schema, const std::string& hint, const std::string& path) {
        const auto items = schema.find("items");
        const std::string item = items == schema.end() ? use("value")
                                                       : add_rule(hint + "-item", visit(*items, hint + "-item", join_path(path, "items")));
        const int64_t lo = count(schema, "minItems", path, 0);
        const int64_t hi = count(schema, "maxItems", path, -1);
        if (hi >= 0 && hi < lo) refuse(join_path(path, "maxItems"), "is below minItems");
        const std::string sp = use("space");
        if (hi == 0) return "\"[\" " + sp + " \"]\" " + sp;
        const std::string more = gbnf_times("(\",\" " + sp + " " + item + ")", std::max<int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1);
        const std::string list = item + " " + more;
        return add_rule(hint, "\"[\" " + sp + " " + (lo == 0 ? "(" + list + ")?" : list) + " \"]\" " + sp);
    }

    std::string visit_object(const ojson& schema, const std::string& hint, const std::string& path) {
        std::vector<std::pair<std::string, const ojson*>> props;
        static const ojson any = ojson::object();
        if (const auto p = schema.find("properties"); p != schema.end()) {
            if (!p->is_object()) refuse(join_path(path, "properties"), "expected an object of schemas");
            for (const auto& [k, v] : p->items()) props.emplace_back(k, &v);
        }
        std::set<std::string> required;
        if (const auto r = schema.find("required"); r != schema.end()) {
            if (!r->is_array()) refuse(join_path(path, "required"), "expected an array of names");
            for (const auto& n : *r) {
                if (!n.is_string()) refuse(join_path(path, "required"), "expected an array of names");
                required.insert(n.get<std::string>());
                const bool known = std::any_of(props.begin(), props.end(), [&](const auto& p) { return p.first == n; });
                if (!known) props.emplace_back(n.get<std::string>(), &any);
            }
        }
        std::string extra;  // an additional key-value pair, when allowed
        if (const auto a = schema.find("additionalProperties"); a != schema.end() && !(a->is_boolean() && !a->get<bool>())) {
            const std::string value = a->is_boolean() ? use("value") : visit(*a, hint + "-additional", join_path(path, "additionalProperties"));
            extra = add_rule(hint + "-additional-kv", use("string") + " \":\" " + use("space") + " " + value);
        }
        const std::string sp = use("space");
        std::vector<std::string> req_kv, opt_kv;
        for (const auto& [name, sub] : props) {
            const std::string value = visit(*sub, hint + "-" + name, join_path(path, "properties." + name));
            const std::string kv = add_rule(hint + "-" + name + "-kv",
                                            gbnf_literal(ojson(name).dump()) + " " + sp + " \":\" " + sp + " " + value);
            (required.count(name) ? req_kv : opt_kv).push_back(kv);
        }
        const std::string sep = "\",\" " + sp + " ";
        const std::string extra_tail = extra.empty() ? "" : " (" + sep + extra + ")*";
        // The optional pairs, each present or not, in order, after
        // something: ("," kv_i)? for each, then the additional ones.
        const auto optional_tail = [&](size_t from) {
            std::string s;
            for (size_t i = from; i < opt_kv.size(); ++i) s += " (" + sep + opt_kv[i] + ")?";
            return s + extra_tail;
        };
        std::string body;
        if (!req_kv.empty()) {
            body = req_kv[0];
            for (size_t i = 1; i < req_kv.size(); ++i) body += " " + sep + req_kv[i];
            body += optional_tail(0);
        } else {
            // Nothing required: empty, or starting at one of the optional
            // pairs (or an additional one).
            std::vector<std::string> starts;
            for (size_t i = 0; i < opt_kv.size(); ++i) starts.push_back(opt_kv[i] + optional_tail(i + 1));
            if (!extra.empty()) starts.push_back(extra + extra_tail);
            if (!starts.empty()) body = "(" + join(starts) + ")?";
        }
        return add_rule(hint, "\"{\" " + sp + " " + body + " \"}\" " + sp);
    }

    const ojson& root_;
    std::vector<std::pair<std::string, std::string>> rules_;
    std::set<std::string> names_;
    std::set<std::string> used_;
    std::map<std::string, std::string> ref_rules_;
    std::map<std::string, std::string> pattern_rules_;
    std::string top_;
};

}  // namespace

std::string json_schema_to_gbnf(const ojson& schema) { return Converter(schema, "root").run(); }

std::string json_schema_rules(const ojson& schema, const std::string& rule) { return Converter(schema, rule).run(); }

std::shared_ptr<const Grammar> compile_json_schema(const ojson& schema) {
    return compile_grammar(json_schema_to_gbnf(schema));
}

std::string json_object_gbnf() { return json_schema_to_gbnf(ojson{{"type", "object"}, {"additionalProperties", true}}); }

}  // namespace tandem::grammar
