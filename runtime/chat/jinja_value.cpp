#include "runtime/chat/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/common/error.h"

namespace tandem::chat::jinja {
namespace {

// Deeper than any real template's data; stops a namespace that holds itself.
constexpr int kMaxPrintDepth = 256;

void check_depth(int depth) {
    if (depth > kMaxPrintDepth) throw Error("jinja: value nested deeper than 256 levels (a namespace containing itself?)");
}

void repr_string(std::string& out, std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const bool has_double = s.find('"') != std::string_view::npos;
    const char quote = (has_single && !has_double) ? '"' : '\'';
    out += quote;
    for (unsigned char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == static_cast<unsigned char>(quote)) { out += '\\'; out += quote; }
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else out += static_cast<char>(c);
    }
    out += quote;
}

void str_into(std::string& out, const Value& v, bool repr, int depth) {
    check_depth(depth);
    switch (v.kind()) {
    case Value::Kind::Undefined: if (repr) out += "Undefined"; return;
    case Value::Kind::None: out += "None"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "True" : "False"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: out += float_repr(v.as_double()); return;
    case Value::Kind::String:
        if (repr) repr_string(out, v.as_string());
        else out += v.as_string();
        return;
    case Value::Kind::List: {
        out += v.is_tuple() ? '(' : '[';
        bool first = true;
        for (const auto& x : v.as_list()) {
            if (!first) out += ", ";
            first = false;
            str_into(out, x, true, depth + 1);
        }
        if (v.is_tuple() && v.as_list().size() == 1) out += ',';
        out += v.is_tuple() ? ')' : ']';
        return;
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
        const Dict& d = v.is_dict() ? v.as_dict() : v.namespace_attrs();
        out += v.is_dict() ? "{" : "<Namespace {";
        bool first = true;
        for (const auto& [k, x] : d.items) {
            if (!first) out += ", ";
            first = false;
            repr_string(out, k);
            out += ": ";
            str_into(out, x, true, depth + 1);
        }
        out += v.is_dict() ? "}" : "}>";
        return;
    }
    case Value::Kind::Callable: out += "<function " + v.as_callable().name + ">"; return;
    }
}

void json_string(std::string& out, std::string_view s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else out += static_cast<char>(c);
        }
    }
    out += '"';
}

void json_into(std::string& out, const Value& v, int indent, int depth) {
    check_depth(depth);
    const auto newline = [&](int level) {
        out += '\n';
        out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
    };
    const char* item_sep = indent >= 0 ? "," : ", ";
    switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
        const double d = v.as_double();
        if (std::isnan(d)) out += "NaN";
        else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
        else out += float_repr(d);
        return;
    }
    case Value::Kind::String: json_string(out, v.as_string()); return;
    case Value::Kind::List: {
        const List& l = v.as_list();
        if (l.empty()) { out += "[]"; return; }
        out += '[';
        for (size_t i = 0; i < l.size(); ++i) {
            if (i) out += item_sep;
            if (indent >= 0) newline(depth + 1);
            json_into(out, l[i], indent, depth + 1);
        }
        if (indent >= 0) newline(depth);
        out += ']';
        return;
    }
    case Value::Kind::Dict: {
        const Dict& d = v.as_dict();
        if (d.items.empty()) { out += "{}"; return; }
        out += '{';
        for (size_t i = 0; i < d.items.size(); ++i) {
            if (i) out += item_sep;
            if (indent >= 0) newline(depth + 1);
            json_string(out, d.items[i].first);
            out += ": ";
            json_into(out, d.items[i].second, indent, depth + 1);
        }
        if (indent >= 0) newline(depth);
        out += '}';
        return;
    }
    default:
        throw Error("jinja: tojson: object of type '" + v.type_name() + "' is not JSON serializable");
    }
}

bool equals_at(const Value& a, const Value& b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.kind() != b.kind() || a.is_tuple() != b.is_tuple()) return false;
    switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List: {
        const List& x = a.as_list();
        const List& y = b.as_list();
        if (x.size() != y.size()) return false;
        for (size_t i = 0; i < x.size(); ++i)
            if (!equals_at(x[i], y[i], depth + 1)) return false;
        return true;
    }
    case Value::Kind::Dict: {
        const Dict& x = a.as_dict();
        const Dict& y = b.as_dict();
        if (x.items.size() != y.items.size()) return false;
        for (const auto& [k, xv] : x.items) {
            const Value* yv = y.find(k);
            if (!yv || !equals_at(xv, *yv, depth + 1)) return false;
        }
        return true;
    }
    default: return same_object(a, b);
    }
}

