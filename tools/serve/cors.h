// Cross-origin requests from browser apps (--cors-origin): off unless
// origins are given. With them, a preflight (OPTIONS with Origin) on any
// route is answered at once, before the API key is asked for (browsers
// send none with it), and answers to an allowed origin carry
// Access-Control-Allow-Origin and Vary: Origin. An origin not allowed
// gets no CORS headers.
#pragma once

#include <string>
#include <vector>

#include <httplib.h>

namespace tandem::serve {

// --cors-origin's values, each a list split at commas: "*" or
// scheme://host[:port] (no path, as browsers send Origin). Throws
// tandem::Error naming the value otherwise.
std::vector<std::string> parse_cors_origins(const std::vector<std::string>& values);

// Access-Control-Allow-Origin for a request's Origin: "" (none given, CORS
// off, or not allowed), "*" (--cors-origin '*'), or the origin itself.
std::string allowed_origin(const std::vector<std::string>& origins, const std::string& origin);

bool is_preflight(const httplib::Request& req);
// 204 with Access-Control-Allow-Origin, -Methods, -Headers (Authorization,
// Content-Type and those the browser asks for) and -Max-Age; 403 with no
// CORS headers for an origin not allowed.
void answer_preflight(const std::vector<std::string>& origins, const httplib::Request& req, httplib::Response& res);
// Adds the headers to any other answer to an allowed origin.
void add_cors_headers(const std::vector<std::string>& origins, const httplib::Request& req, httplib::Response& res);

}  // namespace tandem::serve
