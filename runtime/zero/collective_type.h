// The DataType in which ZeRO's collectives move a storage type's elements.
#pragma once
#include "amp/storage.h"
#include "comm/process_group.h"

namespace ds::zero {

inline DataType collective_type(amp::Storage s) {
  return s == amp::Storage::F32 ? DataType::F32 : s == amp::Storage::F16 ? DataType::F16 : DataType::BF16;
}

}  // namespace ds::zero
