// What dsworker prints: sizes, rates, durations, the progress line and the per-rank memory and
// traffic summaries.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "comm/process_group.h"
#include "core/format_bytes.h"
#include "engine/engine.h"

namespace ds {

std::string format_rate(double per_sec);  // "7618.0", "121912"
std::string format_duration(double seconds);  // "45s", "3m05s", "1h02m"

// "params 21.5 KiB, grads …, optimizer state … (model states …), activations …"
std::string memory_line(const MemoryReport& m);
// "<what> per rank: read 1.2 GiB at 1.10 GB/s, wrote …; waited 0.31 s for I/O" (the rates while
// requests were in flight).
std::string swap_line(const std::string& what, const offload::SwapStats& s);

// Bytes this rank sent per step, per collective, since `before` (the counters before the first step).
std::string comms_line(const CommsLogger& comms, const std::map<std::string, uint64_t>& before, int64_t steps);

// Peak resident memory of this process (VmHWM), bytes.
size_t peak_rss();

struct Progress {
  int64_t step = 0, steps = 0;  // done, total
  double elapsed_seconds = 0;   // training time so far (evaluation and sampling excluded)
  double rate = 0;              // tokens (or samples) per second over the last print interval
  const char* unit = "samples"; // what `rate` counts
};

// wall_clock_breakdown's line, DeepSpeed's global timers in milliseconds: "time (ms) | fwd: 12.34 | bwd: 30.10 |
// bwd_inner: 28.00 | bwd_allreduce: 2.10 | step: 8.76"; with a pipeline "time (ms) | pipe_schedule: … |
// bwd_allreduce: … | step: …" (its forward and backward passes interleave).
std::string wall_clock_line(const StepStats& s, bool pipeline);

// "step 120/600 [####----------------]  20% | <fields> | 41.2k tokens/s | ETA 1m52s": the bar is 20
// characters; the ETA assumes the remaining steps take the mean time of those done.
std::string progress_line(const Progress& p, const std::string& fields);

}  // namespace ds
