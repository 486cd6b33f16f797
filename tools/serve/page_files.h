// The chat page's files (tools/serve/page/), compiled into the binary: the
// definition is generated at build time by tools/serve/embed_page.cmake, so
// the server needs nothing on disk and fetches nothing from elsewhere.
#pragma once

#include <span>
#include <string_view>

namespace tandem::serve {

struct PageFile {
    std::string_view name;   // the file's name in tools/serve/page/, e.g. "chat.js"
    std::string_view bytes;  // its content, as in the repository
};

// Every file of the page, sorted by name.
std::span<const PageFile> page_files();

}  // namespace tandem::serve
