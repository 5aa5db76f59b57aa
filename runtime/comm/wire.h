// The TCP store's wire format and socket helpers, shared by its server and client (internal).
// A frame is a u32 little-endian payload length, then the payload. A request payload is an op byte
// and its fields; a reply is a status byte and its fields. Fields: u8, i64 (little-endian), string
// (u32 length + bytes). The first request on every connection is Hello(magic, token).
//   Hello(magic, token)            → Ok | Refused
//   Set(key, value)                → Ok
//   Get(key, timeout_ms)           → Ok(value) | Timeout          (the server holds the request)
//   Wait(n, key×n, timeout_ms)     → Ok | Timeout(n, missing×n)   (the server holds the request)
//   Add(key, delta)                → Ok(new value) | Error(message)
//   Remove(key)                    → Ok(u8 existed)
#pragma once
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "comm/store.h"

namespace ds::wire {

enum Op : uint8_t { kHello = 1, kSet, kGet, kWait, kAdd, kRemove };
enum Status : uint8_t { kOk = 0, kTimeout, kError, kRefused };
inline constexpr const char* kMagic = "dsstore/1";
// Server limits (store_core.h); a peer beyond one is refused or dropped with a logged reason.
inline constexpr uint32_t kMaxFrame = 64u << 20;  // bytes; a bigger length means a broken peer
inline constexpr uint32_t kMaxHelloFrame = 1024;  // before the token is checked
inline constexpr size_t kMaxConnections = 4096;     // open at once (also bounded by RLIMIT_NOFILE)
inline constexpr size_t kMaxUnauthenticated = 1024; // open at once without a checked token
inline constexpr std::chrono::seconds kHelloTimeout{10};  // to send the Hello after connecting

using Clock = std::chrono::steady_clock;

// A socket-level failure, without context (the caller adds which server and which operation).
struct IoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Builds a payload; frame() returns it with its length prefix.
class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& i64(int64_t v);
  Writer& str(const std::string& v);
  std::string frame() const;

 private:
  std::string buf_;
};

// Reads a payload field by field; throws IoError("malformed message") when it runs short.
class Reader {
 public:
  explicit Reader(const std::string& payload) : s_(payload) {}
  uint8_t u8();
  int64_t i64();
  std::string str();

 private:
  void need(size_t n) const;
  const std::string& s_;
  size_t pos_ = 0;
};

// Moves one complete frame's payload from the front of `buf` into `payload`; false if incomplete.
// Throws IoError if the announced length exceeds `max`.
bool take_frame(std::string& buf, std::string& payload, uint32_t max);
// The same from position `pos` of `buf`, which it advances past the frame instead of erasing it
// (many pipelined frames cost one erase, not one each).
bool take_frame_at(const std::string& buf, size_t& pos, std::string& payload, uint32_t max);

// Blocking I/O on a connected socket with a deadline (poll + non-blocking calls); throw IoError on
// timeout ("no reply within 5 s"), on a closed connection and on socket errors.
void send_all(int fd, const std::string& data, Clock::time_point deadline);
std::string recv_frame(int fd, Clock::time_point deadline);

// now + d, clamped so that huge timeouts do not overflow.
Clock::time_point deadline_after(Millis d);
// The integer a counter key holds (add); throws CommError naming the key and the value otherwise.
int64_t parse_counter(const std::string& key, const std::string& text);
// "60 s", "1.5 s", "250 ms".
std::string format_duration(Millis d);
// strerror(err) as a std::string.
std::string errno_text(int err);

}  // namespace ds::wire
