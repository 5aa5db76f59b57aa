// Store semantics, checked identically on MemoryStore and on TcpStore (server + client over
// loopback): set/get/wait/add/remove, timeouts naming keys, concurrency.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "comm/store.h"
#include "core/errors.h"

using namespace ds;
using namespace std::chrono_literals;

namespace {

// A store and whatever keeps it alive (the TCP server).
struct StoreUnderTest {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
};

StoreUnderTest memory() { return {nullptr, make_memory_store()}; }

StoreUnderTest tcp() {
  auto server = serve_tcp_store(0, "0123456789abcdef0123456789abcdef");
  auto store = connect_tcp_store("127.0.0.1", server->port(), "0123456789abcdef0123456789abcdef", 2s);
  return {std::move(server), store};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const CommError& e) {
    return e.what();
  }
  return "(no error)";
}

void check_basics(Store& s) {
  s.set("a", "1");
  CHECK(s.get("a", 1s) == "1");
  s.set("a", std::string("x\0y", 3));  // overwrite; values are raw bytes
  CHECK(s.get("a", 1s) == std::string("x\0y", 3));
  s.set("empty", "");
  CHECK(s.get("empty", 1s).empty());
  s.wait({"a", "empty"}, 1s);

  CHECK(s.add("n", 5) == 5);  // created at 0
  CHECK(s.add("n", -2) == 3);
  CHECK(s.get("n", 1s) == "3");
  CHECK(error_of([&] { s.add("a", 1); }).find("store: add on key 'a'") == 0);

  CHECK(s.remove("n"));
  CHECK_FALSE(s.remove("n"));
  CHECK(s.add("n", 1) == 1);

  const std::string big(1 << 20, 'z');
  s.set("big", big);
  CHECK(s.get("big", 1s) == big);
}

void check_timeouts(Store& s) {
  auto start = std::chrono::steady_clock::now();
  CHECK(error_of([&] { s.get("never", 200ms); }) == "store: get 'never' timed out after 200 ms");
  CHECK(std::chrono::steady_clock::now() - start >= 190ms);
  s.set("here", "1");
  CHECK(error_of([&] { s.wait({"here", "gone1", "gone2"}, 100ms); }) ==
        "store: wait timed out after 100 ms; missing keys: gone1, gone2");
}

void check_blocking(Store& s) {
  // get and wait block until another thread sets the key, and return soon after.
  std::chrono::steady_clock::time_point set_at;
  std::thread setter([&] {
    std::this_thread::sleep_for(150ms);
    set_at = std::chrono::steady_clock::now();
    s.set("late", "v");
    s.set("late2", "w");
  });
  CHECK(s.get("late", 5s) == "v");
  CHECK(std::chrono::steady_clock::now() - set_at < 1s);
  s.wait({"late", "late2"}, 5s);
  setter.join();
}

void check_concurrent_add(Store& s) {
  constexpr int kThreads = 8, kAdds = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
    });
  for (auto& t : threads) t.join();
  CHECK(s.add("counter", 0) == kThreads * kAdds);
}

}  // namespace

TEST_CASE("memory store: set get wait add remove") {
  auto s = memory();
  check_basics(*s.store);
}

TEST_CASE("memory store: timeouts name the key and the missing keys") {
  auto s = memory();
  check_timeouts(*s.store);
}

TEST_CASE("memory store: get and wait block until set") {
  auto s = memory();
  check_blocking(*s.store);
}

TEST_CASE("memory store: concurrent add is atomic") {
  auto s = memory();
  check_concurrent_add(*s.store);
}

TEST_CASE("tcp store: set get wait add remove") {
  auto s = tcp();
  check_basics(*s.store);
}

TEST_CASE("tcp store: timeouts name the key and the missing keys") {
  auto s = tcp();
  check_timeouts(*s.store);
}

TEST_CASE("tcp store: get and wait block server-side until set") {
  auto s = tcp();
  check_blocking(*s.store);
}

TEST_CASE("tcp store: concurrent add from many threads is atomic") {
  auto s = tcp();
  check_concurrent_add(*s.store);
}

TEST_CASE("tcp store: several clients see each other's keys") {
  auto s = tcp();
  auto other = connect_tcp_store("localhost", s.server->port(), "0123456789abcdef0123456789abcdef", 2s);
  std::thread waiter([&] { CHECK(other->get("from-first", 5s) == "hello"); });
  std::this_thread::sleep_for(50ms);
  s.store->set("from-first", "hello");
  waiter.join();
  CHECK(other->add("shared", 2) == 2);
  CHECK(s.store->add("shared", 3) == 5);
}
