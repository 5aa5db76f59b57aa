// DeepSpeed's 1-bit compressed all-reduce with error feedback (runtime/comm/nccl.py and
// compressed.py, `compressed_allreduce`), which its 1-bit optimizers use on momentum. For a buffer
// x of n floats on each of p ranks:
//   pad      x with zeros to N = ⌈n / (p·L)⌉·p·L, L = lcm(p, 8): each rank's chunk of N/p signs is
//            whole bytes;
//   worker   c = x + e_w;  s = ‖c‖₂/√N;  e_w ← c − s·sgn(c);  sgn(v) = −1 if v < 0 else +1 (0 → +1);
//   phase 1  all-to-all of the packed signs (chunk j, N/p signs, to rank j; MSB first, 1 = +1) and
//            all-gather of the p scales;
//   server j z = Σᵢ (sᵢ/p)·sgnᵢ[chunk j] + e_s (ranks in order);  s′ = ‖z‖₂/√(N/p);  e_s ← z − s′·sgn(z);
//   phase 2  all-gather of the server signs and scales: x ← s′ⱼ·sgn(zⱼ), j = 0..p−1, the first n.
// Every rank ends with the same x. Errors: worker [N], server [N/p], fp32, zero at first. Per buffer a
// rank sends 2·(p−1)·N/(8p) bytes of signs and 8·(p−1) bytes of scales: 1/32 of an fp32 ring all-reduce.
// Element arithmetic is fp32 as DeepSpeed's; a norm's squares are summed in double, in 8 interleaved
// partial sums (element i into sum i mod 8, each in index order) added 0 to 7.
//
// Several buffers go through one call: each has its own padding, scales and errors (DeepSpeed
// compresses each parameter tensor on its own), but their messages travel together — four
// collectives per call, not per buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "comm/process_group.h"

namespace ds {

// N for n floats on `world` ranks (see above).
size_t compressed_padded_size(size_t n, int world);

// The worker's (and the server's) compression of c = x + error, in place: error ← c − s·sgn(c),
// bits ← sgn(c) packed MSB first (1 = +1), returns s = ‖c‖₂/√N. error: [N]; x: [≤ N], zero past
// its end (the padding); bits: [⌈N/8⌉].
float compress_signs(std::span<const float> x, std::span<float> error, std::span<uint8_t> bits);

// out[i] = ±scale from bit i of `bits` (MSB first, 1 = +1). out: [count], bits: [⌈count/8⌉].
void expand_signs(std::span<const uint8_t> bits, float scale, std::span<float> out);
// out[i] += ±scale, the same signs.
void add_signs(std::span<const uint8_t> bits, float scale, std::span<float> out);

class CompressedAllreduce {
 public:
  // One pair of error buffers per entry of `sizes` (floats per buffer).
  CompressedAllreduce(ProcessGroup& group, std::vector<size_t> sizes);

  // In place: buffers[k] (sizes[k] floats) becomes its compressed average over the ranks. A
  // collective: every rank calls it with buffers of the same sizes.
  void run(std::span<float* const> buffers);

  void reset_errors();  // all errors to zero (checkpoint load; 0/1 Adam's switch to local steps)
  size_t padded_size(size_t k) const { return padded_[k]; }
  std::span<const float> worker_error(size_t k) const { return worker_[k]; }  // [N]
  std::span<const float> server_error(size_t k) const { return server_[k]; }  // [N/p]
  size_t bytes() const;  // error memory

 private:
  ProcessGroup& group_;
  std::vector<size_t> sizes_, padded_;
  std::vector<size_t> byte_offset_;             // of buffer k inside one rank's sign message
  size_t message_bytes_ = 0;                    // B: one rank-to-rank sign message, Σ N_k/(8p)
  std::vector<std::vector<float>> worker_, server_;
  std::vector<float> work_;                     // one buffer's z, [max N/p]
  std::vector<uint8_t> send_, recv_;            // phase 1: [p·B]; phase 2 uses the first B of send_
  std::vector<float> scales_, all_scales_;      // [K] this rank's, [p·K] everyone's
};

}  // namespace ds
