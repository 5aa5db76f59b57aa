// Unit tests for cli/allocation (Slurm's compressed host lists and per-node counts, the allocation
// and task environment) and cli/fanout_tools (each tool's command line and output prefixes).
#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "allocation.h"
#include "errors.h"
#include "fanout_tools.h"
#include "scoped_env.h"

using namespace dsrun;

namespace {

std::string hosts(std::string_view list) { return fmt::format("{}", fmt::join(expand_slurm_hostlist(list, "L"), " ")); }

std::string counts(std::string_view text, size_t nodes) {
  return fmt::format("{}", fmt::join(expand_slurm_counts(text, nodes, "C"), " "));
}

// A PATH holding an executable file for each of `programs` (never run: fanout_command only
// checks that the tool exists and builds its command line).
struct FakeTools {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("dsrun-tools-{}", ::getpid());
  explicit FakeTools(std::initializer_list<const char*> programs) {
    std::filesystem::create_directories(dir);
    for (const char* p : programs) {
      std::ofstream(dir / p) << "#!/bin/sh\nexit 1\n";
      ::chmod((dir / p).c_str(), 0755);
    }
  }
  ~FakeTools() { std::filesystem::remove_all(dir); }
};

std::string joined(const std::vector<std::string>& words) { return fmt::format("{}", fmt::join(words, " ")); }

std::string env_value(const FanoutCommand& c, std::string_view name) {
  for (const auto& e : c.env)
    if (e.rfind(std::string(name) + "=", 0) == 0) return e.substr(name.size() + 1);
  return "<unset>";
}

}  // namespace

TEST_CASE("slurm host lists: ranges with padding and several brackets expand in order") {
  CHECK(hosts("node01") == "node01");
  CHECK(hosts("node[01-04,07]") == "node01 node02 node03 node04 node07");
  CHECK(hosts("a[1-2],b,c[9-11]") == "a1 a2 b c9 c10 c11");
  CHECK(hosts("rack[1-2]-n[08-09]") == "rack1-n08 rack1-n09 rack2-n08 rack2-n09");
  CHECK(hosts("127.0.0.[1-2]") == "127.0.0.1 127.0.0.2");
  CHECK(hosts("gpu[7]x") == "gpu7x");
}

TEST_CASE("slurm host lists: malformed or huge lists are errors naming the variable") {
  CHECK_THROWS_WITH_AS(hosts("node[01-04"), "L: 'node[01-04': '[' without ']'", InputError);
  CHECK_THROWS_WITH_AS(hosts("node]1"), "L: 'node]1': ']' without '['", InputError);
  CHECK_THROWS_WITH_AS(hosts("node[4-1]"), "L: 'node[4-1]': '4-1' is not a number or an ascending range", InputError);
  CHECK_THROWS_WITH_AS(hosts("node[a]"), "L: 'node[a]': 'a' is not a number or an ascending range", InputError);
  CHECK_THROWS_WITH_AS(hosts("a,,b"), "L: an empty host name", InputError);
  CHECK_THROWS_WITH_AS(hosts("n[0-99999]"), "L: 'n[0-99999]' names more than 65536 hosts", InputError);
  CHECK_THROWS_WITH_AS(hosts("n[0-999]m[0-999]"), "L: 'n[0-999]m[0-999]' names more than 65536 hosts", InputError);
}

TEST_CASE("slurm counts: repeats expand and must match the node count") {
  CHECK(counts("2(x3),1", 4) == "2 2 2 1");
  CHECK(counts("8", 1) == "8");
  CHECK(counts("4(x2)", 2) == "4 4");
  CHECK_THROWS_WITH_AS(counts("2(x3),1", 3), "C='2(x3),1': expected counts like 2(x3),1 for 3 nodes", InputError);
  CHECK_THROWS_WITH_AS(counts("2", 2), "C='2': 1 counts for 2 nodes", InputError);
  CHECK_THROWS_WITH_AS(counts("x", 1), "C='x': expected counts like 2(x3),1 for 1 node", InputError);
  CHECK_THROWS_WITH_AS(counts("2(x0)", 1), "C='2(x0)': expected counts like 2(x3),1 for 1 node", InputError);
}

