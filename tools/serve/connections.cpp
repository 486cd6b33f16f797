#include "tools/serve/connections.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "runtime/common/error.h"
#include "tools/serve/openai_api.h"

namespace tandem::serve {

namespace {

// Worker threads past --threads-http end after this long without a request.
constexpr auto kThreadLinger = std::chrono::seconds(10);
// The epoll tags of the listener and the wake eventfd (connection ids
// count up from 1 and never reach them).
constexpr uint64_t kListenTag = ~uint64_t{0};
constexpr uint64_t kWakeTag = ~uint64_t{0} - 1;
constexpr int kEventsPerWait = 256;
// When the server closes a connection after an answer (a refused request
// whose body it never read, "Connection: close", --timeout), what the
// client still sends is read and dropped until it closes too, for this long
// at most (and up to kLingerBytes): closing with unread bytes resets the
// connection, and the client may then never read the answer (a client still
// sending a refused 9 MiB body gets a broken pipe instead of its 413).
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = size_t{64} << 20;
// File descriptors beside the connections: the model's files, the listener,
// logs, the draft model.
constexpr int kOtherFds = 64;

const char* reason_phrase(int status) {
    switch (status) {
        case 408: return "Request Timeout";
        case 413: return "Payload Too Large";
        case 431: return "Request Header Fields Too Large";
        case 503: return "Service Unavailable";
        default: return "Error";
    }
}

// A whole answer the layer writes itself: OpenAI's error object, and the
// connection closes after it.
std::string refusal(int status, const std::string& message) {
    const std::string body =
        error_body(message, status == 503 ? "unavailable_error" : "invalid_request_error", "", status).dump();
    return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
                       "Connection: close\r\n{}\r\n{}",
                       status, reason_phrase(status), body.size(), status == 503 ? "Retry-After: 1\r\n" : "", body);
}

void close_quietly(int fd) {
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
}

// The 503 for a connection the server has no room (or no thread) for; the
// caller closes it.
void send_busy(int fd, const std::string& why) {
    const std::string busy = refusal(503, why);
    [[maybe_unused]] const ssize_t n = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Drains what the client still sends (kLingerTime, kLingerBytes at most),
// its answer being out (the write side shut).
void linger(int fd) {
    ::shutdown(fd, SHUT_WR);
    const auto until = ConnClock::now() + kLingerTime;
    size_t dropped = 0;
    char sink[16384];
    while (dropped < kLingerBytes) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - ConnClock::now()).count();
        if (left <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
        const ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n <= 0 && !(n < 0 && (errno == EINTR || errno == EAGAIN))) break;
        if (n > 0) dropped += static_cast<size_t>(n);
    }
}

// The open-file limit raised to what max_connections needs (up to the hard
// limit); max_connections lowered, with a note, when it cannot be.
int fit_fd_limit(int max_connections) {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return max_connections;
    const rlim_t want = static_cast<rlim_t>(max_connections) * 2 + kOtherFds;  // a connection may be queued while one closes
    if (rl.rlim_cur < want) {
        rlimit raised = rl;
        raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    const rlim_t spare = rl.rlim_cur > static_cast<rlim_t>(kOtherFds) ? rl.rlim_cur - kOtherFds : 0;
    const auto room = static_cast<int>(std::min<rlim_t>(spare / 2, static_cast<rlim_t>(max_connections)));
    if (room < max_connections) {
        fmt::print(stderr, "tandem serve: --max-connections {} lowered to {} (the open-file limit is {})\n",
                   max_connections, room, static_cast<unsigned long long>(rl.rlim_cur));
    }
    return std::max(room, 1);
}

}  // namespace

Connections::Conn::~Conn() { close_quietly(fd); }

Connections::Connections(ConnectionLimits limits, Runner run) : limits_(limits), run_(std::move(run)) {}

Connections::~Connections() {
    stop();
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
}

