// The NCCL process group for CUDA ranks: ProcessGroup's collectives on buffers in the memory of
// `device`, run by NCCL on a stream of the group's own (so they overlap the compute stream); each
// collective starts after the work issued before it on the device's default stream (where the CUDA
// backend's ops run), as torch's NCCL group orders after the current stream, so a caller need not
// make the host wait for its ops before handing their output to a collective. The NCCL unique id
// travels from rank 0 through the job's token-protected store (key `prefix/nccl_id`). The
// communicator is non-blocking and watched: a set-up or collective that has not finished within
// `timeout`, or that NCCL reports failed, aborts the communicator and throws CommError naming the
// group, the rank, the collective and NCCL's error text, so a dead peer never hangs the job; the
// group is unusable afterwards (later collectives fail at once). Bytes sent are counted as a ring
// would send them (NCCL picks its own algorithm).
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "comm/process_group.h"
#include "comm/store.h"

namespace ds {

struct NcclApi;  // comm/nccl_api.h: the real CUDA runtime and NCCL, or a test's fake

std::unique_ptr<ProcessGroup> make_nccl_group(const NcclApi& api, std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& prefix, std::chrono::milliseconds timeout,
                                              int device);

// The real CUDA runtime and NCCL; throws CommError naming the library and dlerror() if
// libnccl.so.2 cannot be loaded or lacks a function.
const NcclApi& real_nccl_api();

// Whether this build has the NCCL group (the CUDA toolkit's headers were found); without it
// make_nccl_group and real_nccl_api throw CommError ("built without NCCL").
bool nccl_built();

}  // namespace ds
