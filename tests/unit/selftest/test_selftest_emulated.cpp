// dsworker --selftest's checks on the emulated launchers (kernels/cuda/launch_emulated.cpp): every
// kernel through its launcher and device-memory copies against the CPU reference, the table and the
// JSON report, as a GPU owner would get them.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cuda/launch.h"
#include "selftest.h"

TEST_CASE("selftest: every check passes on the emulated device and the JSON report says so") {
  REQUIRE(ds::cuda::emulated());
  const auto path = std::filesystem::temp_directory_path() / "dsrun-selftest-emulated.json";
  CHECK(ds::run_selftest(0, path.string()) == 0);
  std::ifstream in(path);
  const nlohmann::json report = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  CHECK(report["emulated"] == true);
  CHECK(report["device_name"] == "emulated CUDA device (the CPU SIMT emulator)");
  CHECK(report["failed"] == 0);
  CHECK(report["checks"].size() == 20);
  CHECK(report["passed"] == 20);
  size_t adam = 0;
  for (const auto& c : report["checks"]) {
    INFO(c.dump());
    CHECK(c["passed"] == true);
    if (c.contains("differing_elements")) {
      CHECK(c["differing_elements"] == 0);  // Adam and AdamW: the CPU optimizer's bits
      ++adam;
    } else {
      CHECK(c["share_of_bound"].get<double>() <= 1.0);
    }
  }
  CHECK(adam == 4);
  CHECK(std::string(report["not_checked"]).find("NCCL") != std::string::npos);
}

TEST_CASE("selftest: an unwritable JSON path is an error before the checks") {
  CHECK(ds::run_selftest(0, "/nonexistent-dir/report.json") == 1);
}