TEST_CASE("slurm allocation: hosts from the node list and slots from GPUs per node or tasks per node") {
  ScopedEnv env;
  env.set("SLURM_JOB_NODELIST", nullptr);
  env.set("SLURM_NODELIST", nullptr);
  env.set("SLURM_GPUS_PER_NODE", nullptr);
  env.set("SLURM_TASKS_PER_NODE", nullptr);
  env.set("SLURM_JOB_ID", "77");
  CHECK_FALSE(slurm_allocation().has_value());
  env.set("SLURM_JOB_NODELIST", "n[1-3]");
  env.set("SLURM_TASKS_PER_NODE", "2(x2),1");
  auto a = slurm_allocation();
  REQUIRE(a.has_value());
  REQUIRE(a->pool.size() == 3);
  CHECK(a->pool[0].host == "n1");
  CHECK(a->pool[0].slots == std::vector<int>{0, 1});
  CHECK(a->pool[2].slots == std::vector<int>{0});
  CHECK(a->note == "no hostfile: the Slurm allocation of job 77 SLURM_JOB_NODELIST=n[1-3] (3 hosts; slots from "
                   "SLURM_TASKS_PER_NODE)");
  env.set("SLURM_GPUS_PER_NODE", "a100:4");
  CHECK(slurm_allocation()->pool[2].slots == std::vector<int>{0, 1, 2, 3});
  env.set("SLURM_GPUS_PER_NODE", "a100:");
  CHECK_THROWS_WITH_AS(slurm_allocation(), "SLURM_GPUS_PER_NODE='a100:': not a GPU count", InputError);
}

TEST_CASE("tool task: srun steps and MPI jobs of more than one task (not the batch script)") {
  ScopedEnv env;
  for (const char* name : {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NODEID", "SLURM_NTASKS",
                           "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"})
    env.set(name, nullptr);
  env.set("SLURM_PROCID", "0");
  env.set("SLURM_NTASKS", "8");  // the batch script: one process, whatever the job's task count
  CHECK_FALSE(tool_task().has_value());
  env.set("SLURM_STEP_NUM_TASKS", "1");
  CHECK_FALSE(tool_task().has_value());
  env.set("SLURM_STEP_NUM_TASKS", "4");
  env.set("SLURM_PROCID", "3");
  env.set("SLURM_NODEID", "1");
  auto t = tool_task();
  REQUIRE(t.has_value());
  CHECK((t->rank == 3 && t->size == 4 && t->node == 1));
  CHECK((t->rank_variable == "SLURM_PROCID" && t->node_variable == "SLURM_NODEID"));
  env.set("SLURM_STEP_NUM_TASKS", nullptr);
  env.set("PMI_RANK", "2");
  env.set("PMI_SIZE", "3");
  t = tool_task();
  REQUIRE(t.has_value());
  CHECK((t->rank == 2 && t->node == 2 && t->rank_variable == "PMI_RANK"));
}

TEST_CASE("fanout prefixes: each tool's line prefix names the node and other lines name none") {
  const std::vector<std::string> h = {"root@a", "b"};
  auto node = [&](const char* launcher, std::string_view line, std::string_view rest) {
    std::string_view text = line;
    const int n = take_node_prefix(launcher, text, h);
    CHECK(text == rest);
    return n;
  };
  CHECK(node("pdsh", "b: hello", "hello") == 1);
  CHECK(node("pdsh", "a: x: y", "x: y") == 0);
  CHECK(node("pdsh", "pdsh@launch: b: ssh exited with exit code 255", "ssh exited with exit code 255") == 1);
  CHECK(node("pdsh", "c: hello", "c: hello") == -1);
  CHECK(node("openmpi", "[1,0]<stdout>:#dsrun-agent-listening 0 5 k", "#dsrun-agent-listening 0 5 k") == 0);
  CHECK(node("openmpi", "[4242,17]<stderr>:boom", "boom") == 17);
  CHECK(node("openmpi", "--------------------", "--------------------") == -1);
  CHECK(node("openmpi", "[1,x]<stdout>:a", "[1,x]<stdout>:a") == -1);
  CHECK(node("mpich", "[1] hello", "hello") == 1);
  CHECK(node("mpich", "[proxy:0:0@vm] HYDU_create_process", "[proxy:0:0@vm] HYDU_create_process") == -1);
  CHECK(node("slurm", "0: hello", "hello") == 0);
  CHECK(node("slurm", " 7: hello", "hello") == 7);
  CHECK(node("slurm", "srun: error: n3: task 1: Exited", "srun: error: n3: task 1: Exited") == -1);
}

