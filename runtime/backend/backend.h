// The compute backends (plugin/ds_backend.h's table) the engine creates models on: the CPU
// (cpu_backend.cpp, kernels/cpu) and one CUDA device (cuda_backend.cpp, kernels/cuda; on the SIMT
// emulator and the CPU GEMM in tests, where it links ds_kernels_cuda_emulated).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "amp/half.h"
#include "cpu/adagrad_element.h"
#include "cpu/rmsprop_element.h"
#include "cpu/adam_element.h"
#include "cpu/lamb_element.h"
#include "cpu/lion_element.h"
#include "cpu/sgd_element.h"
#include "plugin/ds_backend.h"

namespace ds::backend {

// The CPU backend: tables for the process, safe to use from several threads (last_error is per
// thread). With `products` bf16 or fp16 the matmul op rounds its operands to that type and sums their
// products in fp32 (cpu/matmul_half.h: oneDNN's AMX or AVX-512-BF16 kernels for bf16), as DeepSpeed's 16-bit
// models multiply and as Device::set_half_matmuls does on a GPU; every other op is the same in all three.
const ds_backend* cpu(std::optional<amp::Half> products = std::nullopt);

// What the engine needs of a backend whose memory is not the host's, besides its ops: device
// memory, copies to and from the host (which wait for the ops before them; those to the host also
// asynchronously, on a copy stream), zeroing, and the
// rounding of fp32 values to 16-bit precision in place that mixed precision applies between layers.
class Device {
 public:
  virtual ~Device() = default;
  virtual const ds_backend* table() const = 0;
  virtual std::string describe() const = 0;  // "NVIDIA H100 80GB HBM3 (sm_90, 81559 MiB)"
  virtual void* allocate(size_t bytes) = 0;  // never nullptr (throws)
  virtual void release(void* p) = 0;
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;  // device memory
  // An asynchronous copy to the host, on a copy stream beside the ops: it starts once the ops issued
  // before it are done and runs while later ones do. Until it is known done, `dst` must not be read
  // (wait_copies) and no later op may overwrite `src` (ops_after_copies). Into pinned memory it
  // overlaps the ops; into pageable memory CUDA returns only once it is done.
  virtual void to_host_async(void* dst, const void* src, size_t bytes) = 0;
  // The same to the device: no op may read `dst` (ops_after_copies) nor the host write `src`
  // (wait_copies) before it is known done. From pinned memory it overlaps the ops.
  virtual void to_device_async(void* dst, const void* src, size_t bytes) = 0;
  // A ticket for the asynchronous copies issued so far (0 when there were none), for:
  virtual uint64_t copies_issued() = 0;
  virtual void wait_copies(uint64_t ticket) = 0;       // the host waits for those copies
  virtual void ops_after_copies(uint64_t ticket) = 0;  // ops issued from now on wait for them
  // An upload that need not wait for every op before it: `ops` is a mark of the ops issued so far
  // (ops_issued(), taken after the last ops that read `dst`), and the upload waits only for those, on
  // an upload stream of its own, so it runs while the later ops do (stage 3's parameters, uploaded
  // while the previous layer computes). Its ticket comes from uploads_issued(), for wait_copies and
  // ops_after_copies. Marks are used in the order they were taken (an older one after a newer one
  // waits for more ops than it names); mark 0 waits for none.
  virtual uint64_t ops_issued() = 0;
  virtual void to_device_after(uint64_t ops, void* dst, const void* src, size_t bytes) = 0;
  virtual uint64_t uploads_issued() = 0;
  // Page-locks host memory [p, p + bytes) so the copies to and from it run at the bus's speed
  // (ZeRO-Offload's pin_memory); unpin_host(p) before it is freed. False, with the reason in `why`,
  // when the system refuses: the copies still work, at pageable memory's speed.
  virtual bool pin_host(void* p, size_t bytes, std::string& why) = 0;
  virtual void unpin_host(void* p) = 0;
  virtual void round_to(amp::Half type, float* x, size_t n) = 0;  // x[i] = float(half(x[i])), device memory
  virtual void widen(amp::Half type, const uint16_t* in, float* out, size_t n) = 0;  // out[i] = float(in[i]), device memory
  virtual void narrow(amp::Half type, const float* in, uint16_t* out, size_t n) = 0;  // out[i] = half(in[i]), device memory
  // bf16 or fp16: the matmul op, and attention's products, round their operands to that type and
  // multiply them on the tensor cores with fp32 accumulation and output, as torch.autocast runs a
  // Linear and a 16-bit flash attention its products, and as DeepSpeed's fp16 and bf16 models
  // multiply. None (the default): fp32.
  virtual void set_half_matmuls(std::optional<amp::Half> type) = 0;