int Connections::bind(const std::string& host, int port) {
    limits_.max_connections = fit_fd_limit(limits_.max_connections);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string where = fmt::format("{}:{}", host, port);
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
        throw Error(fmt::format("cannot listen on {}: '{}' is not an address or a known host name", where, host));
    }
    int fd = -1;
    for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        const int yes = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        // The backlog holds a burst of connections (1,000 at once) while the
        // accept loop takes them: httplib's 5 made the rest retry after 1-3 s.
        if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
            ::close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(found);
    if (fd < 0) {
        throw Error(port == 0 ? fmt::format("cannot listen on {}: no free port could be bound", host)
                              : fmt::format("cannot listen on {}: the address is in use, or not one of this machine's",
                                            where));
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    const int bound = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                                 : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    listen_fd_ = fd;
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) throw Error(fmt::format("cannot listen on {}: eventfd: {}", where, std::strerror(errno)));
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) throw Error(fmt::format("cannot listen on {}: epoll_create1: {}", where, std::strerror(errno)));
    for (const auto& [watched, tag] : {std::pair{listen_fd_, kListenTag}, std::pair{wake_fd_, kWakeTag}}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = tag;
        if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, watched, &ev) != 0) {
            throw Error(fmt::format("cannot listen on {}: epoll_ctl: {}", where, std::strerror(errno)));
        }
    }
    return bound;
}

void Connections::start() { waiter_ = std::thread([this] { wait_loop(); }); }

void Connections::wake() const {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void Connections::wait_loop() {
    epoll_event events[kEventsPerWait];
    while (true) {
        int timeout_ms = -1;
        std::vector<std::unique_ptr<Conn>> expired;
        std::vector<std::thread> ended;
        {
            std::lock_guard lock(mu_);
            if (stopping_) break;
            // The idle close: waiting_ is in the order the connections
            // began to wait, so the expired ones are at its front.
            const auto now = ConnClock::now();
            while (!waiting_.empty() && waiting_.front()->idle_since + limits_.idle_time <= now) {
                expired.push_back(unlink(*waiting_.front()));
            }
            if (!waiting_.empty()) {
                const auto left = waiting_.front()->idle_since + limits_.idle_time - now;
                const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
                timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
            }
            ended = take_finished();
        }
        // Outside the lock: a worker that ended may not have exited yet (a
        // busy machine), and the others must not wait for it.
        for (std::thread& t : ended) t.join();
        expired.clear();  // closed outside the lock
        const int n = epoll_wait(epoll_fd_, events, kEventsPerWait, timeout_ms);
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < n; ++i) {
            const uint64_t tag = events[i].data.u64;
            if (tag == kWakeTag) {
                uint64_t count = 0;
                [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &count, sizeof(count));
            } else if (tag == kListenTag) {
                accept_all();
            } else {
                on_ready(tag);
            }
        }
    }
}

void Connections::accept_all() {
    // Everything waiting in the backlog, then back to epoll.
    while (true) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            const int yes = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));  // streamed tokens go out at once
            admit(fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // EMFILE and the like: the connection waits in the backlog until a
        // descriptor is free.
        if (errno != EAGAIN && errno != EWOULDBLOCK) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return;
    }
}

std::unique_ptr<Connections::Conn> Connections::unlink(Conn& c) {
    if (c.state == State::Waiting) waiting_.erase(c.in_waiting);
    if (c.state == State::Queued) std::erase(queue_, c.id);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);  // a waiting one, or one disarmed (EPOLLONESHOT)
    auto it = open_.find(c.id);
    std::unique_ptr<Conn> owned = std::move(it->second);
    open_.erase(it);
    return owned;
}

bool Connections::evict_idle() {
    if (waiting_.empty()) return false;
    unlink(*waiting_.front());  // closed as it is dropped
    return true;
}

bool Connections::park(Conn& c, int op) {
    c.stream.release_buffer();
    c.state = State::Waiting;
    c.idle_since = ConnClock::now();
    const bool first = waiting_.empty();
    c.in_waiting = waiting_.insert(waiting_.end(), &c);
    // One event, then the connection is the worker's until it is parked
    // again: the waiting thread never reads a connection a worker has.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    ev.data.u64 = c.id;
    if (epoll_ctl(epoll_fd_, op, c.fd, &ev) != 0) {
        waiting_.erase(c.in_waiting);
        c.state = State::Busy;
        return false;
    }
    // The waiting thread sleeps without a time limit while none waits.
    if (first) wake();
    return true;
}

