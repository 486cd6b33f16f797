// The filters (`x | name(args)`) and tests (`x is name(args)`) of the
// Jinja subset: name -> function tables with jinja2's semantics.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "runtime/chat/jinja_eval.h"
#include "runtime/chat/jinja_text.h"

namespace tandem::chat::jinja {
namespace {

size_t length_of(Interpreter& in, const Value& v) {
    switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return utf8_chars(v.as_string()).size();
    case Value::Kind::List: return v.as_list().size();
    case Value::Kind::Dict: return v.as_dict().items.size();
    default: in.fail("object of type '" + v.type_name() + "' has no len()");
    }
}

// jinja2 attribute paths: "a.b" looks up a then b; digits index lists.
Value attribute_path(Interpreter& in, const Value& v, const std::string& path) {
    Value cur = v;
    size_t pos = 0;
    while (true) {
        const size_t dot = path.find('.', pos);
        const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        cur = digits && part.size() < 18 ? in.get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))) : in.get_attr(cur, part);
        if (dot == std::string::npos) return cur;
        pos = dot + 1;
    }
}

// Positional arguments from `from` on, for passing a test or filter on.
Args rest_args(const Args& a, size_t from) {
    Args r;
    for (size_t i = from; i < a.pos.size(); ++i) r.pos.push_back(a.pos[i]);
    r.kw = a.kw;
    return r;
}

// select/reject/selectattr/rejectattr
Value select_impl(Interpreter& in, const Value& v, const Args& a, bool by_attr, bool keep_when) {
    std::string attr;
    size_t next = 0;
    if (by_attr) {
        const auto name = string_arg(in, a, 0, "attribute", "selectattr");
        if (!name) in.fail("selectattr/rejectattr need an attribute name");
        attr = *name;
        next = 1;
    }
    const auto test = string_arg(in, a, next, "test", "select");
    Args test_args = rest_args(a, next + 1);
    test_args.kw.clear();
    List out;
    for (const auto& item : in.iterate(v)) {
        const Value x = by_attr ? attribute_path(in, item, attr) : item;
        const bool ok = test ? in.apply_test(*test, x, test_args) : x.truthy();
        if (ok == keep_when) out.push_back(item);
    }
    return Value(std::move(out));
}

Value map_filter(Interpreter& in, const Value& v, const Args& a) {
    List out;
    if (const auto attr = string_arg(in, a, a.pos.empty() ? 0 : 99, "attribute", "map")) {
        const Value* def = a.get(99, "default");
        for (const auto& item : in.iterate(v)) {
            Value x = attribute_path(in, item, *attr);
            out.push_back(x.is_undefined() && def ? *def : x);
        }
        return Value(std::move(out));
    }
    const auto filter = string_arg(in, a, 0, "filter", "map");
    if (!filter) in.fail("map() needs a filter name or attribute=");
    const Args fargs = rest_args(a, 1);
    for (const auto& item : in.iterate(v)) out.push_back(in.apply_filter(*filter, item, fargs));
    return Value(std::move(out));
}

Value join_filter(Interpreter& in, const Value& v, const Args& a) {
    const std::string sep = string_arg(in, a, 0, "d", "join").value_or("");
    const auto attr = string_arg(in, a, 1, "attribute", "join");
    std::string out;
    bool first = true;
    for (const auto& item : in.iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(attr ? attribute_path(in, item, *attr) : item);
        in.check_size(out.size());
    }
    return Value(std::move(out));
}

Value default_filter(Interpreter&, const Value& v, const Args& a) {
    const Value* def = a.get(0, "default_value");
    const bool boolean = bool_arg(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.truthy())) return def ? *def : Value("");
    return v;
}

Value tojson_filter(Interpreter& in, const Value& v, const Args& a) {
    for (const auto& [k, x] : a.kw)
        if (k != "indent" && !(k == "ensure_ascii" && !x.truthy()) && !(k == "sort_keys" && !x.truthy()))
            in.fail("tojson(): argument '" + k + "' is not supported");
    const auto indent = int_arg(in, a, 0, "indent", "tojson");
    if (indent && (*indent < 0 || *indent > 64)) in.fail("tojson(): indent must be between 0 and 64");
    std::string s = to_json(v, indent ? static_cast<int>(*indent) : -1);
    in.check_size(s.size());
    return Value(std::move(s));
}

