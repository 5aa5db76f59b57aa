// blas: OpenBLAS runtime queries, thread count, and the OPENBLAS_CORETYPE re-exec (see blas.h).
#include "cpu/blas.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ds::cpu {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// OpenBLAS 0.3.x x86-64 core names (openblas_get_corename) by the instruction set of their kernels.
// -1: not a name we know.
int core_tier(std::string_view core) {
  static constexpr std::array<std::pair<std::string_view, int>, 27> kCores{{
      {"katmai", 0},     {"coppermine", 0},   {"northwood", 0},  {"prescott", 0},   {"banias", 0},
      {"atom", 0},       {"core2", 0},        {"penryn", 0},     {"dunnington", 0}, {"nehalem", 0},
      {"opteron", 0},    {"opteron_sse3", 0}, {"barcelona", 0},  {"nano", 0},       {"bobcat", 0},
      {"athlon", 0},     {"sandybridge", 1},  {"bulldozer", 1},  {"piledriver", 1}, {"steamroller", 1},
      {"excavator", 1},  {"haswell", 2},      {"zen", 2},        {"skylakex", 3},   {"cooperlake", 3},
      {"sapphirerapids", 3}, {"generic", 0},
  }};
  const std::string name = lower(core);
  for (const auto& [n, tier] : kCores)
    if (n == name) return tier;
  return -1;
}

}  // namespace

std::string blas_corename() {
  const char* s = openblas_get_corename();
  return s ? s : "";
}

std::string blas_config() {
  const char* s = openblas_get_config();
  std::string out = s ? s : "";
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

int blas_threads() { return openblas_get_num_threads(); }

std::string blas_threading() {
  switch (openblas_get_parallel()) {
    case 0: return "serial";
    case 1: return "pthreads";
    case 2: return "OpenMP";
  }
  return "unknown";
}

CpuTier cpu_tier() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return CpuTier::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuTier::avx2;
  if (__builtin_cpu_supports("avx")) return CpuTier::avx;
  return CpuTier::sse;
}

std::string blas_coretype_upgrade(std::string_view loaded_core, CpuTier cpu) {
  const int have = core_tier(loaded_core);
  const int can = static_cast<int>(cpu);
  if (have < 0 || have >= can) return "";
  switch (cpu) {
    case CpuTier::avx512: return "SkylakeX";
    case CpuTier::avx2: return "Haswell";
    case CpuTier::avx: return "SandyBridge";
    case CpuTier::sse: break;
  }
  return "";
}

std::string blas_fix_coretype(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";  // the user's choice, or our re-exec
  const std::string loaded = blas_corename();
  const std::string core = blas_coretype_upgrade(loaded, cpu_tier());
  if (core.empty() || argv == nullptr || argv[0] == nullptr) return "";
  if (setenv("OPENBLAS_CORETYPE", core.c_str(), 1) == 0) execv("/proc/self/exe", argv);
  const int err = errno;
  unsetenv("OPENBLAS_CORETYPE");  // stay consistent with the core this process actually runs
  return "blas: could not re-execute with OPENBLAS_CORETYPE=" + core + " (" + std::strerror(err) +
         "); continuing on OpenBLAS core " + loaded + ", matmul may be ~5x slower";
}

}  // namespace ds::cpu
