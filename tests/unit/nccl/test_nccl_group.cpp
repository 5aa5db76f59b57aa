// The NCCL process group on thread ranks over the fake CUDA runtime and NCCL (fake_nccl.h): every
// collective's result at 1-4 ranks (in place too) with sums that are exact; the unique id travels
// through the store; a collective starts after the default stream's earlier work; the comms logger
// counts as a ring would; a rank that never joins a collective is a timeout that aborts the
// communicator and names the collective; a peer that leaves is NCCL's remote error with the
// transport's text; later collectives fail at once.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl_group.h"
#include "comm/store.h"
#include "core/errors.h"
#include "fake_nccl.h"

using namespace ds;
using namespace std::chrono_literals;

namespace {

// body(rank's group) on n threads; returns each rank's error text ("" if none).
std::vector<std::string> nccl_ranks(int n, const std::function<void(ProcessGroup&)>& body,
                                    std::chrono::milliseconds timeout = 10s,
                                    std::shared_ptr<Store> store = make_memory_store()) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto group = make_nccl_group(test::fake_nccl_api(), store, r, n, "nccl", timeout, r);
        body(*group);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void require_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    CAPTURE(r);
    CHECK(errors[r] == "");
  }
}

// A "device" buffer of the fake (host memory).
template <typename T>
struct Device {
  explicit Device(size_t n) : data(n) {}
  std::vector<T> data;
  T* get() { return data.data(); }
};

}  // namespace

TEST_CASE("NCCL group (fake NCCL): every collective at 1 to 4 ranks, in place too") {
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    require_no_errors(nccl_ranks(n, [n](ProcessGroup& g) {
      const int r = g.rank();
      CHECK(g.size() == n);
      CHECK(std::string(g.transport()) == (n == 1 ? "none" : "NCCL"));
      const size_t count = 1000;
      // allreduce: sum, average and max of rank-dependent integers (exact in F32).
      std::vector<float> x(count);
      for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(i * (r + 1));
      g.allreduce(x.data(), count, DataType::F32, ReduceOp::Sum);
      const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
      bool ok = true;
      for (size_t i = 0; i < count; ++i) ok = ok && x[i] == static_cast<float>(i) * ranks_sum;
      CHECK(ok);
      std::vector<int32_t> m{r, -r, 7};
      g.allreduce(m.data(), 3, DataType::I32, ReduceOp::Max);
      CHECK(m == std::vector<int32_t>{n - 1, 0, 7});
      std::vector<double> avg{static_cast<double>(r)};
      g.allreduce(avg.data(), 1, DataType::F64, ReduceOp::Avg);
      CHECK(avg[0] == doctest::Approx((n - 1) / 2.0));
      // reduce_scatter: out of place, then in place (output = this rank's chunk of the input).
      std::vector<float> in(count * n), out(count);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i + r);
      g.reduce_scatter(in.data(), out.data(), count, DataType::F32, ReduceOp::Sum);
      const float rank_sum = static_cast<float>(n * (n - 1) / 2);
      ok = true;
      for (size_t i = 0; i < count; ++i)
        ok = ok && out[i] == static_cast<float>(n) * static_cast<float>(r * count + i) + rank_sum;
      CHECK(ok);
      g.reduce_scatter(in.data(), in.data() + r * count, count, DataType::F32, ReduceOp::Sum);
      CHECK(std::equal(out.begin(), out.end(), in.begin() + static_cast<std::ptrdiff_t>(r * count)));
      // allgather: in place (input = this rank's chunk of the output).
      std::vector<float> all(count * n, -1.0f);
      for (size_t i = 0; i < count; ++i) all[r * count + i] = static_cast<float>(r * 10000 + i);
      g.allgather(all.data() + r * count, all.data(), count, DataType::F32);
      ok = true;
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < count; ++i) ok = ok && all[q * count + i] == static_cast<float>(q * 10000 + i);
      CHECK(ok);
      // broadcast from the last rank, in BF16 bit patterns.
      std::vector<uint16_t> b(5, static_cast<uint16_t>(r));
      g.broadcast(b.data(), 5, DataType::BF16, n - 1);
      CHECK(b == std::vector<uint16_t>(5, static_cast<uint16_t>(n - 1)));
      // alltoall: chunk j of rank i holds i*100 + j; rank r receives chunk r of every rank.
      std::vector<int32_t> send(3 * n), recv(3 * n);
      for (int j = 0; j < n; ++j) std::fill_n(send.begin() + 3 * j, 3, r * 100 + j);
      g.alltoall(send.data(), recv.data(), 3, DataType::I32);
      for (int i = 0; i < n; ++i) CHECK(recv[3 * i] == i * 100 + r);
      g.barrier();
      // The logger: the ring's payload per rank.
      const CommStats ar = g.comms().stats("allreduce");
      CHECK(ar.count == 3);
      CHECK(ar.bytes == count * 4 + 3 * 4 + 8);
      CHECK(g.comms().stats("allgather").sent_bytes == count * 4 * static_cast<uint64_t>(n - 1));
      CHECK(g.comms().stats("barrier").count == 1);
    }));
  }
}

