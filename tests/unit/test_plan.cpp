// Rank numbering and the rank environment of the plan, and the --dry_run JSON shape.
#include <doctest/doctest.h>

#include <algorithm>

#include "plan.h"
#include "process.h"

using namespace dsrun;

namespace {

PlanInputs inputs() {
  PlanInputs in;
  in.transport = "ssh";
  in.master_addr = "node-a";
  in.master_port = 29600;
  in.accelerator = "cpu";
  in.job_id = "job-1";
  in.forwarded = {{"NCCL_DEBUG", "INFO"}};
  in.argv = {"./train", "--x"};
  return in;
}

std::string env_of(const RankPlan& r, const std::string& name) {
  const std::string* v = find_env(r.env, name);
  REQUIRE(v != nullptr);
  return *v;
}

}  // namespace

TEST_CASE("plan: ranks are numbered through hosts in order, then slots in order") {
  Selection sel = {{"node-a", {0, 1, 2}}, {"node-b", {1, 3}}};
  JobPlan plan = make_plan(sel, inputs());
  CHECK(plan.world_size == 5);
  REQUIRE(plan.nodes.size() == 2);
  const auto& b = plan.nodes[1];
  CHECK(b.node_rank == 1);
  REQUIRE(b.ranks.size() == 2);
  CHECK(b.ranks[0].rank == 3);
  CHECK(b.ranks[0].local_rank == 0);
  CHECK(b.ranks[1].rank == 4);
  CHECK(b.ranks[1].local_rank == 1);  // position in the host's list, not RANK % LOCAL_SIZE
  const auto& r4 = b.ranks[1];
  CHECK(env_of(r4, "RANK") == "4");
  CHECK(env_of(r4, "LOCAL_RANK") == "1");
  CHECK(env_of(r4, "WORLD_SIZE") == "5");
  CHECK(env_of(r4, "LOCAL_SIZE") == "2");
  CHECK(env_of(r4, "LOCAL_WORLD_SIZE") == "2");
  CHECK(env_of(r4, "CROSS_RANK") == "1");
  CHECK(env_of(r4, "NODE_RANK") == "1");
  CHECK(env_of(r4, "GROUP_RANK") == "1");
  CHECK(env_of(r4, "CROSS_SIZE") == "2");
  CHECK(env_of(r4, "MASTER_ADDR") == "node-a");
  CHECK(env_of(r4, "MASTER_PORT") == "29600");
  CHECK(env_of(r4, "CUDA_VISIBLE_DEVICES") == "1,3");
  CHECK(env_of(r4, "DS_ACCELERATOR") == "cpu");
  CHECK(env_of(r4, "DS_JOB_ID") == "job-1");
  CHECK(find_env(r4.env, "DS_JOB_TOKEN") == nullptr);
}

TEST_CASE("plan: hosts with no slots start nothing and do not count as nodes") {
  Selection sel = {{"a", {}}, {"b", {0}}, {"c", {0, 1}}};
  JobPlan plan = make_plan(sel, inputs());
  REQUIRE(plan.nodes.size() == 2);
  CHECK(plan.nodes[0].host == "b");
  CHECK(plan.nodes[0].node_rank == 0);
  CHECK(env_of(plan.nodes[1].ranks[0], "CROSS_SIZE") == "2");
}

TEST_CASE("plan: set_master_addr reaches every rank") {
  JobPlan plan = make_plan({{"a", {0}}, {"b", {0}}}, inputs());
  set_master_addr(plan, "10.0.0.5");
  CHECK(plan.master_addr == "10.0.0.5");
  for (const auto& n : plan.nodes)
    for (const auto& r : n.ranks) CHECK(env_of(r, "MASTER_ADDR") == "10.0.0.5");
}

TEST_CASE("plan: the dry-run JSON has the documented shape") {
  JobPlan plan = make_plan({{"a", {0, 1}}}, inputs());
  auto j = plan_to_json(plan);
  CHECK(j["world_size"] == 2);
  CHECK(j["master_addr"] == "node-a");
  CHECK(j["master_port"] == 29600);
  CHECK(j["transport"] == "ssh");
  CHECK(j["nodes"][0]["host"] == "a");
  CHECK(j["nodes"][0]["node_rank"] == 0);
  CHECK(j["nodes"][0]["slots"] == nlohmann::json::array({0, 1}));
  auto rank1 = j["nodes"][0]["ranks"][1];
  CHECK(rank1["rank"] == 1);
  CHECK(rank1["local_rank"] == 1);
  CHECK(rank1["env"]["RANK"] == "1");
  CHECK(rank1["env"]["NCCL_DEBUG"] == "INFO");
  CHECK_FALSE(rank1["env"].contains("DS_JOB_TOKEN"));
}

TEST_CASE("plan: restart variables start at 0 and set_restart_count reaches every rank") {
  PlanInputs in = inputs();
  in.max_restarts = 3;
  JobPlan plan = make_plan({{"a", {0}}, {"b", {0, 1}}}, in);
  CHECK(plan.max_restarts == 3);
  for (const auto& n : plan.nodes)
    for (const auto& r : n.ranks) {
      CHECK(env_of(r, "DSRUN_RESTART_COUNT") == "0");
      CHECK(env_of(r, "TORCHELASTIC_RESTART_COUNT") == "0");
      CHECK(env_of(r, "DSRUN_MAX_RESTARTS") == "3");
      CHECK(env_of(r, "TORCHELASTIC_MAX_RESTARTS") == "3");
    }
  set_restart_count(plan, 2);
  for (const auto& n : plan.nodes)
    for (const auto& r : n.ranks) {
      CHECK(env_of(r, "DSRUN_RESTART_COUNT") == "2");
      CHECK(env_of(r, "TORCHELASTIC_RESTART_COUNT") == "2");
      CHECK(env_of(r, "RANK") == std::to_string(r.rank));  // nothing else changes
    }
  for (const char* name : {"DSRUN_RESTART_COUNT", "DSRUN_MAX_RESTARTS", "TORCHELASTIC_RESTART_COUNT"})
    CHECK(std::find(rank_variable_names().begin(), rank_variable_names().end(), name) != rank_variable_names().end());
}

TEST_CASE("plan: the dry-run JSON lists max_restarts only when it is set") {
  CHECK_FALSE(plan_to_json(make_plan({{"a", {0}}}, inputs())).contains("max_restarts"));
  PlanInputs in = inputs();
  in.max_restarts = 2;
  JobPlan plan = make_plan({{"a", {0}}}, in);
  CHECK(plan_to_json(plan)["max_restarts"] == 2);
  CHECK(plan_to_text(plan).find("max restarts 2") != std::string::npos);
}

TEST_CASE("process: exit wording and shell status") {
  CHECK(describe_exit(3, 0) == "exited with code 3");
  CHECK(describe_exit(0, 9) == "killed by SIGKILL");
  CHECK(describe_exit(0, 11) == "killed by SIGSEGV");
  CHECK(shell_status(3, 0) == 3);
  CHECK(shell_status(0, 9) == 137);
  CHECK(shell_status(0, 2) == 130);
}

TEST_CASE("process: find_program searches the given PATH, not ours") {
  CHECK(find_program("sh", "/nonexistent:/bin") == "/bin/sh");
  CHECK(find_program("sh", "/nonexistent") == "");
  CHECK(find_program("/bin/sh", "") == "/bin/sh");
  CHECK(find_program("/etc/passwd", "") == "");  // not executable
}
