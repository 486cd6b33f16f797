// Methods of strings and dicts (`s.strip()`, `d.get(k)`), the global
// functions (range, namespace, dict, raise_exception, strftime_now) and the
// argument helpers of the built-ins.
#include <cmath>
#include <ctime>
#include <string_view>

#include "runtime/chat/jinja_eval.h"
#include "runtime/chat/jinja_text.h"

namespace tandem::chat::jinja {
namespace {

std::string self_str(const Value& v) { return v.as_string(); }

Value strip_method(Interpreter& in, const Value& self, const Args& a, text::Side side, const char* fn) {
    return Value(text::strip(self.as_string(), string_arg(in, a, 0, "chars", fn), side));
}

// startswith/endswith take a string or a list of strings.
Value affix_method(Interpreter& in, const Value& self, const Args& a, bool prefix) {
    const char* fn = prefix ? "startswith" : "endswith";
    const Value* arg = a.get(0, prefix ? "prefix" : "suffix");
    if (!arg) in.fail(std::string(fn) + "() takes at least 1 argument (0 given)");
    const std::string& s = self.as_string();
    const auto test = [&](const Value& v) {
        if (!v.is_string()) in.fail(std::string(fn) + " first arg must be str or a tuple of str, not " + v.type_name());
        const std::string& x = v.as_string();
        if (x.size() > s.size()) return false;
        return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (arg->is_list()) {
        for (const auto& v : arg->as_list())
            if (test(v)) return Value(true);
        return Value(false);
    }
    return Value(test(*arg));
}

Value split_method(Interpreter& in, const Value& self, const Args& a) {
    const auto sep = string_arg(in, a, 0, "sep", "split");
    if (sep && sep->empty()) in.fail("split(): empty separator");
    const int64_t maxsplit = int_arg(in, a, 1, "maxsplit", "split").value_or(-1);
    List out;
    for (auto& part : text::split(self.as_string(), sep, maxsplit)) out.emplace_back(std::move(part));
    return Value(std::move(out));
}

Value replace_method(Interpreter& in, const Value& self, const Args& a) {
    const auto from = string_arg(in, a, 0, "old", "replace");
    const auto to = string_arg(in, a, 1, "new", "replace");
    if (!from || !to) in.fail("replace() takes at least 2 arguments");
    std::string r = text::replace(self.as_string(), *from, *to, int_arg(in, a, 2, "count", "replace").value_or(-1));
    in.check_size(r.size());
    return Value(std::move(r));
}

Value find_method_impl(Interpreter& in, const Value& self, const Args& a) {
    const auto sub = string_arg(in, a, 0, "sub", "find");
    if (!sub) in.fail("find() takes at least 1 argument");
    const size_t f = self.as_string().find(*sub);
    if (f == std::string::npos) return Value(-1);
    return Value(static_cast<int64_t>(utf8_chars(std::string_view(self.as_string()).substr(0, f)).size()));
}

Value join_method(Interpreter& in, const Value& self, const Args& a) {
    const Value* seq = a.get(0, "iterable");
    if (!seq) in.fail("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const auto& v : in.iterate(*seq)) {
        if (!v.is_string()) in.fail("join(): expected str instance, found '" + v.type_name() + "'");
        if (!first) out += self.as_string();
        first = false;
        out += v.as_string();
        in.check_size(out.size());
    }
    return Value(std::move(out));
}

Value dict_get(Interpreter&, const Value& self, const Args& a) {
    const Value* key = a.get(0, "key");
    const Value* def = a.get(1, "default");
    if (key && key->is_string())
        if (const Value* v = self.as_dict().find(key->as_string())) return *v;
    return def ? *def : Value::none();
}

Value dict_items(Interpreter&, const Value& self, const Args&) {
    List out;
    for (const auto& [k, v] : self.as_dict().items) out.push_back(Value::tuple(List{Value(k), v}));
    return Value(std::move(out));
}

Value dict_keys(Interpreter&, const Value& self, const Args&) {
    List out;
    for (const auto& [k, v] : self.as_dict().items) out.emplace_back(k);
    return Value(std::move(out));
}

Value dict_values(Interpreter&, const Value& self, const Args&) {
    List out;
    for (const auto& [k, v] : self.as_dict().items) out.push_back(v);
    return Value(std::move(out));
}

struct MethodEntry {
    Value::Kind kind;
    std::string_view name;
    MethodFn fn;
};

constexpr MethodEntry kMethods[] = {
    {Value::Kind::String, "strip", [](Interpreter& in, const Value& s, const Args& a) { return strip_method(in, s, a, text::Side::Both, "strip"); }},
    {Value::Kind::String, "lstrip", [](Interpreter& in, const Value& s, const Args& a) { return strip_method(in, s, a, text::Side::Left, "lstrip"); }},
    {Value::Kind::String, "rstrip", [](Interpreter& in, const Value& s, const Args& a) { return strip_method(in, s, a, text::Side::Right, "rstrip"); }},
    {Value::Kind::String, "startswith", [](Interpreter& in, const Value& s, const Args& a) { return affix_method(in, s, a, true); }},
    {Value::Kind::String, "endswith", [](Interpreter& in, const Value& s, const Args& a) { return affix_method(in, s, a, false); }},
    {Value::Kind::String, "split", split_method},
    {Value::Kind::String, "upper", [](Interpreter&, const Value& s, const Args&) { return Value(text::upper(self_str(s))); }},
    {Value::Kind::String, "lower", [](Interpreter&, const Value& s, const Args&) { return Value(text::lower(self_str(s))); }},
    {Value::Kind::String, "title", [](Interpreter&, const Value& s, const Args&) { return Value(text::py_title(self_str(s))); }},
    {Value::Kind::String, "capitalize", [](Interpreter&, const Value& s, const Args&) { return Value(text::capitalize(self_str(s))); }},
    {Value::Kind::String, "replace", replace_method},
    {Value::Kind::String, "find", find_method_impl},
    {Value::Kind::String, "join", join_method},
    {Value::Kind::Dict, "get", dict_get},
    {Value::Kind::Dict, "items", dict_items},
    {Value::Kind::Dict, "keys", dict_keys},
    {Value::Kind::Dict, "values", dict_values},
};

// ---- globals ----

Value range_fn(Interpreter& in, const Args& a) {
    if (a.pos.empty() || a.pos.size() > 3 || !a.kw.empty()) in.fail("range() takes 1 to 3 positional arguments");
    for (const auto& v : a.pos)
        if (!v.is_int() && !v.is_bool()) in.fail("range(): '" + v.type_name() + "' object cannot be interpreted as an integer");
    const int64_t start = a.pos.size() == 1 ? 0 : a.pos[0].as_int();
    const int64_t stop = a.pos.size() == 1 ? a.pos[0].as_int() : a.pos[1].as_int();
    const int64_t step = a.pos.size() == 3 ? a.pos[2].as_int() : 1;
    if (step == 0) in.fail("range() arg 3 must not be zero");
    // Count without overflow: the distance as a double is exact enough to compare with the cap.
    const double span = step > 0 ? static_cast<double>(stop) - static_cast<double>(start) : static_cast<double>(start) - static_cast<double>(stop);
    const double count = span <= 0 ? 0 : std::ceil(span / std::abs(static_cast<double>(step)));
    if (count > static_cast<double>(in.options().max_iterations))
        in.fail("range() of " + std::to_string(static_cast<uint64_t>(count)) + " items passes the limit of " +
                std::to_string(in.options().max_iterations));
    in.count_iterations(static_cast<size_t>(count));
    List out;
    out.reserve(static_cast<size_t>(count));
    for (int64_t i = 0, v = start; i < static_cast<int64_t>(count); ++i, v += step) out.emplace_back(v);
    return Value(std::move(out));
}

Dict kwargs_dict(Interpreter& in, const Args& a, const char* fn) {
    Dict d;
    if (!a.pos.empty()) {
        if (a.pos.size() > 1 || !a.pos[0].is_dict()) in.fail(std::string(fn) + "() takes at most one positional argument, a dict");
        d = a.pos[0].as_dict();
    }
    for (const auto& [k, v] : a.kw) d.set(k, v);
    return d;
}

std::string strftime_local(const std::string& fmt) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return std::string(buf, n);
}

}  // namespace

MethodFn find_method(Value::Kind kind, std::string_view name) {
    for (const auto& m : kMethods)
        if (m.kind == kind && m.name == name) return m.fn;
    return nullptr;
}

Dict make_globals() {
    Dict g;
    g.set("range", Value::function("range", range_fn));
    g.set("namespace", Value::function("namespace", [](Interpreter& in, const Args& a) {
              return Value::make_namespace(kwargs_dict(in, a, "namespace"));
          }));
    g.set("dict", Value::function("dict", [](Interpreter& in, const Args& a) { return Value(kwargs_dict(in, a, "dict")); }));
    g.set("raise_exception", Value::function("raise_exception", [](Interpreter& in, const Args& a) -> Value {
              const Value* msg = a.get(0, "message");
              in.fail("template raised an exception: " + (msg ? to_str(*msg) : std::string()));
          }));
    g.set("strftime_now", Value::function("strftime_now", [](Interpreter& in, const Args& a) {
              const auto fmt = string_arg(in, a, 0, "format", "strftime_now");
              if (!fmt) in.fail("strftime_now() takes a format string");
              if (fmt->size() > 128) in.fail("strftime_now(): format longer than 128 bytes");
              return Value(in.options().strftime_now ? in.options().strftime_now(*fmt) : strftime_local(*fmt));
          }));
    return g;
}

std::optional<std::string> string_arg(Interpreter& in, const Args& a, size_t index, std::string_view name, std::string_view fn) {
    const Value* v = a.get(index, name);
    if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
    if (!v->is_string()) in.fail(std::string(fn) + "(): argument '" + std::string(name) + "' must be a string, found '" + v->type_name() + "'");
    return v->as_string();
}

std::optional<int64_t> int_arg(Interpreter& in, const Args& a, size_t index, std::string_view name, std::string_view fn) {
    const Value* v = a.get(index, name);
    if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
    if (!v->is_int() && !v->is_bool()) in.fail(std::string(fn) + "(): argument '" + std::string(name) + "' must be an integer, found '" + v->type_name() + "'");
    return v->as_int();
}

bool bool_arg(const Args& a, size_t index, std::string_view name, bool def) {
    const Value* v = a.get(index, name);
    return v ? v->truthy() : def;
}

}  // namespace tandem::chat::jinja
