// The line of each key in a JSON config, so that errors in JSON files point at a line as YAML ones
// do (nlohmann's parser reports positions only for syntax errors). Runs on text that already
// parsed, so it only tracks strings, comments and nesting.
#include <fmt/format.h>

#include "config/parse.h"

namespace ds::cfg {

std::map<std::string, int> json_key_lines(const std::string& text) {
  struct Frame {
    bool object;
    std::string key;         // objects: the latest key
    size_t index = 0;        // arrays: the element being read
    bool expect_key = true;  // objects: the next string is a key
  };
  std::vector<Frame> stack;
  std::map<std::string, int> lines;
  auto path = [&] {
    std::string p;
    for (const auto& f : stack) p += f.object ? (p.empty() ? "" : ".") + f.key : fmt::format("[{}]", f.index);
    return p;
  };
  int line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '\n') {
      ++line;
    } else if (c == '/' && next == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '/' && next == '*') {
      for (i += 2; i + 1 < text.size() && !(text[i] == '*' && text[i + 1] == '/'); ++i)
        if (text[i] == '\n') ++line;
      ++i;
    } else if (c == '"') {
      const size_t start = i;
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
      if (!stack.empty() && stack.back().object && stack.back().expect_key) {
        stack.back().key = nlohmann::json::parse(text.substr(start, i - start + 1)).get<std::string>();
        stack.back().expect_key = false;
        lines.emplace(path(), line);
      }
    } else if (c == '{' || c == '[') {
      stack.push_back({c == '{', {}, 0, true});
    } else if ((c == '}' || c == ']') && !stack.empty()) {
      stack.pop_back();
    } else if (c == ',' && !stack.empty()) {
      if (stack.back().object)
        stack.back().expect_key = true;
      else
        ++stack.back().index;
    }
  }
  return lines;
}

}  // namespace ds::cfg
