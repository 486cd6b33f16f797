// Recursive-descent parser for the Jinja subset, following jinja2's grammar
// and operator precedence (jinja2/parser.py), e.g. `-x|f` is `(-x)|f` and
// `a ~ b + c` is `(a ~ b) + c`.
#include <algorithm>
#include <initializer_list>

#include "runtime/chat/jinja_ast.h"
#include "runtime/common/error.h"

namespace tandem::chat::jinja {
namespace {

// Nesting of expressions and of statements. Real templates nest a few
// levels; the cap keeps hostile sources from exhausting the stack.
constexpr int kMaxDepth = 200;

class Parser {
public:
    explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

    std::shared_ptr<const Program> run() {
        auto program = std::make_shared<Program>();
        std::string stop;
        program->body = parse_body({}, stop, SourcePos{}, "");
        return program;
    }

private:
    struct DepthGuard {
        Parser& p;
        DepthGuard(Parser& parser, SourcePos pos) : p(parser) {
            if (++p.depth_ > kMaxDepth) syntax_error(pos, "expected at most " + std::to_string(kMaxDepth) + " levels of nesting, found more");
        }
        ~DepthGuard() { --p.depth_; }
    };

    const Token& peek(size_t k = 0) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
    const Token& next() {
        const Token& t = peek();
        if (i_ < toks_.size() - 1) ++i_;
        return t;
    }
    bool at_op(std::string_view op, size_t k = 0) const { return peek(k).kind == TokenKind::Op && peek(k).text == op; }
    bool at_name(std::string_view name, size_t k = 0) const { return peek(k).kind == TokenKind::Name && peek(k).text == name; }
    bool skip_op(std::string_view op) {
        if (!at_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(std::string_view name) {
        if (!at_name(name)) return false;
        next();
        return true;
    }
    [[noreturn]] void fail_expected(const std::string& what) const {
        syntax_error(peek().pos, "expected " + what + ", found " + describe(peek()));
    }
    void expect_op(std::string_view op) {
        if (!skip_op(op)) fail_expected("'" + std::string(op) + "'");
    }
    std::string expect_name(const std::string& what) {
        if (peek().kind != TokenKind::Name) fail_expected(what);
        return next().text;
    }
    void expect_block_end() {
        if (peek().kind != TokenKind::BlockEnd) fail_expected("'%}'");
        next();
    }

    ExprPtr make(ExprKind kind, SourcePos pos) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->pos = pos;
        return e;
    }
    // Computes the subtree height once the node's children are in place.
    ExprPtr seal(ExprPtr e) {
        int h = 0;
        for (const auto& k : e->kids)
            if (k) h = std::max(h, k->height);
        for (const auto& k : e->args.pos) h = std::max(h, k->height);
        for (const auto& [n, k] : e->args.kw) h = std::max(h, k->height);
        e->height = h + 1;
        if (e->height > kMaxDepth) syntax_error(e->pos, "expected an expression at most " + std::to_string(kMaxDepth) + " operations deep, found a deeper one");
        return e;
    }
    ExprPtr make_binary(ExprKind kind, SourcePos pos, std::string op, ExprPtr a, ExprPtr b) {
        auto e = make(kind, pos);
        e->name = std::move(op);
        e->kids.push_back(std::move(a));
        e->kids.push_back(std::move(b));
        return seal(std::move(e));
    }
    ExprPtr make_unary(ExprKind kind, SourcePos pos, ExprPtr a) {
        auto e = make(kind, pos);
        e->kids.push_back(std::move(a));
        return seal(std::move(e));
    }

    // ---- statements ----

    Body parse_body(std::initializer_list<std::string_view> stops, std::string& stop_found, SourcePos opened_at, std::string_view opener) {
        DepthGuard guard(*this, peek().pos);
        Body body;
        while (true) {
            const Token& t = peek();
            if (t.kind == TokenKind::Eof) {
                if (stops.size() == 0) return body;
                syntax_error(t.pos, "expected '" + std::string(*std::prev(stops.end())) + "' closing the '" + std::string(opener) +
                                        "' at " + describe(opened_at) + ", found end of template");
            }
            if (t.kind == TokenKind::Text) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Text;
                s->pos = t.pos;
                s->text = next().text;
                body.push_back(std::move(s));
            } else if (t.kind == TokenKind::VarBegin) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Output;
                s->pos = next().pos;
                s->expr = parse_tuple(true);
                if (peek().kind != TokenKind::VarEnd) fail_expected("'}}'");
                next();
                body.push_back(std::move(s));
            } else if (t.kind == TokenKind::BlockBegin) {
                const Token& kw = peek(1);
                if (kw.kind == TokenKind::Name && std::find(stops.begin(), stops.end(), kw.text) != stops.end()) {
                    next();
                    stop_found = next().text;
                    return body;
                }
                next();
                body.push_back(parse_statement());
            } else {
                fail_expected("template text or a tag");
            }
        }
    }

