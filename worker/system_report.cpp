// The facts `dsworker --report` prints (see system_report.h).
#include "system_report.h"

#include <dlfcn.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <zlib.h>

#include "comm/process_group.h"
#include "cpu/blas.h"
#include "cpu/matmul_half.h"
#include "plugin/ds_plugin.h"
#include "plugin/plugin.h"

namespace ds {
namespace {

using ojson = nlohmann::ordered_json;

std::string yes_no(bool v) { return v ? "yes" : "no"; }

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

ojson cpu_section() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int usable = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  ojson cpu = {{"model", cpu_model()}, {"cores usable", usable}};
#if defined(__x86_64__)
  static const char* kTiers[] = {"SSE", "AVX", "AVX2", "AVX-512"};
  cpu["vector tier"] = kTiers[static_cast<int>(cpu::cpu_tier())];
  __builtin_cpu_init();
  cpu["F16C (fp16 conversions)"] = yes_no(__builtin_cpu_supports("f16c"));
  cpu["AVX512-BF16"] = yes_no(__builtin_cpu_supports("avx512bf16"));
  cpu["AVX512-FP16"] = yes_no(__builtin_cpu_supports("avx512fp16"));
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 24) & 1) && ((d >> 22) & 1);
  // Linux hands out AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA = 18).
  const bool granted = amx && ::syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  cpu["AMX-BF16 tiles"] = !amx ? "no" : granted ? "yes (permission granted)" : "present, permission refused";
#else
  cpu["vector tier"] = "not x86-64";
#endif
  return cpu;
}

// A shared library's symbol through dlopen, or nullptr.
void* symbol(void* lib, const char* name) { return lib ? ::dlsym(lib, name) : nullptr; }

ojson cuda_section() {
  ojson cuda = {{"CUDA backend", "not built (dsworker trains on CPU ranks; CUDA/NCCL is the next backend)"}};
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    cuda["CUDA driver"] = "not found (libcuda.so.1)";
  } else {
    using Init = int (*)(unsigned);
    using Version = int (*)(int*);
    using Count = int (*)(int*);
    auto init = reinterpret_cast<Init>(symbol(lib, "cuInit"));
    auto version = reinterpret_cast<Version>(symbol(lib, "cuDriverGetVersion"));
    auto count = reinterpret_cast<Count>(symbol(lib, "cuDeviceGetCount"));
    int v = 0, n = 0;
    if (!init || !version || !count) {
      cuda["CUDA driver"] = "libcuda.so.1 found, but without the CUDA driver API";
    } else if (int err = init(0); err != 0) {
      cuda["CUDA driver"] = fmt::format("libcuda.so.1 found, cuInit failed with CUDA error {}", err);
    } else {
      version(&v);
      count(&n);
      cuda["CUDA driver"] = fmt::format("{}.{}", v / 1000, v % 1000 / 10);
      cuda["CUDA devices"] = n;
    }
  }
  void* nccl = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  using NcclVersion = int (*)(int*);
  auto nccl_version = reinterpret_cast<NcclVersion>(symbol(nccl, "ncclGetVersion"));
  int nv = 0;
  if (nccl_version && nccl_version(&nv) == 0)
    cuda["NCCL"] = fmt::format("{}.{}.{}", nv / 10000, nv / 100 % 100, nv % 100);
  else
    cuda["NCCL"] = "not found (libnccl.so.2)";
  return cuda;
}

ojson plugin_section() {
  std::map<std::string, std::string> plugins;  // name -> the file the loader would take (first dir wins)
  std::string dirs;
  for (const std::string& dir : Plugin::search_dirs()) {
    dirs += (dirs.empty() ? "" : ":") + dir;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string file = entry.path().filename().string();
      if (file.rfind("libds_model_", 0) != 0 || entry.path().extension() != ".so") continue;
      const std::string name = file.substr(12, file.size() - 12 - 3);
      plugins.emplace(name, entry.path().string());
    }
  }
  std::string found;
  for (const auto& [name, path] : plugins) found += fmt::format("{}{} ({})", found.empty() ? "" : ", ", name, path);
  return {{"plugin ABI", DS_PLUGIN_ABI_VERSION}, {"search path", dirs}, {"plugins found", found.empty() ? "none" : found}};
}

}  // namespace

ojson system_report() {
  ojson build = {{"dsworker", DS_VERSION},
                 {"compiler", __VERSION__},
                 {"build type", DS_BUILD_TYPE},
                 {"fmt", fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100)},
                 {"nlohmann-json", fmt::format("{}.{}.{}", NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR,
                                               NLOHMANN_JSON_VERSION_PATCH)},
                 {"zlib", zlibVersion()}};
  ojson blas = {{"config", cpu::blas_config()},
                {"kernel (core)", cpu::blas_corename()},
                {"threading", cpu::blas_threading()},
                {"OPENBLAS_CORETYPE", std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "unset"}};
  ojson onednn = {{"version", cpu::onednn_version()}, {"bf16 matmuls", cpu::matmul_bf16_kernel()}};
  ojson comm = {{"CPU collectives", "Gloo over TCP"}, {"listen address", gloo_listen_address()}};
  return {{"build", build}, {"cpu", cpu_section()}, {"openblas", blas}, {"onednn", onednn}, {"communication", comm},
          {"cuda", cuda_section()}, {"plugins", plugin_section()}};
}

std::string format_report(const ojson& report) {
  std::string out;
  for (const auto& [section, items] : report.items()) {
    out += section + "\n";
    for (const auto& [name, value] : items.items()) {
      const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      const size_t dots = name.size() < 28 ? 30 - name.size() : 2;
      out += fmt::format("  {} {} {}\n", name, std::string(dots, '.'), text);
    }
  }
  return out;
}

}  // namespace ds
