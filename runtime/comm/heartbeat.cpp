// The rank's side of dsrun's watchdog (heartbeat.h): one process-wide activity slot and a
// detached thread that writes it to DSRUN_HEARTBEAT_FD every second.
#include "comm/heartbeat.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;

struct Activity {
  std::mutex mutex;
  std::string what;
  Clock::time_point since = Clock::now();
};

Activity& activity() {
  static Activity* a = new Activity;  // never destroyed: the heartbeat thread may outlive main()
  return *a;
}

}  // namespace

ScopedActivity::ScopedActivity(std::string what) {
  Activity& a = activity();
  std::lock_guard lock(a.mutex);
  previous_ = std::move(a.what);
  previous_since_ = a.since;
  a.what = std::move(what);
  a.since = Clock::now();
}

ScopedActivity::~ScopedActivity() {
  Activity& a = activity();
  std::lock_guard lock(a.mutex);
  a.what = std::move(previous_);
  a.since = previous_since_;
}

std::string current_activity(std::chrono::milliseconds* lasted) {
  Activity& a = activity();
  std::lock_guard lock(a.mutex);
  if (lasted) *lasted = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - a.since);
  return a.what;
}

void start_heartbeat() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* text = std::getenv("DSRUN_HEARTBEAT_FD");
    if (!text || !*text) return;
    char* end = nullptr;
    const long fd = std::strtol(text, &end, 10);
    if (*end != '\0' || fd < 3 || fd > (1 << 20) || ::fcntl(static_cast<int>(fd), F_GETFD) < 0) return;
    ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);  // programs this rank starts do not inherit it
    ::fcntl(static_cast<int>(fd), F_SETFL, ::fcntl(static_cast<int>(fd), F_GETFL) | O_NONBLOCK);
    std::thread([fd = static_cast<int>(fd)] {
      for (;;) {
        std::chrono::milliseconds lasted{0};
        std::string what = current_activity(&lasted);
        for (char& c : what)
          if (c == '\t' || c == '\n') c = ' ';
        const std::string line = fmt::format("{}\t{}\n", what, what.empty() ? 0 : lasted.count());
        if (::write(fd, line.data(), line.size()) < 0 && errno != EAGAIN && errno != EINTR) return;  // agent gone
        std::this_thread::sleep_for(std::chrono::seconds(1));
      }
    }).detach();
  });
}

}  // namespace ds
