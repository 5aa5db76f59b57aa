// dsworker --selftest: every CUDA kernel run through its launcher (kernels/cuda/launch.h) on this
// machine's GPU, at odd shapes, against the CPU reference (kernels/cpu, the CPU optimizer), each
// within the bound the emulator's unit tests hold it to (Adam bit for bit). Prints a table; writes
// the same as JSON when asked. Linked with the emulated launchers, the same checks run on the CPU
// SIMT emulator (the unit test of the self-test itself).
#pragma once
#include <string>

namespace ds {

// Exit status: 0 every check passed; 1 a check failed (or a CUDA error stopped one); 3 nothing to
// test: this build has no CUDA, or no usable GPU is visible (the reason is printed).
// `device`: the GPU to test (dsworker passes LOCAL_RANK modulo the visible GPUs).
int run_selftest(int device, const std::string& json_path);

}  // namespace ds
