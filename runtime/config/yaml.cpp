// YAML → the JSON tree a JSON file would give. Plain scalars are typed by the YAML 1.2 core schema
// (null, true/false, integers incl. 0x/0o, floats incl. 5e8 and .inf); quoted or !!str scalars stay
// strings. Duplicate keys are an error, as in JSON configs. Every key's line is kept for messages.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "config/parse.h"
#include "core/errors.h"

namespace ds::cfg {
namespace {

// Character classes and the scalar forms of the core schema, matched by hand: std::regex recursed once
// per character and overflowed the stack on a long scalar (a 1 MB number: SIGSEGV, found by fuzzing).
bool is_dec(char c) { return c >= '0' && c <= '9'; }
bool is_oct(char c) { return c >= '0' && c <= '7'; }
bool is_hex(char c) { return is_dec(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// The end of the run of characters of a class starting at s[i].
size_t run(std::string_view s, size_t i, bool (*in)(char)) {
  while (i < s.size() && in(s[i])) ++i;
  return i;
}

size_t sign_length(std::string_view s) { return !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0; }

// [-+]?[0-9]+ → 10, 0o[0-7]+ → 8, 0x[0-9a-fA-F]+ → 16, anything else 0.
int integer_base(std::string_view s) {
  const size_t i = sign_length(s);
  if (s.size() > i && run(s, i, is_dec) == s.size()) return 10;
  if (s.size() > 2 && s[0] == '0' && s[1] == 'o' && run(s, 2, is_oct) == s.size()) return 8;
  if (s.size() > 2 && s[0] == '0' && s[1] == 'x' && run(s, 2, is_hex) == s.size()) return 16;
  return 0;
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_float(std::string_view s) {
  const size_t i = sign_length(s);
  size_t j = run(s, i, is_dec);
  if (j > i) {
    if (j < s.size() && s[j] == '.') j = run(s, j + 1, is_dec);
  } else {
    if (j == s.size() || s[j] != '.' || run(s, j + 1, is_dec) == j + 1) return false;
    j = run(s, j + 1, is_dec);
  }
  if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
    const size_t k = j + 1 + sign_length(s.substr(j + 1));
    j = run(s, k, is_dec);
    if (j == k) return false;
  }
  return j == s.size();
}

// Key paths longer than this get no line in messages: a deeply nested file would otherwise keep a
// copy of every prefix of its path (quadratic memory in the nesting depth).
constexpr size_t kMaxLinePath = 4096;

bool one_of(std::string_view s, std::initializer_list<std::string_view> words) {
  return std::find(words.begin(), words.end(), s) != words.end();
}

class Converter {
 public:
  Converter(const std::string& name, size_t max_values) : name_(name), values_left_(max_values) {}

  // `path` is the node's key path; it is extended for the children and restored before returning,
  // so a node costs the length of its own key, not of its path.
  nlohmann::json convert(const YAML::Node& node, std::string& path) {
    if (values_left_-- == 0)
      throw ConfigError(fmt::format("{}:{}: aliases expand to more values than a config can hold (a 'billion laughs' file?)",
                                    name_, node.Mark().line + 1));
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined: return nullptr;
      case YAML::NodeType::Scalar: return scalar(node, path);
      case YAML::NodeType::Sequence: {
        nlohmann::json array = nlohmann::json::array();
        const size_t parent = path.size();
        for (size_t i = 0; i < node.size(); ++i) {
          path += fmt::format("[{}]", i);
          remember_line(path, node[i].Mark().line + 1);
          array.push_back(convert(node[i], path));
          path.resize(parent);
        }
        return array;
      }
      case YAML::NodeType::Map: {
        nlohmann::json object = nlohmann::json::object();
        const size_t parent = path.size();
        for (auto it = node.begin(); it != node.end(); ++it) {
          int line = it->first.Mark().line + 1;
          if (!it->first.IsScalar())
            throw ConfigError(fmt::format("{}:{}: {}: keys must be plain strings", name_, line, path));
          const std::string& key = it->first.Scalar();
          path += (parent == 0 ? "" : ".") + key;
          if (object.contains(key)) throw ConfigError(fmt::format("{}:{}: {}: duplicate key", name_, line, path));
          remember_line(path, line);
          object[key] = convert(it->second, path);
          path.resize(parent);
        }
        return object;
      }
    }
    return nullptr;
  }

  std::map<std::string, int> take_lines() { return std::move(lines_); }

 private:
  // Plain scalars are typed by the core schema; quoted or !!str ones stay strings.
  nlohmann::json scalar(const YAML::Node& node, const std::string& path) const {
    const std::string& s = node.Scalar();
    const std::string& tag = node.Tag();
    if (tag == "!" || tag == "tag:yaml.org,2002:str") return s;
    if (one_of(s, {"~", "null", "Null", "NULL", ""})) return nullptr;
    if (one_of(s, {"true", "True", "TRUE"})) return true;
    if (one_of(s, {"false", "False", "FALSE"})) return false;
    if (const int base = integer_base(s)) {
      const char* begin = s.data() + (base == 10 ? (s[0] == '+' ? 1 : 0) : 2);
      int64_t v = 0;
      auto [end, error] = std::from_chars(begin, s.data() + s.size(), v, base);
      if (error == std::errc() && end == s.data() + s.size()) return v;
      if (base != 10) throw out_of_range(node, path, "integer");
      return to_double(node, path);  // beyond int64: a float, as JSON would give
    }
    if (is_float(s)) return to_double(node, path);
    const size_t i = sign_length(s);
    if (s.size() == i + 4 && s[i] == '.' && one_of(s.substr(i + 1), {"inf", "Inf", "INF"}))
      return (i == 1 && s[0] == '-' ? -1 : 1) * std::numeric_limits<double>::infinity();
    if (one_of(s, {".nan", ".NaN", ".NAN"})) return std::numeric_limits<double>::quiet_NaN();
    return s;
  }

  // A decimal number (is_float or a long integer) as a double; beyond double's range is an error, as
  // in JSON (below it, it rounds to 0 as JSON's does).
  double to_double(const YAML::Node& node, const std::string& path) const {
    const double v = std::strtod(node.Scalar().c_str(), nullptr);
    if (std::isinf(v)) throw out_of_range(node, path, "number");
    return v;
  }

  ConfigError out_of_range(const YAML::Node& node, const std::string& path, const char* what) const {
    const std::string& s = node.Scalar();
    return ConfigError(fmt::format("{}:{}: {}: {} overflow parsing '{}'", name_, node.Mark().line + 1, path, what,
                                   s.size() > 40 ? s.substr(0, 40) + "..." : s));
  }

  void remember_line(const std::string& path, int line) {
    if (path.size() <= kMaxLinePath) lines_[path] = line;
  }

  const std::string& name_;
  size_t values_left_;
  std::map<std::string, int> lines_;
};

}  // namespace

YamlTree parse_yaml_text(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}:{}: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  // Without aliases a value takes at least a byte of text; with them a few lines can expand to
  // billions of values (each alias a copy in the JSON tree).
  Converter converter(name, 2 * text.size() + 10000);
  YamlTree out;
  std::string path;
  out.tree = converter.convert(root, path);
  out.lines = converter.take_lines();
  return out;
}

}  // namespace ds::cfg
