// run_ranks: n threads, one MemoryStore, one Gloo group per thread (thread_ranks.h).
#include "comm/thread_ranks.h"

#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"

namespace ds {

void run_ranks(int n, const std::function<void(ProcessGroup& group)>& body, std::chrono::milliseconds timeout) {
  run_ranks(n, [&](ProcessGroup& group, const std::shared_ptr<Store>&) { body(group); }, timeout);
}

void run_ranks(int n, const std::function<void(ProcessGroup& group, std::shared_ptr<Store> store)>& body,
               std::chrono::milliseconds timeout) {
  if (n < 1) throw CommError(fmt::format("run_ranks: {} is not a number of ranks", n));
  auto store = make_memory_store();
  std::mutex mutex;
  std::vector<int> failed;  // in the order they failed: the first is usually the cause
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<ProcessGroup> group;  // outlives the catch: the failure is recorded before
      try {                                 // closing the group makes the peers fail in turn
        group = make_gloo_group(store, rank, n, "run_ranks", timeout, "127.0.0.1");
        body(*group, store);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (failed.empty()) first = std::current_exception();
        failed.push_back(rank);
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failed.empty()) return;
  std::string others;
  if (failed.size() > 1)
    others = fmt::format(" (then rank{} {} failed too)", failed.size() > 2 ? "s" : "",
                         fmt::join(failed.begin() + 1, failed.end(), ", "));
  try {
    std::rethrow_exception(first);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {}: {}{}", failed[0], e.what(), others));
  }  // anything else (a doctest REQUIRE failure) propagates as it is
}

}  // namespace ds
