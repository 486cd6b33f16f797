#include "runtime/chat/jinja_eval.h"

#include <cmath>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "runtime/common/error.h"

namespace tandem::chat::jinja {
namespace {

// Macro calls nest at most this deep (a macro calling itself).
constexpr int kMaxCallDepth = 64;

// An error that already names its position; others get the position of
// the node being evaluated when they pass through Interpreter::run.
class PositionedError : public Error {
public:
    using Error::Error;
};

// `op` is one of the __builtin_*_overflow functions: it stores the result
// and says whether it overflowed.
template <class Op>
int64_t checked(Op op, int64_t x, int64_t y, const Interpreter& in) {
    int64_t r = 0;
    if (op(x, y, &r)) in.fail("integer overflow (Tandem's integers are 64-bit)");
    return r;
}
bool add_ovf(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool sub_ovf(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
bool mul_ovf(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

}  // namespace

Interpreter::Interpreter(const Program& program, const RenderOptions& options) : program_(program), options_(options) {}

namespace {

// A namespace can hold itself ({% set ns.me = ns %}), a cycle that reference
// counts never free: every render ends by emptying each namespace reachable
// from its variables (nothing of a render outlives it but its text).
void empty_namespaces(std::vector<Dict>& frames) {
    std::vector<const Value*> todo;
    for (const Dict& f : frames) {
        for (const auto& [name, v] : f.items) todo.push_back(&v);
    }
    std::unordered_set<const Dict*> seen;
    std::vector<Dict*> found;
    while (!todo.empty()) {
        const Value* v = todo.back();
        todo.pop_back();
        if (v->is_namespace()) {
            Dict& attrs = v->namespace_attrs();
            if (!seen.insert(&attrs).second) continue;
            found.push_back(&attrs);
            for (const auto& [name, x] : attrs.items) todo.push_back(&x);
        } else if (v->is_list()) {
            for (const Value& x : v->as_list()) todo.push_back(&x);
        } else if (v->is_dict()) {
            for (const auto& [name, x] : v->as_dict().items) todo.push_back(&x);
        }
    }
    // Moved out first, released after: no box is freed while still listed.
    std::vector<std::vector<std::pair<std::string, Value>>> held;
    held.reserve(found.size());
    for (Dict* d : found) held.push_back(std::move(d->items));
    held.clear();
    frames.clear();
}

}  // namespace

std::string Interpreter::run(const Dict& context) {
    frames_.clear();
    frames_.push_back(make_globals());
    frames_.push_back(context);
    struct EmptyAtEnd {
        std::vector<Dict>& frames;
        ~EmptyAtEnd() { empty_namespaces(frames); }
    } empty_at_end{frames_};
    std::string out;
    out_ = &out;
    try {
        exec_body(program_.body);
    } catch (const PositionedError&) {
        throw;
    } catch (const Error& e) {
        fail(e.what());
    }
    return out;
}

void Interpreter::fail(const std::string& msg) const {
    throw PositionedError("jinja error at " + describe(pos_) + ": " + msg);
}

void Interpreter::check_size(size_t n) const {
    if (n > options_.max_output_bytes)
        fail("a value of " + std::to_string(n) + " bytes or items passes the limit of " + std::to_string(options_.max_output_bytes));
}

void Interpreter::count_iterations(size_t n) {
    iterations_ += n;
    if (n > options_.max_iterations || iterations_ > options_.max_iterations)
        fail("more than " + std::to_string(options_.max_iterations) + " loop iterations or range() items in one render");
}

void Interpreter::emit(std::string_view s) {
    if (out_->size() + s.size() > options_.max_output_bytes)
        fail("the output passes the limit of " + std::to_string(options_.max_output_bytes) + " bytes");
    out_->append(s);
}

void Interpreter::require_defined(const Value& v) const {
    if (v.is_undefined()) fail(v.undefined_hint());
}

List Interpreter::iterate(const Value& v) const {
    switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.as_list();
    case Value::Kind::Dict: {
        List keys;
        for (const auto& [k, x] : v.as_dict().items) keys.emplace_back(k);
        return keys;
    }
    case Value::Kind::String: {
        List chars;
        for (auto c : utf8_chars(v.as_string())) chars.emplace_back(std::string(c));
        return chars;
    }
    default: fail("'" + v.type_name() + "' object is not iterable");
    }
}

Value Interpreter::get_attr(const Value& obj, std::string_view name) const {
    require_defined(obj);
    const Dict* d = obj.is_dict() ? &obj.as_dict() : obj.is_namespace() ? &obj.namespace_attrs() : nullptr;
    if (d)
        if (const Value* v = d->find(name)) return *v;
    return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + std::string(name) + "'");
}

Value Interpreter::get_item(const Value& obj, const Value& key) const {
    require_defined(obj);
    if (key.is_string()) return get_attr(obj, key.as_string());
    if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
            const auto n = static_cast<int64_t>(obj.as_list().size());
            if (i < 0) i += n;
            if (i >= 0 && i < n) return obj.as_list()[static_cast<size_t>(i)];
        } else {
            const auto chars = utf8_chars(obj.as_string());
            const auto n = static_cast<int64_t>(chars.size());
            if (i < 0) i += n;
            if (i >= 0 && i < n) return Value(std::string(chars[static_cast<size_t>(i)]));
        }
    }
    return Value::undefined("'" + obj.type_name() + " object' has no attribute " + to_repr(key));
}

