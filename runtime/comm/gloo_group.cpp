// The Gloo process group: Gloo's TCP transport and full-mesh rendezvous (through our Store), our
// ring/tree algorithms (ring.h), Gloo's all-to-all and barrier, all run on one worker thread per group in issue
// order. When every rank is on this host, all-reduce, reduce-scatter, all-gather and broadcast go
// through shared memory instead (shm_collectives.h), with the same results. A size-1 group needs no
// transport: its collectives are local copies.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "comm/heartbeat.h"
#include "comm/process_group.h"
#include "amp/half.h"
#include "comm/rendezvous.h"
#include "comm/ring.h"
#include "comm/shm_collectives.h"
#include "core/errors.h"

namespace ds {

size_t element_bytes(DataType type) {
  switch (type) {
    case DataType::F32: return 4;
    case DataType::F64: return 8;
    case DataType::I32: return 4;
    case DataType::F16: return 2;
    case DataType::BF16: return 2;
    case DataType::U8: return 1;
  }
  throw CommError("comm: unknown DataType");
}

const char* data_type_name(DataType type) {
  switch (type) {
    case DataType::F32: return "F32";
    case DataType::F64: return "F64";
    case DataType::I32: return "I32";
    case DataType::F16: return "F16";
    case DataType::BF16: return "BF16";
    case DataType::U8: return "U8";
  }
  return "?";
}

namespace {

// 16-bit floats: each pair is combined in fp32 and rounded back (what NCCL does per hop).
template <amp::Half kType, bool kMax>
void half_reduce(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  auto *x = static_cast<const uint16_t*>(a), *y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float p = amp::half_to_float(kType, x[i]), q = amp::half_to_float(kType, y[i]);
    o[i] = amp::half_from_float(kType, kMax ? (p < q ? q : p) : p + q);
  }
}

template <typename T>
void sum(void* out, const void* a, const void* b, size_t n) {
  auto *o = static_cast<T*>(out), *x = static_cast<const T*>(a), *y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

template <typename T>
void max(void* out, const void* a, const void* b, size_t n) {
  auto *o = static_cast<T*>(out), *x = static_cast<const T*>(a), *y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] < y[i] ? y[i] : x[i];
}

ring::ReduceFn reduce_fn(DataType t, ReduceOp op) {
  const bool is_max = op == ReduceOp::Max;  // Avg = Sum, then divide
  switch (t) {
    case DataType::F32: return is_max ? max<float> : sum<float>;
    case DataType::F64: return is_max ? max<double> : sum<double>;
    case DataType::I32: return is_max ? max<int32_t> : sum<int32_t>;
    case DataType::F16: return is_max ? half_reduce<amp::Half::F16, true> : half_reduce<amp::Half::F16, false>;
    case DataType::BF16: return is_max ? half_reduce<amp::Half::BF16, true> : half_reduce<amp::Half::BF16, false>;
    case DataType::U8: break;  // refused before the collective is queued
  }
  return nullptr;
}

template <typename T>
void divide(void* data, size_t n, int by) {
  auto* d = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) d[i] /= static_cast<T>(by);
}

void divide(DataType t, void* data, size_t n, int by) {
  if (t == DataType::F32) divide<float>(data, n, by);
  if (t == DataType::F64) divide<double>(data, n, by);
  if (t == DataType::I32) divide<int32_t>(data, n, by);  // truncates toward zero
  if (t == DataType::F16 || t == DataType::BF16) {
    const amp::Half h = t == DataType::F16 ? amp::Half::F16 : amp::Half::BF16;
    auto* d = static_cast<uint16_t*>(data);
    for (size_t i = 0; i < n; ++i) d[i] = amp::half_from_float(h, amp::half_to_float(h, d[i]) / static_cast<float>(by));
  }
}

// A view of a Store with every key under a prefix.
class PrefixedStore final : public Store {
 public:
  PrefixedStore(std::shared_ptr<Store> store, std::string prefix) : store_(std::move(store)), prefix_(std::move(prefix)) {}
  void set(const std::string& k, const std::string& v) override { store_->set(prefix_ + k, v); }
  std::string get(const std::string& k, Millis t) override { return store_->get(prefix_ + k, t); }
  void wait(const std::vector<std::string>& keys, Millis t) override { store_->wait(with_prefix(keys), t); }
  int64_t add(const std::string& k, int64_t d) override { return store_->add(prefix_ + k, d); }
  bool remove(const std::string& k) override { return store_->remove(prefix_ + k); }
  std::vector<std::string> with_prefix(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(prefix_ + k);
    return out;
  }

 private:
  std::shared_ptr<Store> store_;
  std::string prefix_;
};

