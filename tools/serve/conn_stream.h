// One client connection as httplib reads and writes it (an httplib::Stream
// over a non-blocking socket), with the bounds that keep a slow or hostile
// client from holding the server: a request's head and body must arrive
// within a time from its first byte, its head and body within byte caps,
// and each write of the answer must make progress within a time.
//
// The connection layer (connections.h) reads a request's head itself
// (read_head) before httplib parses it, so an oversized or slow head is
// answered 431 or 408 by the layer; httplib then reads the body through
// read(), which refuses past the body cap or the request's deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>

#include <httplib.h>

namespace tandem::serve {

using ConnClock = std::chrono::steady_clock;

// What one request may take of its connection.
struct RequestBounds {
    ConnClock::duration read_time = std::chrono::seconds(30);   // first byte of the head to the body's last
    ConnClock::duration write_time = std::chrono::seconds(30);  // each write of the answer must progress within it
    size_t max_head_bytes = size_t{64} << 10;                   // request line and headers
    size_t max_body_bytes = size_t{8} << 20;                    // the body as sent (chunked framing included)
};

// Why reading a request stopped short.
enum class ReadLimit { None, Time, Head, Body };

// Whether the peer of a connected socket has closed or half-closed it: a
// look that takes no bytes (the next request, pipelined, is no close).
bool peer_gone(int fd);

class ConnStream final : public httplib::Stream {
public:
    ConnStream(int fd, RequestBounds bounds);

    // Bytes received and not yet read: the start of a pipelined request
    // once an answer is out.
    size_t buffered() const { return buf_.size() - pos_; }
    // Frees the receive buffer when it holds nothing unread (a connection
    // waiting for its next request keeps no 16 KiB of it).
    void release_buffer();

    enum class Head { Complete, Closed, TooLarge, TimedOut };
    // Starts a request (its clock and byte counts) and reads its head, up
    // to the blank line that ends the headers, into the buffer.
    Head read_head();
    ReadLimit limit() const { return limit_; }
    // The connection ends after the current answer: it was given before
    // the request's body was read, and those bytes are no request.
    void end_after_answer() { end_after_answer_ = true; }
    bool ends_after_answer() const { return end_after_answer_; }

    bool is_readable() const override;
    bool is_writable() const override;
    ssize_t read(char* ptr, size_t size) override;
    ssize_t write(const char* ptr, size_t size) override;
    void get_remote_ip_and_port(std::string& ip, int& port) const override;
    void get_local_ip_and_port(std::string& ip, int& port) const override;
    socket_t socket() const override { return fd_; }

    // Writes all of `data` within the write time (for the layer's own answers).
    bool write_all(const std::string& data);

private:
    // Receives more into the buffer, waiting until `until`: false on the
    // client closing, an error, or the time running out (timed_out set).
    bool fill(ConnClock::time_point until, bool& timed_out);

    int fd_;
    RequestBounds bounds_;
    std::string buf_;  // received bytes; those from pos_ on are not yet read
    size_t pos_ = 0;
    size_t scanned_ = 0;     // head bytes already searched for the blank line
    size_t head_left_ = 0;   // of the request's head, bytes httplib has yet to read
    size_t body_read_ = 0;   // bytes httplib read past the head
    ConnClock::time_point deadline_{};
    ReadLimit limit_ = ReadLimit::None;
    bool end_after_answer_ = false;
    std::string remote_ip_, local_ip_;
    int remote_port_ = 0, local_port_ = 0;
};

}  // namespace tandem::serve
