// The fake CUDA runtime and NCCL of fake_nccl.h.
#include "fake_nccl.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_group.h"
#include "comm/store.h"

namespace ds::test {
namespace {

std::atomic<int64_t> gloo_timeout_ms{10'000};

struct Stream {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> tasks;
  bool stop = false;
  std::thread worker{[this] { run(); }};

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stop || !tasks.empty(); });
      if (tasks.empty()) return;
      auto task = std::move(tasks.front());
      lock.unlock();
      task();
      lock.lock();
      tasks.pop_front();
    }
  }
  void push(std::function<void()> task) {
    std::lock_guard lock(mutex);
    tasks.push_back(std::move(task));
    wake.notify_one();
  }
  ~Stream() {
    {
      std::lock_guard lock(mutex);
      stop = true;
      wake.notify_one();
    }
    worker.join();
  }
};

// Each record gets its own flag, so a stream told to wait for the event waits for the record before it.
struct Event {
  std::shared_ptr<std::atomic<bool>> reached = std::make_shared<std::atomic<bool>>(true);
};

struct Comm {
  std::unique_ptr<ProcessGroup> gloo;
  std::mutex mutex;
  ncclResult_t error = ncclSuccess;
  std::string last_error;
  bool settling = false;  // the last call answered ncclInProgress
  std::atomic<bool> aborted{false};
};

struct Handle {
  std::shared_ptr<Comm> comm;
};

std::mutex registry_mutex;
std::map<uint64_t, std::shared_ptr<Store>> registry;  // unique id → the store its ranks meet in
thread_local std::string global_error;

Stream& default_stream() {
  static Stream stream;
  return stream;
}

Stream* stream_of(cudaStream_t s) { return s ? reinterpret_cast<Stream*>(s) : &default_stream(); }
std::shared_ptr<Comm> comm_of(ncclComm_t c) { return reinterpret_cast<Handle*>(c)->comm; }

bool to_type(ncclDataType_t t, DataType& out) {
  switch (t) {
    case ncclFloat32: out = DataType::F32; return true;
    case ncclFloat64: out = DataType::F64; return true;
    case ncclInt32: out = DataType::I32; return true;
    case ncclFloat16: out = DataType::F16; return true;
    case ncclBfloat16: out = DataType::BF16; return true;
    case ncclUint8: out = DataType::U8; return true;
    default: return false;
  }
}

bool to_op(ncclRedOp_t op, ReduceOp& out) {
  switch (op) {
    case ncclSum: out = ReduceOp::Sum; return true;
    case ncclAvg: out = ReduceOp::Avg; return true;
    case ncclMax: out = ReduceOp::Max; return true;
    default: return false;
  }
}

// Queues body(gloo group) on the stream; its failure becomes the communicator's async error.
ncclResult_t enqueue(ncclComm_t handle, cudaStream_t s, std::function<void(ProcessGroup&)> body) {
  std::shared_ptr<Comm> comm = comm_of(handle);
  {
    std::lock_guard lock(comm->mutex);
    if (comm->aborted || comm->error != ncclSuccess) return ncclInvalidUsage;
    comm->settling = true;
  }
  stream_of(s)->push([comm, body = std::move(body)] {
    if (comm->aborted) return;
    try {
      body(*comm->gloo);
    } catch (const std::exception& e) {
      std::lock_guard lock(comm->mutex);
      comm->error = ncclRemoteError;
      comm->last_error = e.what();
    }
  });
  return ncclInProgress;
}

// ncclGroupStart … ncclGroupEnd of this thread: only the send/recv pattern of an all-to-all.
struct P2p {
  bool send;
  const char* buffer;
  size_t count;
  ncclDataType_t type;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
};
thread_local int group_depth = 0;
thread_local std::vector<P2p> group_ops;

