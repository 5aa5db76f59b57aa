// ZeRO-Infinity's swap files, for real on this machine's file system: the io_uring queue moves bytes
// both ways in pieces of block_size and reports failures; the swap file is unnamed, preallocated and
// fails clearly; the swapper's sub-group pipeline gives every element back as it was written, for
// any buffer count and a short last sub-group; the parameter swapper keeps the kept units in memory
// and gives every swapped chunk back as last written, through reads queued ahead.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "offload/aio_queue.h"
#include "offload/param_swapper.h"
#include "offload/state_swapper.h"
#include "offload/swap_file.h"

using namespace ds::offload;

namespace {

std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

std::unique_ptr<std::byte, decltype(&std::free)> aligned(size_t bytes) {
  return {static_cast<std::byte*>(std::aligned_alloc(kDirectAlign, bytes)), &std::free};
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

}  // namespace

TEST_CASE("aio queue: bytes written in pieces read back the same, in every submission mode") {
  const size_t bytes = 5 * (1 << 20) + 3 * kDirectAlign;  // not a multiple of the block size
  SwapFile file(temp_dir(), bytes, false, "test");
  CHECK(file.direct());
  auto out = aligned(bytes), in = aligned(bytes);
  for (size_t i = 0; i < bytes; ++i) out.get()[i] = static_cast<std::byte>((i * 131 + i / 4096) & 0xff);
  for (bool single_submit : {false, true}) {
    for (bool overlap : {true, false}) {
      CAPTURE(single_submit);
      CAPTURE(overlap);
      AioQueue aio({1 << 16, 4, single_submit, overlap});
      aio.wait(aio.write(file.fd(), out.get(), bytes, 0, "test"));
      std::memset(in.get(), 0, bytes);
      const auto first = aio.read(file.fd(), in.get(), bytes / 2, 0, "test");
      const auto second = aio.read(file.fd(), in.get() + bytes / 2, bytes - bytes / 2, bytes / 2, "test");
      aio.wait(second);
      aio.wait(first);
      CHECK(std::memcmp(in.get(), out.get(), bytes) == 0);
    }
  }
}

TEST_CASE("aio queue: a read past the end of the file fails naming the file and offset") {
  SwapFile file(temp_dir(), kDirectAlign, false, "test");
  auto buffer = aligned(2 * kDirectAlign);
  AioQueue aio({1 << 20, 8, false, true});
  CHECK_THROWS_WITH_AS(aio.wait(aio.read(file.fd(), buffer.get(), 2 * kDirectAlign, 0, "swap of rank 3")),
                       "swap of rank 3: read of 4096 bytes at offset 4096 failed: end of file", std::runtime_error);
  CHECK_THROWS_WITH_AS(AioQueue({1000, 8, false, true}), "aio.block_size: 1000 must be a multiple of 512 up to 1 GiB",
                       std::invalid_argument);
  CHECK_THROWS_AS(AioQueue({4096, 0, false, true}), std::invalid_argument);
}

TEST_CASE("swap file: unnamed, closed with its owner, and clear failures") {
  const std::string dir = temp_dir() + "/ds-swap-test-" + std::to_string(::getpid());
  std::filesystem::create_directory(dir);
  const size_t before = open_descriptors();
  {
    SwapFile file(dir, 3 * kDirectAlign, false, "offload_optimizer.nvme_path");
    CHECK(file.bytes() == 3 * kDirectAlign);
    CHECK(std::filesystem::is_empty(dir));  // nothing to clean up, whatever happens to the process
    CHECK(open_descriptors() == before + 1);
  }
  CHECK(open_descriptors() == before);
  CHECK_THROWS_WITH_AS(SwapFile(dir + "/missing", 4096, false, "offload_optimizer.nvme_path"),
                       doctest::Contains(("offload_optimizer.nvme_path: \"" + dir + "/missing\": No such file or directory").c_str()),
                       std::runtime_error);
  const std::string file_path = dir + "/plain";
  { std::FILE* f = std::fopen(file_path.c_str(), "w"); std::fclose(f); }
  CHECK_THROWS_WITH_AS(SwapFile(file_path, 4096, false, "nvme_path"),
                       doctest::Contains("is not a directory"), std::runtime_error);
  // More than the process may write: the preallocation fails at start, naming the directory.
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  auto handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 1 << 20;
  ::setrlimit(RLIMIT_FSIZE, &small);
  CHECK_THROWS_WITH_AS(SwapFile(dir, 8 << 20, false, "nvme_path"),
                       doctest::Contains(("nvme_path: cannot allocate 8.0 MiB in \"" + dir + "\"").c_str()), std::runtime_error);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, handler);
  std::filesystem::remove_all(dir);
}

