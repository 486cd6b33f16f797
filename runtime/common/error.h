// Error types. Untrusted input (files, flags, prompts) raises an Error that
// says what was expected and what was found; the tools print it on one line
// and exit non-zero. Broken internal invariants use TANDEM_CHECK, which stays
// on in release builds.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

// Bad input from outside: a malformed file, a bad argument.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A bad value in a request a library takes (serving's loader, scheduler,
// generation): the message names the request's fields in braces, as in
// "{draft_min} 5 is more than {draft_max} 2". what() spells each field by
// its own name ("draft_min 5 is more than draft_max 2"); a front-end says
// them in its own words with render() (the CLI: its flags, "--draft-min").
class FieldError : public Error {
public:
    FieldError(std::string field, std::string message);
    // The field at fault (the first one the message names, usually).
    const std::string& field() const { return field_; }
    // The message with each {name} replaced by spell(name).
    std::string render(std::string (*spell)(std::string_view field)) const;

private:
    std::string field_;
    std::string message_;
};

// `message` with each {name} (lower-case letters, digits, '_') replaced by
// spell(name); other braces are left as they are. For warnings worded as
// FieldError's messages are.
std::string spell_fields(std::string_view message, std::string (*spell)(std::string_view field));

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
