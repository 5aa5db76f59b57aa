// Reading a config file: JSON (with // and /* */ comments, as DeepSpeed reads hjson; duplicate keys
// are an error as in DeepSpeed) or YAML by extension, then the shared validation.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "config/parse.h"
#include "core/errors.h"

namespace ds::cfg {
namespace {

bool has_yaml_extension(const std::string& path) {
  std::string lower = to_lower(path);
  for (std::string_view ext : {".yaml", ".yml"})
    if (lower.size() > ext.size() && lower.compare(lower.size() - ext.size(), ext.size(), ext) == 0) return true;
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Tracks the open containers while nlohmann parses, to name the path of a duplicate key.
class DuplicateKeys {
 public:
  bool operator()(int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start: stack_.push_back({true, {}, {}, 0}); break;
      case E::array_start: stack_.push_back({false, {}, {}, 0}); break;
      case E::key: {
        auto& top = stack_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second && first_.empty()) first_ = path();
        break;
      }
      case E::object_end:
      case E::array_end:
        stack_.pop_back();
        [[fallthrough]];
      case E::value:
        if (!stack_.empty() && !stack_.back().object) ++stack_.back().index;
        break;
    }
    return true;
  }
  const std::string& first() const { return first_; }  // "" when none

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;  // objects: the key being parsed
    size_t index;     // arrays: the element being parsed
  };
  std::string path() const {
    std::string p;
    for (const auto& f : stack_)
      p += f.object ? (p.empty() ? "" : ".") + f.key : fmt::format("[{}]", f.index);
    return p;
  }
  std::vector<Frame> stack_;
  std::string first_;
};

// The offset of the first byte that is not part of valid UTF-8, or npos.
size_t invalid_utf8_at(const std::string& text) {
  // RFC 3629: no overlong forms, no surrogates (U+D800-DFFF), nothing above U+10FFFF.
  const auto byte = [&](size_t i) { return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u; };
  for (size_t i = 0; i < text.size();) {
    const unsigned b = byte(i);
    size_t n = 0;
    unsigned lo = 0x80, hi = 0xbf;  // the range of the second byte
    if (b < 0x80) n = 1;
    else if (b >= 0xc2 && b <= 0xdf) n = 2;
    else if (b >= 0xe0 && b <= 0xef) n = 3, lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
    else if (b >= 0xf0 && b <= 0xf4) n = 4, lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
    else return i;
    for (size_t k = 1; k < n; ++k) {
      const unsigned c = byte(i + k);
      if (i + k >= text.size() || c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xbf)) return i;
    }
    i += n;
  }
  return std::string::npos;
}

// "NAME:LINE:COLUMN: why" for the byte at `at`.
ConfigError error_at(const std::string& name, const std::string& text, size_t at, const std::string& why) {
  const size_t nl = text.rfind('\n', at == 0 ? 0 : at - 1);
  const size_t line_start = nl == std::string::npos || (at == 0) ? 0 : nl + 1;
  return ConfigError(fmt::format("{}:{}:{}: {}", name,
                                 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'),
                                 at - line_start + 1, why));
}

}  // namespace

// nlohmann's what() without its "[json.exception.<kind>.<id>] " prefix.
std::string_view without_exception_id(std::string_view what) {
  if (const size_t end = what.find("] "); what.rfind("[json.exception", 0) == 0 && end != std::string_view::npos)
    what.remove_prefix(end + 2);
  return what;
}

nlohmann::json parse_json_text(const std::string& text, const std::string& name) {
  DuplicateKeys duplicates;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text, std::ref(duplicates), /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    size_t end = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    size_t line = 1, column = 1;
    for (size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    // what(): "[json.exception.parse_error.101] parse error at line 3, column 5: <detail>"; the
    // position is ours, counted above.
    std::string_view detail = without_exception_id(e.what());
    if (const size_t colon = detail.find(": "); detail.rfind("parse error", 0) == 0 && colon != std::string_view::npos)
      detail.remove_prefix(colon + 2);
    throw ConfigError(fmt::format("{}:{}:{}: {}", name, line, column, detail));
  } catch (const nlohmann::json::out_of_range& e) {  // a number beyond double, e.g. 1e5003 (found by fuzzing)
    throw ConfigError(fmt::format("{}: {}", name, without_exception_id(e.what())));
  }
  if (!duplicates.first().empty()) throw ConfigError(fmt::format("{}: {}: duplicate key", name, duplicates.first()));
  return root;
}

}  // namespace ds::cfg

namespace ds {

DsConfig load_config(const std::string& path, int world_size, const TrainerArgs& args) {
  return load_config_text(cfg::read_file(path), path, world_size, args);
}

DsConfig load_config_text(const std::string& text, const std::string& path, int world_size, const TrainerArgs& args) {
  // nlohmann's parser takes a NUL byte for the end of the text: whatever follows it would be ignored.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw cfg::error_at(path, text, nul, "a NUL byte (is this a text file?)");
  const bool yaml = cfg::has_yaml_extension(path);
  // A YAML file is UTF-8; other bytes would reach the resolved config, which cannot be printed as JSON.
  if (const size_t bad = cfg::invalid_utf8_at(text); yaml && bad != std::string::npos)
    throw cfg::error_at(path, text, bad,
                        fmt::format("byte 0x{:02x} is not UTF-8", static_cast<unsigned char>(text[bad])));
  cfg::Context ctx{path, {}, {}, {}, {}};
  nlohmann::json tree;
  std::map<std::string, int> lines;
  if (yaml) {
    cfg::YamlTree parsed = cfg::parse_yaml_text(text, path);
    tree = std::move(parsed.tree);
    lines = std::move(parsed.lines);
  } else {
    tree = cfg::parse_json_text(text, path);
    lines = cfg::json_key_lines(text);
  }
  // A message about a key the file does not contain (a missing one) points at its parent's line.
  ctx.line_of = [lines = std::move(lines)](const std::string& key_path) {
    for (std::string p = key_path;;) {
      if (auto it = lines.find(p); it != lines.end()) return it->second;
      size_t dot = p.rfind('.');
      if (dot == std::string::npos) return 0;
      p.resize(dot);
    }
  };
  return cfg::parse_in(tree, ctx, world_size, args);
}

}  // namespace ds
