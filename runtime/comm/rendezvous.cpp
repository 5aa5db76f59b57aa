// rendezvous() over any Store, and read_job_env().
#include "comm/rendezvous.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/heartbeat.h"
#include "comm/wire.h"
#include "core/errors.h"

namespace ds {

void rendezvous(Store& store, int rank, int size, Millis timeout) {
  if (size < 1 || rank < 0 || rank >= size)
    throw CommError(fmt::format("rendezvous: rank {} is not in 0..{} (world size {})", rank, size - 1, size));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(fmt::format("rank/{}", r));
  ScopedActivity waiting("rendezvous");
  store.set(keys[static_cast<size_t>(rank)], "joined");
  try {
    store.wait(keys, timeout);
  } catch (const CommError&) {
    std::vector<int> missing;  // probe each key rather than parse the store's message
    for (int r = 0; r < size; ++r) {
      try {
        store.get(keys[static_cast<size_t>(r)], Millis(0));
      } catch (const CommError&) {
        missing.push_back(r);
      }
    }
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
  return e;
}

}  // namespace ds
