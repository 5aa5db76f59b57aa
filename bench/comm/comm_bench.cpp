// bench/comm's side "ours": one rank of an nccl-tests-style sweep over runtime/comm's Gloo process group.
// Started once per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (as dsrun sets them):
//   comm_bench --ops allreduce,reduce_scatter,allgather,broadcast --min-bytes 1024 --max-bytes 268435456
//              [--factor 4] [--budget-bytes 536870912]
// For each op and size (bytes of the whole buffer, as nccl-tests: allreduce/broadcast the buffer,
// reduce_scatter its input, allgather its output; fp32, sum), rank 0 prints one JSON line:
// {"side": "ours", "op": O, "ranks": N, "bytes": B, "iters": I, "time_us": T, "transport": X}, T being the
// slowest rank's mean time per call over I calls after 2 untimed ones (I = budget / B, clamped to 3..100),
// X the group's transport ("shared memory" among ranks of one host unless DS_COMM_SHM=0, else "TCP").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "comm/rendezvous.h"
#include "comm/store.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> ops{"allreduce", "reduce_scatter", "allgather", "broadcast"};
  size_t min_bytes = 1024, max_bytes = size_t{256} << 20, budget_bytes = size_t{512} << 20;
  size_t factor = 4;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0, comma;
  while ((comma = text.find(',', start)) != std::string::npos) {
    parts.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  parts.push_back(text.substr(start));
  return parts;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--ops") o.ops = split(value);
    else if (arg == "--min-bytes") o.min_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else if (arg == "--max-bytes") o.max_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else if (arg == "--factor") o.factor = std::strtoull(value.c_str(), nullptr, 10);
    else if (arg == "--budget-bytes") o.budget_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else {
      std::fprintf(stderr, "comm_bench: unknown option %s\n", arg.c_str());
      std::exit(2);
    }
  }
  if (argc % 2 == 0 || o.factor < 2 || o.min_bytes < 4 * 4) {
    std::fprintf(stderr, "usage: comm_bench [--ops a,b] [--min-bytes B] [--max-bytes B] [--factor F] [--budget-bytes B]\n");
    std::exit(2);
  }
  return o;
}

// Buffers for one op at one size, and the call that runs it once.
struct Case {
  std::vector<float> in, out;
  void run(ds::ProcessGroup& group, const std::string& op) {
    const int n = group.size();
    if (op == "allreduce") group.allreduce(in.data(), in.size(), ds::DataType::F32, ds::ReduceOp::Sum);
    else if (op == "reduce_scatter")
      group.reduce_scatter(in.data(), out.data(), in.size() / n, ds::DataType::F32, ds::ReduceOp::Sum);
    else if (op == "allgather") group.allgather(in.data(), out.data(), in.size(), ds::DataType::F32);
    else if (op == "broadcast") group.broadcast(in.data(), in.size(), ds::DataType::F32, 0);
    else {
      std::fprintf(stderr, "comm_bench: unknown op %s\n", op.c_str());
      std::exit(2);
    }
  }
};

Case make_case(const std::string& op, size_t bytes, int ranks) {
  const size_t elems = bytes / sizeof(float);
  Case c;
  if (op == "allgather") {  // bytes = the gathered output
    c.in.assign(elems / ranks, 1.0f);
    c.out.assign(elems, 0.0f);
  } else {
    c.in.assign(elems, 1.0f);
    if (op == "reduce_scatter") c.out.assign(elems / ranks, 0.0f);
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    const ds::JobEnv env = ds::read_job_env();
    std::unique_ptr<ds::TcpStoreServer> server;
    if (env.rank == 0) server = ds::serve_tcp_store(env.master_port, env.token);
    auto store = ds::connect_tcp_store(env.master_addr, env.master_port, env.token, env.comm_timeout);
    ds::rendezvous(*store, env.rank, env.world_size, env.comm_timeout);
    auto group = ds::make_gloo_group(store, env.rank, env.world_size, "bench", env.comm_timeout);
    for (const std::string& op : o.ops)
      for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
        Case c = make_case(op, bytes, env.world_size);
        const int iters = static_cast<int>(std::clamp<size_t>(o.budget_bytes / bytes, 3, 100));
        for (int i = 0; i < 2; ++i) c.run(*group, op);
        group->barrier();
        const auto start = Clock::now();
        for (int i = 0; i < iters; ++i) c.run(*group, op);
        double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        group->allreduce(&seconds, 1, ds::DataType::F64, ds::ReduceOp::Max);
        if (env.rank == 0)
          std::printf("{\"side\": \"ours\", \"op\": \"%s\", \"ranks\": %d, \"bytes\": %zu, \"iters\": %d, "
                      "\"time_us\": %.3f, \"transport\": \"%s\"}\n", op.c_str(), env.world_size, bytes, iters,
                      seconds / iters * 1e6, group->transport());
        std::fflush(stdout);
      }
    group->barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
