// The job plan: which ranks run on which host with which environment. Built by pure functions
// from the selection; printed by --dry_run (text or JSON) and turned into one protocol::NodePlan
// per host by the launcher. DS_JOB_TOKEN is never part of it (the launcher adds it when sending).
// With --max_restarts the same plan runs again after a failure; only the restart count changes.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "env_file.h"
#include "selection.h"

namespace dsrun {

struct RankPlan {
  int rank = 0;
  int local_rank = 0;
  std::vector<EnvVar> env;  // RANK, LOCAL_RANK, WORLD_SIZE, …, MASTER_ADDR, CUDA_VISIBLE_DEVICES, DS_*
};

struct NodePlan {
  std::string host;  // as written in the hostfile (may be user@host)
  int node_rank = 0;
  std::vector<int> slots;
  std::vector<RankPlan> ranks;
};

struct JobPlan {
  int world_size = 0;
  int max_restarts = 0;     // --max_restarts: how many times a failed job is started again
  double comm_timeout_s = 300;  // --comm_timeout: DS_COMM_TIMEOUT of every rank, and the watchdog's limit
  std::string master_addr;  // empty until detected (ssh transport without --master_addr)
  int master_port = 29500;
  std::string transport;    // "local" or "ssh"
  std::vector<NodePlan> nodes;
  std::vector<EnvVar> forwarded;  // prefix-forwarded variables, .deepspeed_env, --export (in that order)
  std::vector<std::string> argv;
  std::optional<std::string> token;  // DS_JOB_TOKEN for every attempt (--no_ssh); unset = a new random one each
};

struct PlanInputs {
  std::string transport;
  std::string master_addr;
  int master_port = 29500;
  std::string accelerator;  // "cuda" or "cpu" → DS_ACCELERATOR
  std::string job_id;
  int max_restarts = 0;
  double comm_timeout_s = 300;
  std::vector<EnvVar> forwarded;
  std::vector<std::string> argv;
};

// Variables dsrun sets for every rank; --export and .deepspeed_env may not set them.
const std::vector<std::string>& rank_variable_names();

// Numbers ranks through hosts in selection order and slots in order; hosts without slots are left out.
JobPlan make_plan(const Selection& selection, const PlanInputs& inputs);
// A short id of the plan's hosts and slots (DSRUN_PLAN_ID): every node of a --no_ssh job must agree.
std::string plan_id(const JobPlan& plan);
// Sets MASTER_ADDR for every rank (used once the address is known).
void set_master_addr(JobPlan& plan, const std::string& address);
// Sets DSRUN_RESTART_COUNT (and TORCHELASTIC_RESTART_COUNT) for every rank: 0 on the first attempt.
void set_restart_count(JobPlan& plan, int restarts);
// The --dry_run --format json object (documented in README.md).
nlohmann::ordered_json plan_to_json(const JobPlan& plan);
// The --dry_run text: one line per host and rank.
std::string plan_to_text(const JobPlan& plan);

}  // namespace dsrun
