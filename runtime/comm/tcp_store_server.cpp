// TcpStore server (rank 0): one background thread poll()s the listening socket, the clients and a
// wake-up pipe. Sockets are non-blocking; the protocol (requests, held get/wait, limits) lives in
// store_core.cpp, which this loop feeds with received bytes and drains of replies.
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
#include "comm/store_core.h"
#include "comm/wire.h"
#include "core/errors.h"

namespace ds {
namespace {

using wire::Clock;

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
  Server(int port, std::string token) : core_(std::move(token)) {
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
    for (auto& c : core_.connections()) ::close(c.fd);
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
      auto& conns = core_.connections();
      fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, static_cast<short>(accept_paused_ ? 0 : POLLIN), 0}});
      for (auto& c : conns)
        fds.push_back({c.fd, static_cast<short>((store::StoreCore::wants_input(c) ? POLLIN : 0) | (c.out.empty() ? 0 : POLLOUT)), 0});
      if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR) {
        std::fprintf(stderr, "store: poll failed: %s\n", wire::errno_text(errno).c_str());
        return;
      }
      if (fds[0].revents) return;  // the destructor woke us
      size_t i = 2;
      for (auto& c : conns) {  // the list is unchanged since fds was built
        const short ev = fds[i++].revents;
        if (ev & (POLLIN | POLLHUP | POLLERR)) read_from(c);
      }
      if (fds[1].revents & POLLIN) accept_all();
      core_.run(Clock::now());
      for (auto& c : conns) flush(c);
      const size_t before = conns.size();
      core_.remove_finished([](store::Conn& c) { ::close(c.fd); });
      if (conns.size() < before) accept_paused_ = false;  // a descriptor was freed
    }
  }

  int poll_timeout_ms() const {
    const auto first = core_.next_deadline();
    if (first == Clock::time_point::max()) return -1;
    if (first == Clock::time_point::min()) return 0;
    const auto ms = std::chrono::ceil<Millis>(first - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: the pending connection would wake every poll at once. Accept again
          // when a connection has closed.
          std::fprintf(stderr, "store: cannot accept a connection: %s (%zu open)\n", wire::errno_text(errno).c_str(),
                       core_.connections().size());
          accept_paused_ = true;
        }
        return;  // EAGAIN, or a connection that died before we got to it
      }
      core_.open(peer_name(addr, len), Clock::now()).fd = fd;
    }
  }

  void read_from(store::Conn& c) {
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, 0);
      if (n > 0) {
        core_.received(c, std::string_view(chunk, static_cast<size_t>(n)));
        if (!store::StoreCore::wants_input(c)) break;  // handle what came first
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) c.dead = true;  // closed or broken
        break;
      }
    }
  }

  void flush(store::Conn& c) {
    while (!c.out.empty() && !c.dead) {
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

  store::StoreCore core_;
  int listen_fd_ = -1, port_ = 0;
  bool accept_paused_ = false;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<TcpStoreServer> serve_tcp_store(int port, const std::string& token) {
  if (port < 0 || port > 65535) throw CommError(fmt::format("store: port {} is not in 0..65535", port));
  return std::make_unique<Server>(port, token);
}

}  // namespace ds