template <class J>
Value from_json_impl(const J& j, int depth) {
    check_depth(depth);
    switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
        const auto u = j.template get<uint64_t>();
        if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
        return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
        List l;
        l.reserve(j.size());
        for (const auto& x : j) l.push_back(from_json_impl(x, depth + 1));
        return Value(std::move(l));
    }
    case nlohmann::json::value_t::object: {
        Dict d;
        for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json_impl(it.value(), depth + 1));
        return Value(std::move(d));
    }
    default: return Value::none();
    }
}

}  // namespace

const Value* Dict::find(std::string_view key) const {
    for (const auto& [k, v] : items)
        if (k == key) return &v;
    return nullptr;
}

Value* Dict::find(std::string_view key) {
    for (auto& [k, v] : items)
        if (k == key) return &v;
    return nullptr;
}

void Dict::set(std::string key, Value value) {
    if (Value* v = find(key)) *v = std::move(value);
    else items.emplace_back(std::move(key), std::move(value));
}

const Value* Args::get(size_t index, std::string_view name) const {
    if (index < pos.size()) return &pos[index];
    for (const auto& [k, v] : kw)
        if (k == name) return &v;
    return nullptr;
}

int64_t Value::as_int() const {
    if (is_bool()) return as_bool() ? 1 : 0;
    return std::get<int64_t>(v_);
}

double Value::as_double() const {
    if (is_float()) return std::get<double>(v_);
    return static_cast<double>(as_int());
}

bool Value::truthy() const {
    switch (kind()) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return as_bool();
    case Kind::Int: return as_int() != 0;
    case Kind::Float: return as_double() != 0.0;
    case Kind::String: return !as_string().empty();
    case Kind::List: return !as_list().empty();
    case Kind::Dict: return !as_dict().items.empty();
    default: return true;
    }
}

std::string Value::type_name() const {
    static constexpr const char* kNames[] = {"Undefined", "NoneType", "bool", "int", "float",
                                             "str", "list", "dict", "Namespace", "function"};
    if (tuple_) return "tuple";
    return kNames[static_cast<size_t>(kind())];
}

bool same_object(const Value& a, const Value& b) {
    if (a.kind() != b.kind()) return false;
    if (a.is_namespace()) return std::get<std::shared_ptr<Value::NamespaceBox>>(a.v_) == std::get<std::shared_ptr<Value::NamespaceBox>>(b.v_);
    if (a.is_callable()) return &a.as_callable() == &b.as_callable();
    return false;
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string_view s(buf, static_cast<size_t>(res.ptr - buf));
    std::string out;
    if (s.front() == '-') {
        out += '-';
        s.remove_prefix(1);
    }
    const size_t epos = s.find('e');
    std::string digits;
    for (char c : s.substr(0, epos))
        if (c != '.') digits += c;
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    int exp = 0;
    std::from_chars(s.data() + epos + 1 + (s[epos + 1] == '+' ? 1 : 0), s.data() + s.size(), exp);
    const int decpt = exp + 1;  // digits[0:decpt] is the integer part
    const int nd = static_cast<int>(digits.size());
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
        else if (decpt >= nd) out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
        else out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    } else {
        out += digits[0];
        if (nd > 1) out += "." + digits.substr(1);
        char eb[16];
        std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        out += eb;
    }
    return out;
}

std::string to_str(const Value& v) {
    if (v.is_string()) return v.as_string();
    std::string out;
    str_into(out, v, false, 0);
    return out;
}

std::string to_repr(const Value& v) {
    std::string out;
    str_into(out, v, true, 0);
    return out;
}

std::string to_json(const Value& v, int indent) {
    std::string out;
    json_into(out, v, indent, 0);
    return out;
}

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }

bool less_than(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
        return a.as_int() < b.as_int();
    }
    if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order is code point order
    if (a.is_list() && b.is_list()) {
        const List& x = a.as_list();
        const List& y = b.as_list();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (less_than(x[i], y[i])) return true;
            if (less_than(y[i], x[i])) return false;
        }
        return x.size() < y.size();
    }
    throw Error("jinja: '<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j, 0); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j, 0); }

std::vector<std::string_view> utf8_chars(std::string_view s) {
    std::vector<std::string_view> out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
        if (i + n > s.size()) n = 1;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) { n = 1; break; }
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

}  // namespace tandem::chat::jinja