// Python int(str, base) on the whole (whitespace-trimmed) text, or nullopt.
std::optional<int64_t> parse_int(std::string_view s, int base) {
    const std::string t = text::strip(s, std::nullopt, text::Side::Both);
    std::string digits;
    for (char c : t)
        if (c != '_') digits += c;
    if (digits.empty()) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(digits.c_str(), &end, base);
    if (errno != 0 || end != digits.c_str() + digits.size()) return std::nullopt;
    return v;
}

std::optional<double> parse_float(std::string_view s) {
    const std::string t = text::strip(s, std::nullopt, text::Side::Both);
    if (t.empty()) return std::nullopt;
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size()) return std::nullopt;
    return d;
}

Value int_filter(Interpreter& in, const Value& v, const Args& a) {
    const Value def = a.get(0, "default") ? *a.get(0, "default") : Value(0);
    const int base = static_cast<int>(int_arg(in, a, 1, "base", "int").value_or(10));
    if (v.is_int() || v.is_bool()) return Value(v.as_int());
    if (v.is_float()) {
        const double d = std::trunc(v.as_double());
        if (!std::isfinite(d) || std::abs(d) > 9.2e18) return def;
        return Value(static_cast<int64_t>(d));
    }
    if (v.is_string()) {
        if (const auto i = parse_int(v.as_string(), base)) return Value(*i);
        if (const auto d = parse_float(v.as_string()); d && std::isfinite(*d) && std::abs(*d) < 9.2e18)
            return Value(static_cast<int64_t>(std::trunc(*d)));
    }
    return def;
}

Value float_filter(Interpreter&, const Value& v, const Args& a) {
    const Value def = a.get(0, "default") ? *a.get(0, "default") : Value(0.0);
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string())
        if (const auto d = parse_float(v.as_string())) return Value(*d);
    return def;
}

Value items_filter(Interpreter& in, const Value& v, const Args&) {
    if (v.is_undefined()) return Value(List{});
    if (!v.is_dict()) in.fail("items(): can only get items from a mapping, found '" + v.type_name() + "'");
    List out;
    for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::tuple(List{Value(k), x}));
    return Value(std::move(out));
}

Value round_filter(Interpreter& in, const Value& v, const Args& a) {
    const int64_t precision = int_arg(in, a, 0, "precision", "round").value_or(0);
    const std::string method = string_arg(in, a, 1, "method", "round").value_or("common");
    if (!v.is_number()) in.fail("round(): expected a number, found '" + v.type_name() + "'");
    if (precision < -20 || precision > 20) in.fail("round(): precision must be between -20 and 20");
    if (method == "common" && !v.is_float() && precision >= 0) return Value(v.as_int());
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_double() * scale;
    double r = 0;
    if (method == "common") r = std::nearbyint(x);  // round half to even, as Python's round()
    else if (method == "ceil") r = std::ceil(x);
    else if (method == "floor") r = std::floor(x);
    else in.fail("round(): method must be 'common', 'ceil' or 'floor'");
    return Value(r / scale);
}

Value sort_values(Interpreter& in, List items, bool reverse, bool case_sensitive, const std::optional<std::string>& attr) {
    const auto key = [&](const Value& x) {
        Value k = attr ? attribute_path(in, x, *attr) : x;
        if (!case_sensitive && k.is_string()) return Value(text::lower(k.as_string()));
        return k;
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
    });
    return Value(std::move(items));
}

Value minmax(Interpreter& in, const Value& v, const Args& a, bool want_max) {
    const bool cs = bool_arg(a, 0, "case_sensitive", false);
    const auto attr = string_arg(in, a, 1, "attribute", want_max ? "max" : "min");
    const Value sorted = sort_values(in, in.iterate(v), want_max, cs, attr);
    if (sorted.as_list().empty()) return Value::undefined("No aggregated item, sequence was empty.");
    return sorted.as_list().front();
}