void Connections::admit(int fd) {
    std::unique_lock lock(mu_);
    if (stopping_) {
        lock.unlock();
        close_quietly(fd);
        return;
    }
    if (static_cast<int>(open_.size()) >= limits_.max_connections && !evict_idle()) {
        lock.unlock();
        send_busy(fd, fmt::format("the server has {} connections open, its limit (--max-connections): try again "
                                  "shortly",
                                  limits_.max_connections));
        close_quietly(fd);
        return;
    }
    // Only this thread adds connections: the room found stays while the
    // lock is let go (getpeername and the like).
    lock.unlock();
    auto conn = std::make_unique<Conn>(fd, limits_.request);
    lock.lock();
    Conn& c = *conn;
    c.id = next_id_++;
    open_.emplace(c.id, std::move(conn));
    if (!park(c, EPOLL_CTL_ADD)) {
        // epoll has no room for it (max_user_watches).
        send_busy(fd, "the server cannot watch more connections: try again shortly");
        unlink(c);
    }
}

void Connections::on_ready(uint64_t id) {
    std::unique_ptr<Conn> closing;  // closed after the lock is let go
    std::lock_guard lock(mu_);
    const auto it = open_.find(id);
    // An event of this batch for a connection closed meanwhile (evicted).
    if (it == open_.end() || it->second->state != State::Waiting) return;
    Conn& c = *it->second;
    // A look that takes no bytes: a client that closed (or reset) is closed
    // here without a worker; a wake with nothing to read waits on.
    char byte = 0;
    const ssize_t n = ::recv(c.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
        ev.data.u64 = c.id;
        if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev) != 0) closing = unlink(c);
        return;
    }
    if (n <= 0) {
        closing = unlink(c);
        return;
    }
    waiting_.erase(c.in_waiting);
    c.state = State::Queued;
    if (!dispatch(c)) {
        send_busy(c.fd, "the server cannot start a thread for the request: try again shortly");
        closing = unlink(c);
    }
}

bool Connections::dispatch(Conn& c) {
    if (!free_.empty()) {
        FreeWorker* w = free_.back();
        free_.pop_back();
        c.state = State::Busy;
        w->conn = &c;
        w->cv.notify_one();
        return true;
    }
    // A worker per open connection at most (so max_connections of them):
    // past that, one is between connections and looks at the queue next.
    if (threads_ >= static_cast<int>(open_.size())) {
        queue_.push_back(c.id);
        return true;
    }
    try {
        std::thread t([this, first = &c] { worker(first); });
        c.state = State::Busy;
        ++threads_;
        workers_.emplace(t.get_id(), std::move(t));
        return true;
    } catch (const std::system_error&) {
        return false;
    }
}

std::vector<std::thread> Connections::take_finished() {
    std::vector<std::thread> ended;
    for (const std::thread::id& id : finished_) {
        auto it = workers_.find(id);
        if (it == workers_.end()) continue;
        ended.push_back(std::move(it->second));
        workers_.erase(it);
    }
    finished_.clear();
    return ended;
}

void Connections::worker(Conn* first) {
    Conn* c = first;
    FreeWorker self;
    std::unique_lock lock(mu_);
    while (true) {
        if (c != nullptr) {
            lock.unlock();
            serve(*c);
            c = nullptr;
            lock.lock();
        }
        if (stopping_) break;
        if (!queue_.empty()) {
            c = open_.at(queue_.front()).get();
            queue_.pop_front();
            c->state = State::Busy;
            continue;
        }
        free_.push_back(&self);
        self.cv.wait_for(lock, kThreadLinger, [&] { return self.conn != nullptr || stopping_; });
        if (self.conn != nullptr) {  // handed one (dispatch took this worker off free_)
            c = std::exchange(self.conn, nullptr);
            continue;
        }
        std::erase(free_, &self);
        if (stopping_ || threads_ > limits_.warm_threads) break;
    }
    --threads_;
    finished_.push_back(std::this_thread::get_id());
    done_cv_.notify_all();
    if (!stopping_) wake();  // to be joined
}

