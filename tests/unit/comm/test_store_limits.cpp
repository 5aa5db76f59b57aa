// The rendezvous store server against broken and hostile peers: the protocol core (store_core.h)
// with a test clock, and the real TCP server with pipelined, silent and oversized clients. Each
// bad peer is refused or dropped with a logged reason; the store keeps serving the others.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <string>
#include <vector>

#include "comm/store.h"
#include "comm/store_core.h"
#include "comm/wire.h"
#include "core/errors.h"

using namespace ds;
using namespace std::chrono_literals;
using wire::Clock;

namespace {

const std::string kToken = "0123456789abcdef";

std::string hello(const std::string& token = kToken) {
  return wire::Writer().u8(wire::kHello).str(wire::kMagic).str(token).frame();
}

// The reply payloads in c.out, which is emptied.
std::vector<std::string> replies(store::Conn& c) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (std::string payload; wire::take_frame_at(c.out, pos, payload, wire::kMaxFrame);) out.push_back(payload);
  c.out.erase(0, pos);
  return out;
}

struct Core {
  std::vector<std::string> log;
  store::StoreCore core{kToken, [this](const std::string& line) { log.push_back(line); }};
  Clock::time_point now = Clock::time_point() + 1h;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void send_all(int fd, const std::string& data) {
  wire::send_all(fd, data, Clock::now() + 10s);
}

}  // namespace

TEST_CASE("store core: thousands of pipelined requests are answered without nesting calls") {
  // The server once answered a held request by handling the connection's next request from inside
  // the answer, one stack frame per pipelined request: 200000 gets that time out at once overflowed it.
  Core t;
  store::Conn& c = t.core.open("peer", t.now);
  std::string burst = hello();
  for (int i = 0; i < 200000; ++i) burst += wire::Writer().u8(wire::kGet).str("missing").i64(0).frame();
  t.core.received(c, burst);
  t.core.run(t.now);
  const auto out = replies(c);
  REQUIRE(out.size() == 200001);
  CHECK(out[0] == std::string(1, wire::kOk));
  CHECK(out[200000][0] == wire::kTimeout);
  CHECK(t.log.empty());
}

TEST_CASE("store core: add that overflows 64 bits is an error naming the key, the counter is unchanged") {
  Core t;
  store::Conn& c = t.core.open("peer", t.now);
  t.core.received(c, hello() + wire::Writer().u8(wire::kAdd).str("n").i64(INT64_MAX).frame() +
                         wire::Writer().u8(wire::kAdd).str("n").i64(1).frame() +
                         wire::Writer().u8(wire::kAdd).str("n").i64(-1).frame());
  t.core.run(t.now);
  const auto out = replies(c);
  REQUIRE(out.size() == 4);
  wire::Reader overflow(out[2]);
  CHECK(overflow.u8() == wire::kError);
  CHECK(overflow.str() == "store: add on key 'n': 9223372036854775807 + 1 overflows a 64-bit integer");
  wire::Reader last(out[3]);
  CHECK(last.u8() == wire::kOk);
  CHECK(last.i64() == INT64_MAX - 1);
}

TEST_CASE("store core: a peer without the token gets no store access and is refused with a reason") {
  Core t;
  store::Conn& wrong = t.core.open("10.0.0.1:1", t.now);
  store::Conn& silent = t.core.open("10.0.0.2:2", t.now);
  store::Conn& huge = t.core.open("10.0.0.3:3", t.now);
  store::Conn& early = t.core.open("10.0.0.4:4", t.now);
  t.core.received(wrong, hello("not-the-token") + wire::Writer().u8(wire::kSet).str("k").str("v").frame());
  t.core.received(huge, std::string("\xff\xff\xff\x7f", 4));  // a 2 GiB frame, announced before any token
  t.core.received(early, wire::Writer().u8(wire::kSet).str("k").str("v").frame());
  t.core.run(t.now);
  CHECK(t.core.keys() == 0);
  for (store::Conn* c : {&wrong, &huge, &early}) {
    CHECK(c->closing);
    CHECK(replies(*c) == std::vector<std::string>{std::string(1, wire::kRefused)});
  }
  CHECK_FALSE(silent.closing);
  t.core.run(t.now + wire::kHelloTimeout);  // the silent one is refused once its time is up
  CHECK(silent.closing);
  CHECK(t.log == std::vector<std::string>{
                     "store: refused a connection from 10.0.0.1:1: wrong job token",
                     "store: refused a connection from 10.0.0.3:3: not a dsrun store client",
                     "store: refused a connection from 10.0.0.4:4: not a dsrun store client",
                     "store: refused a connection from 10.0.0.2:2: no job token within 10 s"});
}

