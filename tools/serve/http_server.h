// The HTTP side of `tandem serve`: binds first (so /health answers 503
// while the model loads), then serves the routes once the model is set.
// Connections are the connection layer's (connections.h: one thread waits
// on the idle ones, a worker serves each request, bounded in number and
// time); httplib parses and routes each request.
#pragma once

#include <memory>

#include "tools/serve/server_state.h"

namespace tandem::serve {

class Connections;
class Router;

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
    // Stops listening, ends every connection (an answer still being
    // written is cut) and waits for the handlers to return.
    void stop();

private:
    ServerState& state_;
    std::unique_ptr<Router> router_;
    std::unique_ptr<Connections> connections_;
    int port_ = 0;
};

}  // namespace tandem::serve
