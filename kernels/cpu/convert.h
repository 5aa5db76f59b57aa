// Bulk operations on flat buffers of a storage type (fp32, fp16 or bf16; amp/storage.h), the building
// blocks of mixed precision: parameters kept in 16 bits beside an fp32 master, layers fed fp32 copies,
// gradients accumulated and reduced in 16 bits. Every operation computes in fp32 (sums of squares in
// double) and rounds once when it stores 16 bits (to nearest, ties to even; amp/half.h's conversions);
// fp32 buffers are updated exactly as plain float loops would.
//
// Split over the kernels' threads (parallel.h). The element-wise operations give the same bits at any
// thread count; sum_squares adds fixed blocks of kSumBlock elements (each in order, in double) in block
// order, so its result depends on n only, not on the threads. Built with -ffp-contract=off: every vector
// tier rounds as the baseline, so ranks on different CPUs compute the same values. Each operation has a
// `_reference`: the plain loop, one element at a time, on the calling thread.
#pragma once
#include <cstddef>
#include <cstdint>

#include "amp/half.h"
#include "amp/storage.h"

namespace ds::cpu {

void to_float(amp::Storage s, const void* in, float* out, size_t n);
void from_float(amp::Storage s, const float* in, void* out, size_t n);
void add_float(amp::Storage s, const float* in, void* out, size_t n);  // out[i] += in[i]
void add(amp::Storage s, const void* in, void* out, size_t n);         // out[i] += in[i], both of storage s
void scale(amp::Storage s, void* data, size_t n, double factor);       // data[i] = data[i]·factor (in double)
double sum_squares(amp::Storage s, const void* data, size_t n, double start = 0.0);  // start + Σ data[i]²
void round_to(amp::Storage s, float* data, size_t n);                  // each value rounded to s's precision
void round_to(amp::Storage s, const float* in, float* out, size_t n);  // out[i] = in[i] rounded (in == out allowed)

// The same on raw 16-bit patterns: out[i] = half(float(out[i]) + in[i]) for accumulate.
void to_float(amp::Half type, const uint16_t* in, float* out, size_t n);
void from_float(amp::Half type, const float* in, uint16_t* out, size_t n);
void accumulate(amp::Half type, const float* in, uint16_t* out, size_t n);

constexpr size_t kSumBlock = 65536;  // sum_squares' fixed blocks

void to_float_reference(amp::Storage s, const void* in, float* out, size_t n);
void from_float_reference(amp::Storage s, const float* in, void* out, size_t n);
void add_float_reference(amp::Storage s, const float* in, void* out, size_t n);
void add_reference(amp::Storage s, const void* in, void* out, size_t n);
void scale_reference(amp::Storage s, void* data, size_t n, double factor);
double sum_squares_reference(amp::Storage s, const void* data, size_t n, double start = 0.0);  // in order, one sum
void round_to_reference(amp::Storage s, float* data, size_t n);

}  // namespace ds::cpu
