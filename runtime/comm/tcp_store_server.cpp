// TcpStore server (rank 0): one background thread poll()s the listening socket, the clients and a
// wake-up pipe. Sockets are non-blocking; each connection has an input and an output buffer.
// get/wait requests whose keys are missing are held (one per connection: clients are synchronous)
// and answered when a set/add supplies the keys, or with Timeout at their deadline.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <list>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "comm/store.h"
#include "comm/wire.h"
#include "core/errors.h"

namespace ds {
namespace {

using wire::Clock;

struct Conn {
  int fd = -1;
  std::string peer;   // "10.0.0.7:41234"
  bool authed = false;
  bool closing = false;  // close once `out` is flushed
  bool dead = false;
  std::string in, out;
  // A held get/wait.
  bool held = false;
  uint8_t op = 0;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

// Constant-time comparison (the time does not depend on where the strings differ).
bool same_token(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>((i < given.size() ? given[i] : 0) ^ expected[i]);
  return diff == 0;
}

std::string peer_name(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0) h = h.substr(7);  // IPv4 client on the dual-stack socket
  return h.find(':') == std::string::npos ? fmt::format("{}:{}", h, serv) : fmt::format("[{}]:{}", h, serv);
}

class Server final : public TcpStoreServer {
 public:
  Server(int port, std::string token) : token_(std::move(token)) {
    listen_fd_ = open_listener(port);
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      ::close(listen_fd_);
      throw CommError(fmt::format("store: cannot create a pipe: {}", wire::errno_text(errno)));
    }
    thread_ = std::thread([this] { loop(); });
  }

  ~Server() override {
    stop_ = true;
    [[maybe_unused]] auto n = ::write(wake_[1], "x", 1);
    thread_.join();
    for (auto& c : conns_) ::close(c.fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  int port() const override { return port_; }

 private:
  // Binds to every interface: dual-stack IPv6 when available, else IPv4.
  int open_listener(int port) {
    int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (fd >= 0) {
      int off = 0;
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
      auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      a->sin6_port = htons(static_cast<uint16_t>(port));
      len = sizeof *a;
    } else {
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      auto* a = reinterpret_cast<sockaddr_in*>(&addr);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      a->sin_port = htons(static_cast<uint16_t>(port));
      len = sizeof *a;
    }
    if (fd < 0) throw CommError(fmt::format("store: cannot create a socket: {}", wire::errno_text(errno)));
    int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 4096) != 0) {
      const int err = errno;
      ::close(fd);
      throw CommError(fmt::format("store: cannot listen on port {}: {}{}", port, wire::errno_text(err),
                                  err == EADDRINUSE ? " (another job on this host? use --master_port)" : ""));
    }
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    return fd;
  }

