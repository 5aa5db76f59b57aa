// The real NcclApi: NCCL from libnccl.so.2, opened on first use (dsworker must start on machines
// without NCCL; only a CUDA run needs it), and the statically linked CUDA runtime.
#include "comm/nccl_api.h"
#include "comm/nccl_group.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include "core/errors.h"

namespace ds {
namespace {

template <typename F>
void bind(void* library, F*& slot, const char* name) {
  slot = reinterpret_cast<F*>(::dlsym(library, name));
  if (!slot) throw CommError(fmt::format("NCCL: libnccl.so.2 has no {} (NCCL older than 2.14?)", name));
}

NcclApi load() {
  void* library = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!library)
    throw CommError(fmt::format("NCCL: cannot load libnccl.so.2 ({}); install NCCL or add its directory to "
                                "LD_LIBRARY_PATH", ::dlerror()));
  NcclApi api{};
  api.set_device = cudaSetDevice;
  api.stream_create = cudaStreamCreateWithFlags;
  api.stream_destroy = cudaStreamDestroy;
  api.event_create = cudaEventCreateWithFlags;
  api.event_record = [](cudaEvent_t event, cudaStream_t stream) { return cudaEventRecord(event, stream); };
  api.stream_wait_event = [](cudaStream_t stream, cudaEvent_t event) { return cudaStreamWaitEvent(stream, event, 0); };
  api.event_query = cudaEventQuery;
  api.event_destroy = cudaEventDestroy;
  api.malloc = cudaMalloc;
  api.free = cudaFree;
  api.memset_async = [](void* pointer, int value, size_t bytes, cudaStream_t stream) {
    return cudaMemsetAsync(pointer, value, bytes, stream);
  };
  api.cuda_error_string = cudaGetErrorString;
  bind(library, api.get_unique_id, "ncclGetUniqueId");
  bind(library, api.comm_init_rank_config, "ncclCommInitRankConfig");
  bind(library, api.comm_get_async_error, "ncclCommGetAsyncError");
  bind(library, api.comm_abort, "ncclCommAbort");
  bind(library, api.comm_destroy, "ncclCommDestroy");
  bind(library, api.all_reduce, "ncclAllReduce");
  bind(library, api.reduce_scatter, "ncclReduceScatter");
  bind(library, api.all_gather, "ncclAllGather");
  bind(library, api.broadcast, "ncclBroadcast");
  bind(library, api.send, "ncclSend");
  bind(library, api.recv, "ncclRecv");
  bind(library, api.group_start, "ncclGroupStart");
  bind(library, api.group_end, "ncclGroupEnd");
  bind(library, api.error_string, "ncclGetErrorString");
  bind(library, api.last_error, "ncclGetLastError");
  return api;
}

}  // namespace

const NcclApi& real_nccl_api() {
  static const NcclApi api = load();  // a failed load throws again at the next call
  return api;
}

}  // namespace ds