  // The optimizer's step on the device (engine/device_step.h), in the ops' order; device memory. The
  // element updates are the CPU loops' bodies (kernels/cpu/*_element.h), so they give the CPU's bits.
  virtual void synchronize() = 0;  // the host waits for every op so far (before another stream reads their results)
  virtual void copy_within(void* dst, const void* src, size_t bytes) = 0;
  virtual void accumulate(float* y, const float* x, size_t n) = 0;           // y[i] += x[i]
  virtual void rescale(float* x, size_t n, double factor) = 0;          // x[i] = float(x[i]·factor), in double
  virtual void add_sum_squares(const float* x, size_t n, double* total) = 0;  // total[0] += Σ x[i]², in double
  // Over several tensors, in one launch each on a GPU (by default one call per tensor): dst[i] =
  // float(half(src[i])) (round_to's bits; dst may be src), and total[0] += Σ x[i]² (the additions' order
  // differs from one call per tensor: within a few roundings in double).
  struct RoundTensor {
    float* dst;
    const float* src;
    size_t n;
  };
  virtual void round_into(amp::Half type, std::span<const RoundTensor> tensors) {
    for (const RoundTensor& t : tensors) {
      if (t.dst != t.src) copy_within(t.dst, t.src, t.n * sizeof(float));
      round_to(type, t.dst, t.n);
    }
  }
  struct Floats {
    const float* x;
    size_t n;
  };
  virtual void add_sums_of_squares(std::span<const Floats> tensors, double* total) {
    for (const Floats& t : tensors) add_sum_squares(t.x, t.n, total);
  }
  // copy_within's, narrow's and widen's bits over several arrays of n fp32 or 16-bit values (in one launch each
  // on a GPU; by default one call per array).
  struct Move {
    void* dst;
    const void* src;
    size_t n;
  };
  virtual void copy_all(std::span<const Move> moves) {
    for (const Move& m : moves) copy_within(m.dst, m.src, m.n * sizeof(float));
  }
  virtual void narrow_all(amp::Half type, std::span<const Move> moves) {
    for (const Move& m : moves) narrow(type, static_cast<const float*>(m.src), static_cast<uint16_t*>(m.dst), m.n);
  }
  virtual void widen_all(amp::Half type, std::span<const Move> moves) {
    for (const Move& m : moves) widen(type, static_cast<const uint16_t*>(m.src), static_cast<float*>(m.dst), m.n);
  }
  // rescale's bits over several tensors (in one launch on a GPU).
  struct Values {
    float* x;
    size_t n;
  };
  virtual void rescale_all(std::span<const Values> tensors, double factor) {
    for (const Values& t : tensors) rescale(t.x, t.n, factor);
  }
  virtual void adam_step(float* p, const float* g, float* m, float* v, size_t n, const cpu::AdamArgs& args,
                         bool decoupled) = 0;  // Adam, or AdamW (decoupled)
  // The same step over several tensors, each p, m, v [n] from g [n]: by default one adam_step each; the
  // CUDA backend updates them all in one launch (multi-tensor Adam), with the same bits.
  struct AdamTensor {
    float* p;
    const float* g;
    float* m;
    float* v;
    size_t n;
  };
  virtual void adam_steps(std::span<const AdamTensor> tensors, const cpu::AdamArgs& args, bool decoupled) {
    for (const AdamTensor& t : tensors) adam_step(t.p, t.g, t.m, t.v, t.n, args, decoupled);
  }
  virtual void sgd_step(float* p, const float* g, float* buf, size_t n, const cpu::SgdArgs& args) = 0;
  // The same step over several tensors (buf null without momentum): by default one sgd_step each; the CUDA
  // backend updates them all in one launch, with the same bits.
  struct SgdTensor {
    float* p;
    const float* g;
    float* buf;
    size_t n;
  };
  virtual void sgd_steps(std::span<const SgdTensor> tensors, const cpu::SgdArgs& args) {
    for (const SgdTensor& t : tensors) sgd_step(t.p, t.g, t.buf, t.n, args);
  }
  // One Lion or Adagrad step over several tensors, p and s (Lion's momentum, Adagrad's sum) in place from g
  // (CUDA: one launch).
  struct OneStateTensor {
    float* p;
    const float* g;
    float* s;
    size_t n;
  };
  virtual void lion_steps(std::span<const OneStateTensor> tensors, const cpu::LionArgs& args) = 0;
  virtual void adagrad_steps(std::span<const OneStateTensor> tensors, const cpu::AdagradArgs& args) = 0;
  virtual void rmsprop_steps(std::span<const OneStateTensor> tensors, const cpu::RmspropArgs& args) = 0;  // (plain)
  // LAMB over several tensors, in its two passes with the host between them: lamb_moments updates each
  // tensor's moments from g and writes its Σp² to sums[2i] and Σu² to sums[2i + 1] (device memory [2 ·
  // tensors]); lamb_apply moves each tensor's p by −scales[i]·u (host memory [tensors]). The CUDA backend
  // makes three launches in all, whatever the tensors' count.
  struct LambTensor {
    float* p;
    const float* g;  // (read by lamb_moments)
    float* m;
    float* v;
    size_t n;
  };
  virtual void lamb_moments(std::span<const LambTensor> tensors, const cpu::LambArgs& args, double* sums) = 0;
  virtual void lamb_apply(std::span<const LambTensor> tensors, const cpu::LambArgs& args,
                          std::span<const float> scales) = 0;
};

// A CUDA device's backend: its ops run on the default stream of `device` (the current device is set
// to it when created; the NCCL group's collectives start after the work issued there), its
// asynchronous copies on a second (non-blocking) one and to_device_after's uploads on a third,
// ordered by events. Temporaries come from a cache of device allocations kept until the backend goes.
// Throws std::runtime_error naming CUDA's error when the device cannot be used (or the build has
// no CUDA).
class Cuda : public Device {
 public:
  explicit Cuda(int device);
  ~Cuda() override;
  Cuda(const Cuda&) = delete;
  Cuda& operator=(const Cuda&) = delete;
  const ds_backend* table() const override;
  std::string describe() const override;
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void to_device(void* dst, const void* src, size_t bytes) override;
  void to_host(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void to_host_async(void* dst, const void* src, size_t bytes) override;
  void to_device_async(void* dst, const void* src, size_t bytes) override;
  uint64_t copies_issued() override;
  void wait_copies(uint64_t ticket) override;
  void ops_after_copies(uint64_t ticket) override;
  uint64_t ops_issued() override;
  void to_device_after(uint64_t ops, void* dst, const void* src, size_t bytes) override;
  uint64_t uploads_issued() override;
  bool pin_host(void* p, size_t bytes, std::string& why) override;
  void unpin_host(void* p) override;
  void round_to(amp::Half type, float* x, size_t n) override;
  void widen(amp::Half type, const uint16_t* in, float* out, size_t n) override;
  void narrow(amp::Half type, const float* in, uint16_t* out, size_t n) override;
  void set_half_matmuls(std::optional<amp::Half> type) override;
  void copy_within(void* dst, const void* src, size_t bytes) override;
  void accumulate(float* y, const float* x, size_t n) override;
  void rescale(float* x, size_t n, double factor) override;
  void add_sum_squares(const float* x, size_t n, double* total) override;
  void round_into(amp::Half type, std::span<const RoundTensor> tensors) override;
  void add_sums_of_squares(std::span<const Floats> tensors, double* total) override;
  void rescale_all(std::span<const Values> tensors, double factor) override;
  void copy_all(std::span<const Move> moves) override;
  void narrow_all(amp::Half type, std::span<const Move> moves) override;
  void widen_all(amp::Half type, std::span<const Move> moves) override;
  void adam_step(float* p, const float* g, float* m, float* v, size_t n, const cpu::AdamArgs& args,
                 bool decoupled) override;
  void adam_steps(std::span<const AdamTensor> tensors, const cpu::AdamArgs& args, bool decoupled) override;
  // The multi-tensor tables uploaded so far (each kept on the device for the next call with its tensors).
  size_t table_uploads() const;
  void sgd_step(float* p, const float* g, float* buf, size_t n, const cpu::SgdArgs& args) override;
  void sgd_steps(std::span<const SgdTensor> tensors, const cpu::SgdArgs& args) override;
  void lion_steps(std::span<const OneStateTensor> tensors, const cpu::LionArgs& args) override;
  void adagrad_steps(std::span<const OneStateTensor> tensors, const cpu::AdagradArgs& args) override;
  void rmsprop_steps(std::span<const OneStateTensor> tensors, const cpu::RmspropArgs& args) override;
  void lamb_moments(std::span<const LambTensor> tensors, const cpu::LambArgs& args, double* sums) override;
  void lamb_apply(std::span<const LambTensor> tensors, const cpu::LambArgs& args, std::span<const float> scales) override;
  // Waits for every op so far; an asynchronous error (a kernel's fault) surfaces here.
  void synchronize() override;

  struct State;  // cuda_backend.cpp

 private:
  std::unique_ptr<State> state_;
};

}  // namespace ds::backend
