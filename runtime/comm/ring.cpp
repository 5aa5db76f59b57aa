// Ring reduce-scatter / allgather and binomial-tree broadcast over Gloo unbound buffers (ring.h).
#include "comm/ring.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

namespace ds::ring {
namespace {

// Gloo's own algorithms use slot prefixes 0x01..0x08; ours live apart from them. A slot may be
// reused by consecutive operations: messages between two ranks on one slot match in order.
constexpr uint8_t kSlotPrefix = 0x40;
constexpr size_t kSegmentBytes = 4u << 20;  // reduce-scatter scratch: two buffers of this size
uint64_t slot(uint32_t tag) { return gloo::Slot::build(kSlotPrefix, tag); }
enum : uint32_t { kReduceScatterTag = 1, kAllgatherTag = 2, kBroadcastTag = 3 };

void wait_recv(gloo::transport::UnboundBuffer& b, int peer, Millis timeout) {
  try {
    if (b.waitRecv(nullptr, timeout)) return;
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{} (receiving from rank {})", clean_error(e.what()), peer));
  }
  throw std::runtime_error(fmt::format("receive from rank {} aborted", peer));
}

void wait_send(gloo::transport::UnboundBuffer& b, int peer, Millis timeout) {
  try {
    if (b.waitSend(nullptr, timeout)) return;
  } catch (const std::exception& e) {
    throw std::runtime_error(peer < 0 ? clean_error(e.what()) : fmt::format("{} (sending to rank {})", clean_error(e.what()), peer));
  }
  throw std::runtime_error("send aborted");
}

}  // namespace

std::string clean_error(const char* what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {  // Gloo's location prefix means nothing to a user
    const auto end = s.find("] ");
    if (end != std::string::npos) s.erase(0, end + 2);
  }
  return s;
}

Layout equal_chunks(size_t count, int n) {
  Layout l;
  for (int i = 0; i < n; ++i) {
    l.offset.push_back(static_cast<size_t>(i) * count);
    l.count.push_back(count);
  }
  return l;
}

Layout split(size_t count, int n) {
  Layout l;
  const size_t base = count / n, extra = count % n;
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    l.offset.push_back(at);
    l.count.push_back(base + (static_cast<size_t>(i) < extra ? 1 : 0));
    at += l.count.back();
  }
  return l;
}

size_t reduce_scatter(gloo::Context& ctx, const void* in, void* out, const Layout& chunks, size_t elem,
                      ReduceFn reduce, Millis timeout) {
  const int n = ctx.size, r = ctx.rank, right = (r + 1) % n, left = (r + n - 1) % n;
  auto mod = [n](int i) { return static_cast<size_t>(((i % n) + n) % n); };
  const auto* src = static_cast<const char*>(in);
  auto ptr = [&](size_t i) { return src + chunks.offset[i] * elem; };
  auto bytes = [&](size_t i) { return chunks.count[i] * elem; };
  if (n == 1) {
    if (bytes(0)) std::memmove(out, ptr(0), bytes(0));
    return 0;
  }
  const size_t most = *std::max_element(chunks.count.begin(), chunks.count.end());
  if (most == 0) return 0;
  // The chunks are reduced in segments of at most kSegmentBytes, one ring pass per segment, so the
  // scratch memory is two segments whatever the buffer size. `acc` holds the partial sum being
  // passed on; `got` the one arriving from the left.
  const size_t seg = std::min(most, std::max<size_t>(1, kSegmentBytes / elem));
  std::vector<char> acc(seg * elem), got(seg * elem);
  auto acc_buf = ctx.createUnboundBuffer(acc.data(), acc.size());
  auto got_buf = ctx.createUnboundBuffer(got.data(), got.size());
  size_t sent = 0;
  for (size_t first = 0; first < most; first += seg) {
    // Elements of chunk i in this segment, and where they start.
    auto count = [&](size_t i) { return chunks.count[i] > first ? std::min(seg, chunks.count[i] - first) : 0; };
    auto at = [&](size_t i) { return ptr(i) + first * elem; };
    std::memcpy(acc.data(), at(mod(r - 1)), count(mod(r - 1)) * elem);
    // Step s: pass chunk r-s-1 right, take chunk r-s-2 from the left and add ours to it. After n-1
    // steps, the chunk arriving is chunk r, summed over every rank.
    for (int s = 0; s < n - 1; ++s) {
      const size_t give = mod(r - s - 1), take = mod(r - s - 2);
      if (count(take)) got_buf->recv(left, slot(kReduceScatterTag), 0, count(take) * elem);
      if (count(give)) acc_buf->send(right, slot(kReduceScatterTag), 0, count(give) * elem);
      if (count(take)) wait_recv(*got_buf, left, timeout);
      if (count(give)) wait_send(*acc_buf, right, timeout);
      sent += count(give) * elem;
      if (count(take))
        reduce(s == n - 2 ? static_cast<char*>(out) + first * elem : acc.data(), got.data(), at(take), count(take));
    }
  }
  return sent;
}

size_t allgather(gloo::Context& ctx, void* data, const Layout& chunks, size_t elem, Millis timeout) {
  const int n = ctx.size, r = ctx.rank, right = (r + 1) % n, left = (r + n - 1) % n;
  auto mod = [n](int i) { return static_cast<size_t>(((i % n) + n) % n); };
  const size_t total = (chunks.offset.back() + chunks.count.back()) * elem;
  if (n == 1 || total == 0) return 0;
  // Two views of the same memory: one send and one receive in flight at a time.
  auto send_buf = ctx.createUnboundBuffer(data, total);
  auto recv_buf = ctx.createUnboundBuffer(data, total);
  size_t sent = 0;
  // Step s: pass chunk r-s right (ours, then the ones received), take chunk r-s-1 from the left.
  for (int s = 0; s < n - 1; ++s) {
    const size_t give = mod(r - s), take = mod(r - s - 1);
    const size_t give_bytes = chunks.count[give] * elem, take_bytes = chunks.count[take] * elem;
    if (take_bytes) recv_buf->recv(left, slot(kAllgatherTag), chunks.offset[take] * elem, take_bytes);
    if (give_bytes) send_buf->send(right, slot(kAllgatherTag), chunks.offset[give] * elem, give_bytes);
    if (take_bytes) wait_recv(*recv_buf, left, timeout);
    if (give_bytes) wait_send(*send_buf, right, timeout);
    sent += give_bytes;
  }
  return sent;
}

size_t broadcast(gloo::Context& ctx, void* data, size_t bytes, int root, Millis timeout) {
  const int n = ctx.size, vrank = (ctx.rank - root + n) % n;  // virtual rank: root is 0
  if (n == 1 || bytes == 0) return 0;
  auto buf = ctx.createUnboundBuffer(data, bytes);
  size_t sends = 0;
  // Round `bit`: virtual ranks below `bit` have the data and send it to vrank + bit.
  for (int bit = 1; bit < n; bit <<= 1) {
    if (vrank < bit && vrank + bit < n) {
      buf->send((vrank + bit + root) % n, slot(kBroadcastTag), 0, bytes);
      ++sends;
    } else if (vrank >= bit && vrank < 2 * bit) {
      const int from = (vrank - bit + root) % n;
      buf->recv(from, slot(kBroadcastTag), 0, bytes);
      wait_recv(*buf, from, timeout);
    }
  }
  for (size_t i = 0; i < sends; ++i) wait_send(*buf, -1, timeout);
  return sends * bytes;
}

}  // namespace ds::ring
