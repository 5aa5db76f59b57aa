// A byte count as people read it: "512 B", "21.5 KiB", "3.2 MiB", "1.25 GiB" (binary units).
#pragma once
#include <cstddef>
#include <string>

#include <fmt/format.h>

namespace ds {

inline std::string format_bytes(size_t bytes) {
  if (bytes >= (size_t{1} << 30)) return fmt::format("{:.2f} GiB", bytes / 1073741824.0);
  if (bytes >= (size_t{1} << 20)) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  if (bytes >= 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace ds
