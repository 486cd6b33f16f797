// The HTTP side of `tandem serve`: binds first (so /health answers 503
// while the model loads), then serves the routes once the model is set.
#pragma once

#include <memory>
#include <thread>

#include "tools/serve/server_state.h"

namespace httplib {
class Server;
}

namespace tandem::serve {

class HttpServer {
public:
    explicit HttpServer(ServerState& state);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds host:port (port 0: any free port) and starts answering on its
    // own threads. Throws tandem::Error when the address cannot be bound.
    void start();
    int port() const { return port_; }
    // Stops listening and waits for the handlers to return.
    void stop();

private:
    ServerState& state_;
    std::unique_ptr<httplib::Server> server_;
    std::thread thread_;
    int port_ = 0;
};

}  // namespace tandem::serve
