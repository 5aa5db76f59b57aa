// The buffer pool of ZeRO's transient copies: best-fit reuse, bytes() as the footprint it made, and
// reserved buffers (for a device to pin).
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <span>
#include <vector>

#include "zero/buffer_pool.h"

using namespace ds::zero;

TEST_CASE("buffer pool: a released buffer is reused by the smallest request it fits, best fit first") {
  BufferPool pool;
  auto a = pool.acquire(100), b = pool.acquire(60);
  CHECK(pool.bytes() >= 160);
  const size_t made = pool.bytes();
  const std::byte* a_data = a.data();
  const std::byte* b_data = b.data();
  pool.release(std::move(a));
  pool.release(std::move(b));
  auto c = pool.acquire(50);  // both fit: the 60-byte one
  CHECK(c.data() == b_data);
  CHECK(c.size() == 50);
  auto d = pool.acquire(90);  // the 100-byte one
  CHECK(d.data() == a_data);
  CHECK(pool.bytes() == made);  // nothing new
  auto e = pool.acquire(10);  // none free: a new one
  CHECK(pool.bytes() > made);
  pool.release(std::move(c));
  pool.release(std::move(d));
  pool.release(std::move(e));
  pool.release({});  // an empty buffer is not kept
  auto f = pool.acquire(0);
  CHECK(f.empty());
}

// What a device pins (the gradient buckets of stages 2-3) must be the storage every later request
// gets: reserved buffers are page-aligned, handed out as they are and never reallocated.
TEST_CASE("buffer pool: reserved buffers are whole pages and are the ones later requests get") {
  BufferPool pool;
  const auto reserved = pool.reserve(5000, 2);
  REQUIRE(reserved.size() == 2);
  std::set<const std::byte*> storage;
  for (const auto& r : reserved) {
    CHECK(reinterpret_cast<uintptr_t>(r.data()) % ds::page_bytes() == 0);
    CHECK(r.size() >= 5000);
    storage.insert(r.data());
  }
  const size_t made = pool.bytes();
  auto a = pool.acquire(5000), b = pool.acquire(300);  // the smaller request fits a reserved one too
  CHECK(storage.count(a.data()) == 1);
  CHECK(storage.count(b.data()) == 1);
  CHECK(a.data() != b.data());
  pool.release(std::move(b));
  auto c = pool.acquire(4000);  // grows back within its capacity: the same storage
  CHECK(storage.count(c.data()) == 1);
  CHECK(pool.bytes() == made);
  CHECK(pool.reserve(0, 3).empty());
}

// A device pins what the pool makes (stage 3's gathered units): the hook sees each new buffer's storage once,
// reserved ones included, and not the reused ones.
TEST_CASE("buffer pool: on_new_buffer sees every buffer it makes, once") {
  BufferPool pool;
  std::vector<std::span<std::byte>> seen;
  pool.on_new_buffer([&](std::span<std::byte> b) { seen.push_back(b); });
  auto a = pool.acquire(10000);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].data() == a.data());
  CHECK(seen[0].size() == a.capacity());
  pool.release(std::move(a));
  auto b = pool.acquire(5000);  // reused: nothing new
  CHECK(seen.size() == 1);
  pool.reserve(3000, 2);
  CHECK(seen.size() == 3);
  auto c = pool.acquire(20000);  // larger than any free one
  CHECK(seen.size() == 4);
  CHECK(seen.back().data() == c.data());
}
