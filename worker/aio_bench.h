// `dsworker --aio_bench DIR`: how fast NVMe offload's swap files can be written and read in DIR,
// through the same io_uring queue and O_DIRECT file the engine uses, for a few `aio` settings (as
// DeepSpeed's ds_nvme_tune sweeps them); prints GB/s for each and the best as an `aio` block.
#pragma once
#include <cstdint>
#include <string>

namespace ds {

// Writes then reads `mib` MiB per setting; returns the process exit code.
int aio_bench(const std::string& dir, int64_t mib);

}  // namespace ds
