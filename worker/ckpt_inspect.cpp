// `dsckpt inspect`'s description of a checkpoint (see ckpt_inspect.h).
#include "ckpt_inspect.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"

namespace ds::ckpt {
namespace {

std::string describe(const LoadedCheckpoint& c, const std::string& dir, const std::string& tag) {
  const nlohmann::json& h = c.model;
  std::string out = fmt::format("{}/{}: step {} ({} applied), world size {}, ZeRO stage {}, {}, {} rank file{}, checksums ok\n",
                                dir, tag, c.state.steps, c.state.updates, as_integer<int>(h.at("world_size")),
                                as_integer<int>(h.at("zero_stage")), h.at("precision").get<std::string>(),
                                as_integer<int>(h.at("writers")), as_integer<int>(h.at("writers")) == 1 ? "" : "s");
  if (h.contains("run")) out += fmt::format("run: {}\n", h["run"].dump());
  if (c.state.scaler) out += fmt::format("loss scale: {:g}\n", c.state.scaler->scale);
  std::string names;
  for (const auto& [name, values] : c.state.tensors) names += (names.empty() ? "" : ", ") + name;
  if (c.state.tensors.empty()) out += "tensors: none\n";
  else out += fmt::format("tensors (fp32, {} elements each): {}\n", c.state.tensors[0].second.size(), names);
  out += fmt::format("{} parameters:\n", h.at("params").size());
  for (const auto& p : h.at("params"))
    out += fmt::format("  {:<40} {}\n", p.at("name").get<std::string>(), p.at("shape").dump());
  return out;
}

}  // namespace

std::string inspect_checkpoint(const std::string& dir, const std::string& tag) {
  const LoadedCheckpoint c = read_checkpoint(dir, tag);
  try {
    return describe(c, dir, tag);
  } catch (const nlohmann::json::exception& e) {  // a key only inspect reads (loading checks the others)
    throw CheckpointError(fmt::format("{}: malformed header: {}", model_file(dir, tag), e.what()));
  }
}

}  // namespace ds::ckpt