    StmtPtr parse_statement() {
        const Token& kw = peek();
        if (kw.kind != TokenKind::Name) fail_expected("a statement name after '{%'");
        auto s = std::make_unique<Stmt>();
        s->pos = kw.pos;
        const std::string name = next().text;
        if (name == "if") parse_if(*s);
        else if (name == "for") parse_for(*s);
        else if (name == "set") parse_set(*s);
        else if (name == "macro") parse_macro(*s);
        else if (name == "break" || name == "continue") {
            if (loop_depth_ == 0) syntax_error(s->pos, "'" + name + "' outside of a for loop");
            s->kind = name == "break" ? StmtKind::Break : StmtKind::Continue;
            expect_block_end();
        } else if (name == "generation" || name == "block") {
            s->kind = StmtKind::Block;
            if (name == "block") expect_name("a block name");
            expect_block_end();
            std::string stop;
            s->body = parse_body({name == "block" ? "endblock" : "endgeneration"}, stop, s->pos, name);
            if (name == "block" && peek().kind == TokenKind::Name) next();
            expect_block_end();
        } else if (name == "extends" || name == "include" || name == "import" || name == "from" || name == "call" ||
                   name == "filter" || name == "with" || name == "autoescape") {
            syntax_error(s->pos, "'" + name + "' tags are not supported by this Jinja subset");
        } else {
            syntax_error(s->pos, "expected a statement such as 'if', 'for', 'set' or 'macro', found '" + name + "'" +
                                     (name.rfind("end", 0) == 0 || name == "else" || name == "elif" ? " with no open block it could close" : ""));
        }
        return s;
    }

    void parse_if(Stmt& s) {
        s.kind = StmtKind::If;
        std::string stop = "elif";
        while (stop == "elif") {
            auto cond = parse_tuple(true);
            expect_block_end();
            auto body = parse_body({"elif", "else", "endif"}, stop, s.pos, "if");
            s.branches.emplace_back(std::move(cond), std::move(body));
        }
        if (stop == "else") {
            expect_block_end();
            s.else_body = parse_body({"endif"}, stop, s.pos, "if");
        }
        expect_block_end();
    }

    void parse_for(Stmt& s) {
        s.kind = StmtKind::For;
        do {
            s.targets.push_back(expect_name("a loop variable name"));
        } while (skip_op(","));
        if (!skip_name("in")) fail_expected("'in'");
        s.expr = parse_tuple(false);
        if (skip_name("if")) s.cond = parse_expression(true);
        if (at_name("recursive")) syntax_error(peek().pos, "recursive loops are not supported by this Jinja subset");
        expect_block_end();
        ++loop_depth_;
        std::string stop;
        s.body = parse_body({"else", "endfor"}, stop, s.pos, "for");
        --loop_depth_;
        if (stop == "else") {
            expect_block_end();
            s.else_body = parse_body({"endfor"}, stop, s.pos, "for");
        }
        expect_block_end();
    }

