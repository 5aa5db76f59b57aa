// Fuzz target: the agent control protocol's decoder, for both directions (one Decoder reads every
// message type: the agent's Plan/Stop and the launcher's Hello/Started/Output/Exited/Error/Done).
// Byte 0 sets the size of the pieces the stream is fed in (a stream arrives in arbitrary pieces).
// Every message decoded must re-encode to bytes that decode to the same bytes again; a malformed
// frame may only throw LaunchError.
#include <algorithm>
#include <cstdint>

#include "errors.h"
#include "fuzz_check.h"
#include "protocol.h"

namespace p = dsrun::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 64;
  const char* bytes = reinterpret_cast<const char*>(data) + 1;
  size -= 1;
  p::Decoder decoder;
  try {
    for (size_t at = 0; at < size; at += piece) {
      decoder.feed(bytes + at, std::min(piece, size - at));
      while (auto message = decoder.next()) {
        const std::string frame = p::encode(*message);
        p::Decoder again;
        again.feed(frame.data(), frame.size());
        auto copy = again.next();
        FUZZ_CHECK(copy.has_value() && copy->index() == message->index());
        FUZZ_CHECK(p::encode(*copy) == frame);
        FUZZ_CHECK(!again.next().has_value());
      }
    }
  } catch (const dsrun::LaunchError&) {
  }
  return 0;
}
