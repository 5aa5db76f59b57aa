// dsworker --selftest's checks on the emulated launchers (kernels/cuda/launch_emulated.cpp): every
// kernel through its launcher and device-memory copies against the CPU reference, and (where the build
// has the NCCL group) the NCCL checks on two thread ranks over the fake NCCL, and a GPT trained on the
// emulated CUDA backend against the CPU's; the table and the JSON report, as a GPU owner would get them.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../scoped_env.h"
#include "cuda/launch.h"
#include "selftest.h"
#ifdef DS_TEST_FAKE_NCCL
#include "../nccl/fake_nccl.h"
#endif

namespace {

// Two ranks on the fake NCCL where the build has the group; else no NCCL checks.
ds::SelftestNccl test_nccl() {
#ifdef DS_TEST_FAKE_NCCL
  return {[]() -> const ds::NcclApi& { return ds::test::fake_nccl_api(); }, 2};
#else
  return {};
#endif
}

}  // namespace

TEST_CASE("selftest: every check passes on the emulated device and the JSON report says so") {
  REQUIRE(ds::cuda::emulated());
  const auto path = std::filesystem::temp_directory_path() / "dsrun-selftest-emulated.json";
  const ds::SelftestNccl nccl = test_nccl();
  ScopedEnv plugins("DSWORKER_PLUGIN_PATH", DS_TEST_PLUGIN_DIR);  // the gpt plugin, by name
  CHECK(ds::run_selftest(0, path.string(), nccl) == 0);
  std::ifstream in(path);
  const nlohmann::json report = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  CHECK(report["emulated"] == true);
  CHECK(report["device_name"] == "emulated CUDA device (the CPU SIMT emulator)");
  CHECK(report["failed"] == 0);
  CHECK(report["passed"] == report["checks"].size());
  size_t bitwise = 0, multi = 0, attention = 0, half_attention = 0, gemm = 0, nccl_rows = 0, training = 0;
  for (const auto& c : report["checks"]) {
    INFO(c.dump());
    CHECK(c["passed"] == true);
    if (c.contains("differing_elements")) {
      CHECK(c["differing_elements"] == 0);  // Adam and AdamW: the CPU optimizer's bits; NCCL: exact sums
      ++bitwise;
    } else {
      CHECK(c["share_of_bound"].get<double>() <= 1.0);
    }
    attention += c["kernel"] == "attention";
    half_attention += c["kernel"] == "attention_bf16" || c["kernel"] == "attention_fp16" ||
                      c["kernel"] == "attention_bf16_gemm" || c["kernel"] == "attention_fp16_gemm";
    gemm += std::string(c["kernel"]).starts_with("gemm");
    multi += c["shape"] == "0+1+37+4096+4099+65539";
    nccl_rows += std::string(c["kernel"]).starts_with("nccl ");
    if (c["kernel"] == "lamb") CHECK(std::string(c["note"]).find("differ in their last bit") != std::string::npos);
    if (c["kernel"] == "train gpt") {
      ++training;
      CHECK(std::string(c["note"]).starts_with("loss "));  // the losses, first and last step, both sides
    }
  }
  CHECK(training == 1);
  CHECK(attention == 3);       // 1x1x1x1, 2x37x3x16 and it in groups of 4 heads; GPT-2's 1024 only on a GPU
  CHECK(half_attention == 6);  // 16-bit products, bf16 and fp16: 2x37x3x16 fused and GEMMs, in groups GEMMs
  CHECK(gemm == 23);  // f32, bf16, fp16: 1x1x1, 17x33x65 x 4 transposes, a batch; f32: k 0; bf16->f32 and
                      // fp16->f32: 2 each; the big: GPU
  CHECK(nccl_rows == (nccl.ranks ? 12u : 0u));  // 4 collectives x F32, F16, BF16
  CHECK(multi == 9);  // the device step's multi-tensor launches: Adam, AdamW, SGD, scaling, rounding x 2,
                      // moves x 2, the sum of squares
  CHECK(bitwise == 4 + 3 + 3 + 1 + 3 + 1 + 1 + 3 + 8 + nccl_rows);  // Adam x 4, SGD x 3, Lion, Adagrad, RMSprop, LAMB,
                                                                    // bias+residual x 3, embedding, nonfinite,
                                                                    // relu+scale, 2 conversions, 8 multi-tensor
  CHECK((std::string(report["not_checked"]).find("NCCL") == std::string::npos) == (nccl.ranks > 0));
  CHECK(std::string(report["not_checked"]).find("GEMM") == std::string::npos);
  CHECK(std::string(report["not_checked"]).find("engine") != std::string::npos);  // dsworker's loop: not yet
}

TEST_CASE("selftest: an unwritable JSON path is an error before the checks") {
  CHECK(ds::run_selftest(0, "/nonexistent-dir/report.json", {}) == 1);
}
