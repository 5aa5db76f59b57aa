// The CUDA runtime and NCCL entry points the NCCL process group uses, as a table of functions: the
// real one (nccl_api.cpp: NCCL's libnccl.so.2 opened at run time, so dsworker starts where NCCL is
// not installed; the CUDA runtime linked statically) or a test's fake (tests/unit/comm/fake_nccl:
// device memory is host memory and the collectives run on a Gloo group), which lets the group run
// end to end on thread ranks in ctest without a GPU.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace ds {

struct NcclApi {
  // CUDA runtime
  cudaError_t (*set_device)(int device);
  cudaError_t (*stream_create)(cudaStream_t* stream, unsigned int flags);
  cudaError_t (*stream_destroy)(cudaStream_t stream);
  cudaError_t (*event_create)(cudaEvent_t* event, unsigned int flags);
  cudaError_t (*event_record)(cudaEvent_t event, cudaStream_t stream);  // stream nullptr: the default stream
  cudaError_t (*stream_wait_event)(cudaStream_t stream, cudaEvent_t event);  // later work on `stream` waits for it
  cudaError_t (*event_query)(cudaEvent_t event);  // cudaSuccess once reached, cudaErrorNotReady before
  cudaError_t (*event_destroy)(cudaEvent_t event);
  cudaError_t (*malloc)(void** pointer, size_t bytes);
  cudaError_t (*free)(void* pointer);
  cudaError_t (*memset_async)(void* pointer, int value, size_t bytes, cudaStream_t stream);
  const char* (*cuda_error_string)(cudaError_t error);
  // NCCL
  ncclResult_t (*get_unique_id)(ncclUniqueId* id);
  ncclResult_t (*comm_init_rank_config)(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config);
  ncclResult_t (*comm_get_async_error)(ncclComm_t comm, ncclResult_t* error);
  ncclResult_t (*comm_abort)(ncclComm_t comm);
  ncclResult_t (*comm_destroy)(ncclComm_t comm);
  ncclResult_t (*all_reduce)(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                             ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*reduce_scatter)(const void* send, void* recv, size_t recv_count, ncclDataType_t type, ncclRedOp_t op,
                                 ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*all_gather)(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t comm,
                             cudaStream_t stream);
  ncclResult_t (*broadcast)(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                            cudaStream_t stream);
  ncclResult_t (*send)(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                       cudaStream_t stream);
  ncclResult_t (*recv)(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
  const char* (*error_string)(ncclResult_t result);
  const char* (*last_error)(ncclComm_t comm);
};

}  // namespace ds
