// CommsLogger: per-collective totals and DeepSpeed-style summary table.
#include "comm/comms_logger.h"

#include <cmath>

#include <fmt/format.h>

namespace ds {

void CommsLogger::record(const std::string& op, uint64_t bytes, uint64_t sent_bytes, double ms) {
  std::lock_guard lock(mutex_);
  CommStats& s = ops_[op][bytes];
  s.count += 1;
  s.bytes += bytes;
  s.sent_bytes += sent_bytes;
  s.ms += ms;
}

CommStats CommsLogger::stats(const std::string& op) const {
  std::lock_guard lock(mutex_);
  CommStats total;
  auto it = ops_.find(op);
  if (it == ops_.end()) return total;
  for (const auto& [size, s] : it->second) {
    total.count += s.count;
    total.bytes += s.bytes;
    total.sent_bytes += s.sent_bytes;
    total.ms += s.ms;
  }
  return total;
}

uint64_t CommsLogger::sent_bytes() const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [op, sizes] : ops_)
    for (const auto& [size, s] : sizes) total += s.sent_bytes;
  return total;
}

void CommsLogger::reset() {
  std::lock_guard lock(mutex_);
  ops_.clear();
}

namespace {

// DeepSpeed's convert_size: "0B", "512.0 B", "4.0 MB" (powers of 1024).
std::string convert_size(double bytes) {
  if (bytes <= 0) return "0B";
  static const char* names[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int i = 0;
  while (bytes >= 1024 && i < 5) bytes /= 1024, ++i;
  std::string number = fmt::format("{}", std::round(bytes * 100) / 100);  // Python's round(x, 2) printed
  if (number.find_first_of(".e") == std::string::npos) number += ".0";
  return number + " " + names[i];
}

double gbps(double bytes, double ms) { return ms > 0 ? bytes * 8 / (ms * 1e6) : 0.0; }

}  // namespace

std::string CommsLogger::summary() const {
  std::lock_guard lock(mutex_);
  std::string out = fmt::format("{:<20}{:<20}{:<20}{:<20}{:<20}{:<20}{:<20}{:<20}\n", "Comm. Op", "Message Size", "Count",
                                "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)",
                                "Sent/call");
  for (const auto& [op, sizes] : ops_) {
    out += op + "\n";
    for (const auto& [size, s] : sizes)
      out += fmt::format("{:<20}{:<20}{:<20}{:<20.2f}{:<20.2f}{:<20.2f}{:<20.2f}{:<20}\n", "", convert_size(size), s.count,
                         s.ms, s.ms / s.count, gbps(s.bytes, s.ms), gbps(s.sent_bytes, s.ms),
                         convert_size(static_cast<double>(s.sent_bytes) / s.count));
  }
  return out;
}

}  // namespace ds
