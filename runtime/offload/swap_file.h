// One swap file of ZeRO-Infinity: an unnamed file (O_TMPFILE) in the configured directory, so the
// kernel frees it when the rank exits, however it exits, and no crash leaves one behind. Opened with
// O_DIRECT (buffered only when the caller allows it) and preallocated, so a full disk fails at
// start, not in the middle of training. Every failure is a std::runtime_error naming the directory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ds::offload {

// O_DIRECT transfers: buffers, offsets and sizes are multiples of this.
constexpr size_t kDirectAlign = 4096;
constexpr size_t align_up(size_t n) { return (n + kDirectAlign - 1) / kDirectAlign * kDirectAlign; }

// Memory for O_DIRECT transfers: kDirectAlign-aligned, align_up(bytes) long (at least one block).
struct FreeDirect {
  void operator()(std::byte* p) const;
};
using DirectBuffer = std::unique_ptr<std::byte, FreeDirect>;
DirectBuffer direct_buffer(size_t bytes);  // throws std::bad_alloc

class SwapFile {
 public:
  // `what` names the setting in errors (e.g. "zero_optimization.offload_optimizer.nvme_path").
  SwapFile(const std::string& dir, uint64_t bytes, bool allow_buffered, const std::string& what);
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  int fd() const { return fd_; }
  bool direct() const { return direct_; }
  uint64_t bytes() const { return bytes_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  uint64_t bytes_;
  int fd_ = -1;
  bool direct_ = true;
};

}  // namespace ds::offload
