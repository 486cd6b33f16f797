#include "tools/serve/cors.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "tools/serve/http_util.h"

namespace tandem::serve {

namespace {

constexpr const char* kMethods = "GET, POST, OPTIONS";
constexpr const char* kHeaders = "Authorization, Content-Type";
constexpr int kMaxAgeSeconds = 7200;  // Chromium's cap

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// scheme://host[:port]: no path, query, user or fragment.
bool is_origin(const std::string& o) {
    const size_t sep = o.find("://");
    if (sep == std::string::npos || sep == 0 || sep + 3 >= o.size()) return false;
    const bool scheme_ok = std::all_of(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(sep), [](unsigned char c) {
        return std::isalnum(c) || c == '+' || c == '-' || c == '.';
    });
    const std::string rest = o.substr(sep + 3);
    return scheme_ok && rest.find_first_of("/?#@ \t") == std::string::npos;
}

// Access-Control-Request-Headers, when it is a plain list of header names.
bool plain_header_list(const std::string& s) {
    return s.size() <= 1000 && std::all_of(s.begin(), s.end(), [](unsigned char c) {
               return std::isalnum(c) || c == '-' || c == '_' || c == ',' || c == ' ';
           });
}

}  // namespace

std::vector<std::string> parse_cors_origins(const std::vector<std::string>& values) {
    std::vector<std::string> out;
    for (const std::string& value : values) {
        size_t start = 0;
        while (start <= value.size()) {
            const size_t comma = std::min(value.find(',', start), value.size());
            const std::string o = trim(value.substr(start, comma - start));
            start = comma + 1;
            if (o.empty()) continue;
            if (o != "*" && !is_origin(o)) {
                throw Error(fmt::format("--cors-origin '{}': expected '*' or an origin as browsers send it, "
                                        "scheme://host[:port] with no path (e.g. http://localhost:3000)",
                                        o));
            }
            out.push_back(o == "*" ? o : lower(o));
        }
    }
    return out;
}

std::string allowed_origin(const std::vector<std::string>& origins, const std::string& origin) {
    if (origin.empty()) return "";
    const std::string o = lower(origin);
    for (const std::string& allowed : origins) {
        if (allowed == "*") return "*";
        if (allowed == o) return origin;
    }
    return "";
}

bool is_preflight(const httplib::Request& req) { return req.method == "OPTIONS" && req.has_header("Origin"); }

void answer_preflight(const std::vector<std::string>& origins, const httplib::Request& req, httplib::Response& res) {
    const std::string origin = req.get_header_value("Origin");
    const std::string allow = allowed_origin(origins, origin);
    if (allow.empty()) {
        set_error(req, res, 403,
                  fmt::format("origin '{}' may not call this server: start it with --cors-origin {}",
                              origin.substr(0, 200), origin.substr(0, 200)),
                  "permission_error");
        return;
    }
    std::string headers = kHeaders;
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    if (!asked.empty() && plain_header_list(asked)) headers += ", " + asked;
    res.status = 204;
    res.set_header("Access-Control-Allow-Origin", allow);
    res.set_header("Access-Control-Allow-Methods", kMethods);
    res.set_header("Access-Control-Allow-Headers", headers);
    res.set_header("Access-Control-Max-Age", std::to_string(kMaxAgeSeconds));
    res.set_header("Vary", "Origin");
}

void add_cors_headers(const std::vector<std::string>& origins, const httplib::Request& req, httplib::Response& res) {
    if (origins.empty() || res.has_header("Access-Control-Allow-Origin")) return;
    const std::string allow = allowed_origin(origins, req.get_header_value("Origin"));
    if (allow.empty()) return;
    res.set_header("Access-Control-Allow-Origin", allow);
    res.set_header("Vary", "Origin");
}

}  // namespace tandem::serve
