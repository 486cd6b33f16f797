// Checks on a parsed grammar before it is flattened (gbnf_parser.cpp).
#pragma once

#include <string>
#include <vector>

#include "runtime/grammar/grammar.h"

namespace tandem::grammar {

// Throws GrammarError when a rule can reach itself before any character is
// consumed (`a ::= a "x"`, `a ::= b`, `b ::= "" a`, or `("x"?)*`): the
// matcher expands references until it meets a character, so such a rule
// would never stop. `rules[id]` holds the rule's alternatives.
void check_no_left_recursion(const std::vector<std::vector<std::vector<Element>>>& rules,
                             const std::vector<std::string>& names);

}  // namespace tandem::grammar
