// Collectives of the Gloo group on thread ranks (world sizes 1-4, and 8 for a cheap case): every
// op × dtype on inputs whose reductions are exact, so results are compared with ==; uneven counts;
// broadcast from every root; async overlap; bytes sent against the ring's theory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "amp/half.h"
#include "comm/thread_ranks.h"
#include "core/errors.h"

using namespace ds;

namespace {

template <typename T>
DataType dtype();
template <>
DataType dtype<float>() { return DataType::F32; }
template <>
DataType dtype<double>() { return DataType::F64; }
template <>
DataType dtype<int32_t>() { return DataType::I32; }

constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max};

// Rank r's element i: a small integer, negative at odd i (so Max is not simply the last rank).
template <typename T>
T value(int r, size_t i) {
  const T v = static_cast<T>((r + 1) * static_cast<int>(i % 5 + 1));
  return i % 2 ? -v : v;
}

// The reduction over n ranks of element i, computed the way the group defines it.
template <typename T>
T expected(ReduceOp op, int n, size_t i) {
  T sum = 0, max = value<T>(0, i);
  for (int r = 0; r < n; ++r) {
    sum += value<T>(r, i);
    max = std::max(max, value<T>(r, i));
  }
  if (op == ReduceOp::Sum) return sum;
  if (op == ReduceOp::Avg) return sum / static_cast<T>(n);
  return max;
}

// Number of mismatching elements (checked once per call, to keep failures readable).
template <typename T>
size_t wrong_allreduce(ProcessGroup& g) {
  size_t wrong = 0;
  for (ReduceOp op : kOps)
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{67}}) {
      std::vector<T> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = value<T>(g.rank(), i);
      g.allreduce(buf.data(), count, dtype<T>(), op);
      for (size_t i = 0; i < count; ++i) wrong += buf[i] != expected<T>(op, g.size(), i);
    }
  return wrong;
}

template <typename T>
size_t wrong_reduce_scatter(ProcessGroup& g) {
  size_t wrong = 0;
  const int n = g.size();
  for (ReduceOp op : kOps)
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{13}}) {
      std::vector<T> in(n * count), out(count, T(-99));
      for (size_t j = 0; j < in.size(); ++j) in[j] = value<T>(g.rank(), j);
      g.reduce_scatter(in.data(), out.data(), count, dtype<T>(), op);
      for (size_t i = 0; i < count; ++i) wrong += out[i] != expected<T>(op, n, g.rank() * count + i);
    }
  return wrong;
}

template <typename T>
size_t wrong_allgather(ProcessGroup& g) {
  size_t wrong = 0;
  const int n = g.size();
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{10}}) {
    std::vector<T> in(count), out(n * count, T(-1));
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<T>(g.rank() * 100 + static_cast<int>(i));
    g.allgather(in.data(), out.data(), count, dtype<T>());
    for (int k = 0; k < n; ++k)
      for (size_t i = 0; i < count; ++i) wrong += out[k * count + i] != static_cast<T>(k * 100 + static_cast<int>(i));
  }
  return wrong;
}

template <typename T>
size_t wrong_broadcast(ProcessGroup& g) {
  size_t wrong = 0;
  for (int root = 0; root < g.size(); ++root) {
    std::vector<T> buf(9);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<T>(g.rank() * 1000 + static_cast<int>(i));
    g.broadcast(buf.data(), buf.size(), dtype<T>(), root);
    for (size_t i = 0; i < buf.size(); ++i) wrong += buf[i] != static_cast<T>(root * 1000 + static_cast<int>(i));
  }
  return wrong;
}

}  // namespace

TEST_CASE("collectives: allreduce every op and dtype for world sizes 1 to 4") {
  for (int n = 1; n <= 4; ++n) {
    INFO("world size ", n);
    run_ranks(n, [](ProcessGroup& g) {
      CHECK(wrong_allreduce<float>(g) == 0);
      CHECK(wrong_allreduce<double>(g) == 0);
      CHECK(wrong_allreduce<int32_t>(g) == 0);
    });
  }
}

TEST_CASE("collectives: reduce_scatter every op and dtype for world sizes 1 to 4") {
  for (int n = 1; n <= 4; ++n) {
    INFO("world size ", n);
    run_ranks(n, [](ProcessGroup& g) {
      CHECK(wrong_reduce_scatter<float>(g) == 0);
      CHECK(wrong_reduce_scatter<double>(g) == 0);
      CHECK(wrong_reduce_scatter<int32_t>(g) == 0);
    });
  }
}

TEST_CASE("collectives: allgather and broadcast from every root for world sizes 1 to 4") {
  for (int n = 1; n <= 4; ++n) {
    INFO("world size ", n);
    run_ranks(n, [](ProcessGroup& g) {
      CHECK(wrong_allgather<float>(g) == 0);
      CHECK(wrong_allgather<double>(g) == 0);
      CHECK(wrong_allgather<int32_t>(g) == 0);
      CHECK(wrong_broadcast<float>(g) == 0);
      CHECK(wrong_broadcast<double>(g) == 0);
      CHECK(wrong_broadcast<int32_t>(g) == 0);
      g.barrier();
    });
  }
}

