// Rendezvous: the ranks of a job meet in the store before building their process group, and the
// rank environment dsrun gives every process (or the single-process defaults without dsrun).
#pragma once
#include <string>

#include "comm/store.h"

namespace ds {

// Registers `rank/<rank>` and blocks until all `size` ranks have. Throws CommError listing exactly
// the ranks that did not join within `timeout` ("rendezvous: ranks 3, 5 did not join within 60 s").
// Rank 0 publishes `size` and `plan` (dsrun's DSRUN_PLAN_ID, may be empty); a rank started with
// other values throws naming both, and so does every rank waiting then (within about a second).
void rendezvous(Store& store, int rank, int size, Millis timeout, const std::string& plan = "");

// The rank environment. Without dsrun (no RANK/WORLD_SIZE): rank 0 of 1, master 127.0.0.1 on a
// free port, empty token.
struct JobEnv {
  int rank = 0;          // RANK
  int world_size = 1;    // WORLD_SIZE
  int local_rank = 0;    // LOCAL_RANK (default: RANK)
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = 0;   // MASTER_PORT
  std::string token;     // DS_JOB_TOKEN
  // Bound on every store wait and collective: DS_COMM_TIMEOUT (seconds), else DeepSpeed's
  // DEEPSPEED_TIMEOUT (minutes), else 300 s.
  Millis comm_timeout{300000};
  std::string plan_id;   // DSRUN_PLAN_ID: dsrun's plan, the same on every node of a job
};

// Reads JobEnv from the environment. Throws CommError naming the variable and its value when one
// is malformed or inconsistent (RANK >= WORLD_SIZE; MASTER_ADDR/MASTER_PORT missing for WORLD_SIZE > 1;
// a timeout that is not a positive number).
JobEnv read_job_env();

// The timeout of read_job_env() alone (DS_COMM_TIMEOUT, DEEPSPEED_TIMEOUT, 300 s).
Millis comm_timeout_from_env();

}  // namespace ds