void Connections::serve(Conn& c) {
    ConnStream& stream = c.stream;
    bool answered = false;  // the connection ends after an answer: linger (kLingerTime)
    bool keep = false;      // kept alive: back to the waiting set
    // The requests whose bytes are here: a pipelined one follows at once.
    while (!answered && !keep) {
        const ConnStream::Head head = stream.read_head();
        if (head == ConnStream::Head::Closed) break;
        if (head == ConnStream::Head::TooLarge) {
            stream.write_all(refusal(431, fmt::format("the request line and headers are over the limit of {} bytes",
                                                      limits_.request.max_head_bytes)));
            answered = true;
            break;
        }
        if (head == ConnStream::Head::TimedOut) {
            stream.write_all(refusal(408, fmt::format("the request's headers did not arrive within {} s (--timeout)",
                                                      std::chrono::duration_cast<std::chrono::seconds>(
                                                          limits_.request.read_time)
                                                          .count())));
            answered = true;
            break;
        }
        bool stopping = false;
        {
            std::lock_guard lock(mu_);
            stopping = stopping_;
        }
        const bool last = ++c.served >= limits_.max_requests || stopping;
        bool closed = false;
        const bool ok = run_(stream, c.id, last, closed);
        answered = !ok || closed || last || stream.limit() != ReadLimit::None || stream.ends_after_answer();
        keep = !answered && stream.buffered() == 0;
    }
    std::unique_ptr<Conn> closing;
    {
        std::lock_guard lock(mu_);
        if (keep && !stopping_ && park(c, EPOLL_CTL_MOD)) return;
        // Still registered while it lingers (below): stop() cuts that short.
        if (!answered) closing = unlink(c);
    }
    if (!answered) return;  // closed as `closing` is dropped
    linger(c.fd);
    std::lock_guard lock(mu_);
    closing = unlink(c);
}

bool Connections::client_gone(uint64_t id) const {
    // Under the lock: the connection cannot close (and its descriptor be
    // reused) while it is looked at.
    std::lock_guard lock(mu_);
    const auto it = open_.find(id);
    return it == open_.end() || peer_gone(it->second->fd);
}

ReadLimit Connections::read_limit(uint64_t id) const {
    std::lock_guard lock(mu_);
    const auto it = open_.find(id);
    return it == open_.end() ? ReadLimit::None : it->second->stream.limit();
}

void Connections::end_after_answer(uint64_t id) {
    std::lock_guard lock(mu_);
    const auto it = open_.find(id);
    if (it != open_.end()) it->second->stream.end_after_answer();
}

void Connections::stop() {
    {
        std::lock_guard lock(mu_);
        if (stopping_) return;
        stopping_ = true;
    }
    if (wake_fd_ >= 0) wake();
    if (waiter_.joinable()) waiter_.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    std::vector<std::unique_ptr<Conn>> closing;
    std::unordered_map<std::thread::id, std::thread> workers;
    {
        std::unique_lock lock(mu_);
        // Waiting and queued connections have no thread: closed here. A
        // worker's gets its reads and writes cut, and the worker closes it.
        std::vector<Conn*> idle;
        for (auto& [id, c] : open_) {
            if (c->state == State::Busy) {
                ::shutdown(c->fd, SHUT_RDWR);
            } else {
                idle.push_back(c.get());
            }
        }
        for (Conn* c : idle) closing.push_back(unlink(*c));
        for (FreeWorker* w : free_) w->cv.notify_one();
        done_cv_.wait(lock, [&] { return threads_ == 0; });
        workers.swap(workers_);
        finished_.clear();
    }
    closing.clear();
    for (auto& [id, t] : workers) t.join();
}

}  // namespace tandem::serve
