// TcpStore client: each request takes an idle connection from a small pool (or opens one, with the
// token handshake), sends one frame and reads one reply, so threads sharing the client never wait
// on each other's blocking get/wait. Any socket failure closes that connection and throws CommError.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/store.h"
#include "comm/wire.h"
#include "core/errors.h"

namespace ds {
namespace {

using wire::Clock;

// Slack for a held get/wait: the server answers at the request's timeout; the reply may take a bit.
constexpr Millis kReplySlack{2000};
Millis with_slack(Millis timeout) { return timeout < Millis(int64_t{1} << 40) ? timeout + kReplySlack : timeout; }

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, std::string token, Millis timeout)
      : host_(std::move(host)), port_(port), token_(std::move(token)), timeout_(timeout) {
    idle_.push_back(open_connection(/*retry=*/true));
  }

  ~TcpStore() override {
    for (int fd : idle_) ::close(fd);
  }

  void set(const std::string& key, const std::string& value) override {
    request(wire::Writer().u8(wire::kSet).str(key).str(value), timeout_, fmt::format("set '{}'", key));
  }

  std::string get(const std::string& key, Millis timeout) override {
    const std::string what = fmt::format("get '{}'", key);
    std::string reply = request(wire::Writer().u8(wire::kGet).str(key).i64(timeout.count()), with_slack(timeout), what);
    wire::Reader r(reply);
    if (r.u8() == wire::kTimeout)
      throw CommError(fmt::format("store: {} timed out after {}", what, wire::format_duration(timeout)));
    return r.str();
  }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    wire::Writer w;
    w.u8(wire::kWait).i64(static_cast<int64_t>(keys.size()));
    for (const auto& k : keys) w.str(k);
    std::string reply = request(w.i64(timeout.count()), with_slack(timeout), "wait");
    wire::Reader r(reply);
    if (r.u8() == wire::kOk) return;
    std::vector<std::string> missing;
    for (int64_t n = r.i64(); n > 0; --n) missing.push_back(r.str());  // bounded by the reply, not by n
    throw CommError(fmt::format("store: wait timed out after {}; missing keys: {}", wire::format_duration(timeout),
                                fmt::join(missing, ", ")));
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::string reply = request(wire::Writer().u8(wire::kAdd).str(key).i64(delta), timeout_, fmt::format("add '{}'", key));
    wire::Reader r(reply);
    if (r.u8() == wire::kError) throw CommError(r.str());
    return r.i64();
  }

  bool remove(const std::string& key) override {
    std::string reply = request(wire::Writer().u8(wire::kRemove).str(key), timeout_, fmt::format("remove '{}'", key));
    wire::Reader r(reply);
    r.u8();
    return r.u8() != 0;
  }

 private:
  // Sends one request and returns the reply payload (status first).
  std::string request(const wire::Writer& w, Millis limit, const std::string& what) {
    const std::string frame = w.frame();
    if (frame.size() - 4 > wire::kMaxFrame)
      throw CommError(fmt::format("store: {} on {}:{}: a request of {} bytes exceeds the store's limit of {}", what,
                                  host_, port_, frame.size() - 4, wire::kMaxFrame));
    const int fd = acquire();
    try {
      const auto deadline = wire::deadline_after(limit);
      wire::send_all(fd, frame, deadline);
      std::string reply = wire::recv_frame(fd, deadline);
      if (reply.empty()) throw wire::IoError("malformed message");
      release(fd);
      return reply;
    } catch (const wire::IoError& e) {
      ::close(fd);
      throw CommError(fmt::format("store: {} on {}:{} failed: {}", what, host_, port_, e.what()));
    }
  }

  int acquire() {
    {
      std::lock_guard lock(mutex_);
      if (!idle_.empty()) {
        const int fd = idle_.back();
        idle_.pop_back();
        return fd;
      }
    }
    return open_connection(/*retry=*/false);  // the server was up: a refusal now means it is gone
  }

  void release(int fd) {
    std::lock_guard lock(mutex_);
    idle_.push_back(fd);
  }

  // Connects and presents the token; with `retry`, tries every 100 ms until the timeout.
  int open_connection(bool retry) {
    const auto deadline = wire::deadline_after(timeout_);
    std::string last_error = "no attempt";
    for (;;) {
      try {
        const int fd = connect_once(deadline);
        if (handshake(fd, deadline)) return fd;
        ::close(fd);
        throw CommError(fmt::format("store: {}:{}: the server refused the job token (DS_JOB_TOKEN)", host_, port_));
      } catch (const wire::IoError& e) {
        last_error = e.what();
      }
      if (!retry || Clock::now() + Millis(100) >= deadline) break;
      std::this_thread::sleep_for(Millis(100));
    }
    if (!retry) throw CommError(fmt::format("store: cannot reconnect to {}:{}: {}", host_, port_, last_error));
    throw CommError(fmt::format("store: cannot reach MASTER_ADDR:MASTER_PORT = {}:{} within {}: {}", host_, port_,
                                wire::format_duration(timeout_), last_error));
  }

  // One connection attempt to each address of host_; throws IoError with the last failure.
  int connect_once(Clock::time_point deadline) {
    addrinfo hints{}, *list = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const int rc = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &list);
    if (rc != 0) throw wire::IoError(fmt::format("cannot resolve '{}': {}", host_, ::gai_strerror(rc)));
    std::string error = "no address";
    for (addrinfo* ai = list; ai; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      int err = ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
        socklen_t len = sizeof err;
        if (::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30))) <= 0) err = ETIMEDOUT;
        else ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
      if (err == 0) {
        ::freeaddrinfo(list);
        return fd;
      }
      error = wire::errno_text(err);
      ::close(fd);
    }
    ::freeaddrinfo(list);
    throw wire::IoError(error);
  }

  // Presents the token; false if the server refused it. IoError if the connection failed.
  bool handshake(int fd, Clock::time_point deadline) {
    try {
      wire::send_all(fd, wire::Writer().u8(wire::kHello).str(wire::kMagic).str(token_).frame(), deadline);
      const std::string reply = wire::recv_frame(fd, deadline);
      return !reply.empty() && static_cast<uint8_t>(reply[0]) == wire::kOk;
    } catch (const wire::IoError&) {
      ::close(fd);
      throw;
    }
  }

  const std::string host_;
  const int port_;
  const std::string token_;
  const Millis timeout_;
  std::mutex mutex_;
  std::vector<int> idle_;
};

}  // namespace

std::shared_ptr<Store> connect_tcp_store(const std::string& host, int port, const std::string& token,
                                         Millis connect_timeout) {
  return std::make_shared<TcpStore>(host, port, token, connect_timeout);
}

}  // namespace ds
