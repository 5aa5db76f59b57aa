// Failure behaviour of the Gloo group and of run_ranks: a rank that never joins is named, a
// timed-out collective names itself and breaks the group, a rank that throws does not leave its
// peers hanging; plus the size-1 group and the choice of listening address.
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../scoped_env.h"
#include "comm/process_group.h"
#include "comm/thread_ranks.h"
#include "core/errors.h"

using namespace ds;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST_CASE("gloo group: a rank that never joins is named") {
  auto store = make_memory_store();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        make_gloo_group(store, r, 3, "g", 300ms, "127.0.0.1");
      } catch (const CommError& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  CHECK(errors[0] == "process group 'g': rank 2 did not join within 300 ms");
  CHECK(errors[1] == errors[0]);
}

TEST_CASE("gloo group: a timed-out collective names itself and breaks the group") {
  ScopedEnv tcp("DS_COMM_SHM", "0");  // Gloo's own wording (shared memory's: test_shm_collectives.cpp)
  std::vector<std::string> errors(2), later(2);
  run_ranks(
      2,
      [&](ProcessGroup& g) {
        std::vector<float> x(4, 1.0f);
        if (g.rank() == 1) std::this_thread::sleep_for(2s);  // late past rank 0's timeout
        try {
          g.allreduce(x.data(), x.size(), DataType::F32, ReduceOp::Sum);
        } catch (const CommError& e) {
          errors[static_cast<size_t>(g.rank())] = e.what();
        }
        try {
          g.barrier();
        } catch (const CommError& e) {
          later[static_cast<size_t>(g.rank())] = e.what();
        }
      },
      1s);
  CHECK(errors[0].rfind("allreduce of 4 F32 failed: Timed out waiting 1000ms for recv operation", 0) == 0);
  CHECK(errors[0].find("(receiving from rank 1)") != std::string::npos);
  CHECK(errors[1].rfind("allreduce of 4 F32 failed: ", 0) == 0);  // its peer gave up on it
  CHECK(later[0].rfind("barrier failed: the group is unusable after an earlier failure (allreduce of 4 F32", 0) == 0);
}

TEST_CASE("run_ranks: a failing rank is reported and does not leave the others hanging") {
  const auto start = Clock::now();
  std::string error;
  try {
    run_ranks(
        3,
        [](ProcessGroup& g) {
          if (g.rank() == 1) throw std::runtime_error("boom");
          std::vector<float> x(16, 1.0f);
          g.allreduce(x.data(), x.size(), DataType::F32, ReduceOp::Sum);  // rank 1 never comes
        },
        20s);
  } catch (const CommError& e) {
    error = e.what();
  }
  CHECK(Clock::now() - start < 10s);  // well before the 20 s timeout
  INFO(error);
  CHECK(error.rfind("rank 1: boom (then ranks ", 0) == 0);
}

TEST_CASE("gloo group: a group of one needs no peers") {
  auto g = make_gloo_group(make_memory_store(), 0, 1, "solo", 1s);
  std::vector<double> x{1, 2, 3}, out(3);
  g->allreduce(x.data(), 3, DataType::F64, ReduceOp::Avg);
  CHECK(x == std::vector<double>{1, 2, 3});
  g->reduce_scatter(x.data(), out.data(), 3, DataType::F64, ReduceOp::Sum);
  CHECK(out == x);
  g->allgather(x.data(), out.data(), 3, DataType::F64);
  CHECK(out == x);
  g->broadcast(x.data(), 3, DataType::F64, 0);
  g->barrier();
  CHECK(g->comms().stats("allreduce").count == 1);
  CHECK(g->comms().stats("allreduce").sent_bytes == 0);
  CHECK_THROWS_WITH_AS(g->broadcast(x.data(), 3, DataType::F64, 1),
                       "broadcast: root 1 is not a rank of this group (0..0)", CommError);
}

TEST_CASE("gloo group: listening address") {
  {
    ScopedEnv env("DS_GLOO_IFACE_ADDR", "10.1.2.3");
    CHECK(gloo_listen_address() == "10.1.2.3");
  }
  ScopedEnv env("DS_GLOO_IFACE_ADDR", nullptr);
  {
    ScopedEnv master("MASTER_ADDR", "127.0.0.1");
    CHECK(gloo_listen_address() == "127.0.0.1");  // the route to a local master is loopback
  }
  CHECK_FALSE(gloo_listen_address().empty());
}
