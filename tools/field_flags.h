// The CLI's words for the serving library's request fields: a FieldError
// from the library ("{draft_min} 5 is more than {draft_max} 2") reaches the
// user as "--draft-min 5 is more than --draft-max 2". The one table from
// field names to flags; main() renders every FieldError through it.
#pragma once

#include <string>
#include <string_view>

#include "runtime/common/error.h"

namespace tandem::tools {

// The flag that sets `field` (a field no flag sets keeps its own name).
std::string flag_for_field(std::string_view field);

// e's message in flags.
std::string in_flags(const FieldError& e);
// A serving message naming fields as {field} (a warning, Split::why), in flags.
std::string in_flags(std::string_view message);

// Prints a serving warning on stderr, in flags: the tools' serving::Warn.
void warn_on_stderr(const std::string& message);

}  // namespace tandem::tools
