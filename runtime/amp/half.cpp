// Bulk 16-bit conversions (see half.h); plain loops the compiler vectorizes.
#include "amp/half.h"

namespace ds::amp {

DS_AMP_BULK void to_float(Half type, const uint16_t* in, float* out, size_t n) {
  if (type == Half::F16)
    for (size_t i = 0; i < n; ++i) out[i] = fp16_to_float(in[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

DS_AMP_BULK void from_float(Half type, const float* in, uint16_t* out, size_t n) {
  if (type == Half::F16)
    for (size_t i = 0; i < n; ++i) out[i] = fp16_from_float(in[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = bf16_from_float(in[i]);
}

DS_AMP_BULK void accumulate(Half type, const float* in, uint16_t* out, size_t n) {
  if (type == Half::F16)
    for (size_t i = 0; i < n; ++i) out[i] = fp16_from_float(fp16_to_float(out[i]) + in[i]);
  else
    for (size_t i = 0; i < n; ++i) out[i] = bf16_from_float(bf16_to_float(out[i]) + in[i]);
}

}  // namespace ds::amp
