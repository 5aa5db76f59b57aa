// Fuzz target: `dsckpt inspect` (worker/ckpt_inspect.h) on a checkpoint made from the input.
// The input is parts separated by a line "--": the model_states header (JSON), then for each rank
// file its header (JSON) and its tensors' values (text numbers). The target writes them as valid
// checkpoint files (right magic, checksums) in a temporary folder, so every input exercises what
// read_checkpoint and inspect do with the headers, and inspects DIR/t. Only CheckpointError may
// come out.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/format.h"
#include "ckpt_inspect.h"
#include "fuzz_check.h"

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts(1);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line == "--") parts.emplace_back();
    else parts.back() += line + "\n";
  }
  return parts;
}

// A folder of our own under /dev/shm (or TMPDIR), made once per process, removed at exit. Never
// destroyed: the exit handler that removes it runs after static destructors would have.
const std::string& work_dir() {
  static const std::string* dir = [] {
    std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string();
    auto* templ = new std::string(base + "/dsckpt-fuzz-XXXXXX");
    FUZZ_CHECK(::mkdtemp(templ->data()) != nullptr);
    std::atexit([] { std::filesystem::remove_all(work_dir()); });
    return templ;
  }();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = split(std::string(reinterpret_cast<const char*>(data), size));
  if (parts.size() > 9) return 0;  // at most 4 rank files
  const std::string dir = work_dir();
  std::filesystem::remove_all(dir + "/t");
  std::filesystem::create_directories(dir + "/t");
  try {
    for (size_t i = 0; i < parts.size(); i += 2) {
      ds::ckpt::CheckpointFile file;
      file.header = nlohmann::json::parse(parts[i]);
      if (!file.header.is_object()) return 0;
      if (i + 1 < parts.size()) {
        std::istringstream values(parts[i + 1]);
        std::vector<float> tensor;
        for (float v; values >> v && tensor.size() < 4096;) tensor.push_back(v);
        file.tensors.emplace_back("fp32", tensor);
        file.tensors.emplace_back("exp_avg", std::move(tensor));
      }
      char rank_name[64];
      std::snprintf(rank_name, sizeof rank_name, "/t/rank_%05zu_optim_states.dsckpt", i / 2 - 1);
      const std::string path = dir + (i == 0 ? std::string("/t/model_states.dsckpt") : std::string(rank_name));
      ds::ckpt::write_checkpoint_file(path, file);
    }
  } catch (const nlohmann::json::exception&) {
    return 0;  // not the input's JSON: nothing to inspect
  }
  try {
    const std::string text = ds::ckpt::inspect_checkpoint(dir, "t");
    FUZZ_CHECK(text.find(", checksums ok\n") != std::string::npos);
  } catch (const ds::ckpt::CheckpointError&) {
  }
  return 0;
}
