// The syntax tree of the Jinja subset, as jinja_parser builds it and
// jinja_eval walks it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/chat/jinja_lexer.h"
#include "runtime/chat/jinja_value.h"

namespace tandem::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallArgs {
    std::vector<ExprPtr> pos;
    std::vector<std::pair<std::string, ExprPtr>> kw;
};

enum class ExprKind : uint8_t {
    Const,     // value
    Name,      // name
    List,      // kids
    Tuple,     // kids
    Dict,      // kids: key, value, key, value...
    GetAttr,   // kids[0].name
    GetItem,   // kids[0][kids[1]]
    Slice,     // kids[0][kids[1]:kids[2]:kids[3]], absent parts are null
    Call,      // kids[0](args)
    Filter,    // kids[0] | name(args)
    Test,      // kids[0] is [not] name(args)
    Neg,       // -kids[0]
    Pos,       // +kids[0]
    Not,       // not kids[0]
    And,       // kids[0] and kids[1]
    Or,        // kids[0] or kids[1]
    Binary,    // kids[0] name kids[1], name in + - * / // % ** ~
    Compare,   // kids[0] ops[0] kids[1] ops[1] kids[2]...
    CondExpr,  // kids[1] if kids[0] else kids[2] (kids[2] may be null)
};

struct Expr {
    ExprKind kind = ExprKind::Const;
    SourcePos pos;
    Value value;
    std::string name;
    std::vector<ExprPtr> kids;
    CallArgs args;
    std::vector<std::string> ops;
    bool negated = false;
    int height = 1;  // of the subtree, capped by the parser so walking it cannot overflow the stack
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind : uint8_t {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches (cond, body); else_body
    For,       // for targets in expr [if cond] ... [else] ...
    Set,       // set targets = expr, or set attr_of.name = expr
    SetBlock,  // set targets[0] %}body{% endset
    Macro,     // macro name(params) %}body{% endmacro
    Break,
    Continue,
    Block,     // body rendered as is ({% generation %}, {% block %})
};

struct Stmt {
    StmtKind kind = StmtKind::Text;
    SourcePos pos;
    std::string text;
    ExprPtr expr;
    ExprPtr cond;                                    // For's inline filter
    std::vector<std::pair<ExprPtr, Body>> branches;  // If
    Body body;
    Body else_body;
    std::vector<std::string> targets;                // For/Set names (several: unpacking)
    ExprPtr attr_of;                                 // Set ns.attr: the namespace expression
    std::string name;                                // Set attr name, Macro name
    std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters with defaults (null: none)
};

struct Program {
    Body body;
};

// Parses a normalized source (normalize_source). Throws tandem::Error
// naming line and column.
std::shared_ptr<const Program> parse_program(std::string_view normalized_source);

}  // namespace tandem::chat::jinja
