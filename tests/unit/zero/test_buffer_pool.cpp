// The buffer pool of ZeRO's transient copies: best-fit reuse, and bytes() as the footprint it made.
#include <doctest/doctest.h>

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