TEST_CASE("store core: an authenticated peer with a broken request is dropped with the reason") {
  Core t;
  store::Conn& c = t.core.open("peer", t.now);
  t.core.received(c, hello() + std::string("\x01\x00\x00\x00\x63", 5));  // request type 99
  t.core.run(t.now);
  CHECK(c.dead);
  CHECK(t.log == std::vector<std::string>{"store: dropped a connection from peer: unknown request type 99"});
  store::Conn& big = t.core.open("big", t.now);
  t.core.received(big, hello() + std::string("\x01\x00\x00\x10", 4));  // 256 MiB > kMaxFrame
  t.core.run(t.now);
  CHECK(big.dead);
  CHECK(t.log.back() == "store: dropped a connection from big: message of 268435457 bytes exceeds the limit of 67108864");
}

TEST_CASE("store core: connections beyond the limits are refused") {
  Core t;
  std::vector<store::Conn*> conns;
  for (size_t i = 0; i < wire::kMaxUnauthenticated; ++i) conns.push_back(&t.core.open("p", t.now));
  CHECK_FALSE(conns.back()->closing);
  store::Conn& extra = t.core.open("extra", t.now);
  CHECK(extra.closing);
  CHECK(t.log.back() == "store: refused a connection from extra: too many connections without a job token (the limit is 1024)");
  for (auto* c : conns) t.core.received(*c, hello());
  t.core.run(t.now);
  store::Conn& next = t.core.open("next", t.now);  // the others have shown the token: room again
  CHECK_FALSE(next.closing);
}

TEST_CASE("store core: a peer that never reads its replies stops being read, and resumes") {
  Core t;
  store::Conn& c = t.core.open("peer", t.now);
  const std::string value(1 << 20, 'v');
  t.core.received(c, hello() + wire::Writer().u8(wire::kSet).str("big").str(value).frame());
  std::string gets;
  for (int i = 0; i < 200; ++i) gets += wire::Writer().u8(wire::kGet).str("big").i64(0).frame();
  t.core.received(c, gets);
  t.core.run(t.now);
  CHECK(c.out.size() <= wire::kMaxFrame + value.size() + 64);  // not 200 MiB of replies
  CHECK_FALSE(store::StoreCore::wants_input(c));
  CHECK(t.core.next_deadline() == Clock::time_point::max());
  const size_t pending = c.in.size();
  REQUIRE(pending > 0);
  c.out.clear();  // the peer reads
  CHECK(t.core.next_deadline() == Clock::time_point::min());  // run again now
  t.core.run(t.now);
  CHECK(c.in.size() < pending);
  CHECK_FALSE(c.out.empty());
}

TEST_CASE("tcp store: a pipelining, a silent and a garbage peer do not stop the store") {
  auto server = serve_tcp_store(0, kToken);
  const int silent = connect_to(server->port());  // connects, never speaks
  const int garbage = connect_to(server->port());
  send_all(garbage, std::string("\x10\x00\x00\x00garbage-garbage!", 20));
  const int pipelined = connect_to(server->port());
  std::string burst = hello();
  for (int i = 0; i < 20000; ++i) burst += wire::Writer().u8(wire::kGet).str("missing").i64(0).frame();
  send_all(pipelined, burst);
  std::string in, payload;
  int frames = 0;
  char chunk[65536];
  for (const auto deadline = Clock::now() + 30s; frames < 20001 && Clock::now() < deadline;) {
    const ssize_t n = ::recv(pipelined, chunk, sizeof chunk, 0);
    REQUIRE(n > 0);
    in.append(chunk, static_cast<size_t>(n));
    while (wire::take_frame(in, payload, wire::kMaxFrame)) ++frames;
  }
  CHECK(frames == 20001);  // Ok, then 20000 timeouts
  auto client = connect_tcp_store("127.0.0.1", server->port(), kToken, 5s);
  client->set("k", "v");
  CHECK(client->get("k", 1s) == "v");
  char byte;
  CHECK(::recv(garbage, &byte, 1, 0) == 1);  // the refusal
  ::close(silent);
  ::close(garbage);
  ::close(pipelined);
}

TEST_CASE("tcp store: a value over the limit fails on the client, naming the request") {
  auto server = serve_tcp_store(0, kToken);
  auto client = connect_tcp_store("127.0.0.1", server->port(), kToken, 5s);
  try {
    client->set("huge", std::string(wire::kMaxFrame, 'x'));
    FAIL("no error");
  } catch (const CommError& e) {
    CHECK(std::string(e.what()).find("store: set 'huge' on 127.0.0.1:") == 0);
    CHECK(std::string(e.what()).find("exceeds the store's limit of 67108864") != std::string::npos);
  }
  client->set("small", "ok");  // the client still works
  CHECK(client->get("small", 1s) == "ok");
}