TEST_CASE("collectives: world size 8") {
  run_ranks(8, [](ProcessGroup& g) {
    CHECK(wrong_allreduce<float>(g) == 0);
    CHECK(wrong_allgather<int32_t>(g) == 0);
    g.barrier();
  });
}

TEST_CASE("collectives: async handles overlap and complete in issue order") {
  run_ranks(3, [](ProcessGroup& g) {
    std::vector<float> a(1000), b(10);
    std::vector<int32_t> mine{g.rank()}, all(3, -1);
    for (size_t i = 0; i < a.size(); ++i) a[i] = value<float>(g.rank(), i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = value<float>(g.rank(), i);
    auto w1 = g.allreduce_async(a.data(), a.size(), DataType::F32, ReduceOp::Sum);
    auto w2 = g.allgather_async(mine.data(), all.data(), 1, DataType::I32);
    auto w3 = g.allreduce_async(b.data(), b.size(), DataType::F32, ReduceOp::Max);
    w3->wait();  // waiting on the last first is fine: they ran in order
    w1->wait();
    w2->wait();
    w2->wait();  // a second wait returns again
    size_t wrong = 0;
    for (size_t i = 0; i < a.size(); ++i) wrong += a[i] != expected<float>(ReduceOp::Sum, 3, i);
    for (size_t i = 0; i < b.size(); ++i) wrong += b[i] != expected<float>(ReduceOp::Max, 3, i);
    CHECK(wrong == 0);
    CHECK(all == std::vector<int32_t>{0, 1, 2});
  });
}

TEST_CASE("collectives: bytes sent per rank match the ring's theory") {
  for (int n = 1; n <= 4; ++n) {
    INFO("world size ", n);
    run_ranks(n, [n](ProcessGroup& g) {
      const uint64_t count = 12;  // divisible by 1..4
      std::vector<float> in(n * count, 1.0f), out(count), data(count, 1.0f);
      g.reduce_scatter(in.data(), out.data(), count, DataType::F32, ReduceOp::Sum);
      g.reduce_scatter(in.data(), out.data(), count, DataType::F32, ReduceOp::Sum);
      const CommStats rs = g.comms().stats("reduce_scatter");
      CHECK(rs.count == 2);
      CHECK(rs.bytes == 2 * n * count * 4);                // the input the caller passed
      CHECK(rs.sent_bytes * n == rs.bytes * (n - 1));      // (n-1)/n of it, not a full allreduce
      g.allreduce(data.data(), count, DataType::F32, ReduceOp::Sum);
      const CommStats ar = g.comms().stats("allreduce");
      CHECK(ar.sent_bytes * n == 2 * (n - 1) * count * 4);  // ring: reduce-scatter + allgather
      g.allgather(out.data(), in.data(), count, DataType::F32);
      CHECK(g.comms().stats("allgather").sent_bytes == (n - 1) * count * 4);
      CHECK(g.comms().stats("broadcast").count == 0);
      const std::string table = g.comms().summary();
      CHECK(table.rfind("Comm. Op", 0) == 0);
      CHECK(table.find("\nreduce_scatter\n") != std::string::npos);
    });
  }
}

TEST_CASE("collectives: large reduce_scatter and allgather in place across several segments") {
  // 2.5M floats a rank: each chunk spans several 4 MiB ring segments (an odd number: the segments
  // alternate between two slots, the next one's first transfer started early), the last one partial.
  const size_t count = 2'500'000 + 3;
  for (int n : {2, 3, 4}) {
    run_ranks(n, [count](ProcessGroup& g) {
      const int r = g.rank(), size = g.size();
      std::vector<float> buf(count * size);
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>((r + 1) * static_cast<int>(i % 7));
      float* mine = buf.data() + r * count;
      g.reduce_scatter(buf.data(), mine, count, DataType::F32, ReduceOp::Sum);  // in place
      const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
      for (size_t i = 0; i < count; ++i) REQUIRE(mine[i] == ranks_sum * static_cast<float>((r * count + i) % 7));
      for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(r * 1000 + static_cast<int>(i % 11));
      g.allgather(mine, buf.data(), count, DataType::F32);  // in place
      for (int q = 0; q < size; ++q)
        for (size_t i = 0; i < count; i += 997) REQUIRE(buf[q * count + i] == static_cast<float>(q * 1000 + static_cast<int>(i % 11)));
    });
  }
}

TEST_CASE("collectives: large allreduce whose unequal chunks end in segments empty for some of them") {
  // 2^20 floats are one 4 MiB ring segment: with one or two extra elements the first chunks get a
  // last segment of one element and the others an empty one, which neither side may send.
  const size_t seg = size_t{1} << 20;
  for (int n : {2, 3, 4}) {
    const size_t count = n * seg + (n == 4 ? 2 : 1);
    INFO("world size ", n);
    run_ranks(n, [count](ProcessGroup& g) {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>((g.rank() + 1) * static_cast<int>(i % 5));
      g.allreduce(data.data(), count, DataType::F32, ReduceOp::Sum);
      const float ranks_sum = static_cast<float>(g.size() * (g.size() + 1) / 2);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += data[i] != ranks_sum * static_cast<float>(i % 5);
      CHECK(wrong == 0);
    });
  }
}

TEST_CASE("collectives: fp16 and bf16 sum, max and gather for world sizes 1 to 4") {
  // Small integers and halves are exact in both formats, so sums compare with ==.
  for (DataType type : {DataType::F16, DataType::BF16}) {
    const amp::Half h = type == DataType::F16 ? amp::Half::F16 : amp::Half::BF16;
    for (int world : {1, 2, 3, 4}) {
      CAPTURE(world);
      const size_t count = 7;
      run_ranks(world, [&](ProcessGroup& g) {
        auto input = [&](int r) {
          std::vector<uint16_t> v(count * world);
          for (size_t i = 0; i < v.size(); ++i) v[i] = amp::half_from_float(h, 0.5f * static_cast<float>((r + 1) * (i % 3 + 1)));
          return v;
        };
        std::vector<uint16_t> data = input(g.rank());
        g.allreduce(data.data(), data.size(), type, ReduceOp::Sum);
        for (size_t i = 0; i < data.size(); ++i)
          CHECK(amp::half_to_float(h, data[i]) == 0.5f * static_cast<float>((i % 3 + 1) * world * (world + 1) / 2));
        std::vector<uint16_t> in = input(g.rank()), out(count);
        g.reduce_scatter(in.data(), out.data(), count, type, ReduceOp::Max);
        for (size_t i = 0; i < count; ++i)
          CHECK(amp::half_to_float(h, out[i]) == 0.5f * static_cast<float>(world * ((g.rank() * count + i) % 3 + 1)));
        std::vector<uint16_t> mine(count, amp::half_from_float(h, static_cast<float>(g.rank()))), all(count * world);
        g.allgather(mine.data(), all.data(), count, type);
        for (size_t i = 0; i < all.size(); ++i) CHECK(amp::half_to_float(h, all[i]) == static_cast<float>(i / count));
      });
    }
  }
}

TEST_CASE("collectives: alltoall moves chunk j of rank i to chunk i of rank j for world sizes 1 to 4") {
  for (int n = 1; n <= 4; ++n) {
    INFO("world size ", n);
    run_ranks(n, [n](ProcessGroup& g) {
      const int r = g.rank();
      for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{10}}) {
        // element k of the chunk rank r sends to rank j: 10000·r + 100·j + k
        std::vector<int32_t> in(n * count), out(n * count, -1);
        for (int j = 0; j < n; ++j)
          for (size_t k = 0; k < count; ++k) in[j * count + k] = 10000 * r + 100 * j + static_cast<int32_t>(k);
        g.alltoall(in.data(), out.data(), count, DataType::I32);
        size_t wrong = 0;
        for (int i = 0; i < n; ++i)
          for (size_t k = 0; k < count; ++k) wrong += out[i * count + k] != 10000 * i + 100 * r + static_cast<int32_t>(k);
        CHECK(wrong == 0);
      }
      // Bytes: packed sign bits, as the compressed all-reduce sends them.
      std::vector<uint8_t> bits(n * 5), got(n * 5, 0);
      for (size_t k = 0; k < bits.size(); ++k) bits[k] = static_cast<uint8_t>(r * 16 + k);
      g.alltoall(bits.data(), got.data(), 5, DataType::U8);
      size_t wrong = 0;
      for (int i = 0; i < n; ++i)
        for (size_t k = 0; k < 5; ++k) wrong += got[i * 5 + k] != static_cast<uint8_t>(i * 16 + r * 5 + k);
      CHECK(wrong == 0);
      const CommStats a = g.comms().stats("alltoall");
      CHECK(a.count == 5);
      CHECK(a.bytes == static_cast<uint64_t>(n) * (14 * 4 + 5));                // the inputs
      CHECK(a.sent_bytes == static_cast<uint64_t>(n - 1) * (14 * 4 + 5));  // all but one's own chunk
    });
  }
}

TEST_CASE("collectives: U8 data is moved but never reduced") {
  run_ranks(2, [](ProcessGroup& g) {
    std::vector<uint8_t> b(4, 1), out(2);
    CHECK_THROWS_WITH_AS(g.allreduce(b.data(), 4, DataType::U8, ReduceOp::Sum), "allreduce: U8 data cannot be reduced",
                         CommError);
    CHECK_THROWS_AS(g.reduce_scatter(b.data(), out.data(), 2, DataType::U8, ReduceOp::Sum), CommError);
    g.allgather(b.data(), out.data(), 1, DataType::U8);
    CHECK(out == std::vector<uint8_t>{1, 1});
  });
}
