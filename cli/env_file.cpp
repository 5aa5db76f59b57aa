// Environment forwarding. `.deepspeed_env` is read more leniently than DeepSpeed reads it (blank
// lines and `#` comments are skipped instead of crashing or reaching the remote shell) and more
// strictly about names, since a bad name would otherwise break the remote command line.
#include "env_file.h"

#include <algorithm>

#include <fmt/format.h>

#include "errors.h"
#include "text.h"

namespace dsrun {
namespace {

// DeepSpeed's EXPORT_ENVS (runner.py: its own prefixes, then NEBULA_EXPORT_ENVS), plus OMP_ and DS_.
// Like DeepSpeed, every entry is matched as a name prefix, the AzureML/Nebula names included.
constexpr std::string_view kForwardedPrefixes[] = {
    "NCCL", "PYTHON", "UCX", "MLFLOW", "MV2", "OMP_", "DS_",
    "DLTS_JOB_ID", "DLTS_NUM_WORKER", "NEBULA_PERSISTENT_STORAGE_PATH", "NEBULA_PERSISTENT_TIME_INTERVAL",
    "AML_RUN_ID", "AZUREML_RUN_TOKEN", "AZUREML_WORKSPACE_SCOPE", "AZUREML_EXPERIMENT_SCOPE",
    "AZUREML_RUN_HISTORY_SERVICE_ENDPOINT", "AZUREML_RUN_ID", "NEBULA_MEMORY_BUFFER_SIZE",
    "AZUREML_PARAMETER_ITPJOB_NAME", "FC_TASKROLE_NAME", "FC_TASK_INDEX", "MASTER_HOST", "LOCAL_HOST",
    "AZUREML_BLOB_ACCOUNT_NAME", "AZUREML_BLOB_ACCOUNT_KEY"};

constexpr std::string_view kNameRule = "must match [A-Za-z_][A-Za-z0-9_]*";

bool is_valid_name(std::string_view name) {
  const auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  const auto letter_or_digit = [&](char c) { return letter(c) || (c >= '0' && c <= '9'); };
  return !name.empty() && letter(name.front()) && std::ranges::all_of(name, letter_or_digit);
}

// `value` without one pair of matching surrounding quotes, as the remote shell would have removed them.
std::string_view unquote(std::string_view value) {
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
    return value.substr(1, value.size() - 2);
  return value;
}

}  // namespace

std::vector<EnvVar> parse_env_file(std::string_view text, const std::string& origin) {
  std::vector<EnvVar> vars;
  for (const ContentLine& line : content_lines(text)) {
    const auto error = [&](std::string_view why) {
      return InputError(fmt::format("{}:{}: '{}': {}", origin, line.number, line.text, why));
    };
    const size_t eq = line.text.find('=');
    if (eq == std::string_view::npos) throw error("expected NAME=VALUE");
    const std::string_view name = trim(line.text.substr(0, eq));
    if (!is_valid_name(name)) throw error(fmt::format("name '{}' {}", name, kNameRule));
    vars.push_back({std::string(name), std::string(unquote(trim(line.text.substr(eq + 1))))});
  }
  return vars;
}

std::vector<EnvVar> read_env_file(const std::string& path) {
  return parse_env_file(read_text_file(path), path);
}

void set_env(std::vector<EnvVar>& vars, const std::string& name, const std::string& value) {
  const auto existing = std::ranges::find(vars, name, &EnvVar::name);
  if (existing == vars.end())
    vars.push_back({name, value});
  else
    existing->value = value;
}

std::vector<EnvVar> forwarded_environment(char* const* environ_, const std::vector<std::string>& reserved) {
  std::vector<EnvVar> vars;
  for (char* const* entry = environ_; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = text.substr(0, eq);
    const bool forwarded = std::ranges::any_of(
        kForwardedPrefixes, [&](std::string_view prefix) { return name.starts_with(prefix); });
    if (forwarded && std::ranges::find(reserved, name) == reserved.end())
      vars.push_back({std::string(name), std::string(text.substr(eq + 1))});
  }
  return vars;
}

EnvVar parse_export(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) throw InputError(fmt::format("--export '{}': expected NAME=VALUE", text));
  const std::string_view name = text.substr(0, eq);
  if (!is_valid_name(name))
    throw InputError(fmt::format("--export '{}': name '{}' {}", text, name, kNameRule));
  return {std::string(name), std::string(text.substr(eq + 1))};
}

}  // namespace dsrun
