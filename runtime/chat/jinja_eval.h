// Walking the syntax tree: the interpreter that jinja.h's Template::render
// runs, and what the built-in filters, tests and methods
// (jinja_builtins.cpp) need from it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/jinja.h"
#include "runtime/chat/jinja_ast.h"

namespace tandem::chat::jinja {

class Interpreter {
public:
    Interpreter(const Program& program, const RenderOptions& options);

    std::string run(const Dict& context);

    const RenderOptions& options() const { return options_; }

    // Throws tandem::Error "jinja error at line L, column C: MSG" at the
    // node being evaluated.
    [[noreturn]] void fail(const std::string& msg) const;
    // Fails when a string or list of `n` bytes/items would pass the caps.
    void check_size(size_t n) const;
    // Counts loop iterations (and range() items) against the cap.
    void count_iterations(size_t n);

    // Python iteration: list items, dict keys, string characters; an
    // Undefined iterates as empty.
    List iterate(const Value& v) const;
    // jinja2's getattr/getitem: a missing key gives Undefined; looking into
    // an Undefined fails.
    Value get_attr(const Value& obj, std::string_view name) const;
    Value get_item(const Value& obj, const Value& key) const;
    Value call(const Value& fn, const Args& args);
    Value apply_filter(std::string_view name, const Value& v, const Args& args);
    bool apply_test(std::string_view name, const Value& v, const Args& args);
    // Fails with the Undefined's message when v is undefined.
    void require_defined(const Value& v) const;

private:
    enum class Flow { Normal, Break, Continue };

    Flow exec_body(const Body& body);
    Flow exec(const Stmt& s);
    void exec_for(const Stmt& s);
    void assign(const std::vector<std::string>& targets, const Value& v);
    Value eval(const Expr& e);
    Value eval_binary(const std::string& op, const Value& a, const Value& b);
    bool compare(const std::string& op, const Value& a, const Value& b);
    Value eval_call(const Expr& e);
    Value eval_slice(const Value& obj, const Expr* start, const Expr* stop, const Expr* step);
    Args eval_args(const CallArgs& args);
    Value lookup(const std::string& name) const;
    Value make_macro(const Stmt& s);
    void emit(std::string_view s);

    const Program& program_;
    const RenderOptions& options_;
    std::vector<Dict> frames_;  // [0] globals, [1] the context and top-level sets, then loop/macro scopes
    std::string* out_ = nullptr;
    SourcePos pos_;
    size_t iterations_ = 0;
    int call_depth_ = 0;
};

// The built-in tables (jinja_builtins.cpp).
using FilterFn = Value (*)(Interpreter&, const Value&, const Args&);
using TestFn = bool (*)(Interpreter&, const Value&, const Args&);
using MethodFn = Value (*)(Interpreter&, const Value& self, const Args&);
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
MethodFn find_method(Value::Kind kind, std::string_view name);
Dict make_globals();

// Arguments of built-ins, by position or keyword; nullopt when absent or
// None. A wrong type fails naming `fn` and the parameter.
std::optional<std::string> string_arg(Interpreter& in, const Args& a, size_t index, std::string_view name, std::string_view fn);
std::optional<int64_t> int_arg(Interpreter& in, const Args& a, size_t index, std::string_view name, std::string_view fn);
bool bool_arg(const Args& a, size_t index, std::string_view name, bool def);

}  // namespace tandem::chat::jinja
