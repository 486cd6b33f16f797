#include "tools/serve/page_routes.h"

#include <algorithm>
#include <string_view>

#include "tools/serve/page_files.h"

namespace tandem::serve {
namespace {

// Scripts, styles and requests from this origin only: no inline script, no
// outside host; the page may not be framed nor post a form anywhere. The
// empty data: icon keeps browsers from asking for /favicon.ico.
constexpr const char* kPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string_view content_type(std::string_view name) {
    auto ends = [name](std::string_view ext) {
        return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
    };
    if (ends(".html")) return "text/html; charset=utf-8";
    if (ends(".css")) return "text/css; charset=utf-8";
    if (ends(".js")) return "text/javascript; charset=utf-8";
    if (ends(".svg")) return "image/svg+xml";
    return "application/octet-stream";
}

// A file's name as a route pattern (httplib's patterns are regular
// expressions; the names are letters, digits, '_', '-' and '.').
std::string pattern(std::string_view name) {
    std::string out = "/";
    for (const char c : name) {
        if (c == '.') out += '\\';
        out += c;
    }
    return out;
}

void answer(const PageFile& f, httplib::Response& res) {
    res.set_header("Content-Security-Policy", kPolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    // A new binary may bring a new page: the browser asks each time.
    res.set_header("Cache-Control", "no-cache");
    res.set_content(std::string(f.bytes), std::string(content_type(f.name)));
}

}  // namespace

bool is_page_path(const std::string& path) {
    if (path == "/") return true;
    if (path.size() < 2 || path[0] != '/') return false;
    const std::string_view name = std::string_view(path).substr(1);
    const auto files = page_files();
    return std::any_of(files.begin(), files.end(), [name](const PageFile& f) { return f.name == name; });
}

void add_page_routes(httplib::Server& server) {
    for (const PageFile& f : page_files()) {
        const auto handler = [&f](const httplib::Request&, httplib::Response& res) { answer(f, res); };
        if (f.name == "index.html") server.Get("/", handler);
        server.Get(pattern(f.name), handler);
    }
}

}  // namespace tandem::serve
