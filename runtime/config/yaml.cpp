// YAML → the JSON tree a JSON file would give. Plain scalars are typed by the YAML 1.2 core schema
// (null, true/false, integers incl. 0x/0o, floats incl. 5e8 and .inf); quoted or !!str scalars stay
// strings. Duplicate keys are an error, as in JSON configs. Every key's line is kept for messages.
#include <charconv>
#include <cmath>
#include <limits>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "config/parse.h"
#include "core/errors.h"

namespace ds::cfg {
namespace {

std::optional<nlohmann::json> as_integer(const std::string& s) {
  static const std::regex decimal(R"([-+]?[0-9]+)"), octal(R"(0o[0-7]+)"), hex(R"(0x[0-9a-fA-F]+)");
  int base = std::regex_match(s, decimal) ? 10 : std::regex_match(s, octal) ? 8 : std::regex_match(s, hex) ? 16 : 0;
  if (base == 0) return std::nullopt;
  const char* begin = s.data() + (base == 10 ? (s[0] == '+' ? 1 : 0) : 2);
  int64_t v = 0;
  auto [end, error] = std::from_chars(begin, s.data() + s.size(), v, base);
  if (error == std::errc() && end == s.data() + s.size()) return nlohmann::json(v);
  return nlohmann::json(std::stod(s));  // out of int64 range: a float, as JSON would give
}

std::optional<nlohmann::json> as_float(const std::string& s) {
  static const std::regex number(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  static const std::regex inf(R"([-+]?\.(inf|Inf|INF))"), nan(R"(\.(nan|NaN|NAN))");
  if (std::regex_match(s, number)) return nlohmann::json(std::stod(s));
  if (std::regex_match(s, inf))
    return nlohmann::json((s[0] == '-' ? -1 : 1) * std::numeric_limits<double>::infinity());
  if (std::regex_match(s, nan)) return nlohmann::json(std::numeric_limits<double>::quiet_NaN());
  return std::nullopt;
}

nlohmann::json scalar(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  const std::string& tag = node.Tag();
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return s;  // quoted, or explicitly a string
  static const std::set<std::string> nulls = {"~", "null", "Null", "NULL", ""};
  static const std::set<std::string> trues = {"true", "True", "TRUE"}, falses = {"false", "False", "FALSE"};
  if (nulls.count(s)) return nullptr;
  if (trues.count(s)) return true;
  if (falses.count(s)) return false;
  if (auto i = as_integer(s)) return *i;
  if (auto f = as_float(s)) return *f;
  return s;
}

class Converter {
 public:
  explicit Converter(const std::string& name) : name_(name) {}

  nlohmann::json convert(const YAML::Node& node, const std::string& path) {
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined: return nullptr;
      case YAML::NodeType::Scalar: return scalar(node);
      case YAML::NodeType::Sequence: {
        nlohmann::json array = nlohmann::json::array();
        for (size_t i = 0; i < node.size(); ++i) {
          std::string item = fmt::format("{}[{}]", path, i);
          lines_[item] = node[i].Mark().line + 1;
          array.push_back(convert(node[i], item));
        }
        return array;
      }
      case YAML::NodeType::Map: {
        nlohmann::json object = nlohmann::json::object();
        for (auto it = node.begin(); it != node.end(); ++it) {
          int line = it->first.Mark().line + 1;
          if (!it->first.IsScalar())
            throw ConfigError(fmt::format("{}:{}: {}: keys must be plain strings", name_, line, path));
          const std::string& key = it->first.Scalar();
          std::string child = path.empty() ? key : path + "." + key;
          if (object.contains(key)) throw ConfigError(fmt::format("{}:{}: {}: duplicate key", name_, line, child));
          lines_[child] = line;
          object[key] = convert(it->second, child);
        }
        return object;
      }
    }
    return nullptr;
  }

  std::map<std::string, int> take_lines() { return std::move(lines_); }

 private:
  const std::string& name_;
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
  Converter converter(name);
  YamlTree out;
  out.tree = converter.convert(root, "");
  out.lines = converter.take_lines();
  return out;
}

}  // namespace ds::cfg
