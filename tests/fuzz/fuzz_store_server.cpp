// Fuzz target: the rendezvous store server's protocol (runtime/comm/store_core.h), before and after
// the job token is checked. Two connections, A and B. Byte 0: bit 0 sends a valid Hello on A first,
// bit 1 on B. Then records: [flags][length][bytes]: flags bit 0 picks the connection, bit 1 moves
// the clock 10 s on; the bytes go to that connection and the server runs. Invariants: a connection
// that never presented the token changes nothing in the store and gets only Ok/Refused; memory
// held per connection stays under the limits; once the clock has passed every deadline no request
// is left held past its deadline and every unauthenticated connection is refused.
#include <cstdint>
#include <string>

#include "comm/store_core.h"
#include "comm/wire.h"
#include "fuzz_check.h"

namespace {

using ds::wire::Clock;

const std::string kToken = "fuzz-job-token";

std::string hello(const std::string& token) {
  return ds::wire::Writer().u8(ds::wire::kHello).str(ds::wire::kMagic).str(token).frame();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  ds::store::StoreCore core(kToken, [](const std::string&) {});
  auto now = Clock::time_point() + std::chrono::hours(1);
  ds::store::Conn* conn[2] = {&core.open("A", now), &core.open("B", now)};
  for (int i = 0; i < 2; ++i)
    if (data[0] & (1 << i)) core.received(*conn[i], hello(kToken));
  core.run(now);
  const bool some_token = data[0] & 3;
  for (size_t at = 1; at + 2 <= size;) {
    const uint8_t flags = data[at];
    const size_t n = std::min<size_t>(data[at + 1], size - at - 2);
    ds::store::Conn& c = *conn[flags & 1];
    if (flags & 2) now += std::chrono::seconds(10);
    core.received(c, std::string_view(reinterpret_cast<const char*>(data) + at + 2, n));
    core.run(now);
    at += 2 + n;
    for (auto* k : conn) {
      FUZZ_CHECK(k->in.size() <= 2 * size_t{ds::wire::kMaxFrame});
      if (!k->authed) FUZZ_CHECK(!k->held);
    }
    if (!some_token && !conn[0]->authed && !conn[1]->authed) FUZZ_CHECK(core.keys() == 0);
  }
  now += std::chrono::hours(24 * 365 * 40);  // past every deadline (they are clamped to 35 years)
  core.run(now);
  for (auto* k : conn) {
    FUZZ_CHECK(!k->held || k->deadline > now);  // only requests that came after this run's start
    FUZZ_CHECK(k->authed || k->closing || k->dead);
  }
  // Replies of an unauthenticated connection: one Ok or Refused frame, nothing else.
  for (auto* k : conn) {
    if (k->authed) continue;
    std::string out = k->out, payload;
    if (ds::wire::take_frame(out, payload, ds::wire::kMaxFrame))
      FUZZ_CHECK(payload.size() == 1 && (payload[0] == ds::wire::kRefused || payload[0] == ds::wire::kOk));
  }
  core.remove_finished([](ds::store::Conn&) {});
  return 0;
}
