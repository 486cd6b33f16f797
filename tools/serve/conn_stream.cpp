#include "tools/serve/conn_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tandem::serve {

namespace {

// Waits until the socket has one of `events` or `until` passes: the events
// it has, 0 when the time ran out, -1 on an error of poll itself.
int wait_for(int fd, short events, ConnClock::time_point until) {
    while (true) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - ConnClock::now()).count();
        pollfd p{fd, events, 0};
        const int r = ::poll(&p, 1, static_cast<int>(std::clamp<long long>(left, 0, 60'000)));
        if (r > 0) return p.revents;
        if (r < 0 && errno != EINTR) return -1;
        if (r == 0 && left <= 0) return 0;
    }
}

void name_of(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
    char host[NI_MAXHOST] = {0};
    char serv[NI_MAXSERV] = {0};
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
        ip = host;
        port = std::atoi(serv);
    }
}

}  // namespace

bool peer_gone(int fd) {
    pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
    const int r = ::poll(&p, 1, 0);
    if (r < 0) return errno != EINTR;
    if (r == 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
    if ((p.revents & POLLIN) == 0) return false;
    char c = 0;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

ConnStream::ConnStream(int fd, RequestBounds bounds) : fd_(fd), bounds_(bounds) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) name_of(addr, len, remote_ip_, remote_port_);
    len = sizeof(addr);
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) name_of(addr, len, local_ip_, local_port_);
}

bool ConnStream::fill(ConnClock::time_point until, bool& timed_out) {
    constexpr size_t kChunk = 16384;
    timed_out = false;
    while (true) {
        const size_t had = buf_.size();
        buf_.resize(had + kChunk);
        const ssize_t n = ::recv(fd_, buf_.data() + had, kChunk, MSG_DONTWAIT);
        buf_.resize(had + static_cast<size_t>(std::max<ssize_t>(n, 0)));
        if (n > 0) return true;
        if (n == 0) return false;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
        const int ev = wait_for(fd_, POLLIN, until);
        if (ev == 0) {
            timed_out = true;
            return false;
        }
        if (ev < 0) return false;
    }
}

void ConnStream::release_buffer() {
    if (buffered() > 0) return;
    std::string().swap(buf_);
    pos_ = 0;
}

ConnStream::Head ConnStream::read_head() {
    buf_.erase(0, pos_);
    pos_ = 0;
    scanned_ = 0;
    head_left_ = 0;
    body_read_ = 0;
    limit_ = ReadLimit::None;
    deadline_ = ConnClock::now() + bounds_.read_time;
    while (true) {
        // The blank line that ends the headers; a search resumes where the
        // last one stopped (less the three bytes a terminator may straddle).
        const size_t at = buf_.find("\r\n\r\n", scanned_ >= 3 ? scanned_ - 3 : 0);
        if (at != std::string::npos && at + 4 <= bounds_.max_head_bytes) {
            head_left_ = at + 4;
            return Head::Complete;
        }
        if (at != std::string::npos || buf_.size() >= bounds_.max_head_bytes) {
            limit_ = ReadLimit::Head;
            return Head::TooLarge;
        }
        scanned_ = buf_.size();
        bool timed_out = false;
        if (!fill(deadline_, timed_out)) {
            if (!timed_out) return Head::Closed;
            limit_ = ReadLimit::Time;
            return Head::TimedOut;
        }
    }
}

bool ConnStream::is_readable() const {
    if (buffered() > 0) return true;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
}

bool ConnStream::is_writable() const {
    const int ev = wait_for(fd_, POLLOUT, ConnClock::now() + bounds_.write_time);
    return ev > 0 && (ev & (POLLERR | POLLHUP | POLLNVAL)) == 0 && !peer_gone(fd_);
}

ssize_t ConnStream::read(char* ptr, size_t size) {
    if (limit_ != ReadLimit::None) return -1;
    if (buffered() == 0) {
        buf_.clear();
        pos_ = 0;
        bool timed_out = false;
        if (!fill(deadline_, timed_out)) {
            if (!timed_out) return 0;
            limit_ = ReadLimit::Time;
            return -1;
        }
    }
    const size_t n = std::min(size, buffered());
    const size_t head = std::min(n, head_left_);
    head_left_ -= head;
    if (body_read_ + (n - head) > bounds_.max_body_bytes) {
        limit_ = ReadLimit::Body;
        return -1;
    }
    body_read_ += n - head;
    std::memcpy(ptr, buf_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
}

ssize_t ConnStream::write(const char* ptr, size_t size) {
    const auto until = ConnClock::now() + bounds_.write_time;
    while (true) {
        const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        const int ev = wait_for(fd_, POLLOUT, until);
        if (ev <= 0 || (ev & (POLLERR | POLLHUP | POLLNVAL)) != 0) return -1;
    }
}

bool ConnStream::write_all(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
        const ssize_t n = write(data.data() + off, data.size() - off);
        if (n <= 0) return false;
        off += static_cast<size_t>(n);
    }
    return true;
}

void ConnStream::get_remote_ip_and_port(std::string& ip, int& port) const {
    ip = remote_ip_;
    port = remote_port_;
}

void ConnStream::get_local_ip_and_port(std::string& ip, int& port) const {
    ip = local_ip_;
    port = local_port_;
}

}  // namespace tandem::serve
