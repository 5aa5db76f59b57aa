// The hostfile: DeepSpeed's `host slots=N` lines, read strictly. Hosts keep file order, which
// fixes node order and rank order.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dsrun {

// The most slots one host may have: every slot becomes a rank with its own buffers and process
// (a larger number is a typo, and would size the launcher's tables).
constexpr int kMaxSlots = 4096;

struct HostEntry {
  std::string host;
  int slots;  // number of devices; slot ids are 0..slots-1
  int line;   // 1-based line in the file
};

// Parses hostfile text; `origin` (the file path) prefixes every error as `origin:LINE: '<line>': why`.
// Throws InputError on a bad line, a duplicate host, or a file without hosts.
std::vector<HostEntry> parse_hostfile(std::string_view text, const std::string& origin);

// Reads and parses the file at `path`. Throws InputError (unreadable file, or as parse_hostfile).
std::vector<HostEntry> read_hostfile(const std::string& path);

}  // namespace dsrun
