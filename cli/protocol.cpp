// Encoding and decoding of the dsrun ↔ agent frames described in protocol.h.
#include "protocol.h"

#include <fmt/format.h>

#include "errors.h"

namespace dsrun::protocol {
namespace {

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out_.push_back(static_cast<char>((v >> shift) & 0xff));
  }
  void i32(int v) { u32(static_cast<uint32_t>(v)); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  void strings(const std::vector<std::string>& list) {
    u32(static_cast<uint32_t>(list.size()));
    for (const auto& s : list) str(s);
  }
  void ints(const std::vector<int>& list) {
    u32(static_cast<uint32_t>(list.size()));
    for (int v : list) i32(v);
  }
  void env(const std::vector<EnvVar>& vars) {
    u32(static_cast<uint32_t>(vars.size()));
    for (const auto& v : vars) {
      str(v.name);
      str(v.value);
    }
  }
  std::string frame() const {
    Writer length;
    length.u32(static_cast<uint32_t>(out_.size()));
    return length.out_ + out_;
  }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  uint8_t u8() { return static_cast<uint8_t>(take(1)[0]); }
  uint32_t u32() {
    auto b = take(4);
    uint32_t v = 0;
    for (char c : b) v = (v << 8) | static_cast<uint8_t>(c);
    return v;
  }
  int i32() { return static_cast<int>(u32()); }
  bool boolean() { return u8() != 0; }
  std::string str() { return std::string(take(u32())); }
  std::vector<std::string> strings() {
    std::vector<std::string> list(count());
    for (auto& s : list) s = str();
    return list;
  }
  std::vector<int> ints() {
    std::vector<int> list(count());
    for (auto& v : list) v = i32();
    return list;
  }
  std::vector<EnvVar> env() {
    std::vector<EnvVar> vars(count());
    for (auto& v : vars) {
      v.name = str();
      v.value = str();
    }
    return vars;
  }
  void finish() const {
    if (!in_.empty()) throw LaunchError(fmt::format("protocol: {} unexpected trailing bytes in a frame", in_.size()));
  }

 private:
  // A list count, bounded by the bytes left so a corrupt count cannot allocate gigabytes.
  size_t count() {
    uint32_t n = u32();
    if (n > in_.size()) throw LaunchError(fmt::format("protocol: list of {} items in a frame of {} bytes", n, in_.size()));
    return n;
  }
  std::string_view take(size_t n) {
    if (n > in_.size()) throw LaunchError("protocol: truncated frame");
    auto head = in_.substr(0, n);
    in_.remove_prefix(n);
    return head;
  }
  std::string_view in_;
};

enum class Type : uint8_t { Plan = 1, Stop, Hello, Started, Output, Exited, Error, Done, Progress };

struct EncodeVisitor {
  Writer& w;
  void operator()(const NodePlan& p) {
    w.u8(static_cast<uint8_t>(Type::Plan));
    w.i32(p.version);
    w.str(p.host);
    w.str(p.cwd);
    w.strings(p.argv);
    w.env(p.env);
    w.u32(static_cast<uint32_t>(p.ranks.size()));
    for (const auto& r : p.ranks) {
      w.i32(r.rank);
      w.i32(r.local_rank);
      w.env(r.env);
    }
    w.str(p.log_dir);
    w.i32(p.kill_grace_ms);
    w.boolean(p.bind_cores);
    w.ints(p.cores);
    w.boolean(p.pass_local_rank);
  }
  void operator()(const Stop& s) {
    w.u8(static_cast<uint8_t>(Type::Stop));
    w.i32(s.signal);
    w.i32(s.grace_ms);
  }
  void operator()(const Hello& h) {
    w.u8(static_cast<uint8_t>(Type::Hello));
    w.i32(h.version);
    w.i32(h.pid);
  }
  void operator()(const Started& s) {
    w.u8(static_cast<uint8_t>(Type::Started));
    w.i32(s.rank);
    w.i32(s.pid);
  }
  void operator()(const Output& o) {
    w.u8(static_cast<uint8_t>(Type::Output));
    w.i32(o.rank);
    w.i32(o.stream);
    w.str(o.line);
  }
  void operator()(const Exited& e) {
    w.u8(static_cast<uint8_t>(Type::Exited));
    w.i32(e.rank);
    w.i32(e.code);
    w.i32(e.signal);
  }
  void operator()(const Error& e) {
    w.u8(static_cast<uint8_t>(Type::Error));
    w.str(e.message);
  }
  void operator()(const Done&) { w.u8(static_cast<uint8_t>(Type::Done)); }
  void operator()(const Progress& p) {
    w.u8(static_cast<uint8_t>(Type::Progress));
    w.u32(static_cast<uint32_t>(p.ranks.size()));
    for (const auto& r : p.ranks) {
      w.i32(r.rank);
      w.i32(r.silent_ms);
      w.str(r.activity);
      w.i32(r.activity_ms);
    }
  }
};

Message decode_payload(std::string_view payload) {
  Reader r(payload);
  Message m;
  switch (static_cast<Type>(r.u8())) {
    case Type::Plan: {
      NodePlan p;
      p.version = r.i32();
      if (p.version != kVersion)
        throw LaunchError(fmt::format("protocol: plan has version {}, this dsrun speaks {}", p.version, kVersion));
      p.host = r.str();
      p.cwd = r.str();
      p.argv = r.strings();
      p.env = r.env();
      uint32_t n = r.u32();
      if (n > payload.size()) throw LaunchError("protocol: rank count larger than the frame");
      p.ranks.resize(n);
      for (auto& rank : p.ranks) {
        rank.rank = r.i32();
        rank.local_rank = r.i32();
        rank.env = r.env();
      }
      p.log_dir = r.str();
      p.kill_grace_ms = r.i32();
      p.bind_cores = r.boolean();
      p.cores = r.ints();
      p.pass_local_rank = r.boolean();
      m = std::move(p);
      break;
    }
    case Type::Stop: {
      Stop s;
      s.signal = r.i32();
      s.grace_ms = r.i32();
      m = s;
      break;
    }
    case Type::Hello: {
      Hello h;
      h.version = r.i32();
      h.pid = r.i32();
      m = h;
      break;
    }
    case Type::Started: {
      Started s;
      s.rank = r.i32();
      s.pid = r.i32();
      m = s;
      break;
    }
    case Type::Output: {
      Output o;
      o.rank = r.i32();
      o.stream = r.i32();
      o.line = r.str();
      m = std::move(o);
      break;
    }
    case Type::Exited: {
      Exited e;
      e.rank = r.i32();
      e.code = r.i32();
      e.signal = r.i32();
      m = e;
      break;
    }
    case Type::Error:
      m = Error{r.str()};
      break;
    case Type::Done:
      m = Done{};
      break;
    case Type::Progress: {
      Progress p;
      uint32_t n = r.u32();
      if (n > payload.size()) throw LaunchError("protocol: progress count larger than the frame");
      p.ranks.resize(n);
      for (auto& rank : p.ranks) {
        rank.rank = r.i32();
        rank.silent_ms = r.i32();
        rank.activity = r.str();
        rank.activity_ms = r.i32();
      }
      m = std::move(p);
      break;
    }
    default:
      throw LaunchError(fmt::format("protocol: unknown message type {}", static_cast<int>(payload[0])));
  }
  r.finish();
  return m;
}

}  // namespace

std::string encode(const Message& message) {
  Writer w;
  std::visit(EncodeVisitor{w}, message);
  return w.frame();
}

void Decoder::feed(const char* data, size_t size) { buffer_.append(data, size); }

std::optional<Message> Decoder::next() {
  if (buffer_.size() < 4) return std::nullopt;
  uint32_t length = Reader(std::string_view(buffer_).substr(0, 4)).u32();
  if (length == 0 || length > kMaxFrameBytes)
    throw LaunchError(fmt::format("protocol: bad frame length {} (is the other side a dsrun agent?)", length));
  if (buffer_.size() < 4 + static_cast<size_t>(length)) return std::nullopt;
  Message m = decode_payload(std::string_view(buffer_).substr(4, length));
  buffer_.erase(0, 4 + static_cast<size_t>(length));
  return m;
}

}  // namespace dsrun::protocol
