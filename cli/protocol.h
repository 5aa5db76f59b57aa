// The control protocol between dsrun and its node agents, over one byte stream each way
// (pipes for the local transport, an SSH channel's stdin/stdout for the ssh transport).
// Frame: u32 big-endian length of the payload, then the payload: u8 message type and fields.
// Fields: integers as i32 big-endian; strings as u32 length + raw bytes (any byte is allowed,
// so environment values and output lines need no quoting); lists as u32 count + items.
// Launcher → agent: Plan (once), Stop. Agent → launcher: Hello (first), Started, Output,
// Exited, Error, Progress (every second once the plan is in), Done (last). Nothing on this stream is ever interpreted by a shell.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "env_file.h"

namespace dsrun::protocol {

constexpr int kVersion = 2;  // 2: Progress
constexpr uint32_t kMaxFrameBytes = 64u << 20;
// The agent writes this before its first frame; the launcher skips whatever comes before it
// (a login shell that prints to stdout must not break the stream).
inline constexpr std::string_view kPreamble = "\n#dsrun-agent-protocol-v1#\n";

// One rank the agent must start.
struct RankSpec {
  int rank = 0;
  int local_rank = 0;
  std::vector<EnvVar> env;  // rank-specific variables (RANK, LOCAL_RANK, …)
};

// Everything one node agent needs; sent once, right after Hello.
struct NodePlan {
  int version = kVersion;
  std::string host;               // the host as the launcher names it, for messages
  std::string cwd;                // ranks run here; an error if missing on the node
  std::vector<std::string> argv;  // the program and its arguments (argv[0] is looked up in PATH)
  std::vector<EnvVar> env;        // common to every rank, applied over the agent's own environment
  std::vector<RankSpec> ranks;
  std::string log_dir;            // per-rank log files go here; empty = none
  int kill_grace_ms = 5000;       // SIGTERM → SIGKILL delay when tearing down
  bool bind_cores = false;        // give each rank an equal share of `cores` (or the node's physical cores)
  std::vector<int> cores;         // from --bind_core_list; empty = the node's physical cores
  bool pass_local_rank = false;   // append --local_rank=N to each rank's arguments
};

// Stop every rank: send `signal` to each rank's process group, SIGKILL after `grace_ms` (0 = at once).
struct Stop {
  int signal = 15;
  int grace_ms = 5000;
};

struct Hello {
  int version = kVersion;
  int pid = 0;  // the agent's pid on its node
};
struct Started {
  int rank = 0;
  int pid = 0;
};
// One line of a rank's output, without its '\n' (a final unterminated line is sent as is).
struct Output {
  int rank = 0;
  int stream = 1;  // 1 = stdout, 2 = stderr
  std::string line;
};
struct Exited {
  int rank = 0;
  int code = 0;    // exit code when signal == 0
  int signal = 0;  // the signal that killed it, or 0
};
// Something on the node went wrong outside any rank (missing cwd, exec failure, log dir).
struct Error {
  std::string message;
};
// Every rank of the node has been reaped and no process of the job is left on it.
struct Done {};

// What one rank last reported on its heartbeat pipe (DSRUN_HEARTBEAT_FD, runtime/comm/heartbeat.h).
struct RankProgress {
  int rank = 0;
  int silent_ms = 0;      // since its last heartbeat reached the agent
  std::string activity;   // what it was waiting in ("" = computing)
  int activity_ms = 0;    // for how long, when it last beat
};
// The agent's heartbeat, once a second: the ranks that send heartbeats (others are not listed).
struct Progress {
  std::vector<RankProgress> ranks;
};

using Message = std::variant<NodePlan, Stop, Hello, Started, Output, Exited, Error, Done, Progress>;

// The whole frame (length prefix included) for `message`.
std::string encode(const Message& message);

// Reassembles frames from a byte stream fed in arbitrary pieces.
class Decoder {
 public:
  // Appends received bytes.
  void feed(const char* data, size_t size);
  // The next complete message, or nullopt if more bytes are needed. Throws LaunchError on a malformed frame.
  std::optional<Message> next();

 private:
  std::string buffer_;
};

}  // namespace dsrun::protocol
