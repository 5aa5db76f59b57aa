// Environment a launcher hands to remote ranks: the `.deepspeed_env` file, `--export NAME=VALUE`,
// and the variables of its own environment that DeepSpeed forwards (prefix and exact-name lists).
// Lists keep order, because a later setting of a name overrides the value but keeps its position.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dsrun {

struct EnvVar {
  std::string name, value;
};

// Parses a .deepspeed_env file: NAME=VALUE per line, split at the first '='; name and value trimmed; one
// pair of surrounding quotes ('…' or "…") stripped from the value; blank and '#' lines skipped; CRLF ok.
// Entries keep file order, repeated names included. Throws InputError `origin:LINE: 'text': why`.
std::vector<EnvVar> parse_env_file(std::string_view text, const std::string& origin);

// Reads and parses `path`. Throws InputError (unreadable file, or as parse_env_file).
std::vector<EnvVar> read_env_file(const std::string& path);

// Sets name=value in `vars`: a new name is appended; an existing one gets the new value and keeps its
// position.
void set_env(std::vector<EnvVar>& vars, const std::string& name, const std::string& value);

// The launcher variables forwarded to remote ranks, in `environ_` order: names starting with NCCL, PYTHON,
// UCX, MLFLOW, MV2, OMP_ or DS_, plus DeepSpeed's AzureML/Nebula names; never a name in `reserved`.
std::vector<EnvVar> forwarded_environment(char* const* environ_, const std::vector<std::string>& reserved);

// Parses one `--export NAME=VALUE` (split at the first '=', nothing trimmed). Throws InputError naming it.
EnvVar parse_export(std::string_view text);

}  // namespace dsrun
