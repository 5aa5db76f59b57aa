// Per-collective counters of one rank, like DeepSpeed's comms_logger: how many calls, how many
// bytes, how long, and how many bytes this rank actually put on the wire (to check ZeRO's
// communication volume against theory). Filled by the process group; safe to read from any thread.
//   bytes:      the full (unsharded) message: count·elem for allreduce/broadcast, size·count·elem
//               for reduce_scatter (the input) and allgather (the output); 0 for barrier.
//   sent_bytes: payload this rank sent, e.g. (size-1)/size·bytes for a ring reduce_scatter or
//               allgather, 2·(size-1)/size·bytes for a ring allreduce.
//   ms:         wall time of the collective on the group's worker thread.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace ds {

struct CommStats {
  int64_t count = 0;
  uint64_t bytes = 0;       // summed over calls
  uint64_t sent_bytes = 0;  // summed over calls
  double ms = 0.0;          // summed over calls
};

class CommsLogger {
 public:
  void record(const std::string& op, uint64_t bytes, uint64_t sent_bytes, double ms);
  // Totals for one collective name ("allreduce", "reduce_scatter", ...); zeros if never called.
  CommStats stats(const std::string& op) const;
  uint64_t sent_bytes() const;  // summed over every collective
  // A table per collective and message size, in DeepSpeed's log_summary layout plus a column for
  // the bytes sent; bandwidths in Gbit/s (tput = bytes/time, busbw = sent_bytes/time).
  std::string summary() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::map<uint64_t, CommStats>> ops_;  // op → message size → totals
};

}  // namespace ds
