// Helpers for the 16-bit conversion tests (tests/unit/amp, tests/unit/kernels/test_convert.cpp): NaN
// patterns of either format, and a float from its bits.
#pragma once
#include <cstdint>
#include <cstring>

#include "amp/half.h"

namespace ds::test {

inline bool is_nan16(amp::Half t, uint16_t b) {
  return t == amp::Half::F16 ? (b & 0x7c00u) == 0x7c00u && (b & 0x03ffu) : (b & 0x7f80u) == 0x7f80u && (b & 0x007fu);
}

inline float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace ds::test
