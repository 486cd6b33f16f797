#include "tools/serve/http_server.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>

#include <fmt/format.h>
#include <httplib.h>

#include "runtime/common/error.h"
#include "tools/serve/connections.h"
#include "tools/serve/cors.h"
#include "tools/serve/http_util.h"
#include "tools/serve/page_routes.h"

namespace tandem::serve {

// httplib's parsing and routing of one request, on a stream the connection
// layer hands it: its own accept loop and fixed thread pool are not used.
class Router : public httplib::Server {
public:
    // The header that ties a request to its connection (for client_gone):
    // set here, after any the client sent under that name is dropped.
    static constexpr const char* kConnectionHeader = "Tandem-Connection-Id";

    bool run(ConnStream& stream, uint64_t id, bool last, bool& closed) {
        return process_request(stream, last, closed, [id](httplib::Request& req) {
            req.headers.erase(kConnectionHeader);
            req.set_header(kConnectionHeader, std::to_string(id));
        });
    }
    // httplib ends a streamed answer once this is no longer a socket.
    void set_listening(int fd) { svr_sock_ = fd; }
};

namespace {

// The connection a request came on (0: none known).
uint64_t connection_of(const httplib::Request& req) {
    const std::string v = req.get_header_value(Router::kConnectionHeader);
    uint64_t id = 0;
    std::from_chars(v.data(), v.data() + v.size(), id);
    return id;
}

ConnectionLimits limits_of(const ServeConfig& c) {
    ConnectionLimits l;
    l.max_connections = c.max_connections;
    l.warm_threads = c.http_threads;
    l.request.read_time = std::chrono::seconds(c.timeout_s);
    l.request.write_time = std::chrono::seconds(c.timeout_s);
    // The body as sent: a chunked one may carry some framing past the
    // decoded limit (a body given its length is checked against the limit
    // itself before it is read).
    l.request.max_body_bytes = c.max_body_bytes + (size_t{64} << 10);
    return l;
}

// With --api-key, every route asks for the key but /health (for load
// balancers and supervisors) and a GET of the chat page's files (they hold
// no data; the page sends the key with its API requests): the admin routes
// too (/slots writes files, /metrics and /tokenize read the server's
// state), as llama-server does.
bool needs_key(const httplib::Request& req) {
    if (req.path == "/health") return false;
    return !((req.method == "GET" || req.method == "HEAD") && is_page_path(req.path));
}

// The request's framing, checked before its body is read (httplib's
// pre-routing handler runs first): 0 if it may be read, else the status to
// answer at once with `why`. Both Transfer-Encoding and Content-Length is
// how requests get smuggled past proxies (RFC 9112 6.3: 400); a
// Content-Length that is not a plain decimal number was read for 35 s and
// then refused; a compressed body inflates past the body limit while it is
// read (1.5 MB of gzip became 1.5 GiB), so it is refused as llama-server
// does (415).
int framing_error(const httplib::Request& req, size_t max_body, std::string& why) {
    const bool chunked = req.has_header("Transfer-Encoding");
    // httplib reads a body framed by anything but plain chunked, or by
    // nothing, until the client closes: such a request would hold its
    // connection until the read time runs out.
    if (chunked && req.get_header_value("Transfer-Encoding") != "chunked") {
        why = fmt::format("Transfer-Encoding '{}' is not supported: send Content-Length or 'chunked'",
                          req.get_header_value("Transfer-Encoding").substr(0, 40));
        return 501;
    }
    const bool has_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
    if (has_body && !chunked && !req.has_header("Content-Length")) {
        why = fmt::format("a {} request needs a Content-Length header (or Transfer-Encoding: chunked)", req.method);
        return 411;
    }
    if (req.has_header("Content-Length")) {
        if (chunked) {
            why = "a request with both Transfer-Encoding and Content-Length";
            return 400;
        }
        const std::string len = req.get_header_value("Content-Length");
        const bool digits = !len.empty() && len.size() <= 19 &&
                            std::all_of(len.begin(), len.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits) {
            why = fmt::format("Content-Length '{}' is not a byte count", len.substr(0, 40));
            return 400;
        }
        if (std::stoull(len) > max_body) {
            why = fmt::format("the request body ({} bytes) is over the limit of {} bytes", len, max_body);
            return 413;
        }
    }
    const std::string enc = req.get_header_value("Content-Encoding");
    if (!enc.empty() && enc != "identity") {
        why = fmt::format("Content-Encoding '{}' is not accepted: send the body uncompressed", enc.substr(0, 40));
        return 415;
    }
    return 0;
}

// Whether body bytes follow the request's head. An answer given before they
// are read (the pre-routing handler's) must close the connection: kept
// alive, the unread body would be parsed as the next request (a browser
// that sent a wrong key got "400" for its next, right one).
bool body_follows(const httplib::Request& req) {
    if (req.has_header("Transfer-Encoding")) return true;
    const std::string len = req.get_header_value("Content-Length");
    return !len.empty() && len.find_first_not_of('0') != std::string::npos;
}

// Compares in a time that depends on the key's length only: no early exit
// at the first difference, nor at a length that differs.
bool same_secret(const std::string& given, const std::string& key) {
    unsigned diff = given.size() == key.size() ? 0u : 1u;
    for (size_t i = 0; i < key.size(); ++i) {
        const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
        diff |= static_cast<unsigned>(g ^ static_cast<unsigned char>(key[i]));
    }
    return diff == 0;
}

// What the checks before a request's body is read made of it: routed on,
// answered, or answered with its framing refused (whatever follows the
// head is then no request, even without a body's header).
enum class Early { Route, Answered, FramingRefused };

// The answers given before a request's body is read, and before it is
// routed: its framing refused, a CORS preflight, the server stopping or
// loading, a missing or wrong API key (into `res`).
Early answer_before_body(ServerState& state, const httplib::Request& req, httplib::Response& res) {
    std::string why;
    if (const int status = framing_error(req, state.config.max_body_bytes, why); status != 0) {
        state.requests_rejected.fetch_add(1);
        set_error(req, res, status, why);
        return Early::FramingRefused;
    }
    // A browser's preflight carries no API key: it is answered first.
    if (!state.config.cors_origins.empty() && is_preflight(req)) {
        answer_preflight(state.config.cors_origins, req, res);
        return Early::Answered;
    }
    if (req.path == "/health") return Early::Route;
    if (state.stopping.load()) {
        set_error(req, res, 503, "the server is stopping", "unavailable_error");
        return Early::Answered;
    }
    if (!state.ready.load()) {
        set_error(req, res, 503, "Loading model", "unavailable_error");
        return Early::Answered;
    }
    if (!state.config.api_key.empty() && needs_key(req)) {
        // OpenAI's clients send Authorization: Bearer KEY, Anthropic's x-api-key: KEY.
        const std::string auth = req.get_header_value("Authorization");
        const std::string x_key = req.get_header_value("x-api-key");
        const std::string prefix = "Bearer ";
        const bool bearer_ok =
            auth.rfind(prefix, 0) == 0 && same_secret(auth.substr(prefix.size()), state.config.api_key);
        const bool x_ok = !x_key.empty() && same_secret(x_key, state.config.api_key);
        if (!bearer_ok && !x_ok) {
            state.requests_rejected.fetch_add(1);
            set_error(req, res, 401,
                      auth.empty() && x_key.empty()
                          ? "no API key: send the header Authorization: Bearer KEY (or x-api-key: KEY)"
                          : "the API key is not the server's",
                      "authentication_error");
            return Early::Answered;
        }
    }
    return Early::Route;
}

}  // namespace

HttpServer::HttpServer(ServerState& state)
    : state_(state),
      router_(std::make_unique<Router>()),
      connections_(std::make_unique<Connections>(
          limits_of(state.config), [this](ConnStream& stream, uint64_t id, bool last, bool& closed) {
              return router_->run(stream, id, last, closed);
          })) {
    httplib::Server& s = *router_;
    s.set_payload_max_length(state_.config.max_body_bytes);
    // What the Keep-Alive header tells clients: the layer's own bounds.
    const ConnectionLimits& limits = connections_->limits();
    s.set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(limits.idle_time).count());
    s.set_keep_alive_max_count(static_cast<size_t>(limits.max_requests));
    // The scheduler's look at whether a request's client is still there.
    state_.client_watch = [c = connections_.get()](const httplib::Request& req) -> std::function<bool()> {
        const uint64_t id = connection_of(req);
        if (id == 0) return {};
        return [c, id] { return c->client_gone(id); };
    };
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        const Early early = answer_before_body(state_, req, res);
        if (early == Early::Route) return httplib::Server::HandlerResponse::Unhandled;
        // Its body is never read: the connection ends after the answer
        // (httplib keeps it alive for anything but the request's own
        // "Connection: close"), and the client is told so.
        if (early == Early::FramingRefused || body_follows(req)) {
            res.set_header("Connection", "close");
            connections_->end_after_answer(connection_of(req));
        }
        return httplib::Server::HandlerResponse::Handled;
    });
    // Answers httplib makes itself (404, 413 for a body over the limit,
    // 400 for a request it cannot parse) get a JSON error body too.
    s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        // A body the connection layer stopped reading (httplib says 400).
        const ReadLimit limit = connections_->read_limit(connection_of(req));
        if (limit == ReadLimit::Body) res.status = 413;
        if (limit == ReadLimit::Time) {
            res.status = 408;
            state_.requests_rejected.fetch_add(1);
            set_error(req, res, 408,
                      fmt::format("the request's body did not arrive within {} s (--timeout)", state_.config.timeout_s));
            return;
        }
        std::string message = fmt::format("HTTP {}", res.status);
        if (res.status == 404) message = fmt::format("no route {} {}", req.method, req.path);
        if (res.status == 413) {
            message = fmt::format("the request body is over the limit of {} bytes", state_.config.max_body_bytes);
        }
        if (res.status == 405) message = fmt::format("{} is not allowed on {}", req.method, req.path);
        if (res.status >= 400 && res.status < 500) state_.requests_rejected.fetch_add(1);
        set_error(req, res, res.status, message, res.status == 404 ? "not_found_error" : "invalid_request_error");
    });
    // Every answer to an allowed origin, streamed ones too (httplib calls
    // this before it writes the headers), errors included.
    s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        add_cors_headers(state_.config.cors_origins, req, res);
    });
    s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        set_error(req, res, 500, what, "server_error");
    });
    add_admin_routes(s, state_);
    add_completion_routes(s, state_);
    add_ollama_routes(s, state_);
    add_anthropic_routes(s, state_);
    add_page_routes(s);
    add_embedding_routes(s, state_);
}

HttpServer::~HttpServer() {
    stop();
    state_.client_watch = nullptr;
}

void HttpServer::start() {
    const ServeConfig& c = state_.config;
    port_ = connections_->bind(c.host, c.port);
    router_->set_listening(connections_->listen_fd());
    connections_->start();
}

void HttpServer::stop() {
    router_->set_listening(-1);
    connections_->stop();
}

}  // namespace tandem::serve
