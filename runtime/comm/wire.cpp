// The TCP store's wire format and blocking socket helpers (see wire.h).
#include "comm/wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "core/errors.h"

namespace ds::wire {

Writer& Writer::u8(uint8_t v) {
  buf_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::i64(int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  return *this;
}

static void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

static uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

Writer& Writer::str(const std::string& v) {
  put_u32(buf_, static_cast<uint32_t>(v.size()));
  buf_ += v;
  return *this;
}

std::string Writer::frame() const {
  std::string out;
  put_u32(out, static_cast<uint32_t>(buf_.size()));
  return out + buf_;
}

void Reader::need(size_t n) const {
  if (s_.size() - pos_ < n) throw IoError("malformed message");
}

uint8_t Reader::u8() {
  need(1);
  return static_cast<uint8_t>(s_[pos_++]);
}

int64_t Reader::i64() {
  need(8);
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(static_cast<unsigned char>(s_[pos_ + i])) << (8 * i);
  pos_ += 8;
  return static_cast<int64_t>(u);
}

std::string Reader::str() {
  need(4);
  const uint32_t n = get_u32(s_.data() + pos_);
  pos_ += 4;
  need(n);
  std::string v = s_.substr(pos_, n);
  pos_ += n;
  return v;
}

bool take_frame_at(const std::string& buf, size_t& pos, std::string& payload, uint32_t max) {
  if (buf.size() - pos < 4) return false;
  const uint32_t n = get_u32(buf.data() + pos);
  if (n > max) throw IoError(fmt::format("message of {} bytes exceeds the limit of {}", n, max));
  if (buf.size() - pos - 4 < n) return false;
  payload.assign(buf, pos + 4, n);
  pos += 4 + size_t{n};
  return true;
}

bool take_frame(std::string& buf, std::string& payload, uint32_t max) {
  size_t pos = 0;
  if (!take_frame_at(buf, pos, payload, max)) return false;
  buf.erase(0, pos);
  return true;
}

// Waits until fd is ready for `events` or the deadline passes (IoError).
static void wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left <= 0) throw IoError("no reply in time");
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left + 1, 1 << 30)));
    if (rc > 0) return;  // readable, writable, or an error/hang-up the next call reports
    if (rc < 0 && errno != EINTR) throw IoError(errno_text(errno));
  }
}

void send_all(int fd, const std::string& data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(fd, POLLOUT, deadline);
    } else if (n < 0 && errno != EINTR) {
      throw IoError(errno == EPIPE || errno == ECONNRESET ? "the server closed the connection" : errno_text(errno));
    }
  }
}

std::string recv_frame(int fd, Clock::time_point deadline) {
  std::string buf, payload;
  char chunk[65536];
  while (!take_frame(buf, payload, kMaxFrame)) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
    } else if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      throw IoError("the server closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLIN, deadline);
    } else if (errno != EINTR) {
      throw IoError(errno_text(errno));
    }
  }
  return payload;
}

Clock::time_point deadline_after(Millis d) {
  return Clock::now() + std::clamp(d, Millis(0), Millis(int64_t{1} << 40));  // 2^40 ms: 35 years
}

int64_t parse_counter(const std::string& key, const std::string& text) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    throw CommError(fmt::format("store: add on key '{}': its value '{}' is not an integer", key, text));
  return v;
}

std::string format_duration(Millis d) {
  const auto ms = d.count();
  if (ms < 1000) return fmt::format("{} ms", ms);
  if (ms % 1000 == 0) return fmt::format("{} s", ms / 1000);
  return fmt::format("{:g} s", ms / 1000.0);
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace ds::wire