TEST_CASE("state swapper: every sub-group comes back as written, for 1 to 5 buffers") {
  const size_t n = 10'500, sub_group = 1'000;  // 11 sub-groups, the last one short
  for (size_t buffers : {1, 2, 3, 5}) {
    CAPTURE(buffers);
    StateSwapper swapper({4, 2, 4}, n, sub_group, buffers, temp_dir(), AioConfig{}, false, "test");
    CHECK(swapper.sub_groups() == 11);
    size_t visited = 0;
    swapper.pass(false, true, [&](size_t begin, size_t count, std::span<std::byte* const> s) {
      CHECK(begin == visited);
      visited += count;
      auto* a = reinterpret_cast<float*>(s[0]);
      auto* b = reinterpret_cast<uint16_t*>(s[1]);
      auto* c = reinterpret_cast<int32_t*>(s[2]);
      for (size_t i = 0; i < count; ++i) {
        a[i] = static_cast<float>(begin + i) * 0.5f;
        b[i] = static_cast<uint16_t>(begin + i);
        c[i] = -static_cast<int32_t>(begin + i);
      }
    });
    CHECK(visited == n);
    swapper.pass(true, true, [&](size_t, size_t count, std::span<std::byte* const> s) {
      auto* c = reinterpret_cast<int32_t*>(s[2]);
      for (size_t i = 0; i < count; ++i) c[i] *= 2;
    });
    size_t wrong = 0;
    swapper.pass(true, false, [&](size_t begin, size_t count, std::span<std::byte* const> s) {
      auto* a = reinterpret_cast<float*>(s[0]);
      auto* b = reinterpret_cast<uint16_t*>(s[1]);
      auto* c = reinterpret_cast<int32_t*>(s[2]);
      for (size_t i = 0; i < count; ++i)
        wrong += a[i] != static_cast<float>(begin + i) * 0.5f || b[i] != static_cast<uint16_t>(begin + i) ||
                 c[i] != -2 * static_cast<int32_t>(begin + i);
    });
    CHECK(wrong == 0);
    const SwapStats& st = swapper.stats();
    CHECK(st.bytes_written == 2 * swapper.file_bytes());
    CHECK(st.bytes_read == 2 * swapper.file_bytes());
    CHECK(swapper.buffer_bytes() < swapper.file_bytes());  // only the buffers live in memory
  }
}

