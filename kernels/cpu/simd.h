// simd: what the elementwise kernels need to vectorise. DS_KERNEL_CLONES builds a function once per
// x86-64 level (AVX-512, AVX2+FMA, and the library's SSE4.2 baseline) and picks one at load time
// (GCC function multi-versioning), so a loop runs 16 lanes wide on AVX-512 machines while the
// binary still runs anywhere. exp_approx is a branch-free fp32 e^x that such loops can inline:
// glibc's expf is a call per element, which stops vectorisation.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

// Not under ThreadSanitizer: the clones' ifunc resolvers run while the loader relocates, before its
// runtime is up, and crash there (SIGSEGV in the resolver of the first clone). Not under AddressSanitizer:
// it instruments the clones' accesses alike (one source), and three instrumented copies of every loop made
// the heaviest kernel files (adam.cpp: 250 s) the slowest part of the test command's sanitizer build.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define DS_KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DS_KERNEL_CLONES
#endif

namespace ds::cpu {

// e^x in fp32, within 2 ulp of the correctly rounded value (tests/unit/kernels/test_simd.cpp
// measures it over the whole range): x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split in two parts so
// n·ln2 is exact), e^r by Cephes's degree-6 minimax polynomial, 2^n put into the exponent bits.
// Special values: e^x = +inf above 88.72 (+inf included) and 0 below −86.64 (−inf included; there
// e^x < 2.4e−38, and expf's results near FLT_MIN and subnormal ones flush to 0); NaN stays NaN.
inline float exp_approx(float x) {
  constexpr float kMax = 88.7228391f;   // ln(FLT_MAX)
  constexpr float kMin = -86.6433976f;  // −125·ln2: 2^(n−1) stays a normal number
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float xc = x < kMin ? kMin : (x > kMax ? kMax : x);
  const float n = __builtin_floorf(xc * kLog2e + 0.5f);
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  // n in [−125, 128]; 2^n applied as 2^(n−1)·2, since 2^128 is not a float (n = 128 near the top).
  const int32_t bits = (static_cast<int32_t>(n) + 126) << 23;  // 2^(n−1), always a normal float
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const float e = er * scale * 2.0f;
  const float big = x > kMax ? std::numeric_limits<float>::infinity() : e;
  const float out = x < kMin ? 0.0f : big;
  return x != x ? x : out;
}

}  // namespace ds::cpu
