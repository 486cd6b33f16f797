// The chat page at / (tools/serve/page/, embedded by embed_page.cmake):
// GET / and /index.html answer the page, GET /<file> its other files. The
// page holds no data, so it is served without the API key (the page itself
// sends the key with each API request); a Content-Security-Policy lets it
// load nothing but these files and talk to nothing but this server.
#pragma once

#include <string>

#include <httplib.h>

namespace tandem::serve {

// True for the paths the page's routes answer.
bool is_page_path(const std::string& path);

void add_page_routes(httplib::Server& server);

}  // namespace tandem::serve
