// Small text helpers shared by the parsers of user text (hostfile, selection, core_list,
// env_file), so they split, trim, count lines and read files the same way.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dsrun {

// Whitespace as the parsers understand it (CR included, so CRLF files work).
inline constexpr std::string_view kWhitespace = " \t\r\n\v\f";

// `text` without leading and trailing whitespace (space, tab, CR, LF, VT, FF).
std::string_view trim(std::string_view text);

// `text` cut at every `separator`, nothing trimmed: "a,,b" -> {"a", "", "b"}; "" -> {""}.
std::vector<std::string_view> split(std::string_view text, char separator);

struct ContentLine {
  int number;             // 1-based
  std::string_view text;  // trimmed, never empty, never starting with '#'
};

// The lines of `text` that are neither blank nor whole-line `#` comments, trimmed (so CRLF is fine).
std::vector<ContentLine> content_lines(std::string_view text);

// The whole content of the file at `path`. Throws InputError naming `path` and strerror.
std::string read_text_file(const std::string& path);

// `text` split into words as a POSIX shell would, without expansions: whitespace separates,
// '…' keeps everything literally, "…" and \ escape. Throws InputError "<origin>: unterminated quote".
std::vector<std::string> split_shell_words(std::string_view text, std::string_view origin);

// `text` in single quotes for a POSIX shell (each ' written as '\'').
std::string single_quote(std::string_view text);

// `text` as an int > 0, all of it. Throws InputError "<origin> '<text>' is not a positive integer".
int parse_positive_int(std::string_view text, std::string_view origin);

}  // namespace dsrun
