// Text helpers shared by the launcher's parsers (see text.h).
#include "text.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "errors.h"

namespace dsrun {
namespace {

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

}  // namespace

std::string_view trim(std::string_view text) {
  const size_t first = text.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kWhitespace) - first + 1);
}

std::string single_quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::vector<std::string> split_shell_words(std::string_view text, std::string_view origin) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      const size_t end = text.find('\'', i + 1);
      if (end == std::string_view::npos) throw InputError(fmt::format("{}: unterminated ' quote", origin));
      word.append(text.substr(i + 1, end - i - 1));
      i = end;
      in_word = true;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i >= text.size()) throw InputError(fmt::format("{}: unterminated \" quote", origin));
        if (text[i] == '"') break;
        if (text[i] == '\\' && i + 1 < text.size() && std::string_view("$`\"\\").find(text[i + 1]) != std::string_view::npos) ++i;
        word.push_back(text[i]);
      }
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word.push_back(text[++i]);
      in_word = true;
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::vector<ContentLine> content_lines(std::string_view text) {
  std::vector<ContentLine> lines;
  int number = 0;
  for (const std::string_view raw : split(text, '\n')) {
    const std::string_view line = trim(raw);
    ++number;
    if (!line.empty() && line.front() != '#') lines.push_back({number, line});
  }
  return lines;
}

std::string read_text_file(const std::string& path) {
  const std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw InputError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::string text;
  char buffer[1 << 14];
  while (const size_t count = std::fread(buffer, 1, sizeof buffer, file.get())) text.append(buffer, count);
  if (std::ferror(file.get()))
    throw InputError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  return text;
}

int parse_positive_int(std::string_view text, std::string_view origin) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value <= 0)
    throw InputError(fmt::format("{} '{}' is not a positive integer", origin, text));
  return value;
}

}  // namespace dsrun