    void parse_set(Stmt& s) {
        s.kind = StmtKind::Set;
        const SourcePos target_pos = peek().pos;
        std::string first = expect_name("a variable name after 'set'");
        if (skip_op(".")) {
            auto ns = make(ExprKind::Name, target_pos);
            ns->name = std::move(first);
            s.attr_of = std::move(ns);
            s.name = expect_name("an attribute name");
        } else {
            s.targets.push_back(std::move(first));
            while (skip_op(",")) s.targets.push_back(expect_name("a variable name"));
        }
        if (skip_op("=")) {
            s.expr = parse_tuple(true);
            expect_block_end();
            return;
        }
        if (s.attr_of || s.targets.size() != 1) fail_expected("'='");
        expect_block_end();
        s.kind = StmtKind::SetBlock;
        std::string stop;
        s.body = parse_body({"endset"}, stop, s.pos, "set");
        expect_block_end();
    }

    void parse_macro(Stmt& s) {
        s.kind = StmtKind::Macro;
        s.name = expect_name("a macro name");
        expect_op("(");
        while (!at_op(")")) {
            if (!s.params.empty()) expect_op(",");
            if (at_op(")")) break;
            std::string param = expect_name("a parameter name");
            ExprPtr def;
            if (skip_op("=")) def = parse_expression(true);
            s.params.emplace_back(std::move(param), std::move(def));
        }
        expect_op(")");
        expect_block_end();
        const int saved_loops = loop_depth_;
        loop_depth_ = 0;
        std::string stop;
        s.body = parse_body({"endmacro"}, stop, s.pos, "macro");
        loop_depth_ = saved_loops;
        if (peek().kind == TokenKind::Name && peek().text == s.name) next();
        expect_block_end();
    }

    // ---- expressions ----

    // An expression, or several separated by commas (a tuple, kept as a list).
    ExprPtr parse_tuple(bool with_condexpr) {
        const SourcePos pos = peek().pos;
        auto first = parse_expression(with_condexpr);
        if (!at_op(",")) return first;
        auto list = make(ExprKind::Tuple, pos);
        list->kids.push_back(std::move(first));
        while (skip_op(",")) {
            if (peek().kind == TokenKind::VarEnd || peek().kind == TokenKind::BlockEnd || at_op(")")) break;
            list->kids.push_back(parse_expression(with_condexpr));
        }
        return seal(std::move(list));
    }

    ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

    ExprPtr parse_condexpr() {
        auto e = parse_or();
        while (at_name("if")) {
            const SourcePos pos = next().pos;
            auto cond = parse_or();
            ExprPtr otherwise;
            if (skip_name("else")) otherwise = parse_condexpr();
            auto c = make(ExprKind::CondExpr, pos);
            c->kids.push_back(std::move(cond));
            c->kids.push_back(std::move(e));
            c->kids.push_back(std::move(otherwise));
            e = seal(std::move(c));
        }
        return e;
    }

    ExprPtr parse_or() {
        auto e = parse_and();
        while (at_name("or")) {
            const SourcePos pos = next().pos;
            e = make_binary(ExprKind::Or, pos, "or", std::move(e), parse_and());
        }
        return e;
    }

    ExprPtr parse_and() {
        auto e = parse_not();
        while (at_name("and")) {
            const SourcePos pos = next().pos;
            e = make_binary(ExprKind::And, pos, "and", std::move(e), parse_not());
        }
        return e;
    }

