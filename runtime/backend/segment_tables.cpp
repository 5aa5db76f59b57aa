// SegmentTables (segment_tables.h): the tables kept on the device, the one used longest ago released first.
#include "backend/segment_tables.h"

#include <algorithm>
#include <stdexcept>

namespace ds::backend {

SegmentTables::SegmentTables(Memory memory, size_t capacity) : memory_(std::move(memory)), capacity_(capacity) {
  if (capacity_ == 0) throw std::logic_error("SegmentTables: a capacity of 0");
}

const void* SegmentTables::find(std::string key, const std::function<std::vector<std::byte>()>& make) {
  ++uses_;
  if (const auto it = tables_.find(key); it != tables_.end()) {
    it->second.used = uses_;
    return it->second.device;
  }
  if (tables_.size() == capacity_) {
    const auto oldest = std::min_element(tables_.begin(), tables_.end(),
                                         [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
    memory_.release(oldest->second.device);
    tables_.erase(oldest);
  }
  const std::vector<std::byte> bytes = make();
  void* device = memory_.allocate(bytes.size());
  try {
    if (!bytes.empty()) memory_.upload(device, bytes.data(), bytes.size());
    tables_.emplace(std::move(key), Table{device, uses_});
  } catch (...) {
    memory_.release(device);
    throw;
  }
  ++uploads_;
  return device;
}

}  // namespace ds::backend
