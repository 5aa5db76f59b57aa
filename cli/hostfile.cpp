// Hostfile parsing. DeepSpeed's regex accepts `host slots=N` and silently ignores anything after
// the digits (`slots=4abc` is 4); we take the same lines but check every token, so a typo is an
// error naming the file, the line and its text instead of a different job.
#include "hostfile.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>

#include "errors.h"
#include "text.h"

namespace dsrun {
namespace {

// The whitespace-separated tokens of `line`, up to a token starting with '#' (a trailing comment).
std::vector<std::string_view> tokens_of(std::string_view line) {
  std::vector<std::string_view> tokens;
  for (size_t pos = 0; (pos = line.find_first_not_of(kWhitespace, pos)) != std::string_view::npos;) {
    if (line[pos] == '#') break;
    const size_t end = std::min(line.find_first_of(kWhitespace, pos), line.size());
    tokens.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  return tokens;
}

// One `host slots=N [key=value ...] [# comment]` line.
HostEntry parse_line(const ContentLine& line, const std::string& origin) {
  const auto error = [&](std::string_view why) {
    return InputError(fmt::format("{}:{}: '{}': {}", origin, line.number, line.text, why));
  };
  const std::vector<std::string_view> tokens = tokens_of(line.text);
  const std::string_view host = tokens.front();  // a content line has a first token, not a comment
  if (host.find('=') != std::string_view::npos)
    throw error(fmt::format("expected a host name first, found '{}'", host));
  if (tokens.size() < 2) throw error("missing slots=N after the host name");
  if (!tokens[1].starts_with("slots="))
    throw error(fmt::format("expected slots=N after the host name, found '{}'", tokens[1]));

  const std::string_view digits = tokens[1].substr(std::string_view("slots=").size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
    throw error("slots must be a non-negative integer");
  int slots = 0;
  if (std::from_chars(digits.data(), digits.data() + digits.size(), slots).ec != std::errc() || slots > kMaxSlots)
    throw error(fmt::format("slots value {} is too large (at most {} per host)", digits, kMaxSlots));

  for (size_t i = 2; i < tokens.size(); ++i) {
    const size_t eq = tokens[i].find('=');
    if (eq == 0 || eq == std::string_view::npos)
      throw error(fmt::format("expected key=value after slots=N, found '{}'", tokens[i]));
    if (tokens[i].substr(0, eq) == "slots") throw error("slots is given more than once");
  }
  return {std::string(host), slots, line.number};
}

}  // namespace

std::vector<HostEntry> parse_hostfile(std::string_view text, const std::string& origin) {
  std::vector<HostEntry> hosts;
  std::unordered_map<std::string, int> first_line;
  for (const ContentLine& line : content_lines(text)) {
    HostEntry entry = parse_line(line, origin);
    const auto [seen, inserted] = first_line.emplace(entry.host, entry.line);
    if (!inserted)
      throw InputError(fmt::format("{}:{}: duplicate host '{}' (first on line {})", origin, line.number,
                                   entry.host, seen->second));
    hosts.push_back(std::move(entry));
  }
  if (hosts.empty())
    throw InputError(fmt::format("{}: no hosts (the file is empty or only has comments)", origin));
  return hosts;
}

std::vector<HostEntry> read_hostfile(const std::string& path) {
  return parse_hostfile(read_text_file(path), path);
}

}  // namespace dsrun