    ExprPtr parse_not() {
        if (at_name("not")) {
            const SourcePos pos = next().pos;
            DepthGuard guard(*this, pos);
            return make_unary(ExprKind::Not, pos, parse_not());
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const SourcePos pos = peek().pos;
        auto first = parse_math1();
        ExprPtr cmp;
        while (true) {
            std::string op;
            if (peek().kind == TokenKind::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                                 peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
                op = next().text;
            } else if (at_name("in")) {
                next();
                op = "in";
            } else if (at_name("not") && at_name("in", 1)) {
                next();
                next();
                op = "not in";
            } else {
                break;
            }
            if (!cmp) {
                cmp = make(ExprKind::Compare, pos);
                cmp->kids.push_back(std::move(first));
            }
            cmp->ops.push_back(std::move(op));
            cmp->kids.push_back(parse_math1());
        }
        return cmp ? seal(std::move(cmp)) : std::move(first);
    }

    template <class Sub>
    ExprPtr parse_left_assoc(std::initializer_list<std::string_view> ops, Sub sub) {
        auto e = (this->*sub)();
        while (peek().kind == TokenKind::Op && std::find(ops.begin(), ops.end(), peek().text) != ops.end()) {
            const Token& t = next();
            e = make_binary(ExprKind::Binary, t.pos, t.text, std::move(e), (this->*sub)());
        }
        return e;
    }
    ExprPtr parse_math1() { return parse_left_assoc({"+", "-"}, &Parser::parse_concat); }
    ExprPtr parse_concat() { return parse_left_assoc({"~"}, &Parser::parse_math2); }
    ExprPtr parse_math2() { return parse_left_assoc({"*", "/", "//", "%"}, &Parser::parse_pow); }
    ExprPtr parse_pow() { return parse_left_assoc({"**"}, &Parser::parse_unary_filtered); }
    ExprPtr parse_unary_filtered() { return parse_unary(true); }

    ExprPtr parse_unary(bool with_filter) {
        const SourcePos pos = peek().pos;
        DepthGuard guard(*this, pos);
        ExprPtr e;
        if (skip_op("-")) e = make_unary(ExprKind::Neg, pos, parse_unary(false));
        else if (skip_op("+")) e = make_unary(ExprKind::Pos, pos, parse_unary(false));
        else e = parse_primary();
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    ExprPtr parse_primary() {
        const Token& t = peek();
        const SourcePos pos = t.pos;
        switch (t.kind) {
        case TokenKind::Name: {
            std::string name = next().text;
            auto e = make(ExprKind::Const, pos);
            if (name == "true" || name == "True") e->value = Value(true);
            else if (name == "false" || name == "False") e->value = Value(false);
            else if (name == "none" || name == "None") e->value = Value::none();
            else {
                e->kind = ExprKind::Name;
                e->name = std::move(name);
            }
            return e;
        }
        case TokenKind::String: {
            std::string s = next().text;
            while (peek().kind == TokenKind::String) s += next().text;
            auto e = make(ExprKind::Const, pos);
            e->value = Value(std::move(s));
            return e;
        }
        case TokenKind::Int:
        case TokenKind::Float: {
            auto e = make(ExprKind::Const, pos);
            e->value = t.kind == TokenKind::Int ? Value(t.int_value) : Value(t.float_value);
            next();
            return e;
        }
        case TokenKind::Op:
            if (t.text == "(") {
                next();
                if (skip_op(")")) return seal(make(ExprKind::Tuple, pos));
                auto e = parse_tuple(true);
                expect_op(")");
                return e;
            }
            if (t.text == "[") {
                next();
                auto e = make(ExprKind::List, pos);
                while (!at_op("]")) {
                    if (!e->kids.empty()) {
                        expect_op(",");
                        if (at_op("]")) break;
                    }
                    e->kids.push_back(parse_expression(true));
                }
                expect_op("]");
                return seal(std::move(e));
            }
            if (t.text == "{") {
                next();
                auto e = make(ExprKind::Dict, pos);
                while (!at_op("}")) {
                    if (!e->kids.empty()) {
                        expect_op(",");
                        if (at_op("}")) break;
                    }
                    e->kids.push_back(parse_expression(true));
                    expect_op(":");
                    e->kids.push_back(parse_expression(true));
                }
                expect_op("}");
                return seal(std::move(e));
            }
            break;
        default: break;
        }
        fail_expected("an expression");
    }

    ExprPtr parse_postfix(ExprPtr e) {
        while (true) {
            if (at_op(".") || at_op("[")) e = parse_subscript(std::move(e));
            else if (at_op("(")) e = parse_call(std::move(e));
            else return e;
        }
    }

    ExprPtr parse_filter_expr(ExprPtr e) {
        while (true) {
            if (at_op("|")) e = parse_filter(std::move(e));
            else if (at_name("is")) e = parse_test(std::move(e));
            else if (at_op("(")) e = parse_call(std::move(e));
            else return e;
        }
    }

    ExprPtr parse_subscript(ExprPtr obj) {
        const Token& t = next();
        const SourcePos pos = t.pos;
        if (t.text == ".") {
            const Token& attr = peek();
            if (attr.kind == TokenKind::Name) {
                auto e = make(ExprKind::GetAttr, pos);
                e->name = next().text;
                e->kids.push_back(std::move(obj));
                return seal(std::move(e));
            }
            if (attr.kind == TokenKind::Int) {
                auto e = make(ExprKind::GetItem, pos);
                auto key = make(ExprKind::Const, attr.pos);
                key->value = Value(next().int_value);
                e->kids.push_back(std::move(obj));
                e->kids.push_back(std::move(key));
                return seal(std::move(e));
            }
            fail_expected("an attribute name after '.'");
        }
        // '[': an index or a slice
        ExprPtr parts[3];
        bool is_slice = false;
        for (int k = 0; k < 3; ++k) {
            if (!at_op(":") && !at_op("]")) parts[k] = parse_expression(true);
            if (k < 2 && skip_op(":")) {
                is_slice = true;
                continue;
            }
            break;
        }
        expect_op("]");
        if (!is_slice && !parts[0]) syntax_error(pos, "expected an index inside '[]', found nothing");
        auto e = make(is_slice ? ExprKind::Slice : ExprKind::GetItem, pos);
        e->kids.push_back(std::move(obj));
        e->kids.push_back(std::move(parts[0]));
        if (is_slice) {
            e->kids.push_back(std::move(parts[1]));
            e->kids.push_back(std::move(parts[2]));
        }
        return seal(std::move(e));
    }

    void parse_call_args(CallArgs& args) {
        expect_op("(");
        bool first = true;
        while (!at_op(")")) {
            if (!first) {
                expect_op(",");
                if (at_op(")")) break;
            }
            first = false;
            if (at_op("*") || at_op("**")) syntax_error(peek().pos, "'*' and '**' arguments are not supported by this Jinja subset");
            if (peek().kind == TokenKind::Name && at_op("=", 1)) {
                std::string name = next().text;
                next();
                args.kw.emplace_back(std::move(name), parse_expression(true));
            } else {
                if (!args.kw.empty()) syntax_error(peek().pos, "expected a keyword argument (positional arguments come first), found " + describe(peek()));
                args.pos.push_back(parse_expression(true));
            }
        }
        expect_op(")");
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto e = make(ExprKind::Call, peek().pos);
        e->kids.push_back(std::move(callee));
        parse_call_args(e->args);
        return seal(std::move(e));
    }

    ExprPtr parse_filter(ExprPtr obj) {
        const SourcePos pos = next().pos;  // '|'
        auto e = make(ExprKind::Filter, pos);
        e->name = expect_name("a filter name after '|'");
        e->kids.push_back(std::move(obj));
        if (at_op("(")) parse_call_args(e->args);
        return seal(std::move(e));
    }

    ExprPtr parse_test(ExprPtr obj) {
        const SourcePos pos = next().pos;  // 'is'
        auto e = make(ExprKind::Test, pos);
        e->negated = skip_name("not");
        e->name = expect_name("a test name after 'is'");
        e->kids.push_back(std::move(obj));
        const Token& t = peek();
        if (at_op("(")) {
            parse_call_args(e->args);
        } else if ((t.kind == TokenKind::Name || t.kind == TokenKind::String || t.kind == TokenKind::Int ||
                    t.kind == TokenKind::Float || at_op("[") || at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and")) {
            if (at_name("is")) syntax_error(t.pos, "expected a test argument, found 'is'");
            DepthGuard guard(*this, t.pos);
            e->args.pos.push_back(parse_postfix(parse_primary()));
        }
        return seal(std::move(e));
    }

    std::vector<Token> toks_;
    size_t i_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse_program(std::string_view normalized_source) {
    return Parser(lex(normalized_source)).run();
}

}  // namespace tandem::chat::jinja