// Gloo's rendezvous store interface over ours (Gloo exchanges the pairs' addresses through it).
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<ds::Store> store, const std::string& prefix, Millis timeout)
      : store_(std::move(store), prefix), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = store_.get(key, timeout_);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  PrefixedStore store_;
  Millis timeout_;
};

class FutureWork final : public Work {
 public:
  explicit FutureWork(std::shared_future<void> f) : f_(std::move(f)) {}
  // Throws a copy owned by the waiting thread rather than the stored exception, which the worker
  // may free (ThreadSanitizer cannot see exception_ptr's reference counting).
  void wait() override {
    try {
      f_.get();
    } catch (const std::exception& e) {
      throw CommError(std::string(e.what()));
    }
  }

 private:
  std::shared_future<void> f_;
};

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(std::shared_ptr<Store> store, int rank, int size, const std::string& prefix, Millis timeout,
            const std::string& address)
      : rank_(rank), size_(size), timeout_(timeout) {
    if (size < 1 || rank < 0 || rank >= size)
      throw CommError(fmt::format("process group '{}': rank {} is not in 0..{}", prefix, rank, size - 1));
    if (timeout.count() <= 0)
      throw CommError(fmt::format("process group '{}': timeout {} ms is not positive", prefix, timeout.count()));
    if (size > 1) connect(std::move(store), prefix, address);
    worker_ = std::thread([this] { work(); });
  }

  ~GlooGroup() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    worker_.join();  // runs what was issued first: peers expect it
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const CommsLogger& comms() const override { return logger_; }
  const char* transport() const override { return size_ == 1 ? "none" : shm_ ? "shared memory" : "TCP"; }

  std::unique_ptr<Work> allreduce_async(void* data, size_t count, DataType type, ReduceOp op) override {
    refuse_bytes("allreduce", type);
    const size_t elem = element_bytes(type);
    return submit(describe("allreduce", count, type), "allreduce", count * elem, [=, this]() -> uint64_t {
      if (size_ == 1) return 0;
      const ring::Layout chunks = ring::split(count, size_);
      if (shm_) {
        shm::Collectives::FinishFn finish;
        if (op == ReduceOp::Avg) finish = [type, this](void* part, size_t n) { divide(type, part, n, size_); };
        return shm_->allreduce(data, chunks, elem, reduce_fn(type, op), finish, timeout_);
      }
      char* d = static_cast<char*>(data);
      char* mine = d + chunks.offset[rank_] * elem;
      uint64_t sent = ring::reduce_scatter(*ctx_, d, mine, chunks, elem, reduce_fn(type, op), timeout_);
      if (op == ReduceOp::Avg) divide(type, mine, chunks.count[rank_], size_);
      return sent + ring::allgather(*ctx_, d, chunks, elem, timeout_);
    });
  }

  std::unique_ptr<Work> reduce_scatter_async(const void* input, void* output, size_t count, DataType type,
                                             ReduceOp op) override {
    refuse_bytes("reduce_scatter", type);
    const size_t elem = element_bytes(type);
    return submit(describe("reduce_scatter", count, type), "reduce_scatter", size_ * count * elem,
                  [=, this]() -> uint64_t {
                    if (size_ == 1) {
                      if (count) std::memmove(output, input, count * elem);
                      return 0;
                    }
                    const ring::Layout chunks = ring::equal_chunks(count, size_);
                    const uint64_t sent =
                        shm_ ? shm_->reduce_scatter(input, output, chunks, elem, reduce_fn(type, op), timeout_)
                             : ring::reduce_scatter(*ctx_, input, output, chunks, elem, reduce_fn(type, op), timeout_);
                    if (op == ReduceOp::Avg) divide(type, output, count, size_);
                    return sent;
                  });
  }

  std::unique_ptr<Work> allgather_async(const void* input, void* output, size_t count, DataType type) override {
    const size_t elem = element_bytes(type);
    return submit(describe("allgather", count, type), "allgather", size_ * count * elem, [=, this]() -> uint64_t {
      if (count) std::memmove(static_cast<char*>(output) + rank_ * count * elem, input, count * elem);
      if (size_ == 1) return 0;
      const ring::Layout chunks = ring::equal_chunks(count, size_);
      return shm_ ? shm_->allgather(output, chunks, elem, timeout_) : ring::allgather(*ctx_, output, chunks, elem, timeout_);
    });
  }

  std::unique_ptr<Work> alltoall_async(const void* input, void* output, size_t count, DataType type) override {
    const size_t elem = element_bytes(type);
    return submit(describe("alltoall", count, type), "alltoall", size_ * count * elem, [=, this]() -> uint64_t {
      const size_t chunk = count * elem;  // bytes to and from each rank
      if (size_ == 1 || chunk == 0) {
        if (chunk) std::memcpy(output, input, chunk);
        return 0;
      }
      gloo::AlltoallOptions opts(ctx_);
      opts.setInput(static_cast<char*>(const_cast<void*>(input)), size_ * chunk);  // Gloo only reads it
      opts.setOutput(static_cast<char*>(output), size_ * chunk);
      opts.setTimeout(timeout_);
      gloo::alltoall(opts);
      return (size_ - 1) * chunk;
    });
  }

  std::unique_ptr<Work> broadcast_async(void* data, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size_)
      throw CommError(fmt::format("broadcast: root {} is not a rank of this group (0..{})", root, size_ - 1));
    const size_t elem = element_bytes(type);
    return submit(describe("broadcast", count, type), "broadcast", count * elem, [=, this]() -> uint64_t {
      if (size_ == 1) return 0;
      return shm_ ? shm_->broadcast(data, count * elem, root, timeout_)
                  : ring::broadcast(*ctx_, data, count * elem, root, timeout_);
    });
  }

  std::unique_ptr<Work> barrier_async() override {
    return submit("barrier", "barrier", 0, [this]() -> uint64_t {
      if (size_ == 1) return 0;
      gloo::BarrierOptions opts(ctx_);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
      return 0;
    });
  }

 private:
  static void refuse_bytes(const char* op, DataType type) {
    if (type == DataType::U8) throw CommError(fmt::format("{}: U8 data cannot be reduced", op));
  }

  static std::string describe(const char* op, size_t count, DataType type) {
    return fmt::format("{} of {} {}", op, count, data_type_name(type));
  }

  // Rendezvous under prefix/ (naming ranks that never come), then Gloo's full mesh of TCP pairs.
  void connect(std::shared_ptr<Store> store, const std::string& prefix, const std::string& address) {
    if (size_ > 1) shm::setting_from_env();  // a bad value stops every rank here, before any peer connects
    PrefixedStore view(store, prefix + "/");
    ScopedActivity waiting(fmt::format("connecting process group '{}'", prefix));
    try {
      rendezvous(view, rank_, size_, timeout_);
    } catch (const CommError& e) {
      std::string why = e.what();
      if (why.rfind("rendezvous: ", 0) == 0) why.erase(0, 12);
      throw CommError(fmt::format("process group '{}': {}", prefix, why));
    }
    std::shared_ptr<gloo::transport::Device> device;
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = address;
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("process group '{}': cannot listen on '{}' (set DS_GLOO_IFACE_ADDR to an address "
                                  "of this host its peers can reach): {}", prefix, address, ring::clean_error(e.what())));
    }
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    ctx->setTimeout(timeout_);
    GlooStore gloo_store(std::move(store), prefix + "/gloo/", timeout_);
    try {
      ctx->connectFullMesh(gloo_store, device);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("process group '{}': rank {} (listening on {}) could not connect to its peers: {}",
                                  prefix, rank_, address, ring::clean_error(e.what())));
    }
    ctx_ = std::move(ctx);
    shm_ = shm::Collectives::connect(view, rank_, size_, timeout_);
  }

  // Queues `body` (which returns the bytes this rank sent) on the worker thread.
  std::unique_ptr<Work> submit(std::string what, const char* op, uint64_t bytes, std::function<uint64_t()> body) {
    std::packaged_task<void()> task([this, what = std::move(what), op, bytes, body = std::move(body)] {
      if (!failure_.empty())
        throw CommError(fmt::format("{} failed: the group is unusable after an earlier failure ({})", what, failure_));
      const auto start = std::chrono::steady_clock::now();
      uint64_t sent = 0;
      try {
        ScopedActivity waiting(what);  // what the watchdog reports if a peer stalls
        sent = body();
      } catch (const std::exception& e) {
        failure_ = fmt::format("{} failed: {}", what, ring::clean_error(e.what()));
        throw CommError(failure_);
      }
      logger_.record(op, bytes, sent,
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    });
    auto done = task.get_future().share();
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
    }
    ready_.notify_one();
    return std::make_unique<FutureWork>(std::move(done));
  }

  void work() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();  // an exception goes to the task's future
    }
  }

  const int rank_, size_;
  const Millis timeout_;
  std::shared_ptr<gloo::Context> ctx_;  // null when size is 1
  std::unique_ptr<shm::Collectives> shm_;  // set when every rank is on this host
  CommsLogger logger_;
  std::string failure_;  // the first failed collective; only the worker touches it
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size, const std::string& prefix,
                                              std::chrono::milliseconds timeout, const std::string& address) {
  return std::make_unique<GlooGroup>(std::move(store), rank, size, prefix, timeout, address);
}

std::unique_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size, const std::string& prefix,
                                              std::chrono::milliseconds timeout) {
  return make_gloo_group(std::move(store), rank, size, prefix, timeout, size > 1 ? gloo_listen_address() : "");
}

}  // namespace ds