TEST_CASE("state swapper: an error in the visit leaves no I/O behind and propagates") {
  StateSwapper swapper({4}, 4'000, 1'000, 3, temp_dir(), AioConfig{}, false, "test");
  swapper.pass(false, true, [](size_t, size_t, std::span<std::byte* const>) {});
  CHECK_THROWS_WITH_AS(swapper.pass(true, true,
                                    [](size_t begin, size_t, std::span<std::byte* const>) {
                                      if (begin == 2'000) throw std::runtime_error("visit failed");
                                    }),
                       "visit failed", std::runtime_error);
  size_t visited = 0;  // and the swapper still works
  swapper.pass(true, false, [&](size_t, size_t count, std::span<std::byte* const>) { visited += count; });
  CHECK(visited == 4'000);
}

TEST_CASE("state swapper: a prefetch serves the next reading pass and yields to a writing one") {
  StateSwapper swapper({4}, 5'000, 1'000, 3, temp_dir(), AioConfig{}, false, "test");
  auto fill = [&](float base) {
    swapper.pass(false, true, [&](size_t begin, size_t count, std::span<std::byte* const> s) {
      for (size_t i = 0; i < count; ++i) reinterpret_cast<float*>(s[0])[i] = base + static_cast<float>(begin + i);
    });
  };
  auto wrong = [&](float base) {
    size_t n = 0;
    swapper.pass(true, false, [&](size_t begin, size_t count, std::span<std::byte* const> s) {
      for (size_t i = 0; i < count; ++i) n += reinterpret_cast<float*>(s[0])[i] != base + static_cast<float>(begin + i);
    });
    return n;
  };
  fill(0.0f);
  swapper.prefetch();
  swapper.prefetch();  // once is enough
  CHECK(wrong(0.0f) == 0);
  CHECK(swapper.stats().bytes_read == swapper.file_bytes());  // the prefetched sub-groups were not read twice
  swapper.prefetch();
  fill(7.0f);  // a writing pass after a prefetch: the prefetched data is stale and not used
  CHECK(wrong(7.0f) == 0);
}

TEST_CASE("state swapper: sub-groups are balanced") {
  StateSwapper swapper({4}, 2'100'000, 2'000'000, 4, temp_dir(), AioConfig{}, false, "test");
  CHECK(swapper.sub_groups() == 2);
  CHECK(swapper.buffer_bytes() == 2 * align_up(1'050'000 * 4));  // not two buffers of 2,000,000
}

TEST_CASE("param swapper: kept units in memory, swapped chunks back as last written, reads queued in order") {
  // Units of 5000, 0, 300 and 9000 bytes; unit 0 kept: the file holds units 2 and 3 (4 KiB and 12 KiB).
  const std::vector<size_t> bytes{5000, 0, 300, 9000};
  ParamSwapper swapper(bytes, {true, false, false, false}, 2, temp_dir(), {4096, 4, false, true}, false, "test");
  CHECK(swapper.memory_bytes() == 5000);
  CHECK(swapper.file_bytes() == 4096 + 12288);
  CHECK(swapper.buffer_bytes() == 2 * 12288);
  REQUIRE(swapper.in_memory(0) != nullptr);
  CHECK(swapper.in_memory(1) != nullptr);  // nothing to swap
  CHECK(swapper.in_memory(2) == nullptr);
  auto fill = [&](size_t unit, int round) {
    std::byte* chunk = swapper.stage(unit);
    for (size_t i = 0; i < bytes[unit]; ++i) chunk[i] = static_cast<std::byte>((i + unit * 7 + round * 13) & 0xff);
    swapper.commit(unit);
  };
  auto holds = [&](const std::byte* chunk, size_t unit, int round) {
    for (size_t i = 0; i < bytes[unit]; ++i)
      if (chunk[i] != static_cast<std::byte>((i + unit * 7 + round * 13) & 0xff)) return false;
    return true;
  };
  fill(2, 0);
  fill(3, 0);
  fill(3, 1);  // the second write of unit 3 lands after the first
  swapper.read(3);  // waits for unit 3's write-back in flight
  swapper.read(2);
  CHECK_FALSE(swapper.can_read());
  CHECK_THROWS_AS(swapper.read(3), std::logic_error);  // both buffers busy
  CHECK(holds(swapper.wait(3), 3, 1));
  swapper.release(3);
  CHECK(swapper.can_read());
  swapper.read(3);  // the same unit queued again behind unit 2
  CHECK(holds(swapper.wait(2), 2, 0));
  CHECK(holds(swapper.wait(3), 3, 1));
  swapper.release(2);
  swapper.release(3);
  fill(2, 2);
  std::vector<std::byte> out(300);
  swapper.read_now(2, out.data());
  CHECK(holds(out.data(), 2, 2));
  const SwapStats stats = swapper.stats();
  CHECK(stats.bytes_written == 4096 + 12288 + 12288 + 4096);
  CHECK(stats.bytes_read == 12288 + 4096 + 12288 + 4096);
  ParamSwapper all_kept(bytes, {true, true, true, true}, 2, temp_dir() + "/no-such-dir", {}, false, "test");
  CHECK(all_kept.file_bytes() == 0);  // no file, so no directory needed
  CHECK(all_kept.buffer_bytes() == 0);
}
