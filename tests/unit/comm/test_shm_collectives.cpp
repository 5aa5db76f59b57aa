// The Gloo group's shared-memory transport among ranks of one host: chosen for local ranks and
// turned off by DS_COMM_SHM=0; results bit-identical to the TCP ring's at inexact sums, over many
// pieces and uneven chunks; a late or departed peer named; no segment left in /dev/shm.
// (ctest also runs every comm test with DS_COMM_SHM=0, so both transports pass the same suite.)
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "../scoped_env.h"
#include "amp/half.h"
#include "comm/shm_collectives.h"
#include "comm/thread_ranks.h"
#include "core/errors.h"

using namespace ds;
using namespace std::chrono_literals;

namespace {

// What every rank of an n-rank run ends with, per collective (rank-major).
struct Results {
  std::vector<std::vector<uint8_t>> allreduce, reduce_scatter, allgather, broadcast;
};

// Random inputs whose sums round (so a different summation order would show), through every
// collective, in fp32 and bf16; count spans several 1 MiB pieces and does not divide by n.
Results run_collectives(int n, const char* transport) {
  const size_t count = 400'003;
  Results res;
  for (auto* v : {&res.allreduce, &res.reduce_scatter, &res.allgather, &res.broadcast}) v->resize(n);
  run_ranks(n, [&](ProcessGroup& g) {
    CHECK(std::string(g.transport()) == transport);
    const int r = g.rank();
    std::mt19937 random(1234 + r);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    auto append = [](std::vector<uint8_t>& to, const void* p, size_t bytes) {
      const auto* b = static_cast<const uint8_t*>(p);
      to.insert(to.end(), b, b + bytes);
    };
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      std::vector<float> x(count);
      for (auto& v : x) v = uniform(random);
      std::vector<uint16_t> h(count);
      for (auto& v : h) v = amp::half_from_float(amp::Half::BF16, uniform(random));
      g.allreduce(x.data(), count, DataType::F32, op);
      g.allreduce(h.data(), count, DataType::BF16, op);
      append(res.allreduce[r], x.data(), count * 4);
      append(res.allreduce[r], h.data(), count * 2);
      std::vector<float> in(count * n), out(count);
      for (auto& v : in) v = uniform(random);
      g.reduce_scatter(in.data(), out.data(), count, DataType::F32, op);
      append(res.reduce_scatter[r], out.data(), count * 4);
      g.reduce_scatter(in.data(), in.data() + r * count, count, DataType::F32, op);  // in place
      append(res.reduce_scatter[r], in.data() + r * count, count * 4);
    }
    std::vector<float> mine(count), all(count * n);
    for (auto& v : mine) v = uniform(random);
    g.allgather(mine.data(), all.data(), count, DataType::F32);
    append(res.allgather[r], all.data(), all.size() * 4);
    for (int root = 0; root < n; ++root) {
      std::vector<uint8_t> bytes(3 * (1u << 20) + 5);  // several pieces, the last one odd
      for (auto& b : bytes) b = static_cast<uint8_t>(random());
      g.broadcast(bytes.data(), bytes.size(), DataType::U8, root);
      append(res.broadcast[r], bytes.data(), bytes.size());
    }
  });
  return res;
}

// Segments this process made (named /dsrun-<pid>-<random>), left in /dev/shm.
size_t shm_segments() {
  const std::string mine = "dsrun-" + std::to_string(::getpid()) + "-";
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    n += e.path().filename().string().rfind(mine, 0) == 0;
  return n;
}

}  // namespace

TEST_CASE("shared memory: local ranks use it but not with DS_COMM_SHM=0 nor in a group of one") {
  run_ranks(1, [](ProcessGroup& g) { CHECK(std::string(g.transport()) == "none"); });
  {
    ScopedEnv env("DS_COMM_SHM", "1");
    run_ranks(3, [](ProcessGroup& g) { CHECK(std::string(g.transport()) == "shared memory"); });
  }
  ScopedEnv env("DS_COMM_SHM", "0");
  run_ranks(3, [](ProcessGroup& g) { CHECK(std::string(g.transport()) == "TCP"); });
}

