// rendezvous() over both stores, naming exactly the ranks that did not join; read_job_env().
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "comm/rendezvous.h"
#include "core/errors.h"

using namespace ds;
using namespace std::chrono_literals;

namespace {

// Runs rendezvous for the given ranks of a job of `size` on threads; returns each rank's error.
std::map<int, std::string> join(Store& store, int size, const std::vector<int>& ranks, Millis timeout) {
  std::map<int, std::string> errors;
  std::vector<std::string> out(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        rendezvous(store, ranks[i], size, timeout);
      } catch (const CommError& e) {
        out[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < ranks.size(); ++i)
    if (!out[i].empty()) errors[ranks[i]] = out[i];
  return errors;
}

// Sets (or unsets, with nullopt) environment variables for one scope.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

const std::map<std::string, std::optional<std::string>> kNoJob = {
    {"RANK", std::nullopt},        {"WORLD_SIZE", std::nullopt},  {"LOCAL_RANK", std::nullopt},
    {"MASTER_ADDR", std::nullopt}, {"MASTER_PORT", std::nullopt}, {"DS_JOB_TOKEN", std::nullopt}};

std::string env_error(std::map<std::string, std::optional<std::string>> vars) {
  auto all = kNoJob;
  for (auto& [k, v] : vars) all[k] = v;
  ScopedEnv env(all);
  try {
    read_job_env();
  } catch (const CommError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("rendezvous: all ranks join") {
  auto store = make_memory_store();
  CHECK(join(*store, 4, {0, 1, 2, 3}, 5s).empty());
}

TEST_CASE("rendezvous: all ranks join over the tcp store") {
  auto server = serve_tcp_store(0, "t");
  std::vector<std::thread> threads;
  std::vector<std::string> errors(3);
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      try {
        auto store = connect_tcp_store("127.0.0.1", server->port(), "t", 2s);
        rendezvous(*store, r, 3, 5s);
      } catch (const CommError& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK(e.empty());
}

TEST_CASE("rendezvous: the message lists exactly the missing ranks") {
  auto store = make_memory_store();
  auto errors = join(*store, 6, {0, 1, 2, 4}, 200ms);
  REQUIRE(errors.size() == 4);
  for (const auto& [rank, message] : errors) CHECK(message == "rendezvous: ranks 3, 5 did not join within 200 ms");

  auto store2 = make_memory_store();
  auto one = join(*store2, 3, {0, 2}, 100ms);
  CHECK(one[0] == "rendezvous: rank 1 did not join within 100 ms");
}

TEST_CASE("rendezvous: a rank outside the job is an error") {
  auto store = make_memory_store();
  CHECK_THROWS_WITH_AS(rendezvous(*store, 4, 4, 1s), "rendezvous: rank 4 is not in 0..3 (world size 4)", CommError);
}

TEST_CASE("read_job_env: defaults without dsrun") {
  ScopedEnv env(kNoJob);
  const JobEnv e = read_job_env();
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.local_rank == 0);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port > 0);
  CHECK(e.token.empty());
}

TEST_CASE("read_job_env: the variables dsrun sets") {
  ScopedEnv env({{"RANK", "5"},
                 {"WORLD_SIZE", "8"},
                 {"LOCAL_RANK", "1"},
                 {"MASTER_ADDR", "10.0.0.7"},
                 {"MASTER_PORT", "29500"},
                 {"DS_JOB_TOKEN", "0123456789abcdef0123456789abcdef"}});
  const JobEnv e = read_job_env();
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.master_addr == "10.0.0.7");
  CHECK(e.master_port == 29500);
  CHECK(e.token == "0123456789abcdef0123456789abcdef");
}

TEST_CASE("read_job_env: malformed variables are named with their value") {
  CHECK(env_error({{"RANK", "abc"}}) == "rendezvous: RANK='abc' is not an integer in 0..16777216 (from the environment)");
  CHECK(env_error({{"WORLD_SIZE", "0"}}) ==
        "rendezvous: WORLD_SIZE='0' is not an integer in 1..16777216 (from the environment)");
  CHECK(env_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}) ==
        "rendezvous: RANK=2 is not below WORLD_SIZE=2 (from the environment)");
  CHECK(env_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}) ==
        "rendezvous: MASTER_PORT='70000' is not an integer in 1..65535 (from the environment)");
  CHECK(env_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}) ==
        "rendezvous: MASTER_PORT is not set but WORLD_SIZE=2 (start the job with dsrun)");
}
