// The swap-file bandwidth sweep (see aio_bench.h).
#include "aio_bench.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "offload/aio_queue.h"
#include "offload/swap_file.h"

namespace ds {
namespace {

// Seconds to move `bytes` one way through a queue with `config`.
double timed(offload::AioQueue& aio, const offload::SwapFile& file, std::byte* buffer, size_t bytes, bool write) {
  const auto start = std::chrono::steady_clock::now();
  aio.wait(write ? aio.write(file.fd(), buffer, bytes, 0, "aio_bench") : aio.read(file.fd(), buffer, bytes, 0, "aio_bench"));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int aio_bench(const std::string& dir, int64_t mib) {
  if (mib < 1) throw std::invalid_argument(fmt::format("--aio_bench_mib: {} must be >= 1", mib));
  const size_t bytes = static_cast<size_t>(mib) << 20;
  offload::SwapFile file(dir, bytes, false, "--aio_bench");
  std::unique_ptr<std::byte, decltype(&std::free)> buffer(
      static_cast<std::byte*>(std::aligned_alloc(offload::kDirectAlign, bytes)), &std::free);
  if (!buffer) throw std::bad_alloc();
  std::memset(buffer.get(), 0x5a, bytes);
  std::printf("aio_bench: %lld MiB written then read in %s (O_DIRECT, io_uring)\n", static_cast<long long>(mib),
              dir.c_str());
  std::printf("%12s %12s %14s %12s %12s\n", "block_size", "queue_depth", "single_submit", "write GB/s", "read GB/s");
  offload::AioConfig best;
  double best_total = 0.0;
  for (int64_t block : {int64_t{1} << 20, int64_t{8} << 20}) {
    for (int64_t depth : {8, 32, 128}) {
      for (bool single : {false, true}) {
        const offload::AioConfig config{block, depth, single, true};
        offload::AioQueue aio(config);
        const double write_gbs = static_cast<double>(bytes) / timed(aio, file, buffer.get(), bytes, true) / 1e9;
        const double read_gbs = static_cast<double>(bytes) / timed(aio, file, buffer.get(), bytes, false) / 1e9;
        std::printf("%12lld %12lld %14s %12.2f %12.2f\n", static_cast<long long>(block), static_cast<long long>(depth),
                    single ? "true" : "false", write_gbs, read_gbs);
        if (write_gbs + read_gbs > best_total) {
          best_total = write_gbs + read_gbs;
          best = config;
        }
      }
    }
  }
  std::printf("best (write + read): \"aio\": {\"block_size\": %lld, \"queue_depth\": %lld, \"single_submit\": %s, "
              "\"overlap_events\": true}\n",
              static_cast<long long>(best.block_size), static_cast<long long>(best.queue_depth),
              best.single_submit ? "true" : "false");
  return 0;
}

}  // namespace ds
