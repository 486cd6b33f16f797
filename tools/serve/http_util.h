// Small pieces every route uses: a JSON answer, and a wrapper that turns
// whatever a handler throws into an answer (ApiError: its status; a
// tandem::Error from input: 400; anything else: 500), so no request is
// left without one and none stops the server.
#pragma once

#include <exception>
#include <functional>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/common/error.h"
#include "tools/serve/openai_api.h"
#include "tools/serve/server_state.h"

namespace tandem::serve {

inline void set_json(httplib::Response& res, int status, const nlohmann::json& body) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

inline Handler guarded(ServerState& state, Handler h) {
    return [&state, h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
        state.requests_total.fetch_add(1);
        try {
            h(req, res);
        } catch (const ApiError& e) {
            state.requests_rejected.fetch_add(1);
            set_json(res, e.status, error_body(e.what(), e.type, e.param, e.status));
        } catch (const Error& e) {
            state.requests_rejected.fetch_add(1);
            set_json(res, 400, error_body(e.what(), "invalid_request_error", "", 400));
        } catch (const std::exception& e) {
            set_json(res, 500, error_body(e.what(), "server_error", "", 500));
        }
    };
}

}  // namespace tandem::serve
