#include "runtime/common/error.h"

#include <fmt/format.h>

namespace tandem {

void fail_check(const char* expr, const char* file, int line, const std::string& msg) {
    throw InternalError(fmt::format("internal error at {}:{}: check `{}` failed: {}", file, line, expr, msg));
}

}  // namespace tandem
