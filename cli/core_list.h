// CPU core lists for `--bind_cores_to_rank`: parsing `--bind_core_list`, splitting the cores among
// the local ranks the way DeepSpeed does (equal contiguous shares, leftovers unused), and the
// compressed text numactl's `-C` takes.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dsrun {

// Parses `--bind_core_list` (`0,2-4,6`): ascending, non-overlapping items N or A-B inclusive, no spaces.
// Returns the core ids, ascending. Throws InputError.
std::vector<int> parse_core_list(std::string_view spec);

// The cores local rank `local_rank` of `local_size` gets: `cores` cut into `local_size` equal contiguous
// shares, leftovers unused. Throws InputError if there are fewer cores than ranks.
std::vector<int> cores_for_rank(const std::vector<int>& cores, int local_rank, int local_size);

// Compresses ascending ids to ranges text: [0,1,2,5] -> "0-2,5"; [] -> "".
std::string format_core_list(const std::vector<int>& cores);

}  // namespace dsrun
