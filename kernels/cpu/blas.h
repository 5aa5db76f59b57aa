// The OpenBLAS runtime behind matmul: which kernel family ("core") it runs, its thread count, and
// the fix for a core misdetected at library load. See README.md for the measurements.
//
// OpenBLAS (DYNAMIC_ARCH builds, e.g. Debian's) picks its core ONCE, in its library constructor,
// from the CPU id or from env OPENBLAS_CORETYPE. Versions before 0.3.25 fall back to "Prescott"
// (SSE3, ~5x slower sgemm) on Intel models they do not know (Sapphire/Emerald Rapids on 0.3.21).
// Setting the variable from main() is too late, so a program re-executes itself with it set:
//   int main(int argc, char** argv) { std::string warning = ds::cpu::blas_fix_coretype(argv); ... }
#pragma once
#include <string>
#include <string_view>

namespace ds::cpu {

// What the loaded OpenBLAS reports, e.g. "SkylakeX", "Prescott".
std::string blas_corename();
// e.g. "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64".
std::string blas_config();
// OpenBLAS's own thread count; set it with set_threads (parallel.h), which sets the kernels' too.
// Results are bit-identical run to run for a fixed core and thread count; across thread counts
// only on some cores (README.md).
int blas_threads();
// How this OpenBLAS runs its threads: "OpenMP" (what the build links), "pthreads" or "serial".
std::string blas_threading();

// The instruction-set tiers OpenBLAS's x86-64 kernels are built for.
enum class CpuTier { sse = 0, avx = 1, avx2 = 2, avx512 = 3 };
// The best tier this CPU (and OS) supports.
CpuTier cpu_tier();

// The OPENBLAS_CORETYPE value to run with when `loaded_core` is below what `cpu` supports
// ("SkylakeX", "Haswell" or "SandyBridge"), else "" (right already, or a core name we do not know,
// which a newer OpenBLAS than we know of detected: trust it). Pure: unit-tested.
std::string blas_coretype_upgrade(std::string_view loaded_core, CpuTier cpu);

// If OPENBLAS_CORETYPE is unset and blas_coretype_upgrade() says so: set it and execv
// /proc/self/exe with main's argv (same pid, so process-group tracking is unaffected; ~10 ms).
// Does not return then. Otherwise returns "" (nothing to do, or the user set the variable: any
// value is honoured), or, if the exec failed, a warning to log (the process goes on, slower).
// Call first thing in main(), before any thread of the program's own exists.
std::string blas_fix_coretype(char** argv);

}  // namespace ds::cpu
