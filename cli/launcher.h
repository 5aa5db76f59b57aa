// Running a job: connect to every host's agent (all before any rank starts), send each its
// plan, relay output, and on the first rank failure, agent error or signal stop every rank on
// every host. Exit status: 0, the first failing rank's status (128+N for signal N), 1 when
// the job could not be run, 128+N when dsrun itself got signal N. With plan.max_restarts, a rank
// failure or a lost agent tears the job down and starts the same plan again (DSRUN_RESTART_COUNT
// counts), up to that many times; the status is then the last attempt's.
#pragma once
#include "console.h"
#include "options.h"
#include "plan.h"

namespace dsrun {

// Runs `plan` (again after each restartable failure) to completion and returns dsrun's exit status.
int run_job(JobPlan plan, const LaunchOptions& options, Console& console);

}  // namespace dsrun