  void loop() {
    std::vector<pollfd> fds;
    while (!stop_) {
      fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}});
      for (auto& c : conns_)
        fds.push_back({c.fd, static_cast<short>((c.closing ? 0 : POLLIN) | (c.out.empty() ? 0 : POLLOUT)), 0});
      if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR) {
        std::fprintf(stderr, "store: poll failed: %s\n", wire::errno_text(errno).c_str());
        return;
      }
      if (fds[0].revents) return;  // the destructor woke us
      size_t i = 2;
      for (auto& c : conns_) {  // conns_ is unchanged since fds was built
        const short ev = fds[i++].revents;
        if (ev & (POLLIN | POLLHUP | POLLERR)) read_from(c);
        if (ev & POLLOUT) flush(c);
      }
      if (fds[1].revents & POLLIN) accept_all();
      answer_held(Clock::now());
      conns_.remove_if([](const Conn& c) {
        const bool drop = c.dead || (c.closing && c.out.empty());
        if (drop) ::close(c.fd);
        return drop;
      });
    }
  }

  int poll_timeout_ms() const {
    auto first = Clock::time_point::max();
    for (const auto& c : conns_)
      if (c.held) first = std::min(first, c.deadline);
    if (first == Clock::time_point::max()) return -1;
    const auto ms = std::chrono::ceil<Millis>(first - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or a connection that died before we got to it
      conns_.emplace_back();
      conns_.back().fd = fd;
      conns_.back().peer = peer_name(addr, len);
    }
  }

  void read_from(Conn& c) {
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, 0);
      if (n > 0) {
        c.in.append(chunk, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) c.dead = true;  // closed or broken
        break;
      }
    }
    if (!c.dead) process(c);
  }

  // Handles the complete requests in c.in, stopping at a held one.
  void process(Conn& c) {
    std::string payload;
    try {
      while (!c.held && !c.closing && wire::take_frame(c.in, payload, c.authed ? wire::kMaxFrame : wire::kMaxHelloFrame))
        handle(c, payload);
    } catch (const wire::IoError&) {
      if (!c.authed) refuse(c, "not a dsrun store client");
      else c.dead = true;  // a broken client: drop it
    }
  }

  void refuse(Conn& c, const char* why) {
    std::fprintf(stderr, "store: refused a connection from %s: %s\n", c.peer.c_str(), why);
    reply(c, wire::Writer().u8(wire::kRefused));
    c.closing = true;
  }

  void handle(Conn& c, const std::string& payload) {
    wire::Reader r(payload);
    const uint8_t op = r.u8();
    if (!c.authed) {
      if (op != wire::kHello || r.str() != wire::kMagic) return refuse(c, "not a dsrun store client");
      const std::string token = r.str();
      if (token.empty() && !token_.empty()) return refuse(c, "missing job token");
      if (!same_token(token, token_)) return refuse(c, "wrong job token");
      c.authed = true;
      return reply(c, wire::Writer().u8(wire::kOk));
    }
    switch (op) {
      case wire::kSet: {
        std::string key = r.str();
        map_[key] = r.str();
        reply(c, wire::Writer().u8(wire::kOk));
        return answer_held(Clock::now());
      }
      case wire::kGet:
      case wire::kWait: {
        c.op = op;
        c.keys.clear();
        const int64_t n = op == wire::kGet ? 1 : r.i64();
        for (int64_t k = 0; k < n; ++k) c.keys.push_back(r.str());
        c.deadline = wire::deadline_after(Millis(r.i64()));
        c.held = true;
        return answer_held(Clock::now());
      }
      case wire::kAdd: {
        const std::string key = r.str();
        const int64_t delta = r.i64();
        auto it = map_.find(key);
        try {
          const int64_t value = (it == map_.end() ? 0 : wire::parse_counter(key, it->second)) + delta;
          map_[key] = std::to_string(value);
          reply(c, wire::Writer().u8(wire::kOk).i64(value));
        } catch (const CommError& e) {
          return reply(c, wire::Writer().u8(wire::kError).str(e.what()));
        }
        return answer_held(Clock::now());
      }
      case wire::kRemove:
        return reply(c, wire::Writer().u8(wire::kOk).u8(map_.erase(r.str()) > 0 ? 1 : 0));
      default:
        throw wire::IoError("unknown request");
    }
  }

  // Answers every held request whose keys now exist, or whose deadline has passed.
  void answer_held(Clock::time_point now) {
    for (auto& c : conns_) {
      if (!c.held) continue;
      std::vector<std::string> missing;
      for (const auto& k : c.keys)
        if (!map_.count(k)) missing.push_back(k);
      if (!missing.empty() && now < c.deadline) continue;
      c.held = false;
      wire::Writer w;
      if (missing.empty()) {
        w.u8(wire::kOk);
        if (c.op == wire::kGet) w.str(map_.at(c.keys[0]));
      } else {
        w.u8(wire::kTimeout).i64(static_cast<int64_t>(missing.size()));
        for (const auto& k : missing) w.str(k);
      }
      reply(c, w);
      process(c);  // requests that arrived while this one was held
    }
  }

  void reply(Conn& c, const wire::Writer& w) {
    c.out += w.frame();
    flush(c);
  }

  void flush(Conn& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
        return;
      }
    }
  }

  std::string token_;
  int listen_fd_ = -1, port_ = 0;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::map<std::string, std::string> map_;
  std::list<Conn> conns_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<TcpStoreServer> serve_tcp_store(int port, const std::string& token) {
  if (port < 0 || port > 65535) throw CommError(fmt::format("store: port {} is not in 0..65535", port));
  return std::make_unique<Server>(port, token);
}

}  // namespace ds
