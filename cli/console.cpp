// Text and JSON-lines rendering of rank output and launcher messages (see console.h).
#include "console.h"

#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dsrun {
namespace {

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // rank output may not be UTF-8
}

}  // namespace

void Console::rank_line(const std::string& host, int rank, int stream, std::string_view line) {
  if (style_.json) {
    nlohmann::ordered_json j = {{"event", "output"}, {"host", host}, {"rank", rank},
                                {"stream", stream == 2 ? "stderr" : "stdout"}, {"line", line}};
    std::fputs((dump(j) + "\n").c_str(), stdout);
    std::fflush(stdout);
    return;
  }
  std::string text;
  if (style_.prefix && !style_.quiet)
    text = style_.show_host ? fmt::format("{}: [rank {}] ", host, rank) : fmt::format("[rank {}] ", rank);
  text.append(line);
  text.push_back('\n');
  FILE* out = stream == 2 ? stderr : stdout;
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);
}

void Console::json_line(std::string_view kind, std::string_view message) {
  nlohmann::ordered_json j = {{"event", kind}, {"message", message}};
  std::fputs((dump(j) + "\n").c_str(), stdout);
  std::fflush(stdout);
}

void Console::info(std::string_view message) {
  if (style_.quiet) return;
  if (style_.json) return json_line("info", message);
  std::fputs(fmt::format("dsrun: {}\n", message).c_str(), stderr);
}

void Console::warn(std::string_view message) {
  if (style_.json) return json_line("warning", message);
  std::fputs(fmt::format("dsrun: {}\n", message).c_str(), stderr);
}

void Console::error(std::string_view message) {
  if (style_.json) json_line("error", message);
  std::fputs(fmt::format("dsrun: error: {}\n", message).c_str(), stderr);
}

void Console::rank_exit(const std::string& host, int rank, int code, int signal) {
  if (!style_.json) return;
  nlohmann::ordered_json j = {{"event", "exit"}, {"host", host}, {"rank", rank}, {"code", code}, {"signal", signal}};
  std::fputs((dump(j) + "\n").c_str(), stdout);
  std::fflush(stdout);
}

void Console::restart(int restart, int max_restarts, std::string_view cause) {
  if (style_.json) {
    nlohmann::ordered_json j = {{"event", "restart"}, {"restart", restart}, {"max_restarts", max_restarts},
                                {"cause", cause}};
    std::fputs((dump(j) + "\n").c_str(), stdout);
    std::fflush(stdout);
    return;
  }
  std::fputs(fmt::format("dsrun: restart {}/{} after: {}\n", restart, max_restarts, cause).c_str(), stderr);
}

void Console::finished(int status) {
  if (!style_.json) return;
  std::fputs((dump({{"event", "done"}, {"exit_code", status}}) + "\n").c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace dsrun