ncclResult_t group_end() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  std::vector<P2p> ops = std::move(group_ops);
  group_ops.clear();
  if (ops.empty()) return ncclSuccess;
  const P2p& first = ops[0];
  DataType type;
  if (!to_type(first.type, type)) return ncclInvalidArgument;
  const size_t chunk = first.count * element_bytes(type);
  const int size = comm_of(first.comm)->gloo->size();
  const char *input = nullptr, *output = nullptr;
  for (const P2p& op : ops)
    if (op.peer == 0) (op.send ? input : output) = op.buffer;
  bool all_to_all = ops.size() == 2 * static_cast<size_t>(size) && input && output;
  for (const P2p& op : ops)
    all_to_all = all_to_all && op.count == first.count && op.type == first.type && op.comm == first.comm &&
                 op.buffer == (op.send ? input : output) + op.peer * chunk;
  if (!all_to_all) {
    global_error = "fake NCCL: a group of send/recv other than an all-to-all";
    return ncclInvalidUsage;
  }
  return enqueue(first.comm, first.stream, [=](ProcessGroup& g) {
    g.alltoall(input, const_cast<char*>(output), first.count, type);
  });
}

NcclApi make_api() {
  NcclApi api{};
  api.set_device = [](int) { return cudaSuccess; };
  api.stream_create = [](cudaStream_t* s, unsigned) {
    *s = reinterpret_cast<cudaStream_t>(new Stream);
    return cudaSuccess;
  };
  api.stream_destroy = [](cudaStream_t s) {
    delete stream_of(s);
    return cudaSuccess;
  };
  api.event_create = [](cudaEvent_t* e, unsigned) {
    *e = reinterpret_cast<cudaEvent_t>(new Event);
    return cudaSuccess;
  };
  api.event_record = [](cudaEvent_t e, cudaStream_t s) {
    auto reached = std::make_shared<std::atomic<bool>>(false);
    reinterpret_cast<Event*>(e)->reached = reached;
    stream_of(s)->push([reached] { reached->store(true); });
    return cudaSuccess;
  };
  api.stream_wait_event = [](cudaStream_t s, cudaEvent_t e) {
    stream_of(s)->push([reached = reinterpret_cast<Event*>(e)->reached] {
      while (!reached->load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    return cudaSuccess;
  };
  api.event_query = [](cudaEvent_t e) {
    return reinterpret_cast<Event*>(e)->reached->load() ? cudaSuccess : cudaErrorNotReady;
  };
  api.event_destroy = [](cudaEvent_t e) {
    delete reinterpret_cast<Event*>(e);
    return cudaSuccess;
  };
  api.malloc = [](void** p, size_t bytes) {
    *p = std::malloc(bytes ? bytes : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
  };
  api.free = [](void* p) {
    std::free(p);
    return cudaSuccess;
  };
  api.memset_async = [](void* p, int value, size_t bytes, cudaStream_t s) {
    stream_of(s)->push([=] { std::memset(p, value, bytes); });
    return cudaSuccess;
  };
  api.cuda_error_string = [](cudaError_t e) -> const char* {
    return e == cudaSuccess ? "no error" : e == cudaErrorNotReady ? "device not ready" : "fake CUDA error";
  };
  api.get_unique_id = [](ncclUniqueId* id) {
    static std::atomic<uint64_t> counter{std::random_device{}()};
    const uint64_t key = counter.fetch_add(1);
    {
      std::lock_guard lock(registry_mutex);
      registry[key] = make_memory_store();
    }
    std::memset(id->internal, 0, sizeof(id->internal));
    std::memcpy(id->internal, &key, sizeof(key));
    return ncclSuccess;
  };
  api.comm_init_rank_config = [](ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t*) {
    uint64_t key = 0;
    std::memcpy(&key, id.internal, sizeof(key));
    std::shared_ptr<Store> store;
    {
      std::lock_guard lock(registry_mutex);
      auto it = registry.find(key);
      if (it != registry.end()) store = it->second;
    }
    *out = nullptr;
    if (!store) {
      global_error = "fake NCCL: unknown unique id";
      return ncclInvalidArgument;
    }
    auto comm = std::make_shared<Comm>();
    try {
      comm->gloo = make_gloo_group(store, rank, nranks, "fake-nccl", std::chrono::milliseconds(gloo_timeout_ms.load()));
    } catch (const std::exception& e) {
      global_error = e.what();
      return ncclRemoteError;
    }
    *out = reinterpret_cast<ncclComm_t>(new Handle{comm});
    return ncclSuccess;
  };
  api.comm_get_async_error = [](ncclComm_t c, ncclResult_t* error) {
    std::shared_ptr<Comm> comm = comm_of(c);
    std::lock_guard lock(comm->mutex);
    *error = comm->settling ? ncclInProgress : comm->error;
    comm->settling = false;
    return ncclSuccess;
  };
  api.comm_abort = [](ncclComm_t c) {
    comm_of(c)->aborted = true;
    delete reinterpret_cast<Handle*>(c);
    return ncclSuccess;
  };
  api.comm_destroy = [](ncclComm_t c) {
    delete reinterpret_cast<Handle*>(c);
    return ncclSuccess;
  };
  api.all_reduce = [](const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t o, ncclComm_t c,
                      cudaStream_t s) {
    DataType type;
    ReduceOp op;
    if (!to_type(t, type) || !to_op(o, op)) return ncclInvalidArgument;
    return enqueue(c, s, [=](ProcessGroup& g) {
      if (send != recv) std::memcpy(recv, send, count * element_bytes(type));
      g.allreduce(recv, count, type, op);
    });
  };
  api.reduce_scatter = [](const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t o, ncclComm_t c,
                          cudaStream_t s) {
    DataType type;
    ReduceOp op;
    if (!to_type(t, type) || !to_op(o, op)) return ncclInvalidArgument;
    return enqueue(c, s, [=](ProcessGroup& g) { g.reduce_scatter(send, recv, count, type, op); });
  };
  api.all_gather = [](const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    DataType type;
    if (!to_type(t, type)) return ncclInvalidArgument;
    return enqueue(c, s, [=](ProcessGroup& g) { g.allgather(send, recv, count, type); });
  };
  api.broadcast = [](const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                     cudaStream_t s) {
    DataType type;
    if (!to_type(t, type)) return ncclInvalidArgument;
    return enqueue(c, s, [=](ProcessGroup& g) {
      if (g.rank() == root && send != recv) std::memcpy(recv, send, count * element_bytes(type));
      g.broadcast(recv, count, type, root);
    });
  };
  api.send = [](const void* buffer, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    if (group_depth == 0) return ncclInvalidUsage;  // only inside a group, as an all-to-all
    group_ops.push_back(P2p{true, static_cast<const char*>(buffer), count, t, peer, c, s});
    return ncclSuccess;
  };
  api.recv = [](void* buffer, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    if (group_depth == 0) return ncclInvalidUsage;
    group_ops.push_back(P2p{false, static_cast<const char*>(buffer), count, t, peer, c, s});
    return ncclSuccess;
  };
  api.group_start = [] {
    ++group_depth;
    return ncclSuccess;
  };
  api.group_end = group_end;
  api.error_string = [](ncclResult_t r) -> const char* {
    switch (r) {
      case ncclSuccess: return "no error";
      case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
      case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
      case ncclRemoteError: return "remote process exited or there was a network error";
      case ncclInProgress: return "NCCL operation in progress";
      default: return "unhandled error";
    }
  };
  api.last_error = [](ncclComm_t c) -> const char* {
    if (!c) return global_error.c_str();
    std::shared_ptr<Comm> comm = comm_of(c);
    std::lock_guard lock(comm->mutex);
    thread_local std::string copy;
    copy = comm->last_error;
    return copy.c_str();
  };
  return api;
}

}  // namespace

const NcclApi& fake_nccl_api() {
  static const NcclApi api = make_api();
  return api;
}

void set_fake_nccl_timeout(std::chrono::milliseconds timeout) { gloo_timeout_ms = timeout.count(); }

void run_on_fake_default_stream(std::function<void()> work) { default_stream().push(std::move(work)); }

}  // namespace ds::test
