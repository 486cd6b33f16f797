// Values of the Jinja subset (runtime/chat/jinja.h): what templates compute
// with, modelled on the Python objects jinja2 would hold so that printing,
// comparison and truthiness match Python's (True/None, 1.0, ['a', 1]).
//
// Lists and dicts are immutable once built (as in jinja2's immutable
// sandbox) and shared by pointer; a namespace is the one mutable object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::chat::jinja {

class Value;
class Interpreter;

using List = std::vector<Value>;

// Keys in insertion order (Python dicts keep it); look-up is linear, which
// is fine for the small objects templates see.
struct Dict {
    std::vector<std::pair<std::string, Value>> items;
    const Value* find(std::string_view key) const;
    Value* find(std::string_view key);
    void set(std::string key, Value value);
};

// Arguments of a call: positional, then keyword.
struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    // The argument at `index` or named `name`, or nullptr.
    const Value* get(size_t index, std::string_view name) const;
};

using NativeFn = std::function<Value(Interpreter&, const Args&)>;
struct Callable {
    std::string name;
    NativeFn fn;
};

struct Undefined {
    std::string hint;  // what was looked up, for error messages
};
struct None {};

class Value {
public:
    enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

    Value() : v_(jinja::Undefined{}) {}
    static Value undefined(std::string hint) { return Value(Rep(jinja::Undefined{std::move(hint)})); }
    static Value none() { return Value(Rep(jinja::None{})); }
    Value(bool b) : v_(b) {}
    Value(int64_t i) : v_(i) {}
    Value(int i) : v_(static_cast<int64_t>(i)) {}
    Value(double d) : v_(d) {}
    Value(std::string s) : v_(std::move(s)) {}
    Value(const char* s) : v_(std::string(s)) {}
    Value(List l) : v_(std::make_shared<const List>(std::move(l))) {}
    Value(Dict d) : v_(std::make_shared<const Dict>(std::move(d))) {}
    // A Python tuple: a list that prints as (a, b) and never equals a list.
    static Value tuple(List l) {
        Value v(std::move(l));
        v.tuple_ = true;
        return v;
    }
    static Value make_namespace(Dict d) { return Value(Rep(std::make_shared<NamespaceBox>(NamespaceBox{std::move(d)}))); }
    static Value function(std::string name, NativeFn fn) {
        return Value(Rep(std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)})));
    }

    Kind kind() const { return static_cast<Kind>(v_.index()); }
    bool is_undefined() const { return kind() == Kind::Undefined; }
    bool is_none() const { return kind() == Kind::None; }
    bool is_bool() const { return kind() == Kind::Bool; }
    bool is_int() const { return kind() == Kind::Int; }  // not bool
    bool is_float() const { return kind() == Kind::Float; }
    bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python: bool is a number
    bool is_string() const { return kind() == Kind::String; }
    bool is_list() const { return kind() == Kind::List; }  // lists and tuples
    bool is_tuple() const { return tuple_; }
    bool is_dict() const { return kind() == Kind::Dict; }
    bool is_namespace() const { return kind() == Kind::Namespace; }
    bool is_callable() const { return kind() == Kind::Callable; }

    bool as_bool() const { return std::get<bool>(v_); }
    int64_t as_int() const;   // bool or int
    double as_double() const; // any number
    const std::string& as_string() const { return std::get<std::string>(v_); }
    const List& as_list() const { return *std::get<std::shared_ptr<const List>>(v_); }
    const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(v_); }
    Dict& namespace_attrs() const { return std::get<std::shared_ptr<NamespaceBox>>(v_)->attrs; }
    const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
    const std::string& undefined_hint() const { return std::get<jinja::Undefined>(v_).hint; }

    // Python's bool(x); Undefined is falsy.
    bool truthy() const;
    // Python's type name, for messages: 'str', 'int', 'list', 'dict', 'NoneType'...
    std::string type_name() const;

private:
    struct NamespaceBox {
        Dict attrs;
    };
    using Rep = std::variant<jinja::Undefined, jinja::None, bool, int64_t, double, std::string,
                             std::shared_ptr<const List>, std::shared_ptr<const Dict>,
                             std::shared_ptr<NamespaceBox>, std::shared_ptr<const Callable>>;
    explicit Value(Rep r) : v_(std::move(r)) {}
    Rep v_;
    bool tuple_ = false;

    friend bool same_object(const Value& a, const Value& b);
};

// Identity, for namespaces and callables (Python `is`).
bool same_object(const Value& a, const Value& b);

// Python's str(x), as `{{ x }}` prints it (Undefined prints as "").
// Throws tandem::Error past a nesting depth (a namespace holding itself).
std::string to_str(const Value& v);
// Python's repr(x) ('a' with quotes, as inside a printed list).
std::string to_repr(const Value& v);
// Python's repr of a float: 1.0, 0.1, 1e+16, inf.
std::string float_repr(double d);
// json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=false), as
// transformers' tojson filter; indent < 0 means none.
std::string to_json(const Value& v, int indent);
// Python ==, with 1 == 1.0 == True and deep comparison of lists and dicts.
bool equals(const Value& a, const Value& b);
// Python <: numbers, strings, lists. Throws tandem::Error for other types.
bool less_than(const Value& a, const Value& b);

// JSON to values (objects keep the order they have in `j`).
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// UTF-8 helpers: Python strings count code points.
std::vector<std::string_view> utf8_chars(std::string_view s);

}  // namespace tandem::chat::jinja
