// dsckpt: checkpoints on the command line (runtime/checkpoint/README.md).
//   dsckpt inspect DIR [--tag TAG]                        what a checkpoint holds
//   dsckpt export DIR -o OUT.safetensors [--tag TAG]      the consolidated fp32 weights (what
//                                                         DeepSpeed's zero_to_fp32.py produces), as safetensors
//   dsckpt export DIR -o OUT --format hf                  a gpt checkpoint as a Hugging Face GPT-2 folder
// TAG defaults to the one DIR/latest names. Exit status: 0, 2 for bad arguments, 1 for a missing,
// corrupt or unreadable checkpoint (the message names the file).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "hf_export.h"
#include "safetensors.h"
#include "ckpt_inspect.h"

namespace ds::ckpt {
namespace {

std::string resolve_tag(const std::string& dir, const std::string& tag) {
  if (!tag.empty()) return tag;
  if (auto latest = latest_tag(dir)) return *latest;
  throw CheckpointError(fmt::format("{}/latest: missing (no checkpoint saved there yet?); give --tag", dir));
}

int64_t elements(const nlohmann::json& shape) {
  int64_t n = 1;
  for (const auto& d : shape) n *= d.get<int64_t>();
  return n;
}

// The consolidated fp32 weights under our parameter names, tied ones once (under their owner's name).
void export_safetensors(const std::string& dir, const std::string& tag, const std::string& out) {
  const LoadedCheckpoint c = read_checkpoint(dir, tag);
  const std::vector<float>& master = c.state.tensors.at(0).second;
  std::vector<SafetensorsTensor> tensors;
  size_t offset = 0;
  for (const auto& p : c.model.at("params")) {
    const auto n = static_cast<size_t>(elements(p.at("shape")));
    if (offset + n > master.size())
      throw CheckpointError(fmt::format("{}/{}: the parameter shapes hold more elements than the state's {}", dir, tag,
                                        master.size()));
    tensors.push_back({p.at("name").get<std::string>(), p.at("shape").get<std::vector<int64_t>>(),
                       std::vector<float>(master.begin() + static_cast<std::ptrdiff_t>(offset),
                                          master.begin() + static_cast<std::ptrdiff_t>(offset + n))});
    offset += n;
  }
  if (offset != master.size())
    throw CheckpointError(fmt::format("{}/{}: the parameter shapes hold {} elements, the state {}", dir, tag, offset,
                                      master.size()));
  write_safetensors(out, tensors, {{"format", "pt"}, {"source", "dsrun"}, {"tag", tag},
                                   {"step", std::to_string(c.state.steps)}});
  std::printf("%s: %zu tensors, %zu parameters (fp32) from %s/%s\n", out.c_str(), tensors.size(), master.size(),
              dir.c_str(), tag.c_str());
}

}  // namespace
}  // namespace ds::ckpt

int main(int argc, char** argv) {
  CLI::App app{"dsckpt: inspect and export dsrun checkpoints", "dsckpt"};
  app.require_subcommand(1);
  std::string dir, tag, out, format = "safetensors";
  auto* inspect = app.add_subcommand("inspect", "Print what a checkpoint holds (and verify every checksum)");
  inspect->add_option("DIR", dir, "The checkpoint directory (checkpoint.dir)")->required();
  inspect->add_option("--tag", tag, "The tag to read (default: the one DIR/latest names)");
  auto* exp = app.add_subcommand("export", "Write the consolidated fp32 weights");
  exp->add_option("DIR", dir, "The checkpoint directory (checkpoint.dir)")->required();
  exp->add_option("-o,--output", out, "The file to write (--format hf: the folder)")->required();
  exp->add_option("--tag", tag, "The tag to read (default: the one DIR/latest names)");
  exp->add_option("--format", format,
                  "safetensors (our names), or hf: a Hugging Face GPT-2 folder (config.json, model.safetensors) "
                  "of a gpt checkpoint")
      ->check(CLI::IsMember({"safetensors", "hf"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    const std::string resolved = ds::ckpt::resolve_tag(dir, tag);
    if (*inspect) std::fputs(ds::ckpt::inspect_checkpoint(dir, resolved).c_str(), stdout);
    else if (format == "hf") ds::ckpt::export_hf_gpt2(dir, resolved, out);
    else ds::ckpt::export_safetensors(dir, resolved, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsckpt: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
