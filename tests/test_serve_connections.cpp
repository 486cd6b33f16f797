// The serve connection layer (tools/serve/connections.h) without a model:
// its bounds on connections, heads and time, and its look at whether a
// request's client is still there. A request here is answered by a stub
// that takes the head and writes a fixed answer.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tools/serve/connections.h"

namespace {

using namespace std::chrono_literals;
using tandem::serve::ConnectionLimits;
using tandem::serve::Connections;
using tandem::serve::ConnStream;

// A client socket connected to 127.0.0.1:port, closed with the object.
struct Client {
    explicit Client(int port) : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connected = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    }
    ~Client() { ::close(fd); }
    void send(const std::string& s) const { [[maybe_unused]] auto n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL); }
    // What the server sends within `wait`: its first line ("" when it
    // closed without a word, "(nothing)" when it sent nothing in time).
    std::string first_line(std::chrono::milliseconds wait) const {
        std::string got;
        const auto until = std::chrono::steady_clock::now() + wait;
        while (got.find("\r\n") == std::string::npos) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
            pollfd p{fd, POLLIN, 0};
            if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
                return got.empty() ? "(nothing)" : got;
            }
            char buf[4096];
            const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
            if (n <= 0) break;
            got.append(buf, static_cast<size_t>(n));
        }
        return got.substr(0, got.find("\r\n"));
    }
    int fd;
    bool connected = false;
};

// Takes the head (all of it is in the stream's buffer) and answers 200.
bool answer_ok(ConnStream& s) {
    char head[1 << 16];
    if (s.read(head, sizeof(head)) <= 0) return false;
    return s.write_all("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
}

// Takes exactly one request's head (a pipelined one after it stays in the
// stream) and answers 200.
bool answer_one(ConnStream& s) {
    std::string head;
    char c = 0;
    while (head.size() < 4 || head.compare(head.size() - 4, 4, "\r\n\r\n") != 0) {
        if (s.read(&c, 1) != 1) return false;
        head.push_back(c);
    }
    return s.write_all("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
}

// This process's threads (Threads: in /proc/self/status).
int thread_count() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
    }
    return -1;
}

struct Layer {
    explicit Layer(ConnectionLimits limits, Connections::Runner run = nullptr)
        : conns(limits, run ? run : [](ConnStream& s, uint64_t, bool, bool&) { return answer_ok(s); }) {
        port = conns.bind("127.0.0.1", 0);
        conns.start();
    }
    Connections conns;
    int port = 0;
};

TEST(ServeConnections, ARequestIsAnsweredAndTheConnectionKeptForTheNext) {
    Layer l(ConnectionLimits{});
    Client c(l.port);
    ASSERT_TRUE(c.connected);
    for (int i = 0; i < 3; ++i) {
        c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        EXPECT_EQ(c.first_line(5000ms), "HTTP/1.1 200 OK") << "request " << i;
    }
}

// Connections with no request in flight wait in the layer's one waiting
// thread: neither fresh ones nor kept-alive ones between requests hold a
// thread each (a thread per connection held 300 here).
TEST(ServeConnections, IdleAndKeptAliveConnectionsHoldNoThread) {
    Layer l(ConnectionLimits{});
    const int before = thread_count();
    ASSERT_GT(before, 0) << "no Threads: line in /proc/self/status";
    std::vector<std::unique_ptr<Client>> clients;
    for (int i = 0; i < 300; ++i) {
        clients.push_back(std::make_unique<Client>(l.port));
        ASSERT_TRUE(clients.back()->connected) << "client " << i;
    }
    std::this_thread::sleep_for(200ms);
    EXPECT_LT(thread_count() - before, 8) << "300 idle connections";
    // One request each, one after the other, then they wait kept alive.
    for (size_t i = 0; i < clients.size(); ++i) {
        clients[i]->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        ASSERT_EQ(clients[i]->first_line(5000ms), "HTTP/1.1 200 OK") << "client " << i;
    }
    std::this_thread::sleep_for(200ms);
    EXPECT_LT(thread_count() - before, 8) << "300 kept-alive connections between requests";
    // Back from the waiting thread: a second request on each of some.
    for (size_t i = 0; i < clients.size(); i += 50) {
        clients[i]->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        EXPECT_EQ(clients[i]->first_line(5000ms), "HTTP/1.1 200 OK") << "client " << i << ", its second request";
    }
}

