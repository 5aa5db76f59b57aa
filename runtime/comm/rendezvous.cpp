// rendezvous() over any Store, and read_job_env().
#include "comm/rendezvous.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/heartbeat.h"
#include "comm/wire.h"
#include "core/errors.h"

namespace ds {

namespace {

std::string job_shape(int size, const std::string& plan) {
  return plan.empty() ? fmt::format("WORLD_SIZE={}", size) : fmt::format("WORLD_SIZE={} (dsrun plan {})", size, plan);
}

// The value of `key` if it is set now.
std::optional<std::string> peek(Store& store, const std::string& key) {
  try {
    return store.get(key, Millis(0));
  } catch (const CommError&) {
    return std::nullopt;
  }
}

}  // namespace

void rendezvous(Store& store, int rank, int size, Millis timeout, const std::string& plan) {
  if (size < 1 || rank < 0 || rank >= size)
    throw CommError(fmt::format("rendezvous: rank {} is not in 0..{} (world size {})", rank, size - 1, size));
  ScopedActivity waiting("rendezvous");
  // Rank 0 publishes the job's shape; every other rank checks its own against it, and a mismatch
  // (nodes started with different hostfiles) is published so that every rank stops at once.
  const std::string mine = job_shape(size, plan);
  if (rank == 0) {
    store.set("job/shape", mine);
  } else {
    std::string theirs;
    try {
      theirs = store.get("job/shape", timeout);
    } catch (const CommError&) {
      throw CommError(fmt::format("rendezvous: rank 0 did not join within {}", wire::format_duration(timeout)));
    }
    if (theirs != mine) {
      const std::string why = fmt::format("rendezvous: rank {} was started with {} but rank 0 with {}: every node must "
                                          "use the same hostfile and selection", rank, mine, theirs);
      store.set("job/abort", why);
      throw CommError(why);
    }
  }
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(fmt::format("rank/{}", r));
  store.set(keys[static_cast<size_t>(rank)], "joined");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    try {
      store.wait(keys, std::clamp(left, Millis(0), Millis(1000)));
      return;
    } catch (const CommError&) {
      if (auto why = peek(store, "job/abort")) throw CommError(*why);
      if (left > Millis(1000)) continue;
    }
    std::vector<int> missing;  // probe each key rather than parse the store's message
    for (int r = 0; r < size; ++r)
      if (!peek(store, keys[static_cast<size_t>(r)])) missing.push_back(r);
    if (missing.empty()) return;  // they all arrived just now
    throw CommError(fmt::format("rendezvous: rank{} {} did not join within {}", missing.size() > 1 ? "s" : "",
                                fmt::join(missing, ", "), wire::format_duration(timeout)));
  }
}

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int fallback, int min, int max) {
  const char* v = env(name);
  if (!v) return fallback;
  int value = 0;
  const char* end = v + std::char_traits<char>::length(v);
  const auto [p, ec] = std::from_chars(v, end, value);
  if (ec != std::errc() || p != end || value < min || value > max)
    throw CommError(fmt::format("rendezvous: {}='{}' is not an integer in {}..{} (from the environment)", name, v, min, max));
  return value;
}

// A port nobody listens on right now (for a single process without dsrun).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw CommError(fmt::format("rendezvous: cannot find a free port: {}", wire::errno_text(errno)));
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

Millis comm_timeout_from_env() {
  auto positive = [](const char* name, const char* text, double scale) {
    char* end = nullptr;
    const double v = std::strtod(text, &end);
    if (*end != '\0' || !(v > 0) || v * scale > 1e12)
      throw CommError(fmt::format("rendezvous: {}='{}' is not a positive number of {} (from the environment)", name,
                                  text, scale == 1000 ? "seconds" : "minutes"));
    return Millis(static_cast<int64_t>(v * scale));
  };
  if (const char* s = env("DS_COMM_TIMEOUT")) return positive("DS_COMM_TIMEOUT", s, 1000);
  if (const char* m = env("DEEPSPEED_TIMEOUT")) return positive("DEEPSPEED_TIMEOUT", m, 60000);
  return Millis(300000);
}

JobEnv read_job_env() {
  JobEnv e;
  e.world_size = env_int("WORLD_SIZE", 1, 1, 1 << 24);
  e.rank = env_int("RANK", 0, 0, 1 << 24);
  if (e.rank >= e.world_size)
    throw CommError(fmt::format("rendezvous: RANK={} is not below WORLD_SIZE={} (from the environment)", e.rank,
                                e.world_size));
  e.local_rank = env_int("LOCAL_RANK", e.rank, 0, 1 << 24);
  if (e.world_size > 1 && (!env("MASTER_ADDR") || !env("MASTER_PORT")))
    throw CommError(fmt::format("rendezvous: {} is not set but WORLD_SIZE={} (start the job with dsrun)",
                                env("MASTER_ADDR") ? "MASTER_PORT" : "MASTER_ADDR", e.world_size));
  if (const char* addr = env("MASTER_ADDR")) e.master_addr = addr;
  e.master_port = env("MASTER_PORT") ? env_int("MASTER_PORT", 0, 1, 65535) : free_port();
  if (const char* token = env("DS_JOB_TOKEN")) e.token = token;
  e.comm_timeout = comm_timeout_from_env();
  if (const char* plan = env("DSRUN_PLAN_ID")) e.plan_id = plan;
  return e;
}

}  // namespace ds
