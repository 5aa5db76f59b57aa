// Resource discovery and selection (see resources.h, and README.md "Hosts and slots").
#include "resources.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "allocation.h"
#include "errors.h"
#include "hostfile.h"
#include "text.h"

namespace dsrun {
namespace {

// Counts devices through the CUDA driver API, falling back to NVML; no link-time dependency.
int count_with_driver() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return -1;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  int result = (init && count && init(0) == 0 && count(&n) == 0) ? n : -1;
  ::dlclose(lib);
  return result;
}

int count_with_nvml() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return -1;
  using InitFn = int (*)();
  using CountFn = int (*)(unsigned*);
  auto init = reinterpret_cast<InitFn>(::dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  unsigned n = 0;
  int result = (init && count && init() == 0 && count(&n) == 0) ? static_cast<int>(n) : -1;
  ::dlclose(lib);
  return result;
}

int cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

// CUDA_VISIBLE_DEVICES=1,3 → [1,3]; DeepSpeed trusts these ids as they are (its PR #6530).
std::vector<int> parse_visible_devices(const std::string& text) {
  std::vector<int> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    try {
      size_t used = 0;
      int id = std::stoi(item, &used);
      if (used != item.size() || id < 0) throw std::invalid_argument(item);
      ids.push_back(id);
    } catch (const std::exception&) {
      throw InputError(fmt::format("CUDA_VISIBLE_DEVICES='{}': '{}' is not a device number (UUIDs are not supported; "
                                   "use -i localhost:N or unset it)", text, item));
    }
    start = end + 1;
  }
  return ids;
}

}  // namespace

int local_gpu_count() {
  int n = count_with_driver();
  if (n < 0) n = count_with_nvml();
  return n < 0 ? 0 : n;
}

bool is_local_host(const std::string& host) {
  if (host.find('@') != std::string::npos) return false;
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return false;
  std::string self(name);
  return host == self || host == self.substr(0, self.find('.'));
}

Resources resolve_resources(const LaunchOptions& o) {
  Resources res;
  SelectionRequest request{o.include, o.exclude, o.num_nodes, o.num_gpus};
  const int gpus = local_gpu_count();
  const char* accel_env = std::getenv("DS_ACCELERATOR");
  res.accelerator = accel_env && *accel_env ? accel_env : (gpus > 0 ? "cuda" : "cpu");

  Selection pool;
  std::error_code ec;
  if (std::filesystem::is_regular_file(o.hostfile, ec)) {
    pool = pool_from_hostfile(read_hostfile(o.hostfile));
    res.from_hostfile = true;
  } else if (o.hostfile_given) {
    throw InputError(fmt::format("--hostfile {}: no such file", o.hostfile));
  } else if (auto allocation = slurm_allocation()) {
    pool = std::move(allocation->pool);
    res.from_slurm = true;
    res.notes.push_back(allocation->note);
  } else {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const char* override_slots = std::getenv("DSRUN_LOCAL_SLOTS");
    bool other_flags = !o.include.empty() || !o.exclude.empty() || o.num_gpus != -1 || o.num_nodes > 1;
    if (override_slots && *override_slots) {
      int n = parse_positive_int(override_slots, "DSRUN_LOCAL_SLOTS");
      pool = {{"localhost", {}}};
      for (int i = 0; i < n; ++i) pool[0].slots.push_back(i);
      res.notes.push_back(fmt::format("no hostfile: localhost with {} slots (DSRUN_LOCAL_SLOTS)", n));
    } else if (visible && *visible && !other_flags) {
      pool = {{"localhost", parse_visible_devices(visible)}};
      if (request.num_nodes == 1) request.num_nodes = -1;  // one node is what this already is
      res.notes.push_back(fmt::format("no hostfile: CUDA_VISIBLE_DEVICES={} gives the slots on localhost", visible));
    } else {
      int n = gpus > 0 ? gpus : cpu_count();
      pool = {{"localhost", {}}};
      for (int i = 0; i < n; ++i) pool[0].slots.push_back(i);
      if (visible && *visible)
        res.notes.push_back(fmt::format("ignoring CUDA_VISIBLE_DEVICES={} because of --include/--exclude/--num_gpus",
                                        visible));
      res.notes.push_back(fmt::format("no hostfile: localhost with {} slots ({})", n,
                                      gpus > 0 ? "one per GPU" : "one per CPU; no GPU found"));
    }
  }
  res.selection = select_resources(pool, request);
  return res;
}

std::string choose_transport(const LaunchOptions& o, const Resources& res) {
  int hosts = 0;
  bool all_local = true;
  for (const auto& node : res.selection) {
    if (node.slots.empty()) continue;
    ++hosts;
    all_local = all_local && is_local_host(node.host);
  }
  if (o.launcher == "local") {
    if (hosts > 1 || !all_local)
      throw InputError("--launcher local runs on this machine only, but the selection has other hosts");
    return "local";
  }
  if (!o.launcher.empty()) return o.launcher;
  if (hosts > 1 || !all_local) return res.from_slurm ? "slurm" : "ssh";
  return "local";
}

}  // namespace dsrun