Value indent_filter(Interpreter& in, const Value& v, const Args& a) {
    const Value* w = a.get(0, "width");
    const std::string pad = w && w->is_string() ? w->as_string() : std::string(static_cast<size_t>(std::clamp<int64_t>(w ? w->as_int() : 4, 0, 256)), ' ');
    const bool first = bool_arg(a, 1, "first", false);
    const bool blank = bool_arg(a, 2, "blank", false);
    const auto lines = text::split(to_str(v), std::string("\n"), -1);
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i) out += '\n';
        if ((i > 0 || first) && (blank || !lines[i].empty())) out += pad;
        out += lines[i];
        in.check_size(out.size());
    }
    return Value(std::move(out));
}

struct FilterEntry {
    std::string_view name;
    FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"trim", [](Interpreter& in, const Value& v, const Args& a) { return Value(text::strip(to_str(v), string_arg(in, a, 0, "chars", "trim"), text::Side::Both)); }},
    {"upper", [](Interpreter&, const Value& v, const Args&) { return Value(text::upper(to_str(v))); }},
    {"lower", [](Interpreter&, const Value& v, const Args&) { return Value(text::lower(to_str(v))); }},
    {"capitalize", [](Interpreter&, const Value& v, const Args&) { return Value(text::capitalize(to_str(v))); }},
    {"title", [](Interpreter&, const Value& v, const Args&) { return Value(text::jinja_title(to_str(v))); }},
    {"length", [](Interpreter& in, const Value& v, const Args&) { return Value(static_cast<int64_t>(length_of(in, v))); }},
    {"count", [](Interpreter& in, const Value& v, const Args&) { return Value(static_cast<int64_t>(length_of(in, v))); }},
    {"first", [](Interpreter& in, const Value& v, const Args&) {
         const List l = in.iterate(v);
         return l.empty() ? Value::undefined("No first item, sequence was empty.") : l.front();
     }},
    {"last", [](Interpreter& in, const Value& v, const Args&) {
         const List l = in.iterate(v);
         return l.empty() ? Value::undefined("No last item, sequence was empty.") : l.back();
     }},
    {"join", join_filter},
    {"default", default_filter},
    {"d", default_filter},
    {"tojson", tojson_filter},
    {"string", [](Interpreter&, const Value& v, const Args&) { return Value(to_str(v)); }},
    {"int", int_filter},
    {"float", float_filter},
    {"list", [](Interpreter& in, const Value& v, const Args&) { return Value(in.iterate(v)); }},
    {"items", items_filter},
    {"replace", [](Interpreter& in, const Value& v, const Args& a) {
         const auto from = string_arg(in, a, 0, "old", "replace");
         const auto to = string_arg(in, a, 1, "new", "replace");
         if (!from || !to) in.fail("replace() needs the old and the new text");
         std::string r = text::replace(to_str(v), *from, *to, int_arg(in, a, 2, "count", "replace").value_or(-1));
         in.check_size(r.size());
         return Value(std::move(r));
     }},
    {"select", [](Interpreter& in, const Value& v, const Args& a) { return select_impl(in, v, a, false, true); }},
    {"reject", [](Interpreter& in, const Value& v, const Args& a) { return select_impl(in, v, a, false, false); }},
    {"selectattr", [](Interpreter& in, const Value& v, const Args& a) { return select_impl(in, v, a, true, true); }},
    {"rejectattr", [](Interpreter& in, const Value& v, const Args& a) { return select_impl(in, v, a, true, false); }},
    {"map", map_filter},
    {"safe", [](Interpreter&, const Value& v, const Args&) { return v; }},
    {"escape", [](Interpreter&, const Value& v, const Args&) { return Value(text::html_escape(to_str(v))); }},
    {"e", [](Interpreter&, const Value& v, const Args&) { return Value(text::html_escape(to_str(v))); }},
    {"round", round_filter},
    {"abs", [](Interpreter& in, const Value& v, const Args&) {
         if (!v.is_number()) in.fail("bad operand type for abs(): '" + v.type_name() + "'");
         if (v.is_float()) return Value(std::abs(v.as_double()));
         if (v.as_int() == INT64_MIN) in.fail("integer overflow (Tandem's integers are 64-bit)");
         return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
     }},
    {"reverse", [](Interpreter& in, const Value& v, const Args&) {
         if (v.is_string()) {
             std::string r;
             const auto cs = utf8_chars(v.as_string());
             for (auto it = cs.rbegin(); it != cs.rend(); ++it) r += *it;
             return Value(std::move(r));
         }
         List l = in.iterate(v);
         std::reverse(l.begin(), l.end());
         return Value(std::move(l));
     }},
    {"sort", [](Interpreter& in, const Value& v, const Args& a) {
         return sort_values(in, in.iterate(v), bool_arg(a, 0, "reverse", false), bool_arg(a, 1, "case_sensitive", false),
                            string_arg(in, a, 2, "attribute", "sort"));
     }},
    {"dictsort", [](Interpreter& in, const Value& v, const Args& a) {
         const Value pairs = items_filter(in, v, Args{});
         return sort_values(in, pairs.as_list(), bool_arg(a, 2, "reverse", false), bool_arg(a, 0, "case_sensitive", false), std::string("0"));
     }},
    {"unique", [](Interpreter& in, const Value& v, const Args&) {
         List out;
         for (const auto& x : in.iterate(v)) {
             const Value key = x.is_string() ? Value(text::lower(x.as_string())) : x;
             bool seen = false;
             for (const auto& y : out) seen = seen || equals(y.is_string() ? Value(text::lower(y.as_string())) : y, key);
             if (!seen) out.push_back(x);
         }
         return Value(std::move(out));
     }},
    {"sum", [](Interpreter& in, const Value& v, const Args& a) {
         const auto attr = string_arg(in, a, 0, "attribute", "sum");
         Value total = a.get(1, "start") ? *a.get(1, "start") : Value(0);
         for (const auto& x : in.iterate(v)) {
             const Value y = attr ? attribute_path(in, x, *attr) : x;
             if (!total.is_number() || !y.is_number()) in.fail("sum(): can only add numbers, found '" + y.type_name() + "'");
             total = total.is_float() || y.is_float() ? Value(total.as_double() + y.as_double()) : Value(total.as_int() + y.as_int());
         }
         return total;
     }},
    {"min", [](Interpreter& in, const Value& v, const Args& a) { return minmax(in, v, a, false); }},
    {"max", [](Interpreter& in, const Value& v, const Args& a) { return minmax(in, v, a, true); }},
    {"indent", indent_filter},
    {"attr", [](Interpreter& in, const Value& v, const Args& a) {
         const auto name = string_arg(in, a, 0, "name", "attr");
         if (!name) in.fail("attr() needs a name");
         return in.get_attr(v, *name);
     }},
    {"wordcount", [](Interpreter&, const Value& v, const Args&) {
         return Value(static_cast<int64_t>(text::split(to_str(v), std::nullopt, -1).size()));
     }},
};

