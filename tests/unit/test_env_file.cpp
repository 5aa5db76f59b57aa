// Unit tests for cli/env_file: `.deepspeed_env` parsing (quotes, comments, `=` in values, bad
// names with file:line), set_env's override-in-place rule, which launcher variables are forwarded,
// and `--export NAME=VALUE`.
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "env_file.h"
#include "errors.h"

using namespace dsrun;

namespace {

// "NAME=[value]" per variable, space-separated: brackets show where a value starts and ends.
std::string show(const std::vector<EnvVar>& vars) {
  std::string text;
  for (const EnvVar& var : vars) text += (text.empty() ? "" : " ") + var.name + "=[" + var.value + "]";
  return text;
}

std::vector<EnvVar> parse(std::string_view text) { return parse_env_file(text, ".deepspeed_env"); }

}  // namespace

TEST_CASE("env file: NAME=VALUE lines split at the first '=' and trimmed") {
  CHECK(show(parse("A=1\nB=b=c\n  C  =  two words  \nD=\nE==")) == "A=[1] B=[b=c] C=[two words] D=[] E=[=]");
}

TEST_CASE("env file: one pair of matching surrounding quotes is stripped") {
  CHECK(show(parse("A=\"x y\"\nB='z'\nC=\"  kept  \"\nD=\"\"\nE=''")) ==
        "A=[x y] B=[z] C=[  kept  ] D=[] E=[]");
  CHECK(show(parse("A=\"mixed'\nB=\"\nC=a\"b\"\nD=\"\"x\"\"\nE='\"q\"'")) ==
        "A=[\"mixed'] B=[\"] C=[a\"b\"] D=[\"x\"] E=[\"q\"]");
}

TEST_CASE("env file: blank lines and comment lines are skipped and CRLF is fine") {
  CHECK(show(parse("# settings\r\n\r\nNCCL_DEBUG=INFO\r\n   # indented comment\r\n\tX=1\t\r\n#Y=2\n")) ==
        "NCCL_DEBUG=[INFO] X=[1]");
  CHECK(parse("").empty());
  CHECK(parse("# nothing\n\n").empty());
}

TEST_CASE("env file: repeated names are kept in file order (set_env merges them)") {
  CHECK(show(parse("A=1\nB=2\nA=3")) == "A=[1] B=[2] A=[3]");
}

TEST_CASE("env file: a line without '=' or with a bad name is an error naming file:line and text") {
  CHECK_THROWS_WITH_AS(parse("A=1\n\nexport B\n"), ".deepspeed_env:3: 'export B': expected NAME=VALUE",
                       InputError);
  CHECK_THROWS_WITH_AS(parse("1A=x"), ".deepspeed_env:1: '1A=x': name '1A' must match [A-Za-z_][A-Za-z0-9_]*",
                       InputError);
  CHECK_THROWS_WITH_AS(parse("A=1\nA-B=x"),
                       ".deepspeed_env:2: 'A-B=x': name 'A-B' must match [A-Za-z_][A-Za-z0-9_]*", InputError);
  CHECK_THROWS_WITH_AS(parse("=x"), ".deepspeed_env:1: '=x': name '' must match [A-Za-z_][A-Za-z0-9_]*",
                       InputError);
  CHECK_THROWS_WITH_AS(parse("export A=x"),
                       ".deepspeed_env:1: 'export A=x': name 'export A' must match [A-Za-z_][A-Za-z0-9_]*",
                       InputError);
}

TEST_CASE("read_env_file: reads a named file and names a missing one in the error") {
  const auto path = std::filesystem::temp_directory_path() / ("dsrun-env-" + std::to_string(getpid()));
  std::ofstream(path) << "_A1=ok\nbad line\n";
  CHECK_THROWS_WITH_AS(read_env_file(path.string()),
                       (path.string() + ":2: 'bad line': expected NAME=VALUE").c_str(), InputError);
  std::ofstream(path) << "_A1=ok\n";
  CHECK(show(read_env_file(path.string())) == "_A1=[ok]");
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(read_env_file(path.string()),
                       (path.string() + ": cannot open: No such file or directory").c_str(), InputError);
}

TEST_CASE("set_env: new names are appended and existing ones change value in place") {
  std::vector<EnvVar> vars{{"A", "1"}, {"B", "2"}};
  set_env(vars, "C", "3");
  set_env(vars, "A", "9");
  CHECK(show(vars) == "A=[9] B=[2] C=[3]");
}

TEST_CASE("forwarded_environment: DeepSpeed prefixes plus OMP_ and DS_ in environ order minus reserved") {
  const char* entries[] = {"PATH=/usr/bin",         "NCCL_DEBUG=INFO",     "HOME=/root",
                           "PYTHONPATH=/src",       "DS_JOB_TOKEN=secret", "DS_ENV_FILE=env",
                           "OMP_NUM_THREADS=4",     "OMPI_MCA_x=1",        "UCX_TLS=rc,sm",
                           "MLFLOW_TRACKING_URI=u", "MV2_USE_CUDA=1",      "CUDA_VISIBLE_DEVICES=0",
                           "LD_LIBRARY_PATH=/l",    "NO_EQUALS_SIGN",      "NCCL_IB_HCA=mlx5=1",
                           "AZUREML_RUN_ID=r",      "MASTER_HOST=m",       "MASTER_ADDR=a",
                           "FC_TASK_INDEX=2",       "HF_HOME=/h",          nullptr};
  std::vector<char*> environ_;
  for (const char* entry : entries) environ_.push_back(const_cast<char*>(entry));
  CHECK(show(forwarded_environment(environ_.data(), {"DS_JOB_TOKEN"})) ==
        "NCCL_DEBUG=[INFO] PYTHONPATH=[/src] DS_ENV_FILE=[env] OMP_NUM_THREADS=[4] UCX_TLS=[rc,sm] "
        "MLFLOW_TRACKING_URI=[u] MV2_USE_CUDA=[1] NCCL_IB_HCA=[mlx5=1] AZUREML_RUN_ID=[r] MASTER_HOST=[m] "
        "FC_TASK_INDEX=[2]");
  CHECK(forwarded_environment(nullptr, {}).empty());
}

TEST_CASE("forwarded_environment: DeepSpeed matches its AzureML/Nebula names as prefixes too") {
  char entry[] = "AZUREML_RUN_ID_EXTRA=x";
  char* environ_[] = {entry, nullptr};
  CHECK(show(forwarded_environment(environ_, {})) == "AZUREML_RUN_ID_EXTRA=[x]");
}

TEST_CASE("parse_export: NAME=VALUE split at the first '=' with nothing trimmed") {
  CHECK(show({parse_export("A=b=c")}) == "A=[b=c]");
  CHECK(show({parse_export("A= x ")}) == "A=[ x ]");
  CHECK(show({parse_export("A=")}) == "A=[]");
  CHECK(show({parse_export("A=\"q\"")}) == "A=[\"q\"]");
  CHECK_THROWS_WITH_AS(parse_export("A"), "--export 'A': expected NAME=VALUE", InputError);
  CHECK_THROWS_WITH_AS(parse_export("1A=x"), "--export '1A=x': name '1A' must match [A-Za-z_][A-Za-z0-9_]*",
                       InputError);
  CHECK_THROWS_WITH_AS(parse_export(" A=x"), "--export ' A=x': name ' A' must match [A-Za-z_][A-Za-z0-9_]*",
                       InputError);
  CHECK_THROWS_WITH_AS(parse_export("=x"), "--export '=x': name '' must match [A-Za-z_][A-Za-z0-9_]*",
                       InputError);
}