Value Interpreter::call(const Value& fn, const Args& args) {
    require_defined(fn);
    if (!fn.is_callable()) fail("'" + fn.type_name() + "' object is not callable");
    return fn.as_callable().fn(*this, args);
}

Value Interpreter::apply_filter(std::string_view name, const Value& v, const Args& args) {
    const FilterFn f = find_filter(name);
    if (!f) fail("no filter named '" + std::string(name) + "'");
    return f(*this, v, args);
}

bool Interpreter::apply_test(std::string_view name, const Value& v, const Args& args) {
    const TestFn t = find_test(name);
    if (!t) fail("no test named '" + std::string(name) + "'");
    return t(*this, v, args);
}

Value Interpreter::lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
        if (const Value* v = it->find(name)) return *v;
    return Value::undefined("'" + name + "' is undefined");
}

// ---- statements ----

Interpreter::Flow Interpreter::exec_body(const Body& body) {
    for (const auto& s : body) {
        const Flow f = exec(*s);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
    pos_ = s.pos;
    switch (s.kind) {
    case StmtKind::Text: emit(s.text); break;
    case StmtKind::Output: {
        const Value v = eval(*s.expr);
        emit(v.is_string() ? v.as_string() : to_str(v));
        break;
    }
    case StmtKind::If:
        for (const auto& [cond, body] : s.branches)
            if (eval(*cond).truthy()) return exec_body(body);
        return exec_body(s.else_body);
    case StmtKind::For: exec_for(s); break;
    case StmtKind::Set: {
        const Value v = eval(*s.expr);
        if (s.attr_of) {
            const Value ns = eval(*s.attr_of);
            pos_ = s.pos;
            if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object ('" + ns.type_name() + "')");
            ns.namespace_attrs().set(s.name, v);
        } else {
            assign(s.targets, v);
        }
        break;
    }
    case StmtKind::SetBlock: {
        std::string captured;
        std::string* saved = out_;
        out_ = &captured;
        exec_body(s.body);
        out_ = saved;
        frames_.back().set(s.targets[0], Value(std::move(captured)));
        break;
    }
    case StmtKind::Macro: frames_.back().set(s.name, make_macro(s)); break;
    case StmtKind::Break: return Flow::Break;
    case StmtKind::Continue: return Flow::Continue;
    case StmtKind::Block: return exec_body(s.body);
    }
    return Flow::Normal;
}

void Interpreter::assign(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
        frames_.back().set(targets[0], v);
        return;
    }
    const List items = iterate(v);
    if (items.size() != targets.size())
        fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) frames_.back().set(targets[i], items[i]);
}

