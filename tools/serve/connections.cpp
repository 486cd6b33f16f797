#include "tools/serve/connections.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
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

// Worker threads past --threads-http end after this long without a connection.
constexpr auto kThreadLinger = std::chrono::seconds(10);
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

Connections::Connections(ConnectionLimits limits, Runner run) : limits_(limits), run_(std::move(run)) {}

Connections::~Connections() {
    stop();
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
    return bound;
}

void Connections::start() { acceptor_ = std::thread([this] { accept_loop(); }); }

void Connections::accept_loop() {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    while (true) {
        if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
        if (fds[1].revents != 0) break;
        // Everything waiting in the backlog, then back to poll.
        while (true) {
            const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                const int yes = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));  // streamed tokens go out at once
                admit(fd);
                continue;
            }
            if (errno == EINTR || errno == ECONNABORTED) continue;
            // EMFILE and the like: the connection waits in the backlog
            // until a descriptor is free.
            if (errno != EAGAIN && errno != EWOULDBLOCK) std::this_thread::sleep_for(std::chrono::milliseconds(10));
            break;
        }
    }
}

bool Connections::evict_idle() {
    Open* oldest = nullptr;
    for (auto& [id, c] : open_) {
        if (c.idle && (oldest == nullptr || c.idle_since < oldest->idle_since)) oldest = &c;
    }
    if (oldest == nullptr) return false;
    oldest->idle = false;  // not chosen twice; its thread sees the shutdown and ends it
    ::shutdown(oldest->fd, SHUT_RDWR);
    return true;
}

void Connections::admit(int fd) {
    std::unique_lock lock(mu_);
    if (stopping_) {
        lock.unlock();
        close_quietly(fd);
        return;
    }
    const auto live = static_cast<int>(queue_.size() + open_.size());
    bool refuse = live >= limits_.max_connections && !evict_idle();
    if (!refuse) {
        queue_.push_back(fd);
        if (queue_.size() > static_cast<size_t>(idle_threads_)) {
            try {
                std::thread t([this] { worker(); });
                ++threads_;
                workers_.emplace(t.get_id(), std::move(t));
            } catch (const std::system_error&) {
                // No thread to be had: a waiting worker may still take it,
                // else it is refused.
                if (idle_threads_ == 0) {
                    queue_.pop_back();
                    refuse = true;
                }
            }
        }
        work_cv_.notify_one();
    }
    // Workers that ended are joined here, off their own threads.
    for (const std::thread::id& id : finished_) {
        auto it = workers_.find(id);
        if (it == workers_.end()) continue;
        it->second.join();
        workers_.erase(it);
    }
    finished_.clear();
    lock.unlock();
    if (refuse) {
        const std::string busy = refusal(503, fmt::format("the server has {} connections open, its limit "
                                                          "(--max-connections): try again shortly",
                                                          limits_.max_connections));
        [[maybe_unused]] const ssize_t n = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        close_quietly(fd);
    }
}

void Connections::worker() {
    std::unique_lock lock(mu_);
    while (true) {
        ++idle_threads_;
        const bool woken = work_cv_.wait_for(lock, kThreadLinger, [&] { return stopping_ || !queue_.empty(); });
        --idle_threads_;
        if (!queue_.empty() && !stopping_) {
            const int fd = queue_.front();
            queue_.pop_front();
            lock.unlock();
            serve(fd);
            lock.lock();
            continue;
        }
        if (stopping_ || (!woken && threads_ > limits_.warm_threads)) break;
    }
    --threads_;
    finished_.push_back(std::this_thread::get_id());
    done_cv_.notify_all();
}

void Connections::set_idle(uint64_t id, bool idle) {
    std::lock_guard lock(mu_);
    auto it = open_.find(id);
    if (it == open_.end()) return;
    it->second.idle = idle;
    if (idle) it->second.idle_since = ConnClock::now();
}

void Connections::serve(int fd) {
    ConnStream stream(fd, limits_.request);
    uint64_t id = 0;
    {
        std::lock_guard lock(mu_);
        id = next_id_++;
        open_[id] = Open{fd, true, ConnClock::now(), &stream};
    }
    bool answered = false;  // the connection ends after an answer: linger (kLingerTime)
    for (int n = 0; n < limits_.max_requests; ++n) {
        set_idle(id, true);
        if (!stream.wait_request(limits_.idle_time)) break;
        set_idle(id, false);
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
        const bool last = n + 1 == limits_.max_requests || stopping;
        bool closed = false;
        const bool ok = run_(stream, id, last, closed);
        answered = !ok || closed || last || stream.limit() != ReadLimit::None;
        if (answered) break;
    }
    // Still registered while it lingers: stop() cuts that short.
    if (answered) linger(fd);
    {
        std::lock_guard lock(mu_);
        open_.erase(id);
    }
    close_quietly(fd);
}

bool Connections::client_gone(uint64_t id) const {
    // Under the lock: the connection cannot close (and its descriptor be
    // reused) while it is looked at.
    std::lock_guard lock(mu_);
    const auto it = open_.find(id);
    return it == open_.end() || peer_gone(it->second.fd);
}

ReadLimit Connections::read_limit(uint64_t id) const {
    std::lock_guard lock(mu_);
    const auto it = open_.find(id);
    return it == open_.end() ? ReadLimit::None : it->second.stream->limit();
}

void Connections::stop() {
    {
        std::lock_guard lock(mu_);
        if (stopping_) return;
        stopping_ = true;
    }
    if (wake_fd_ >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
    }
    if (acceptor_.joinable()) acceptor_.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    std::unordered_map<std::thread::id, std::thread> workers;
    {
        std::unique_lock lock(mu_);
        for (int fd : queue_) close_quietly(fd);
        queue_.clear();
        for (auto& [id, c] : open_) ::shutdown(c.fd, SHUT_RDWR);
        work_cv_.notify_all();
        done_cv_.wait(lock, [&] { return threads_ == 0; });
        workers.swap(workers_);
        finished_.clear();
    }
    for (auto& [id, t] : workers) t.join();
}

}  // namespace tandem::serve