TEST_CASE("shared memory: results are bit-identical to the TCP ring's") {
  for (int n : {2, 3, 4}) {
    INFO("world size ", n);
    Results shm, tcp;
    {
      ScopedEnv env("DS_COMM_SHM", "1");
      shm = run_collectives(n, "shared memory");
    }
    {
      ScopedEnv env("DS_COMM_SHM", "0");
      tcp = run_collectives(n, "TCP");
    }
    for (int r = 0; r < n; ++r) {
      INFO("rank ", r);
      CHECK(shm.allreduce[r] == tcp.allreduce[r]);
      CHECK(shm.allreduce[r] == shm.allreduce[0]);  // every rank holds the same sums
      CHECK(shm.reduce_scatter[r] == tcp.reduce_scatter[r]);
      CHECK(shm.allgather[r] == tcp.allgather[r]);
      CHECK(shm.broadcast[r] == tcp.broadcast[r]);
    }
  }
}

TEST_CASE("shared memory: a peer late past the timeout is named and the group breaks") {
  ScopedEnv env("DS_COMM_SHM", "1");
  std::vector<std::string> errors(2), later(2);
  run_ranks(
      2,
      [&](ProcessGroup& g) {
        std::vector<float> x(4, 1.0f);
        if (g.rank() == 1) std::this_thread::sleep_for(2s);
        try {
          g.allreduce(x.data(), x.size(), DataType::F32, ReduceOp::Sum);
        } catch (const CommError& e) {
          errors[static_cast<size_t>(g.rank())] = e.what();
        }
        try {
          g.broadcast(x.data(), x.size(), DataType::F32, 0);
        } catch (const CommError& e) {
          later[static_cast<size_t>(g.rank())] = e.what();
        }
      },
      1s);
  CHECK(errors[0] == "allreduce of 4 F32 failed: no progress from rank 1 within 1000 ms (shared memory)");
  CHECK(errors[1].rfind("allreduce of 4 F32 failed: rank 0 left the group", 0) == 0);  // gone when 1 came
  CHECK(later[0].rfind("broadcast of 4 F32 failed: the group is unusable after an earlier failure", 0) == 0);
}

TEST_CASE("shared memory: a peer that leaves is named at once rather than after the timeout") {
  ScopedEnv env("DS_COMM_SHM", "1");
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  run_ranks(
      2,
      [&](ProcessGroup& g) {
        if (g.rank() == 1) return;  // closes its group without taking part
        std::vector<float> x(1 << 20, 1.0f);
        try {
          g.allreduce(x.data(), x.size(), DataType::F32, ReduceOp::Sum);
        } catch (const CommError& e) {
          error = e.what();
        }
      },
      30s);
  CHECK(error == "allreduce of 1048576 F32 failed: rank 1 left the group (shared memory)");
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("shared memory: no segment is left behind in /dev/shm") {
  ScopedEnv env("DS_COMM_SHM", "1");
  run_ranks(4, [&](ProcessGroup& g) {
    float x = 1.0f;
    g.allreduce(&x, 1, DataType::F32, ReduceOp::Sum);  // so rank 0 is past its set-up too
    CHECK(x == 4.0f);
    CHECK(shm_segments() == 0);  // unlinked as soon as every rank had mapped it
  });
  CHECK(shm_segments() == 0);
  CHECK_FALSE(shm::host_identity().empty());
}

TEST_CASE("shared memory: DS_COMM_SHM other than 0 or 1 is an error naming it") {
  ScopedEnv env("DS_COMM_SHM", "false");
  CHECK_THROWS_WITH_AS(run_ranks(2, [](ProcessGroup&) {}, 5s),  // every rank refuses it, in either order
                       doctest::Contains("DS_COMM_SHM: 'false' is not 0 (TCP only) or 1 (the default)"), CommError);
}
