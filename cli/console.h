// Everything dsrun prints: rank output (prefixed `[rank N]`, or `host: [rank N]` with several
// hosts), its own messages on stderr (`dsrun: …`), and with --format json one JSON object per
// line on stdout instead. Used from the launcher's main thread only.
#pragma once
#include <string>
#include <string_view>

namespace dsrun {

struct ConsoleStyle {
  bool json = false;
  bool quiet = false;       // no info messages, no prefixes
  bool prefix = true;       // [rank N]
  bool show_host = false;   // host: before [rank N]
};

class Console {
 public:
  explicit Console(ConsoleStyle style) : style_(style) {}
  // One line a rank wrote to `stream` (1 stdout, 2 stderr).
  void rank_line(const std::string& host, int rank, int stream, std::string_view line);
  // Progress and decisions, suppressed by --quiet.
  void info(std::string_view message);
  // Problems worth seeing even with --quiet.
  void warn(std::string_view message);
  // The reason the job failed.
  void error(std::string_view message);
  // A rank's exit (JSON mode only; text mode reports failures through error()).
  void rank_exit(const std::string& host, int rank, int code, int signal);
  // The job is started again (`restart` of `max_restarts`) after `cause`; shown even with --quiet.
  void restart(int restart, int max_restarts, std::string_view cause);
  // The job's end (JSON mode only).
  void finished(int status);

 private:
  void json_line(std::string_view kind, std::string_view message);
  ConsoleStyle style_;
};

}  // namespace dsrun
