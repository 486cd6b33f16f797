// Error types. Untrusted input (files, flags, prompts) raises an Error that
// says what was expected and what was found; the tools print it on one line
// and exit non-zero. Broken internal invariants use TANDEM_CHECK, which stays
// on in release builds.
#pragma once

#include <stdexcept>
#include <string>

namespace tandem {

// Bad input from outside: a malformed file, a bad argument.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A bug in Tandem itself: an invariant that should hold did not.
class InternalError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

[[noreturn]] void fail_check(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace tandem

#define TANDEM_CHECK(cond, msg)                                        \
    do {                                                               \
        if (!(cond)) ::tandem::fail_check(#cond, __FILE__, __LINE__, (msg)); \
    } while (0)
