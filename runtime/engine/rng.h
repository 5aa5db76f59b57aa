// A tiny counter-based random source (splitmix64) whose output is fixed by its seed on every
// platform and compiler (std:: distributions are implementation-defined). Used for parameter
// initialisation and data shuffling, so runs are reproducible bit for bit.
#pragma once
#include <cmath>
#include <cstdint>

namespace ds {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)); }
  // Standard normal (Box-Muller; one draw per call).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

// A seed derived from a base seed and a stream number (e.g. the parameter index).
inline uint64_t mix_seed(uint64_t seed, uint64_t stream) { return SplitMix64(seed ^ (stream * 0xD1B54A32D192ED03ull)).next(); }

}  // namespace ds
