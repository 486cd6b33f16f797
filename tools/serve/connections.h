// The connection layer of `tandem serve`: the listening socket, a thread
// per open connection, and the bounds that keep any client from holding
// the others up.
//
// cpp-httplib 0.11 serves connections from a fixed pool (32 threads): a
// connection holds its thread for as long as it is open, idle keep-alive
// waits included, so 32 slow or idle clients made every other request wait
// (the 200 slow clients: no answer within 60 s; /health behind 64
// chats: 16 s). Here a connection gets a thread of its own as it is
// accepted (threads are cheap while they wait), --threads-http of them are
// kept ready, and the bounds make every connection end in a bounded time:
//   - at most max_connections open; past it, the connection idle longest
//     is closed to make room, and when none is idle the new one gets 503;
//   - a connection with no request in flight is closed after idle_time;
//   - a request's head and body must arrive within --timeout seconds of
//     its first byte (408 otherwise), its head within 64 KiB (431) and
//     its body within the body limit (413);
//   - each write of an answer must make progress within --timeout.
// httplib still parses each request and routes it (HttpServer): this layer
// hands it a stream (ConnStream) whose head has fully arrived.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tools/serve/conn_stream.h"

namespace tandem::serve {

struct ConnectionLimits {
    int max_connections = 1024;   // --max-connections
    int warm_threads = 32;        // --threads-http: threads kept ready when idle
    ConnClock::duration idle_time = std::chrono::seconds(5);  // keep-alive: no request in flight
    int max_requests = 100;       // per connection (keep-alive)
    RequestBounds request;        // --timeout, the head and body caps
};

class Connections {
public:
    // Runs one request whose head is in `stream` (httplib's parsing and
    // routing): false closes the connection; `closed` too. `last`: the
    // answer must close it.
    using Runner = std::function<bool(ConnStream& stream, uint64_t id, bool last, bool& closed)>;

    Connections(ConnectionLimits limits, Runner run);
    ~Connections();
    Connections(const Connections&) = delete;
    Connections& operator=(const Connections&) = delete;

    // Binds host:port (port 0: any free port) and returns the port. Throws
    // tandem::Error when the address cannot be bound.
    int bind(const std::string& host, int port);
    int listen_fd() const { return listen_fd_; }
    // Accepts connections on a thread of its own, until stop().
    void start();
    // Stops accepting, shuts every open connection down (a request being
    // answered gets its write cut) and waits for their threads.
    void stop();

    // Whether connection `id`'s client has gone (closed or half-closed it,
    // or the connection ended): safe from any thread.
    bool client_gone(uint64_t id) const;
    // Why reading connection `id`'s current request stopped short (on its
    // own thread: httplib's error handler).
    ReadLimit read_limit(uint64_t id) const;
    const ConnectionLimits& limits() const { return limits_; }

private:
    struct Open {
        int fd = -1;
        bool idle = true;  // waiting for a request's first byte
        ConnClock::time_point idle_since{};
        const ConnStream* stream = nullptr;
    };

    void accept_loop();
    void admit(int fd);
    void worker();
    void serve(int fd);
    // The longest idle connection, shut down to make room: false if none
    // is idle. Under mu_.
    bool evict_idle();
    void set_idle(uint64_t id, bool idle);

    ConnectionLimits limits_;
    Runner run_;
    int listen_fd_ = -1;
    int wake_fd_ = -1;  // eventfd: wakes the accept loop on stop()
    std::thread acceptor_;

    mutable std::mutex mu_;
    std::condition_variable work_cv_;  // a connection queued, or stopping
    std::condition_variable done_cv_;  // a worker thread ended
    std::deque<int> queue_;            // accepted, not yet taken by a worker
    std::unordered_map<uint64_t, Open> open_;
    std::unordered_map<std::thread::id, std::thread> workers_;
    std::vector<std::thread::id> finished_;  // workers that ended, to be joined
    uint64_t next_id_ = 1;
    int threads_ = 0;       // worker threads alive
    int idle_threads_ = 0;  // of those, waiting for a connection
    bool stopping_ = false;
};

}  // namespace tandem::serve