TEST_CASE("fanout commands: one agent per host in the hostfile order with the ssh options carried") {
  FakeTools tools({"pdsh", "mpirun.openmpi", "mpiexec.hydra", "srun"});
  ScopedEnv env;
  env.set("PATH", tools.dir.c_str());
  env.set("HYDRA_LAUNCHER_EXTRA_ARGS", "-v");
  env.set("SLURM_JOB_ID", nullptr);
  env.set("SLURM_JOB_CPUS_PER_NODE", nullptr);
  LaunchOptions o;
  o.remote_dsrun = "/opt/ds/dsrun";
  o.ssh_port = 2222;
  o.ssh_timeout_s = 7;
  o.launcher_args = "--mca x 'a b'";
  o.launcher = "openmpi";
  const std::vector<std::string> two = {"n2", "n1"};
  FanoutCommand mpi = fanout_command("openmpi", two, o);
  CHECK(mpi.program == (tools.dir / "mpirun.openmpi").string());
  const std::string ssh = "-p 2222 -o ConnectTimeout=7 -o BatchMode=yes";
  const std::string root = ::geteuid() == 0 ? "--allow-run-as-root " : "";
  CHECK(joined(mpi.argv) == "mpirun " + root + "--tag-output --bind-to none --map-by slot -np 2 --host n2:1,n1:1 --mca "
                                "plm_rsh_args " + ssh + " --mca x a b /opt/ds/dsrun agent --listen --node-env "
                                "OMPI_COMM_WORLD_RANK");
  o.launcher = "mpich";
  o.launcher_args = "";
  FanoutCommand hydra = fanout_command("mpich", two, o);
  CHECK(joined(hydra.argv) == "mpiexec -prepend-rank -n 2 -ppn 1 -hosts n2,n1 /opt/ds/dsrun agent --listen --node-env "
                              "PMI_RANK");
  CHECK(env_value(hydra, "HYDRA_LAUNCHER_EXTRA_ARGS") == "-v " + ssh);  // the user's own first
  o.launcher = "slurm";
  FanoutCommand srun = fanout_command("slurm", two, o);
  CHECK(joined(srun.argv) == "srun --nodes 2 --ntasks 2 --distribution arbitrary --cpu-bind none --kill-on-bad-exit "
                             "--label --exclusive /opt/ds/dsrun agent --listen --node-env SLURM_PROCID");
  std::ifstream file(env_value(srun, "SLURM_HOSTFILE"));
  CHECK(std::string(std::istreambuf_iterator<char>(file), {}) == "n2\nn1\n");
  ::unlink(srun.hostfile.c_str());
  env.set("SLURM_JOB_ID", "5");  // inside an allocation: the nodes' CPUs and memory, not whole nodes
  env.set("SLURM_JOB_NUM_NODES", "3");
  env.set("SLURM_JOB_CPUS_PER_NODE", "64(x2),48");
  srun = fanout_command("slurm", two, o);
  CHECK(joined(srun.argv).find("--label --cpus-per-task 48 --mem 0 /opt/ds/dsrun") != std::string::npos);
  ::unlink(srun.hostfile.c_str());
  o.launcher = "pdsh";
  FanoutCommand pdsh = fanout_command("pdsh", {"u@n2", "n1"}, o);
  CHECK(joined(pdsh.argv) == "pdsh -S -f 1024 -w u@n2,n1 exec '/opt/ds/dsrun' agent --listen --node %n");
}

TEST_CASE("fanout commands: what a tool cannot take is an input error while a missing tool is a launch error") {
  FakeTools tools({"mpirun"});
  ScopedEnv env;
  env.set("PATH", tools.dir.c_str());
  LaunchOptions o;
  o.launcher = "openmpi";
  CHECK_THROWS_WITH_AS(check_fanout_input("openmpi", {"u@n1"}, o),
                       doctest::Contains("--launcher openmpi: host 'u@n1': the user comes from the tool's own"),
                       InputError);
  CHECK_THROWS_WITH_AS(check_fanout_input("slurm", {"n:1"}, o),
                       "--launcher slurm: host 'n:1' cannot be given to srun (its host lists read ',', ':', '[', ']' "
                       "and a leading '-')", InputError);
  o.ssh_identity = "/my keys/id";
  CHECK_THROWS_WITH_AS(check_fanout_input("openmpi", {"n1"}, o),
                       "--ssh_identity '/my keys/id': --launcher openmpi cannot pass a value with whitespace to ssh",
                       InputError);
  CHECK_NOTHROW(fanout_command("openmpi", {"n1"}, LaunchOptions{}));  // mpirun when mpirun.openmpi is absent
  CHECK_THROWS_WITH_AS(check_fanout_tool("mpich"),
                       doctest::Contains("--launcher mpich: mpiexec.hydra or mpiexec.mpich or mpirun.mpich is not "
                                         "installed (not found in PATH="), LaunchError);
}