void Interpreter::exec_for(const Stmt& s) {
    const Value seq = eval(*s.expr);
    pos_ = s.pos;
    List items = iterate(seq);
    frames_.emplace_back();
    if (s.cond) {
        List kept;
        for (auto& item : items) {
            count_iterations(1);
            assign(s.targets, item);
            if (eval(*s.cond).truthy()) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
        count_iterations(1);
        const auto& item = items[static_cast<size_t>(i)];
        frames_.back() = Dict{};  // as in jinja2, a set in the body lasts one iteration
        assign(s.targets, item);
        Dict loop;
        loop.set("index", Value(i + 1));
        loop.set("index0", Value(i));
        loop.set("revindex", Value(n - i));
        loop.set("revindex0", Value(n - i - 1));
        loop.set("first", Value(i == 0));
        loop.set("last", Value(i == n - 1));
        loop.set("length", Value(n));
        loop.set("depth", Value(1));
        loop.set("depth0", Value(0));
        loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
        loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
        loop.set("cycle", Value::function("loop.cycle", [i](Interpreter& in, const Args& a) {
                     if (a.pos.empty()) in.fail("loop.cycle() needs at least one argument");
                     return a.pos[static_cast<size_t>(i) % a.pos.size()];
                 }));
        frames_.back().set("loop", Value(std::move(loop)));
        if (exec_body(s.body) == Flow::Break) break;
    }
    frames_.pop_back();
    if (items.empty()) exec_body(s.else_body);
}

Value Interpreter::make_macro(const Stmt& s) {
    const Stmt* macro = &s;
    return Value::function(s.name, [macro](Interpreter& in, const Args& args) -> Value {
        if (args.pos.size() > macro->params.size())
            in.fail("macro '" + macro->name + "' takes not more than " + std::to_string(macro->params.size()) + " argument(s)");
        if (in.call_depth_ >= kMaxCallDepth) in.fail("macro calls nested deeper than " + std::to_string(kMaxCallDepth));
        // The macro sees the globals and the top level, not the caller's loops.
        std::vector<Dict> saved(in.frames_.begin() + 2, in.frames_.end());
        in.frames_.resize(2);
        in.frames_.emplace_back();
        for (const auto& [name, value] : args.kw) {
            bool known = false;
            for (const auto& p : macro->params) known = known || p.first == name;
            if (!known) in.fail("macro '" + macro->name + "' takes no keyword argument '" + name + "'");
        }
        for (size_t i = 0; i < macro->params.size(); ++i) {
            const auto& [name, def] = macro->params[i];
            const Value* given = args.get(i, name);
            in.frames_.back().set(name, given ? *given : def ? in.eval(*def) : Value::undefined("'" + name + "' is undefined"));
        }
        std::string captured;
        std::string* saved_out = in.out_;
        in.out_ = &captured;
        ++in.call_depth_;
        in.exec_body(macro->body);
        --in.call_depth_;
        in.out_ = saved_out;
        in.frames_.resize(2);
        for (auto& f : saved) in.frames_.push_back(std::move(f));
        return Value(std::move(captured));
    });
}

// ---- expressions ----

Args Interpreter::eval_args(const CallArgs& args) {
    Args out;
    for (const auto& e : args.pos) out.pos.push_back(eval(*e));
    for (const auto& [name, e] : args.kw) out.kw.emplace_back(name, eval(*e));
    return out;
}

Value Interpreter::eval(const Expr& e) {
    pos_ = e.pos;
    switch (e.kind) {
    case ExprKind::Const: return e.value;
    case ExprKind::Name: return lookup(e.name);
    case ExprKind::List:
    case ExprKind::Tuple: {
        List l;
        for (const auto& k : e.kids) l.push_back(eval(*k));
        return e.kind == ExprKind::Tuple ? Value::tuple(std::move(l)) : Value(std::move(l));
    }
    case ExprKind::Dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
            const Value k = eval(*e.kids[i]);
            if (!k.is_string()) fail("dict keys must be strings in this Jinja subset, found '" + k.type_name() + "'");
            d.set(k.as_string(), eval(*e.kids[i + 1]));
        }
        return Value(std::move(d));
    }
    case ExprKind::GetAttr: {
        const Value obj = eval(*e.kids[0]);
        pos_ = e.pos;
        return get_attr(obj, e.name);
    }
    case ExprKind::GetItem: {
        const Value obj = eval(*e.kids[0]);
        const Value key = eval(*e.kids[1]);
        pos_ = e.pos;
        return get_item(obj, key);
    }
    case ExprKind::Slice: return eval_slice(eval(*e.kids[0]), e.kids[1].get(), e.kids[2].get(), e.kids[3].get());
    case ExprKind::Call: return eval_call(e);
    case ExprKind::Filter: {
        const Value v = eval(*e.kids[0]);
        const Args args = eval_args(e.args);
        pos_ = e.pos;
        return apply_filter(e.name, v, args);
    }
    case ExprKind::Test: {
        const Value v = eval(*e.kids[0]);
        const Args args = eval_args(e.args);
        pos_ = e.pos;
        return Value(apply_test(e.name, v, args) != e.negated);
    }
    case ExprKind::Neg:
    case ExprKind::Pos: {
        const Value v = eval(*e.kids[0]);
        pos_ = e.pos;
        require_defined(v);
        if (!v.is_number()) fail("bad operand type for unary " + std::string(e.kind == ExprKind::Neg ? "-" : "+") + ": '" + v.type_name() + "'");
        if (e.kind == ExprKind::Pos) return v.is_bool() ? Value(v.as_int()) : v;
        if (v.is_float()) return Value(-v.as_double());
        return Value(checked(sub_ovf, 0, v.as_int(), *this));
    }
    case ExprKind::Not: return Value(!eval(*e.kids[0]).truthy());
    case ExprKind::And: {
        Value a = eval(*e.kids[0]);
        return a.truthy() ? eval(*e.kids[1]) : a;
    }
    case ExprKind::Or: {
        Value a = eval(*e.kids[0]);
        return a.truthy() ? a : eval(*e.kids[1]);
    }
    case ExprKind::Binary: {
        const Value a = eval(*e.kids[0]);
        const Value b = eval(*e.kids[1]);
        pos_ = e.pos;
        return eval_binary(e.name, a, b);
    }
    case ExprKind::Compare: {
        Value left = eval(*e.kids[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
            Value right = eval(*e.kids[i + 1]);
            pos_ = e.pos;
            if (!compare(e.ops[i], left, right)) return Value(false);
            left = std::move(right);
        }
        return Value(true);
    }
    case ExprKind::CondExpr:
        if (eval(*e.kids[0]).truthy()) return eval(*e.kids[1]);
        if (e.kids[2]) return eval(*e.kids[2]);
        return Value::undefined("the inline if expression evaluated to false and no else section was defined");
    }
    return Value();
}

