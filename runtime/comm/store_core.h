// The TCP store server's protocol without sockets (internal): connections are records whose
// received bytes go in and whose reply bytes come out, so the socket loop (tcp_store_server.cpp)
// and the fuzz target (tests/fuzz/fuzz_store_server.cpp) run the same code. Single-threaded.
// A get/wait whose keys are missing is held (one per connection: clients are synchronous) and
// answered when a set/add supplies the keys, or with Timeout at its deadline.
// Limits (wire.h has the numbers); a peer that breaks one is refused or dropped with a logged reason:
//   - before the token is checked: frames of at most kMaxHelloFrame bytes, a Hello within
//     kHelloTimeout, at most kMaxUnauthenticated such connections at once;
//   - after: frames of at most kMaxFrame bytes (so keys and values are smaller), at most
//     kMaxConnections connections in all; a connection's unsent replies (kMaxFrame) and unhandled
//     requests (2 kMaxFrame) stop its reading, so each holds a bounded amount of memory.
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "comm/wire.h"

namespace ds::store {

struct Conn {
  int fd = -1;            // the socket loop's descriptor (unused here)
  std::string peer;       // "10.0.0.7:41234", for messages
  wire::Clock::time_point opened;
  bool authed = false;
  bool closing = false;   // close once `out` is sent
  bool dead = false;      // close now
  std::string in, out;    // bytes received and not yet handled; bytes to send
  bool stalled = false;   // requests left unhandled because `out` is full
  // A held get/wait.
  bool held = false;
  uint8_t op = 0;
  std::vector<std::string> keys;
  wire::Clock::time_point deadline;
};

class StoreCore {
 public:
  using Log = std::function<void(const std::string&)>;
  // `log` receives one line per refused or dropped peer (default: stderr).
  explicit StoreCore(std::string token, Log log = {});

  // A new connection from `peer`; refused at once (closing) when too many are open.
  Conn& open(std::string peer, wire::Clock::time_point now);
  // Appends bytes received on `c`; run() handles them.
  void received(Conn& c, std::string_view bytes);
  // Handles every complete request of every connection, answers held requests that can be
  // answered (keys present, deadline passed), refuses connections without a Hello in time.
  void run(wire::Clock::time_point now);
  // The earliest time run() has something to do without new input (max(): none; now: a stalled
  // connection has sent its replies).
  wire::Clock::time_point next_deadline() const;
  // Whether to read more from c: not while its requests or replies pile up (a peer that sends
  // without reading its replies stalls, and the memory it holds stays bounded).
  static bool wants_input(const Conn& c);
  // Forgets connections that are dead or closing with nothing left to send; `close` gets each.
  void remove_finished(const std::function<void(Conn&)>& close);

  std::list<Conn>& connections() { return conns_; }
  size_t keys() const { return map_.size(); }

 private:
  bool process(Conn& c, wire::Clock::time_point now);
  void handle(Conn& c, const std::string& payload, wire::Clock::time_point now);
  bool answer_held(Conn& c, wire::Clock::time_point now);
  void refuse(Conn& c, const std::string& why);
  void drop(Conn& c, const std::string& why);

  std::string token_;
  Log log_;
  std::map<std::string, std::string> map_;
  std::list<Conn> conns_;
};

}  // namespace ds::store
