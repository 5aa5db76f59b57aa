// Formatting of dsworker's output (see report.h).
#include "report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace ds {

std::string format_rate(double per_sec) {
  return per_sec >= 1e4 ? fmt::format("{:.0f}", per_sec) : fmt::format("{:.1f}", per_sec);
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(seconds, 0.0)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
}

std::string memory_line(const MemoryReport& m) {
  return fmt::format("params {}{}, grads {}, optimizer state {}{} (model states {}), activations {}",
                     format_bytes(m.params),
                     m.nvme_params ? fmt::format(" + {} on NVMe", format_bytes(m.nvme_params)) : "",
                     format_bytes(m.grads), format_bytes(m.optimizer_state),
                     m.nvme ? fmt::format(" + {} on NVMe", format_bytes(m.nvme)) : "",
                     format_bytes(m.model_states()), format_bytes(m.activations + m.workspace));
}

std::string swap_line(const std::string& what, const offload::SwapStats& s) {
  auto rate = [](uint64_t bytes, double seconds) {
    return seconds > 0 ? fmt::format("{:.2f} GB/s", static_cast<double>(bytes) / seconds / 1e9) : std::string("-");
  };
  return fmt::format("{} per rank: read {} at {}, wrote {} at {}; waited {:.2f} s for I/O", what,
                     format_bytes(s.bytes_read), rate(s.bytes_read, s.read_seconds), format_bytes(s.bytes_written),
                     rate(s.bytes_written, s.write_seconds), s.wait_seconds);
}

std::string comms_line(const CommsLogger& comms, const std::map<std::string, uint64_t>& before, int64_t steps) {
  std::string line;
  for (const auto& [op, bytes] : before) {
    const uint64_t sent = comms.stats(op).sent_bytes - bytes;
    if (sent > 0) line += fmt::format("{}{} {}", line.empty() ? "" : ", ", op, format_bytes(sent / std::max<int64_t>(steps, 1)));
  }
  return line.empty() ? "nothing (one rank)" : line;
}

size_t peak_rss() {
  // VmHWM, not getrusage's ru_maxrss: the kernel carries ru_maxrss over an execve, so a dsworker
  // started by a large parent (a Python test runner of 259 MiB) reported the parent's peak.
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmHWM:   1234 kB"
  return 0;
}

std::string wall_clock_line(const StepStats& s, bool pipeline) {
  const StepStats::Phases& t = s.phases;
  if (pipeline)
    return fmt::format("time (ms) | pipe_schedule: {:.2f} | bwd_allreduce: {:.2f} | step: {:.2f}",
                       s.schedule_seconds * 1e3, t.backward_allreduce * 1e3, t.step * 1e3);
  return fmt::format("time (ms) | fwd: {:.2f} | bwd: {:.2f} | bwd_inner: {:.2f} | bwd_allreduce: {:.2f} | step: {:.2f}",
                     t.forward * 1e3, t.backward() * 1e3, t.backward_inner * 1e3, t.backward_allreduce * 1e3,
                     t.step * 1e3);
}

std::string progress_line(const Progress& p, const std::string& fields) {
  constexpr int kWidth = 20;
  const double done = p.steps > 0 ? static_cast<double>(p.step) / static_cast<double>(p.steps) : 1.0;
  const int filled = static_cast<int>(done * kWidth);
  const double eta = p.step > 0 ? p.elapsed_seconds / static_cast<double>(p.step) * static_cast<double>(p.steps - p.step) : 0;
  return fmt::format("step {}/{} [{}{}] {:3.0f}% | {} | {} {}/s | ETA {}", p.step, p.steps, std::string(filled, '#'),
                     std::string(kWidth - filled, '-'), done * 100.0, fields, format_rate(p.rate), p.unit,
                     format_duration(eta));
}

}  // namespace ds
