// The DataType in which ZeRO's collectives move a storage type's elements.
#pragma once
#include <optional>

#include "amp/half.h"
#include "amp/storage.h"
#include "comm/process_group.h"

namespace ds::zero {

inline DataType collective_type(amp::Storage s) {
  return s == amp::Storage::F32 ? DataType::F32 : s == amp::Storage::F16 ? DataType::F16 : DataType::BF16;
}

// Values kept in a 16-bit type move as it; none: fp32.
inline DataType collective_type(std::optional<amp::Half> half) {
  return !half ? DataType::F32 : *half == amp::Half::BF16 ? DataType::BF16 : DataType::F16;
}

}  // namespace ds::zero