// ---- tests ----

const Value& test_operand(Interpreter& in, const Args& a, const char* test) {
    const Value* x = a.get(0, "other");
    if (!x) in.fail(std::string("the '") + test + "' test needs an argument");
    return *x;
}

bool is_lower_or_upper(const Value& v, bool want_lower) {
    if (!v.is_string()) return false;
    bool cased = false;
    for (char c : v.as_string()) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            cased = true;
            if (((c >= 'a' && c <= 'z')) != want_lower) return false;
        }
    }
    return cased;
}

struct TestEntry {
    std::string_view name;
    TestFn fn;
};

constexpr TestFn kEq = [](Interpreter& in, const Value& v, const Args& a) { return equals(v, test_operand(in, a, "eq")); };
constexpr TestFn kNe = [](Interpreter& in, const Value& v, const Args& a) { return !equals(v, test_operand(in, a, "ne")); };
constexpr TestFn kLt = [](Interpreter& in, const Value& v, const Args& a) { return less_than(v, test_operand(in, a, "lt")); };
constexpr TestFn kLe = [](Interpreter& in, const Value& v, const Args& a) { return !less_than(test_operand(in, a, "le"), v); };
constexpr TestFn kGt = [](Interpreter& in, const Value& v, const Args& a) { return less_than(test_operand(in, a, "gt"), v); };
constexpr TestFn kGe = [](Interpreter& in, const Value& v, const Args& a) { return !less_than(v, test_operand(in, a, "ge")); };
constexpr TestFn kIterable = [](Interpreter&, const Value& v, const Args&) {
    return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
};