TEST_CASE("NCCL group (fake NCCL): asynchronous collectives overlap and complete in issue order") {
  require_no_errors(nccl_ranks(3, [](ProcessGroup& g) {
    std::vector<std::vector<float>> buffers(8, std::vector<float>(4096, static_cast<float>(g.rank() + 1)));
    std::vector<std::unique_ptr<Work>> works;
    for (auto& b : buffers) works.push_back(g.allreduce_async(b.data(), b.size(), DataType::F32, ReduceOp::Sum));
    for (size_t k = works.size(); k-- > 0;) works[k]->wait();  // waited in reverse: no matter
    for (auto& b : buffers) CHECK(b[4095] == 6.0f);
  }));
}

TEST_CASE("NCCL group (fake NCCL): a collective reads what the default stream's earlier work wrote") {
  // The buffer is filled by a slow "kernel" still queued on the default stream when the all-reduce is issued
  // (the host does not wait for it): the sum must be of the values it writes, not of the zeros before.
  require_no_errors(nccl_ranks(2, [](ProcessGroup& g) {
    std::vector<float> buffer(1024, 0.0f);
    const float mine = static_cast<float>(g.rank() + 1);
    test::run_on_fake_default_stream([&buffer, mine] {
      std::this_thread::sleep_for(50ms);
      std::fill(buffer.begin(), buffer.end(), mine);
    });
    g.allreduce_async(buffer.data(), buffer.size(), DataType::F32, ReduceOp::Sum)->wait();
    CHECK(buffer.front() == 3.0f);
    CHECK(buffer.back() == 3.0f);
  }));
}

TEST_CASE("NCCL group (fake NCCL): the unique id travels from rank 0 through the store") {
  auto store = make_memory_store();
  require_no_errors(nccl_ranks(2, [](ProcessGroup& g) { g.barrier(); }, 10s, store));
  CHECK(store->get("nccl/nccl_id", 1s).size() == 128);
}

TEST_CASE("NCCL group (fake NCCL): a rank missing from a collective is a timeout that aborts the communicator") {
  test::set_fake_nccl_timeout(3s);
  std::atomic<bool> checked{false};
  // Outlives the groups: after the abort the fake's Gloo all-reduce may read it until its own timeout (NCCL's
  // abort stops its kernels); the group's release waits for it.
  std::vector<float> x(4, 1.0f);
  auto errors = nccl_ranks(2, [&](ProcessGroup& g) {
    if (g.rank() == 1) {  // never joins the all-reduce; stays until rank 0 has seen the timeout
      while (!checked) std::this_thread::sleep_for(10ms);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(g.allreduce(x.data(), 4, DataType::F32, ReduceOp::Sum),
                         "process group 'nccl' (NCCL, rank 0 of 2): allreduce of 4 F32 did not finish within 500 ms (a "
                         "rank missing or stuck?); the communicator is aborted",
                         CommError);
    CHECK(std::chrono::steady_clock::now() - start < 2s);
    CHECK_THROWS_WITH_AS(g.barrier_async(), doctest::Contains("allreduce of 4 F32 did not finish"), CommError);
    checked = true;
  }, 500ms);
  test::set_fake_nccl_timeout(10s);
  require_no_errors(errors);
}

TEST_CASE("NCCL group (fake NCCL): a peer that leaves is NCCL's remote error, with the transport's own text") {
  auto errors = nccl_ranks(2, [](ProcessGroup& g) {
    g.barrier();
    if (g.rank() == 1) return;  // its communicator goes with it
    std::vector<float> x(1 << 16, 1.0f);
    CHECK_THROWS_WITH_AS(g.allreduce(x.data(), x.size(), DataType::F32, ReduceOp::Sum),
                         doctest::Contains("process group 'nccl' (NCCL, rank 0 of 2): allreduce of 65536 F32 failed: "
                                           "remote process exited or there was a network error ("),
                         CommError);
  });
  require_no_errors(errors);
}

TEST_CASE("NCCL group (fake NCCL): a rank that never joins fails the set-up with NCCL's error and the reason") {
  test::set_fake_nccl_timeout(1s);
  auto store = make_memory_store();
  std::string error;
  try {
    make_nccl_group(test::fake_nccl_api(), store, 0, 2, "nccl", 5s, 0);  // rank 1 never comes
  } catch (const CommError& e) {
    error = e.what();
  }
  test::set_fake_nccl_timeout(10s);
  CAPTURE(error);
  CHECK(error.rfind("process group 'nccl' (NCCL, rank 0 of 2): set-up of the communicator (2 ranks) failed: remote "
                    "process exited or there was a network error (",
                    0) == 0);
  CHECK(error.find("did not join") != std::string::npos);
}

TEST_CASE("NCCL group (fake NCCL): a stream that cannot be made is an error, and what the failed call left is not released") {
  // On an H200 under compute-sanitizer, after a kernel's fault, cudaStreamCreateWithFlags failed and the
  // group then destroyed the handle it had left (cudaErrorInvalidResourceHandle).
  static std::atomic<int> bad_destroys{0};
  NcclApi api = test::fake_nccl_api();
  api.stream_create = [](cudaStream_t* s, unsigned) {
    *s = reinterpret_cast<cudaStream_t>(uintptr_t{0x10});  // what a failing call may leave behind
    return cudaErrorLaunchFailure;
  };
  api.stream_destroy = [](cudaStream_t s) {
    bad_destroys += s == reinterpret_cast<cudaStream_t>(uintptr_t{0x10});
    return cudaSuccess;
  };
  CHECK_THROWS_WITH_AS(make_nccl_group(api, make_memory_store(), 0, 1, "nccl", 10s, 0),
                       doctest::Contains("creating its stream"), CommError);
  CHECK(bad_destroys == 0);
}
