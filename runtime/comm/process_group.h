// Collective communication among the ranks of a job (DeepSpeed's torch.distributed calls).
// One interface, backends behind it: Gloo over TCP for CPU ranks (gloo_group.cpp), NCCL for CUDA
// ranks (nccl_group.h). Every rank must issue the same collectives in the same order. Buffers are
// host memory (device memory for NCCL); counts are in elements. Collectives run on the group's
// own worker thread (NCCL: its stream, after the work issued on the device's default stream) in
// issue order: the *_async forms return at once with a Work to wait on (so communication overlaps
// computation); the plain forms are *_async(...)->wait(). Errors (a peer gone, a timeout) throw CommError from wait().
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "comm/comms_logger.h"
#include "comm/store.h"

namespace ds {

// F16/BF16: raw 16-bit patterns, summed in fp32 per hop. U8: raw bytes (packed bits), moved but
// never reduced (allreduce and reduce_scatter refuse it).
enum class DataType { F32, F64, I32, F16, BF16, U8 };
enum class ReduceOp { Sum, Avg, Max };  // Avg: Sum, then divide by size (I32: truncating)

size_t element_bytes(DataType type);
const char* data_type_name(DataType type);  // "F32", "BF16", ...

// A pending collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished on this rank; throws CommError if it failed.
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: data[0..count) becomes the reduction over ranks.
  virtual std::unique_ptr<Work> allreduce_async(void* data, size_t count, DataType type, ReduceOp op) = 0;
  // input[size*count] (rank-major chunks) → output[count]: this rank's chunk of the reduction.
  // Each rank sends and receives (size-1)/size of the input, not a full allreduce. `output` may be
  // this rank's own chunk of `input` (in place). Scratch memory is bounded (a few MiB).
  virtual std::unique_ptr<Work> reduce_scatter_async(const void* input, void* output, size_t count, DataType type,
                                                     ReduceOp op) = 0;
  // input[count] from every rank → output[size*count], rank-major. `input` may be this rank's own
  // chunk of `output` (in place).
  virtual std::unique_ptr<Work> allgather_async(const void* input, void* output, size_t count, DataType type) = 0;
  // input[size*count]: chunk j (rank-major) goes to rank j → output[size*count]: chunk i came from
  // rank i (torch's all_to_all_single with equal splits). Each rank sends (size-1)·count elements.
  // `output` must not overlap `input`.
  virtual std::unique_ptr<Work> alltoall_async(const void* input, void* output, size_t count, DataType type) = 0;
  // In place: data[0..count) on every rank becomes root's.
  virtual std::unique_ptr<Work> broadcast_async(void* data, size_t count, DataType type, int root) = 0;
  virtual std::unique_ptr<Work> barrier_async() = 0;

  void allreduce(void* data, size_t count, DataType type, ReduceOp op) { allreduce_async(data, count, type, op)->wait(); }
  void reduce_scatter(const void* in, void* out, size_t count, DataType type, ReduceOp op) {
    reduce_scatter_async(in, out, count, type, op)->wait();
  }
  void allgather(const void* in, void* out, size_t count, DataType type) { allgather_async(in, out, count, type)->wait(); }
  void alltoall(const void* in, void* out, size_t count, DataType type) { alltoall_async(in, out, count, type)->wait(); }
  void broadcast(void* data, size_t count, DataType type, int root) { broadcast_async(data, count, type, root)->wait(); }
  void barrier() { barrier_async()->wait(); }

  // Per-collective counts, bytes and time on this rank (DeepSpeed's comms_logger).
  virtual const CommsLogger& comms() const = 0;
  // How all-reduce, reduce-scatter, all-gather and broadcast travel: "shared memory" (every rank
  // on this host), "TCP" or "none" (a group of one).
  virtual const char* transport() const = 0;
};

// A Gloo group of `size` ranks meeting through `store` (keys under `prefix/`, unique per group),
// over TCP: this rank listens on `address` (an address of this host its peers can reach; by default
// gloo_listen_address()). `timeout` bounds the set-up and each collective: a rank that never joins
// is named ("process group 'dp': ranks 3, 5 did not join within 60 s"); a failed collective names
// itself ("allreduce of 1048576 F32 failed: Timed out waiting 60000ms for recv operation ...") and
// leaves the group unusable (later collectives fail at once). Buffers must stay valid until wait().
// When every rank is on this host (and DS_COMM_SHM is not 0), the reductions, gathers and
// broadcasts go through a shared-memory segment instead of TCP, with bit-identical results.
std::unique_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& prefix, std::chrono::milliseconds timeout);
std::unique_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& prefix, std::chrono::milliseconds timeout,
                                              const std::string& address);

// The address this host's Gloo endpoint listens on, for peers on other hosts to reach:
// $DS_GLOO_IFACE_ADDR if set; else the local address of the route to $MASTER_ADDR (the interface
// this host uses to reach the job's rendezvous, so the one its peers share a network with; unless
// that is loopback while CROSS_SIZE > 1); else the first non-loopback address the hostname resolves
// to; else 127.0.0.1 (a single host only). Never 0.0.0.0: Gloo tells peers the address it binds.
std::string gloo_listen_address();

}  // namespace ds
