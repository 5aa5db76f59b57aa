// Built without the CUDA toolkit's NCCL and runtime headers: the NCCL group fails at run time.
#include "comm/nccl_group.h"

#include "core/errors.h"

namespace ds {

std::unique_ptr<ProcessGroup> make_nccl_group(const NcclApi&, std::shared_ptr<Store>, int, int, const std::string& prefix,
                                              std::chrono::milliseconds, int) {
  throw CommError("process group '" + prefix + "': dsworker was built without NCCL (no CUDA toolkit at build time)");
}

const NcclApi& real_nccl_api() { throw CommError("NCCL: dsworker was built without NCCL (no CUDA toolkit at build time)"); }

bool nccl_built() { return false; }

}  // namespace ds
