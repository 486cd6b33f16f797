// The connection layer of `tandem serve`: the listening socket, one thread
// that waits on every connection with no request in flight, worker threads
// for the requests, and the bounds that keep any client from holding the
// others up.
//
// cpp-httplib 0.11 serves connections from a fixed pool (32 threads): a
// connection holds its thread for as long as it is open, idle keep-alive
// waits included, so 32 slow or idle clients made every other request wait
// (the 200 slow clients: no answer within 60 s; /health behind 64
// chats: 16 s). A thread per connection fixed the waiting but held 1,000
// threads (and 88 MiB) for 1,000 idle connections. Here the connections
// that wait (accepted, or kept alive between requests) are in one epoll
// set that one thread watches (it accepts too); a connection gets a worker
// when the first byte of a request arrives, and goes back to the set after
// the answer. Workers start as requests need them (--threads-http are kept
// ready, the others end after 10 s without work), up to one per open
// connection: a fixed pool smaller than the requests in flight would bring
// back httplib's waiting (200 slow clients each hold a worker, for
// --timeout at most). The bounds make every connection end in a bounded time:
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
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tools/serve/conn_stream.h"

namespace tandem::serve {

struct ConnectionLimits {
    int max_connections = 1024;   // --max-connections
    int warm_threads = 32;        // --threads-http: worker threads kept ready when idle
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
    // Accepts connections, and waits on those with no request in flight,
    // on a thread of its own until stop().
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
    // Connection `id` closes (lingering) once its current answer is out,
    // whatever the request asked (on its own thread: an answer given
    // before the request's body was read).
    void end_after_answer(uint64_t id);
    const ConnectionLimits& limits() const { return limits_; }

private:
    // Where a connection is: in the waiting set, queued for a worker (a
    // request's bytes arrived), or with a worker.
    enum class State { Waiting, Queued, Busy };
    struct Conn {
        Conn(int fd, const RequestBounds& bounds) : fd(fd), stream(fd, bounds) {}
        ~Conn();  // closes fd
        Conn(const Conn&) = delete;
        Conn& operator=(const Conn&) = delete;
        const int fd;
        ConnStream stream;  // kept between requests: it may hold a pipelined one
        uint64_t id = 0;
        State state = State::Waiting;
        int served = 0;  // requests begun on it
        ConnClock::time_point idle_since{};
        std::list<Conn*>::iterator in_waiting{};  // while Waiting
    };

    void wait_loop();
    void accept_all();
    void admit(int fd);
    // Bytes, a close or an error on waiting connection `id`.
    void on_ready(uint64_t id);
    // A worker thread with nothing to do: it is handed a connection
    // directly, through its own condition variable (a shared one woke a
    // worker up to 1.5 s late with 200 of them waiting, on a busy machine).
    struct FreeWorker {
        std::condition_variable cv;
        Conn* conn = nullptr;
    };
    void worker(Conn* first);
    // Answers c's requests while their bytes are there, then hands it back
    // to the waiting set or closes it.
    void serve(Conn& c);
    // Under mu_: c into the waiting set (epoll `op`: EPOLL_CTL_ADD or _MOD);
    // false when epoll cannot take it.
    bool park(Conn& c, int op);
    // Under mu_: c out of every set and open_; closing it is the caller's
    // (destroying what is returned).
    std::unique_ptr<Conn> unlink(Conn& c);
    // Under mu_: the longest idle connection closed to make room; false if
    // none is idle.
    bool evict_idle();
    // Under mu_: c (a request's bytes arrived) to the worker freed last, or
    // to a new one; queued when there are as many workers as connections
    // (one finishing takes it). False when none is free and no thread can
    // be had.
    bool dispatch(Conn& c);
    // Under mu_: the workers that ended, to be joined (off their own
    // threads, outside the lock).
    std::vector<std::thread> take_finished();
    void wake() const;

    ConnectionLimits limits_;
    Runner run_;
    int listen_fd_ = -1;
    int wake_fd_ = -1;   // eventfd: wakes the waiting thread (stop, a first waiter, a worker ended)
    int epoll_fd_ = -1;  // the listener, wake_fd_ and the waiting connections
    std::thread waiter_;

    mutable std::mutex mu_;
    std::condition_variable done_cv_;  // a worker thread ended
    std::unordered_map<uint64_t, std::unique_ptr<Conn>> open_;
    std::list<Conn*> waiting_;  // oldest idle_since first: the idle close and the eviction take the front
    std::deque<uint64_t> queue_;  // Queued, in arrival order
    // Free workers, the one freed last at the back: it gets the next
    // connection, so the others stay free and end after kThreadLinger.
    std::vector<FreeWorker*> free_;
    std::unordered_map<std::thread::id, std::thread> workers_;
    std::vector<std::thread::id> finished_;  // workers that ended, to be joined
    uint64_t next_id_ = 1;
    int threads_ = 0;  // worker threads alive
    bool stopping_ = false;
};

}  // namespace tandem::serve
