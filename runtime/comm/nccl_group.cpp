// The NCCL process group (see nccl_group.h), on the entry points of an NcclApi table.
#include "comm/nccl_group.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "comm/nccl_api.h"
#include "core/errors.h"

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::F32: return ncclFloat32;
    case DataType::F64: return ncclFloat64;
    case DataType::I32: return ncclInt32;
    case DataType::F16: return ncclFloat16;
    case DataType::BF16: return ncclBfloat16;
    case DataType::U8: return ncclUint8;
  }
  throw CommError("comm: unknown DataType");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  throw CommError("comm: unknown ReduceOp");
}

// Polls `done` until it returns true, sleeping a little longer each time (50 us up to 1 ms);
// false when `deadline` passed first.
template <typename Done>
bool poll_until(Clock::time_point deadline, Done done) {
  auto pause = std::chrono::microseconds(50);
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
  return true;
}

class NcclGroup;

class NcclWork final : public Work {
 public:
  NcclWork(NcclGroup& group, cudaEvent_t event, std::string what, const char* op, uint64_t bytes, uint64_t sent)
      : group_(group), event_(event), what_(std::move(what)), op_(op), bytes_(bytes), sent_(sent),
        start_(Clock::now()) {}
  ~NcclWork() override;
  void wait() override;

 private:
  NcclGroup& group_;
  cudaEvent_t event_;
  std::string what_;  // "allreduce of 1024 F32"
  const char* op_;
  uint64_t bytes_, sent_;
  Clock::time_point start_;
  bool done_ = false;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(const NcclApi& api, Store& store, int rank, int size, const std::string& prefix, Millis timeout, int device)
      : api_(api), rank_(rank), size_(size), prefix_(prefix), timeout_(timeout) {
    if (size < 1 || rank < 0 || rank >= size)
      throw CommError(fmt::format("process group '{}': rank {} is not in 0..{}", prefix, rank, size - 1));
    try {
      set_up(store, device);
    } catch (...) {
      release();
      throw;
    }
  }