TEST(ServeConnections, PipelinedRequestsAreAnsweredInOrder) {
    Layer l(ConnectionLimits{}, [](ConnStream& s, uint64_t, bool, bool&) { return answer_one(s); });
    Client c(l.port);
    ASSERT_TRUE(c.connected);
    for (int round = 0; round < 2; ++round) {
        c.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\n");
        std::this_thread::sleep_for(50ms);
        c.send("Host: x\r\n\r\n");
        std::string got;
        const auto until = std::chrono::steady_clock::now() + 5s;
        const std::string one = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        while (got.size() < 3 * one.size() && std::chrono::steady_clock::now() < until) {
            pollfd p{c.fd, POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) continue;
            char buf[4096];
            const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
            if (n <= 0) break;
            got.append(buf, static_cast<size_t>(n));
        }
        EXPECT_EQ(got, one + one + one) << "round " << round;
        std::this_thread::sleep_for(100ms);  // back in the waiting set before the next round
    }
}

TEST(ServeConnections, AKeptAliveConnectionIsClosedAfterTheIdleTime) {
    ConnectionLimits limits;
    limits.idle_time = 300ms;
    Layer l(limits);
    Client c(l.port);
    c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_EQ(c.first_line(5000ms), "HTTP/1.1 200 OK");
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(c.first_line(3000ms), "") << "closed without a word";
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GT(waited, 200ms);
    EXPECT_LT(waited, 2000ms);
}

TEST(ServeConnections, PastTheLimitTheLongestIdleConnectionMakesRoom) {
    ConnectionLimits limits;
    limits.max_connections = 2;
    Layer l(limits);
    Client a(l.port);
    std::this_thread::sleep_for(50ms);
    Client b(l.port);
    std::this_thread::sleep_for(50ms);
    Client c(l.port);
    EXPECT_EQ(a.first_line(2000ms), "") << "the longest idle is closed";
    EXPECT_EQ(b.first_line(200ms), "(nothing)") << "the other stays open";
    c.send("GET / HTTP/1.1\r\n\r\n");
    EXPECT_EQ(c.first_line(5000ms), "HTTP/1.1 200 OK");
}

TEST(ServeConnections, PastTheLimitWithNoneIdleTheNewConnectionGets503) {
    ConnectionLimits limits;
    limits.max_connections = 2;
    Layer l(limits);
    Client a(l.port), b(l.port);
    a.send("GET / HTTP/1.1\r\n");  // a head begun: not idle
    b.send("GET / HTTP/1.1\r\n");
    std::this_thread::sleep_for(100ms);
    Client c(l.port);
    EXPECT_EQ(c.first_line(2000ms), "HTTP/1.1 503 Service Unavailable");
}

TEST(ServeConnections, AnOversizedHeadGets431AndAHeadTooSlow408) {
    ConnectionLimits limits;
    limits.request.read_time = 1s;
    Layer l(limits);
    Client big(l.port);
    big.send("GET / HTTP/1.1\r\nX-Big: " + std::string(70 << 10, 'a'));
    EXPECT_EQ(big.first_line(2000ms), "HTTP/1.1 431 Request Header Fields Too Large");
    Client slow(l.port);
    const auto t0 = std::chrono::steady_clock::now();
    slow.send("GET / HTTP/1.1\r\nHost: x\r\n");
    EXPECT_EQ(slow.first_line(3000ms), "HTTP/1.1 408 Request Timeout");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2500ms);
}

TEST(ServeConnections, AnIdleConnectionIsClosedAfterTheIdleTime) {
    ConnectionLimits limits;
    limits.idle_time = 300ms;
    Layer l(limits);
    Client c(l.port);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(c.first_line(3000ms), "");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2000ms);
}

// The look the scheduler takes between steps: false while the client is
// there, true once it closed, whatever the request's handler is doing.
TEST(ServeConnections, AClientThatLeavesIsSeenGone) {
    auto seen_there = std::make_shared<std::atomic<int>>(-1);
    auto seen_gone = std::make_shared<std::atomic<bool>>(false);
    Connections* self = nullptr;
    Layer l(ConnectionLimits{}, [&self, seen_there, seen_gone](ConnStream& s, uint64_t id, bool, bool&) {
        char head[4096];
        s.read(head, sizeof(head));
        seen_there->store(self->client_gone(id) ? 0 : 1);
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (std::chrono::steady_clock::now() < until && !self->client_gone(id)) std::this_thread::sleep_for(5ms);
        seen_gone->store(self->client_gone(id));
        return false;
    });
    self = &l.conns;
    {
        Client c(l.port);
        c.send("POST /v1/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (seen_there->load() < 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
    }
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!seen_gone->load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(seen_there->load(), 1) << "a connected client is not gone";
    EXPECT_TRUE(seen_gone->load()) << "a client that closed is gone";
    EXPECT_TRUE(l.conns.client_gone(12345)) << "a connection that ended is gone";
}

}  // namespace