constexpr TestEntry kTests[] = {
    {"defined", [](Interpreter&, const Value& v, const Args&) { return !v.is_undefined(); }},
    {"undefined", [](Interpreter&, const Value& v, const Args&) { return v.is_undefined(); }},
    {"none", [](Interpreter&, const Value& v, const Args&) { return v.is_none(); }},
    {"boolean", [](Interpreter&, const Value& v, const Args&) { return v.is_bool(); }},
    {"true", [](Interpreter&, const Value& v, const Args&) { return v.is_bool() && v.as_bool(); }},
    {"false", [](Interpreter&, const Value& v, const Args&) { return v.is_bool() && !v.as_bool(); }},
    {"integer", [](Interpreter&, const Value& v, const Args&) { return v.is_int(); }},
    {"float", [](Interpreter&, const Value& v, const Args&) { return v.is_float(); }},
    {"number", [](Interpreter&, const Value& v, const Args&) { return v.is_number(); }},
    {"string", [](Interpreter&, const Value& v, const Args&) { return v.is_string(); }},
    {"mapping", [](Interpreter&, const Value& v, const Args&) { return v.is_dict(); }},
    {"iterable", kIterable},
    {"sequence", kIterable},
    {"callable", [](Interpreter&, const Value& v, const Args&) { return v.is_callable(); }},
    {"lower", [](Interpreter&, const Value& v, const Args&) { return is_lower_or_upper(v, true); }},
    {"upper", [](Interpreter&, const Value& v, const Args&) { return is_lower_or_upper(v, false); }},
    {"odd", [](Interpreter& in, const Value& v, const Args&) {
         if (!v.is_int()) in.fail("the 'odd' test needs an integer");
         return v.as_int() % 2 != 0;
     }},
    {"even", [](Interpreter& in, const Value& v, const Args&) {
         if (!v.is_int()) in.fail("the 'even' test needs an integer");
         return v.as_int() % 2 == 0;
     }},
    {"divisibleby", [](Interpreter& in, const Value& v, const Args& a) {
         const Value& n = test_operand(in, a, "divisibleby");
         if (!v.is_int() || !n.is_int() || n.as_int() == 0) in.fail("the 'divisibleby' test needs integers and a non-zero divisor");
         return v.as_int() % n.as_int() == 0;
     }},
    {"eq", kEq}, {"equalto", kEq}, {"==", kEq},
    {"ne", kNe}, {"!=", kNe},
    {"lt", kLt}, {"lessthan", kLt}, {"<", kLt},
    {"le", kLe}, {"<=", kLe},
    {"gt", kGt}, {"greaterthan", kGt}, {">", kGt},
    {"ge", kGe}, {">=", kGe},
    {"in", [](Interpreter& in, const Value& v, const Args& a) {
         const Value& seq = test_operand(in, a, "in");
         if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
         if (seq.is_dict()) return v.is_string() && seq.as_dict().find(v.as_string()) != nullptr;
         for (const auto& x : in.iterate(seq))
             if (equals(v, x)) return true;
         return false;
     }},
    {"sameas", [](Interpreter& in, const Value& v, const Args& a) {
         const Value& o = test_operand(in, a, "sameas");
         if (v.is_none() || v.is_bool()) return v.kind() == o.kind() && equals(v, o);
         return same_object(v, o);
     }},
    {"escaped", [](Interpreter&, const Value&, const Args&) { return false; }},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
    for (const auto& f : kFilters)
        if (f.name == name) return f.fn;
    return nullptr;
}

TestFn find_test(std::string_view name) {
    for (const auto& t : kTests)
        if (t.name == name) return t.fn;
    return nullptr;
}

}  // namespace tandem::chat::jinja
