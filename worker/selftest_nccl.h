// dsworker --selftest's NCCL checks: the NCCL process group (runtime/comm/nccl_group.h) across
// `ranks` devices, one thread rank per device in this process (device r for rank r), each
// collective on small integers whose sums are exact in F32, F16 and BF16, so every element must
// equal the expected value bit for bit. With the real NCCL on GPUs in dsworker; with the fake NCCL
// and the emulated launchers (host memory as device memory) in the self-test's unit test.
#pragma once
#include <cstddef>

#include "comm/process_group.h"

namespace ds {

struct NcclApi;

enum class NcclCollective { AllReduce, ReduceScatter, AllGather, Broadcast };
const char* collective_name(NcclCollective op);  // "allreduce", ...

// Runs `op` on `count` elements per rank (a reduce-scatter's output, an all-gather's input) and
// returns the elements, over all ranks, that differ from the expected result. Throws the first
// failing rank's error (CommError naming NCCL's text, or a CUDA error), prefixed "rank R: ".
size_t nccl_check(const NcclApi& api, NcclCollective op, DataType type, size_t count, int ranks);

}  // namespace ds
