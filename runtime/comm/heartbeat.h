// What a rank tells dsrun's watchdog: a heartbeat once a second, with what the rank is waiting
// in (a collective, a store wait) and for how long. dsrun's node agent gives each rank the write
// end of a pipe in DSRUN_HEARTBEAT_FD; a rank whose heartbeats stop (a stopped or frozen process,
// a hung host) is named by dsrun as the job's cause after --comm_timeout seconds. Without that
// variable (no dsrun) nothing is sent and the activity is only kept for error messages.
// Line format on the pipe: "<activity>\t<milliseconds in it>\n" ("" = computing, not waiting).
#pragma once
#include <chrono>
#include <string>

namespace ds {

// Marks the calling code as waiting in `what` (e.g. "allreduce of 1024 F32") until destroyed;
// nests (the outer activity is restored).
class ScopedActivity {
 public:
  explicit ScopedActivity(std::string what);
  ~ScopedActivity();
  ScopedActivity(const ScopedActivity&) = delete;
  ScopedActivity& operator=(const ScopedActivity&) = delete;

 private:
  std::string previous_;
  std::chrono::steady_clock::time_point previous_since_;
};

// The current activity ("" when none) and how long it has lasted.
std::string current_activity(std::chrono::milliseconds* lasted = nullptr);

// Starts the heartbeat thread if DSRUN_HEARTBEAT_FD names a pipe (once per process; later calls
// do nothing). The descriptor is made close-on-exec and non-blocking: a beat that cannot be
// written at once is dropped, never waited for.
void start_heartbeat();

}  // namespace ds
