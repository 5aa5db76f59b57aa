// TcpStore failure modes: refused tokens (logged by the server), port in use, nobody listening,
// and a server that goes away before or during a request. Each must fail fast with a clear CommError.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <regex>
#include <thread>

#include "capture_stderr.h"
#include "comm/store.h"
#include "core/errors.h"

using namespace ds;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kToken = "00112233445566778899aabbccddeeff";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const CommError& e) {
    return e.what();
  }
  return "(no error)";
}

// A loopback port nobody listens on (bound, then released).
int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), len);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_CASE("tcp store: a wrong token is refused and logged") {
  auto server = serve_tcp_store(0, kToken);
  const int port = server->port();
  CaptureStderr capture;
  const auto start = Clock::now();
  const std::string err = error_of([&] { connect_tcp_store("127.0.0.1", port, "ffffffffffffffffffffffffffffffff", 5s); });
  CHECK(Clock::now() - start < 2s);  // refused at once, not retried until the timeout
  CHECK(err == "store: 127.0.0.1:" + std::to_string(port) + ": the server refused the job token (DS_JOB_TOKEN)");
  const std::string log = capture.text();
  CHECK(std::regex_search(log, std::regex(R"(^store: refused a connection from 127\.0\.0\.1:\d+: wrong job token\n$)")));
  // The server keeps serving the right token.
  auto store = connect_tcp_store("127.0.0.1", port, kToken, 2s);
  store->set("k", "v");
  CHECK(store->get("k", 1s) == "v");
}

TEST_CASE("tcp store: a missing token is refused and logged") {
  auto server = serve_tcp_store(0, kToken);
  CaptureStderr capture;
  CHECK(error_of([&] { connect_tcp_store("127.0.0.1", server->port(), "", 5s); }).find("refused the job token") !=
        std::string::npos);
  CHECK(capture.text().find(": missing job token\n") != std::string::npos);
}

TEST_CASE("tcp store: a client that is not a store client is refused") {
  auto server = serve_tcp_store(0, kToken);
  CaptureStderr capture;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(server->port()));
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  REQUIRE(::write(fd, http, sizeof http - 1) > 0);
  char buf[64];
  while (::read(fd, buf, sizeof buf) > 0) {
  }  // the server closes the connection
  ::close(fd);
  CHECK(capture.text().find(": not a dsrun store client\n") != std::string::npos);
}

TEST_CASE("tcp store: port in use") {
  auto first = serve_tcp_store(0, kToken);
  const int port = first->port();
  CHECK(error_of([&] { serve_tcp_store(port, kToken); }) ==
        "store: cannot listen on port " + std::to_string(port) +
            ": Address already in use (another job on this host? use --master_port)");
}

TEST_CASE("tcp store: nobody listening times out naming MASTER_ADDR and MASTER_PORT") {
  const int port = unused_port();
  const auto start = Clock::now();
  const std::string err = error_of([&] { connect_tcp_store("127.0.0.1", port, kToken, 1s); });
  const auto took = Clock::now() - start;
  CHECK(err == "store: cannot reach MASTER_ADDR:MASTER_PORT = 127.0.0.1:" + std::to_string(port) +
                   " within 1 s: Connection refused");
  CHECK(took >= 800ms);
  CHECK(took < 3s);
}

TEST_CASE("tcp store: the client retries until the server comes up") {
  const int port = unused_port();
  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    server = serve_tcp_store(port, kToken);
  });
  auto store = connect_tcp_store("127.0.0.1", port, kToken, 5s);
  late.join();
  store->set("k", "v");
  CHECK(store->get("k", 1s) == "v");
}

TEST_CASE("tcp store: a server gone between requests fails the next one at once") {
  auto server = serve_tcp_store(0, kToken);
  auto store = connect_tcp_store("127.0.0.1", server->port(), kToken, 2s);
  store->set("k", "v");
  server.reset();
  const auto start = Clock::now();
  const std::string err = error_of([&] { store->get("k", 10s); });
  CHECK(Clock::now() - start < 2s);
  CHECK(err.find("store: get 'k' on 127.0.0.1:") == 0);
  CHECK(err.find("failed") != std::string::npos);
}

TEST_CASE("tcp store: a server gone during a blocking get fails it at once") {
  auto server = serve_tcp_store(0, kToken);
  auto store = connect_tcp_store("127.0.0.1", server->port(), kToken, 2s);
  std::thread killer([&] {
    std::this_thread::sleep_for(200ms);
    server.reset();
  });
  const auto start = Clock::now();
  const std::string err = error_of([&] { store->get("never", 20s); });
  killer.join();
  CHECK(Clock::now() - start < 3s);
  CHECK(err.find("the server closed the connection") != std::string::npos);
}