Value Interpreter::eval_call(const Expr& e) {
    const Expr& callee = *e.kids[0];
    if (callee.kind == ExprKind::GetAttr) {
        const Value obj = eval(*callee.kids[0]);
        const Args args = eval_args(e.args);
        pos_ = callee.pos;
        require_defined(obj);
        if (const MethodFn m = find_method(obj.kind(), callee.name)) return m(*this, obj, args);
        const Value fn = get_attr(obj, callee.name);
        return call(fn, args);
    }
    const Value fn = eval(callee);
    const Args args = eval_args(e.args);
    pos_ = e.pos;
    return call(fn, args);
}

Value Interpreter::eval_slice(const Value& obj, const Expr* start_e, const Expr* stop_e, const Expr* step_e) {
    const auto bound = [&](const Expr* x, const char* what) -> std::optional<int64_t> {
        if (!x) return std::nullopt;
        const Value v = eval(*x);
        if (v.is_none()) return std::nullopt;
        if (!v.is_int() && !v.is_bool()) fail(std::string("slice ") + what + " must be an integer, found '" + v.type_name() + "'");
        return v.as_int();
    };
    const auto start = bound(start_e, "start");
    const auto stop = bound(stop_e, "stop");
    const auto step_v = bound(step_e, "step");
    require_defined(obj);
    const int64_t step = step_v.value_or(1);
    if (step == 0) fail("slice step cannot be zero");
    std::vector<std::string_view> chars;
    if (obj.is_string()) chars = utf8_chars(obj.as_string());
    else if (!obj.is_list()) fail("'" + obj.type_name() + "' object is not subscriptable with a slice");
    const auto n = static_cast<int64_t>(obj.is_list() ? obj.as_list().size() : chars.size());
    // Python's slice.indices()
    const auto clamp = [&](std::optional<int64_t> v, int64_t def) {
        if (!v) return def;
        int64_t x = *v;
        if (x < 0) x = std::max<int64_t>(x + n, step < 0 ? -1 : 0);
        else x = std::min<int64_t>(x, step < 0 ? n - 1 : n);
        return x;
    };
    const int64_t lo = clamp(start, step < 0 ? n - 1 : 0);
    const int64_t hi = clamp(stop, step < 0 ? -1 : n);
    List items;
    std::string text;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
        if (obj.is_list()) items.push_back(obj.as_list()[static_cast<size_t>(i)]);
        else text += chars[static_cast<size_t>(i)];
    }
    return obj.is_list() ? Value(std::move(items)) : Value(std::move(text));
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in" || op == "not in") {
        bool found = false;
        if (b.is_string()) {
            if (!a.is_string()) fail("'in <string>' requires string as left operand, not '" + a.type_name() + "'");
            found = b.as_string().find(a.as_string()) != std::string::npos;
        } else if (b.is_dict()) {
            found = a.is_string() && b.as_dict().find(a.as_string());
        } else if (b.is_list()) {
            for (const auto& x : b.as_list()) found = found || equals(a, x);
        } else if (!b.is_undefined()) {
            fail("argument of type '" + b.type_name() + "' is not iterable");
        }
        return found == (op == "in");
    }
    require_defined(a);
    require_defined(b);
    if (op == "<") return less_than(a, b);
    if (op == ">") return less_than(b, a);
    if (op == "<=") return !less_than(b, a);
    return !less_than(a, b);  // ">="
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
        std::string s = to_str(a) + to_str(b);
        check_size(s.size());
        return Value(std::move(s));
    }
    require_defined(a);
    require_defined(b);
    const auto unsupported = [&]() {
        fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
    };
    if (a.is_number() && b.is_number()) {
        const bool ints = !a.is_float() && !b.is_float();
        const int64_t x = ints ? a.as_int() : 0, y = ints ? b.as_int() : 0;
        const double fx = a.as_double(), fy = b.as_double();
        if (op == "+") return ints ? Value(checked(add_ovf, x, y, *this)) : Value(fx + fy);
        if (op == "-") return ints ? Value(checked(sub_ovf, x, y, *this)) : Value(fx - fy);
        if (op == "*") return ints ? Value(checked(mul_ovf, x, y, *this)) : Value(fx * fy);
        if (op == "/") {
            if (fy == 0) fail("division by zero");
            return Value(fx / fy);
        }
        if (op == "//" || op == "%") {
            if (ints ? y == 0 : fy == 0) fail(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
            if (ints) {
                if (x == INT64_MIN && y == -1) fail("integer overflow (Tandem's integers are 64-bit)");
                const int64_t q = floor_div(x, y);
                return op == "//" ? Value(q) : Value(x - q * y);
            }
            const double q = std::floor(fx / fy);
            if (op == "//") return Value(q);
            double m = std::fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
            return Value(m);
        }
        if (op == "**") {
            if (ints && y >= 0) {
                int64_t result = 1, base = x;
                for (int64_t k = y; k > 0; k >>= 1) {
                    if (k & 1) result = checked(mul_ovf, result, base, *this);
                    if (k > 1) base = checked(mul_ovf, base, base, *this);
                }
                return Value(result);
            }
            if (fx == 0 && fy < 0) fail("0.0 cannot be raised to a negative power");
            return Value(std::pow(fx, fy));
        }
        unsupported();
    }
    if (op == "+" && a.is_string() && b.is_string()) {
        check_size(a.as_string().size() + b.as_string().size());
        return Value(a.as_string() + b.as_string());
    }
    if (op == "+" && a.is_list() && b.is_list()) {
        check_size(a.as_list().size() + b.as_list().size());
        List l = a.as_list();
        l.insert(l.end(), b.as_list().begin(), b.as_list().end());
        return Value(std::move(l));
    }
    if (op == "*" && (a.is_int() || b.is_int()) && (a.is_string() || b.is_string() || a.is_list() || b.is_list())) {
        const Value& seq = a.is_int() ? b : a;
        const int64_t times = std::max<int64_t>(0, (a.is_int() ? a : b).as_int());
        const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
        if (unit != 0 && static_cast<uint64_t>(times) > options_.max_output_bytes / unit) check_size(options_.max_output_bytes + 1);
        if (seq.is_string()) {
            std::string s;
            for (int64_t k = 0; k < times; ++k) s += seq.as_string();
            return Value(std::move(s));
        }
        List l;
        for (int64_t k = 0; k < times; ++k) l.insert(l.end(), seq.as_list().begin(), seq.as_list().end());
        return Value(std::move(l));
    }
    unsupported();
    return Value();
}

}  // namespace tandem::chat::jinja
