// Bulk operations on flat buffers of a storage type (fp32, fp16 or bf16), the building blocks of
// mixed-precision ZeRO: gradients accumulated and reduced in 16 bits, parameters kept in 16 bits
// beside the fp32 master copy. Every operation computes in fp32 (sums of squares in double) and
// rounds once when it stores 16 bits; fp32 buffers are updated exactly as plain float loops would.
#pragma once
#include <cstddef>

namespace ds::amp {

enum class Storage { F32, F16, BF16 };

size_t storage_bytes(Storage s);  // 4 or 2

void to_float(Storage s, const void* in, float* out, size_t n);
void from_float(Storage s, const float* in, void* out, size_t n);
void add_float(Storage s, const float* in, void* out, size_t n);  // out[i] += in[i]
void add(Storage s, const void* in, void* out, size_t n);         // out[i] += in[i], both of storage s
void scale(Storage s, void* data, size_t n, double factor);       // data[i] *= factor
double sum_squares(Storage s, const void* data, size_t n, double start = 0.0);  // start + Σ data[i]², in order
void round_to(Storage s, float* data, size_t n);                  // each value rounded to s's precision

}  // namespace ds::amp
