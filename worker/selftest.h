// dsworker --selftest: every CUDA kernel run through its launcher (kernels/cuda/launch.h) and the
// cuBLASLt GEMMs (kernels/cuda/gemm.h) on this machine's GPU, at odd shapes, against the CPU reference
// (kernels/cpu, the CPU optimizer), each within the bound the emulator's unit tests hold it to (Adam
// bit for bit; GEMMs fp32 rounding relative to sum |a||b|). Prints a table; writes
// the same as JSON when asked. Linked with the emulated launchers, the same checks run on the CPU
// SIMT emulator (the unit test of the self-test itself).
#pragma once
#include <functional>
#include <string>

namespace ds {

struct NcclApi;

// The NCCL checks' setting: the NCCL to use (dsworker: real_nccl_api(), which throws where
// libnccl.so.2 is missing: the checks then fail naming that) and over how many devices (one thread
// rank each; 0: not checked).
struct SelftestNccl {
  std::function<const NcclApi&()> api;
  int ranks = 0;
};

// Exit status: 0 every check passed; 1 a check failed (or a CUDA error stopped one); 3 nothing to
// test: this build has no CUDA, or no usable GPU is visible (the reason is printed).
// `device`: the GPU to test (dsworker passes LOCAL_RANK modulo the visible GPUs); the NCCL checks
// run over devices 0..nccl.ranks-1.
int run_selftest(int device, const std::string& json_path, const SelftestNccl& nccl);

// This machine's: the real NCCL over every visible GPU (none where the build has no NCCL group or
// no GPU is visible).
SelftestNccl machine_nccl();

}  // namespace ds
