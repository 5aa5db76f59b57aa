// The CUDA subset that block-cooperative kernels are written in, one source for nvcc and for the
// SIMT emulator (simt.h). Under nvcc this is CUDA itself; in a C++ build the same names run on the
// emulator: threadIdx, blockIdx, blockDim, gridDim, __syncthreads, the __shfl_*_sync family on
// 32- and 64-bit values, __ballot_sync, __syncwarp, atomicAdd, and, since `__shared__ T a[N]` has no C++
// spelling, DS_SHARED(T, a, N) and DS_EXTERN_SHARED(T, a) for shared arrays. (The emulator's names
// are CUDA's reserved ones on purpose: this header stands in for the CUDA implementation.)
// DS_HD marks the element and row bodies shared with CPU loops; DS_KERNEL a kernel's entry; DS_UNROLL
// asks nvcc to unroll the loop that follows (arrays indexed by its counter then stay in registers).
#pragma once

#include "simt/hd.h"

#if defined(__CUDACC__)

#define DS_DEVICE __device__
#define DS_KERNEL __global__
#define DS_SHARED(type, name, count) __shared__ type name[count]
#define DS_EXTERN_SHARED(type, name) extern __shared__ __align__(128) type name[]
#define DS_UNROLL _Pragma("unroll")

#else

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "simt/simt.h"

#define DS_DEVICE
// Internal linkage: ds_kernels_cuda holds a host-side launch stub under the same (mangled) name.
#define DS_KERNEL static inline
#define DS_SHARED(type, name, count) type* name = ::ds::simt::shared<type>(count)
#define DS_EXTERN_SHARED(type, name) type* name = static_cast<type*>(::ds::simt::dynamic_shared())
#define DS_UNROLL

#define threadIdx (::ds::simt::thread_idx())
#define blockIdx (::ds::simt::block_idx())
#define blockDim (::ds::simt::block_dim())
#define gridDim (::ds::simt::grid_dim())
#define warpSize (::ds::simt::kWarpSize)

namespace ds::simt {

// A shuffle of any 4- or 8-byte value: moved as 32-bit words, as the hardware does.
template <typename T, typename Op>
T shuffle_value(T value, Op op) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8), "shuffles move 4 or 8 bytes");
  uint32_t words[sizeof(T) / 4];
  std::memcpy(words, &value, sizeof(T));
  for (auto& w : words) w = op(w);
  std::memcpy(&value, words, sizeof(T));
  return value;
}

}  // namespace ds::simt

inline void __syncthreads() { ::ds::simt::syncthreads(); }
// Threads are fibers on one OS thread, switched only at barriers and collectives: a plain
// read-modify-write is atomic.
template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::ds::simt::warp_sync(mask); }
inline unsigned __ballot_sync(unsigned mask, int predicate) { return ::ds::simt::ballot(mask, predicate != 0); }
template <typename T>
T __shfl_sync(unsigned mask, T value, int src_lane) {
  return ::ds::simt::shuffle_value(value, [&](uint32_t w) { return ::ds::simt::shfl(mask, w, src_lane); });
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
  return ::ds::simt::shuffle_value(value, [&](uint32_t w) { return ::ds::simt::shfl_xor(mask, w, lane_mask); });
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta) {
  return ::ds::simt::shuffle_value(value, [&](uint32_t w) { return ::ds::simt::shfl_down(mask, w, delta); });
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta) {
  return ::ds::simt::shuffle_value(value, [&](uint32_t w) { return ::ds::simt::shfl_up(mask, w, delta); });
}

#endif