  ~NcclGroup() override { release(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const CommsLogger& comms() const override { return comms_; }
  const char* transport() const override { return size_ == 1 ? "none" : "NCCL"; }

  std::unique_ptr<Work> allreduce_async(void* data, size_t count, DataType type, ReduceOp op) override {
    const uint64_t bytes = count * element_bytes(type);
    return issue("allreduce", count, type, bytes, ring_share(bytes) * 2, [&] {
      return api_.all_reduce(data, data, count, nccl_type(type), nccl_op(op), comm_, stream_);
    });
  }

  std::unique_ptr<Work> reduce_scatter_async(const void* input, void* output, size_t count, DataType type,
                                             ReduceOp op) override {
    const uint64_t bytes = count * size_ * element_bytes(type);
    return issue("reduce_scatter", count, type, bytes, ring_share(bytes), [&] {
      return api_.reduce_scatter(input, output, count, nccl_type(type), nccl_op(op), comm_, stream_);
    });
  }

  std::unique_ptr<Work> allgather_async(const void* input, void* output, size_t count, DataType type) override {
    const uint64_t bytes = count * size_ * element_bytes(type);
    return issue("allgather", count, type, bytes, ring_share(bytes),
                 [&] { return api_.all_gather(input, output, count, nccl_type(type), comm_, stream_); });
  }

  std::unique_ptr<Work> alltoall_async(const void* input, void* output, size_t count, DataType type) override {
    const size_t chunk = count * element_bytes(type);
    const uint64_t bytes = chunk * size_;
    return issue("alltoall", count, type, bytes, chunk * (size_ - 1), [&] {
      ncclResult_t r = api_.group_start();
      for (int peer = 0; peer < size_ && (r == ncclSuccess || r == ncclInProgress); ++peer) {
        r = api_.send(static_cast<const char*>(input) + peer * chunk, count, nccl_type(type), peer, comm_, stream_);
        if (r == ncclSuccess || r == ncclInProgress)
          r = api_.recv(static_cast<char*>(output) + peer * chunk, count, nccl_type(type), peer, comm_, stream_);
      }
      const ncclResult_t end = api_.group_end();
      return r == ncclSuccess || r == ncclInProgress ? end : r;
    });
  }

  std::unique_ptr<Work> broadcast_async(void* data, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size_)
      throw CommError(fmt::format("broadcast: root {} is not a rank of this group (0..{})", root, size_ - 1));
    const uint64_t bytes = count * element_bytes(type);
    return issue("broadcast", count, type, bytes, rank_ == (root + size_ - 1) % size_ ? 0 : bytes,
                 [&] { return api_.broadcast(data, data, count, nccl_type(type), root, comm_, stream_); });
  }

  std::unique_ptr<Work> barrier_async() override {
    return issue("barrier", 1, DataType::I32, 0, 0, [&] {
      return api_.all_reduce(flag_, flag_, 1, ncclInt32, ncclSum, comm_, stream_);
    });
  }

  // NcclWork::wait: polls the event until the collective is done, NCCL reports an error, or the
  // timeout passes (then the communicator is aborted).
  void finish(cudaEvent_t event, const std::string& what, Clock::time_point start) {
    std::lock_guard lock(mutex_);
    if (broken_) throw CommError(broken_reason_);
    cudaError_t status = cudaErrorNotReady;
    ncclResult_t async = ncclSuccess;
    const bool finished = poll_until(start + timeout_, [&] {
      status = api_.event_query(event);  // first: an error NCCL met before the event is seen below
      api_.comm_get_async_error(comm_, &async);
      return status != cudaErrorNotReady || (async != ncclSuccess && async != ncclInProgress);
    });
    if (!finished)
      fail(fmt::format("{} did not finish within {} ms (a rank missing or stuck?); the communicator is aborted", what,
                       timeout_.count()));
    if (async != ncclSuccess && async != ncclInProgress) fail_nccl(what, async);
    if (status != cudaSuccess) cuda(status, what);
  }

  void destroy_event(cudaEvent_t event) { api_.event_destroy(event); }
  CommsLogger& logger() { return comms_; }

 private:
  // The device, the stream and its ordering event, the unique id from rank 0, the communicator and the
  // barrier's flag.
  void set_up(Store& store, int device) {
    cuda(api_.set_device(device), fmt::format("selecting device {}", device));
    cudaStream_t stream = nullptr;  // kept only once made: release() must not destroy what a failed call left
    cuda(api_.stream_create(&stream, cudaStreamNonBlocking), "creating its stream");
    stream_ = stream;
    cudaEvent_t issued = nullptr;
    cuda(api_.event_create(&issued, cudaEventDisableTiming), "creating its ordering event");
    issued_ = issued;
    ncclUniqueId id{};
    const std::string key = prefix_ + "/nccl_id";
    if (rank_ == 0) {
      nccl(api_.get_unique_id(&id), "ncclGetUniqueId");
      store.set(key, std::string(id.internal, sizeof(id.internal)));
    } else {
      const std::string bytes = store.get(key, timeout_);
      if (bytes.size() != sizeof(id.internal))
        throw CommError(fmt::format("process group '{}': the NCCL id in the store has {} bytes, not {}", prefix_,
                                    bytes.size(), sizeof(id.internal)));
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; progress and errors are polled, so nothing hangs
    settle(api_.comm_init_rank_config(&comm_, size_, id, rank_, &config),
           fmt::format("set-up of the communicator ({} ranks)", size_));
    void* flag = nullptr;
    cuda(api_.malloc(&flag, sizeof(int32_t)), "allocating the barrier's flag");
    flag_ = flag;
    // On the group's stream, before any barrier: sums of zeros stay zero.
    cuda(api_.memset_async(flag_, 0, sizeof(int32_t), stream_), "clearing the barrier's flag");
  }

  // The stream before the flag: its work may still write the flag (a group made and dropped at once: the
  // flag's clearing), and its destruction lets that work finish first.
  void release() {
    if (comm_) api_.comm_destroy(comm_);  // an aborted communicator is already gone (comm_ null)
    comm_ = nullptr;
    if (stream_) api_.stream_destroy(stream_);
    if (issued_) api_.event_destroy(issued_);
    if (flag_) api_.free(flag_);
  }

  uint64_t ring_share(uint64_t bytes) const { return bytes / size_ * (size_ - 1); }

  template <typename Enqueue>
  std::unique_ptr<Work> issue(const char* op, size_t count, DataType type, uint64_t bytes, uint64_t sent,
                              Enqueue enqueue) {
    std::lock_guard lock(mutex_);
    if (broken_) throw CommError(broken_reason_);
    const std::string what = fmt::format("{} of {} {}", op, count, data_type_name(type));
    // After the work issued so far on the default stream (where the CUDA backend's ops write the buffers and
    // read those the collective overwrites), without the host waiting for it.
    cuda(api_.event_record(issued_, nullptr), what + ": marking the default stream's work");
    cuda(api_.stream_wait_event(stream_, issued_), what + ": ordering it after the default stream's work");
    settle(enqueue(), what);
    cudaEvent_t event = nullptr;
    cuda(api_.event_create(&event, cudaEventDisableTiming), what + ": creating its event");
    cuda(api_.event_record(event, stream_), what + ": recording its event");
    return std::make_unique<NcclWork>(*this, event, what, op, bytes, sent);
  }

  // A non-blocking call returns ncclInProgress until NCCL has taken it: poll until it has.
  void settle(ncclResult_t result, const std::string& what) {
    if (result == ncclInProgress) {
      const bool settled = poll_until(Clock::now() + timeout_, [&] {
        api_.comm_get_async_error(comm_, &result);
        return result != ncclInProgress;
      });
      if (!settled)
        fail(fmt::format("{} did not finish within {} ms (a rank missing or stuck?); the communicator is aborted", what,
                         timeout_.count()));
    }
    if (result != ncclSuccess) fail_nccl(what, result);
  }

  void nccl(ncclResult_t result, const std::string& what) {
    if (result != ncclSuccess) fail_nccl(what, result);
  }

  [[noreturn]] void fail_nccl(const std::string& what, ncclResult_t result) {
    const char* detail = api_.last_error(comm_);  // NCCL: a null communicator gives the thread's last error
    fail(fmt::format("{} failed: {}{}", what, api_.error_string(result),
                     detail && *detail ? fmt::format(" ({})", detail) : std::string()));
  }

  [[noreturn]] void fail(const std::string& message) {
    broken_reason_ = fmt::format("process group '{}' (NCCL, rank {} of {}): {}", prefix_, rank_, size_, message);
    if (comm_ && !broken_) api_.comm_abort(comm_);
    comm_ = nullptr;  // aborted: freed by NCCL
    broken_ = true;
    throw CommError(broken_reason_);
  }

  void cuda(cudaError_t error, const std::string& what) {
    if (error != cudaSuccess)
      throw CommError(fmt::format("process group '{}' (NCCL, rank {} of {}): {}: {}", prefix_, rank_, size_, what,
                                  api_.cuda_error_string(error)));
  }

  const NcclApi& api_;
  int rank_, size_;
  std::string prefix_;
  Millis timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t issued_ = nullptr;  // recorded on the default stream before each collective; stream_ waits for it
  void* flag_ = nullptr;  // [1] int32 on the device: the barrier's all-reduce
  std::mutex mutex_;
  bool broken_ = false;
  std::string broken_reason_;
  CommsLogger comms_;
};

NcclWork::~NcclWork() { group_.destroy_event(event_); }

void NcclWork::wait() {
  if (done_) return;
  group_.finish(event_, what_, start_);
  done_ = true;
  group_.logger().record(op_, bytes_, sent_, std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
}

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_group(const NcclApi& api, std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& prefix, std::chrono::milliseconds timeout,
                                              int device) {
  return std::make_unique<NcclGroup>(api, *store, rank, size, prefix, timeout, device);
}

bool nccl_built() { return true; }

}  // namespace ds
