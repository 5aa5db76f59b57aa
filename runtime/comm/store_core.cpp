// The TCP store server's protocol state machine (see store_core.h).
#include "comm/store_core.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "core/errors.h"

namespace ds::store {
namespace {

using wire::Clock;

// Constant-time comparison (the time does not depend on where the strings differ).
bool same_token(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>((i < given.size() ? given[i] : 0) ^ expected[i]);
  return diff == 0;
}

void reply(Conn& c, const wire::Writer& w) { c.out += w.frame(); }

}  // namespace

StoreCore::StoreCore(std::string token, Log log) : token_(std::move(token)), log_(std::move(log)) {
  if (!log_) log_ = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
}

Conn& StoreCore::open(std::string peer, Clock::time_point now) {
  size_t unauthenticated = 0;
  for (const auto& c : conns_) unauthenticated += c.authed ? 0 : 1;
  Conn& c = conns_.emplace_back();
  c.peer = std::move(peer);
  c.opened = now;
  if (conns_.size() > wire::kMaxConnections)
    refuse(c, fmt::format("too many connections (the limit is {})", wire::kMaxConnections));
  else if (unauthenticated >= wire::kMaxUnauthenticated)
    refuse(c, fmt::format("too many connections without a job token (the limit is {})", wire::kMaxUnauthenticated));
  return c;
}

void StoreCore::received(Conn& c, std::string_view bytes) {
  if (!c.closing && !c.dead) c.in.append(bytes);
}

void StoreCore::run(Clock::time_point now) {
  // Iterative, not recursive: a set may release requests held on other connections, whose
  // connections then have more requests to handle; a peer's pipelined requests never nest calls.
  for (bool progress = true; progress;) {
    progress = false;
    for (auto& c : conns_) {
      if (c.dead || c.closing) continue;
      if (!c.authed && now - c.opened >= wire::kHelloTimeout) {
        refuse(c, fmt::format("no job token within {}", wire::format_duration(wire::kHelloTimeout)));
        continue;
      }
      if (c.held && answer_held(c, now)) progress = true;
      if (!c.held && process(c, now)) progress = true;
    }
  }
}

Clock::time_point StoreCore::next_deadline() const {
  auto first = Clock::time_point::max();
  for (const auto& c : conns_) {
    if (c.dead || c.closing) continue;
    if (c.stalled && c.out.size() <= wire::kMaxFrame) return Clock::time_point::min();
    if (c.held) first = std::min(first, c.deadline);
    if (!c.authed) first = std::min(first, c.opened + wire::kHelloTimeout);
  }
  return first;
}

bool StoreCore::wants_input(const Conn& c) {
  return !c.closing && !c.dead && c.out.size() <= wire::kMaxFrame && c.in.size() <= 2 * size_t{wire::kMaxFrame};
}

void StoreCore::remove_finished(const std::function<void(Conn&)>& close) {
  conns_.remove_if([&](Conn& c) {
    const bool finished = c.dead || (c.closing && c.out.empty());
    if (finished) close(c);
    return finished;
  });
}

// Handles the complete requests in c.in, stopping at a held one; whether it handled any.
bool StoreCore::process(Conn& c, Clock::time_point now) {
  std::string payload;
  bool handled = false;
  size_t pos = 0;  // handled frames are erased once, at the end: pipelined requests cost linear time
  try {
    while (!c.held && !c.closing && !c.dead && !(c.stalled = c.out.size() > wire::kMaxFrame) &&
           wire::take_frame_at(c.in, pos, payload, c.authed ? wire::kMaxFrame : wire::kMaxHelloFrame)) {
      handle(c, payload, now);
      handled = true;
    }
    c.in.erase(0, pos);
  } catch (const wire::IoError& e) {
    if (!c.authed) refuse(c, "not a dsrun store client");
    else drop(c, e.what());
    return true;
  }
  return handled;
}

void StoreCore::refuse(Conn& c, const std::string& why) {
  log_(fmt::format("store: refused a connection from {}: {}", c.peer, why));
  c.in.clear();
  c.held = false;
  reply(c, wire::Writer().u8(wire::kRefused));
  c.closing = true;
}

void StoreCore::drop(Conn& c, const std::string& why) {
  log_(fmt::format("store: dropped a connection from {}: {}", c.peer, why));
  c.in.clear();
  c.held = false;
  c.dead = true;
}

void StoreCore::handle(Conn& c, const std::string& payload, Clock::time_point now) {
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
      return reply(c, wire::Writer().u8(wire::kOk));
    }
    case wire::kGet:
    case wire::kWait: {
      c.op = op;
      c.keys.clear();
      const int64_t n = op == wire::kGet ? 1 : r.i64();
      for (int64_t k = 0; k < n; ++k) c.keys.push_back(r.str());  // each key is in the payload: bounded
      c.deadline = now + std::clamp(Millis(r.i64()), Millis(0), Millis(int64_t{1} << 40));  // 2^40 ms: 35 years
      c.held = true;
      answer_held(c, now);
      return;
    }
    case wire::kAdd: {
      const std::string key = r.str();
      const int64_t delta = r.i64();
      auto it = map_.find(key);
      try {
        const int64_t old = it == map_.end() ? 0 : wire::parse_counter(key, it->second);
        int64_t value = 0;
        if (__builtin_add_overflow(old, delta, &value))
          throw CommError(fmt::format("store: add on key '{}': {} + {} overflows a 64-bit integer", key, old, delta));
        map_[key] = std::to_string(value);
        reply(c, wire::Writer().u8(wire::kOk).i64(value));
      } catch (const CommError& e) {
        reply(c, wire::Writer().u8(wire::kError).str(e.what()));
      }
      return;
    }
    case wire::kRemove:
      return reply(c, wire::Writer().u8(wire::kOk).u8(map_.erase(r.str()) > 0 ? 1 : 0));
    default:
      throw wire::IoError(fmt::format("unknown request type {}", op));
  }
}

// Answers c's held request if its keys exist or its deadline has passed; whether it did.
bool StoreCore::answer_held(Conn& c, Clock::time_point now) {
  std::vector<std::string> missing;
  for (const auto& k : c.keys)
    if (!map_.count(k)) missing.push_back(k);
  if (!missing.empty() && now < c.deadline) return false;
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
  return true;
}

}  // namespace ds::store
