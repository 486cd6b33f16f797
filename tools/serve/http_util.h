// Small pieces every route uses: a JSON answer, an error answer in the
// shape the route's clients parse, and a wrapper that turns whatever a
// handler throws into an answer (ApiError: its status; a tandem::Error
// from input: 400; anything else: 500), so no request is left without one
// and none stops the server.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "tools/serve/anthropic_api.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/server_state.h"

namespace tandem::serve {

inline void set_json(httplib::Response& res, int status, const nlohmann::json& body) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

// Ollama's routes (/api/...) answer errors as {"error": "message"},
// Anthropic's (/v1/messages) with its error object (anthropic_error), the
// others with OpenAI's error object (error_body).
inline bool ollama_route(const std::string& path) { return path.rfind("/api/", 0) == 0; }
inline bool anthropic_route(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

inline void set_error(const httplib::Request& req, httplib::Response& res, int status, const std::string& message,
                      const std::string& type = "invalid_request_error", const std::string& param = {}) {
    if (ollama_route(req.path)) return set_json(res, status, nlohmann::json{{"error", message}});
    if (anthropic_route(req.path)) return set_json(res, status, anthropic_error(status, message));
    set_json(res, status, error_body(message, type, param, status));
}

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

inline Handler guarded(ServerState& state, Handler h) {
    return [&state, h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
        state.requests_total.fetch_add(1);
        try {
            h(req, res);
        } catch (const ApiError& e) {
            if (e.status >= 400 && e.status < 500) state.requests_rejected.fetch_add(1);
            set_error(req, res, e.status, e.what(), e.type, e.param);
        } catch (const Error& e) {
            state.requests_rejected.fetch_add(1);
            set_error(req, res, 400, e.what());
        } catch (const std::exception& e) {
            set_error(req, res, 500, e.what(), "server_error");
        }
    };
}

}  // namespace tandem::serve
