// Typed reads of one config object, unknown-key detection and "did you mean" suggestions.
#include "config/section.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"

namespace ds::cfg {
namespace {

// Levenshtein distance, one row at a time.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

bool is_auto(const nlohmann::json& v) { return v.is_string() && v.get_ref<const std::string&>() == "auto"; }

}  // namespace

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Context::where(const std::string& path) const {
  int line = line_of && !path.empty() ? line_of(path) : 0;
  std::string out = line > 0 ? fmt::format("{}:{}", name, line) : name;
  return path.empty() ? out : fmt::format("{}: {}", out, path);
}

void Context::error(const std::string& path, const std::string& what) {
  errors.push_back(fmt::format("{}: {}", where(path), what));
}

void Context::fail(const std::string& path, const std::string& what) {
  error(path, what);
  throw Abort{};
}

void Context::warn(const std::string& path, const std::string& what) {
  warnings.push_back(fmt::format("{}: {}", where(path), what));
}

void Context::note(const std::string& path, const std::string& what) {
  notes.push_back(fmt::format("{}: {}", where(path), what));
}

// The candidate closest to `word`, if near enough to be a typo (distance <= max(2, length/3)).
static std::optional<std::string> closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string w = to_lower(word);
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, w.size() / 3) + 1;  // farther than this: not a typo
  for (const auto& c : candidates) {
    // The distance is at least the difference in length: skip before paying length x length (a
    // 60 KB unknown key against every known one made the config fuzz targets crawl).
    if ((w.size() > c.size() ? w.size() - c.size() : c.size() - w.size()) >= best_distance) continue;
    size_t d = edit_distance(w, to_lower(c));
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  auto c = closest(word, candidates);
  return c ? fmt::format(" (did you mean '{}'?)", *c) : "";
}

std::string show(const nlohmann::json& value) { return value.dump(); }

template <typename T, typename Convert>
std::optional<T> Section::read(std::string_view key, Convert convert) {
  const auto* v = get(key);
  if (v == nullptr) return std::nullopt;
  try {
    return convert(*v);
  } catch (const Abort&) {
    return std::nullopt;  // recorded; the default applies so parsing can go on
  }
}

Section::Section(Context& ctx, const nlohmann::json* value, std::string path, bool drop_auto)
    : ctx_(&ctx), value_(nullptr), path_(std::move(path)), drop_auto_(drop_auto) {
  if (value == nullptr || value->is_null()) return;
  if (!value->is_object()) ctx.fail(path_, fmt::format("{} is not an object", show(*value)));
  value_ = value;
}

std::string Section::path(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

void Section::accept(std::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
}

const nlohmann::json* Section::get(std::string_view key) {
  accept(key);
  if (value_ == nullptr) return nullptr;
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null() || (drop_auto_ && is_auto(*it))) return nullptr;
  return &*it;
}

void Section::fail(std::string_view key, const std::string& what) const { ctx_->fail(path(key), what); }

void Section::error(std::string_view key, const std::string& what) const { ctx_->error(path(key), what); }

void Section::warn(std::string_view key, const std::string& what) { ctx_->warn(path(key), what); }

void Section::type_error(std::string_view key, const nlohmann::json& value, const char* expected) const {
  std::string hint = is_auto(value) ? " (\"auto\" is filled in by the HuggingFace Trainer integration; "
                                      "dsworker needs the value itself)"
                                    : "";
  fail(key, fmt::format("{} is not {}{}", show(value), expected, hint));
}

double as_number(const Section& at, std::string_view key, const nlohmann::json& value) {
  if (!value.is_number()) at.type_error(key, value, "a number");
  return value.get<double>();
}

int64_t as_integer(const Section& at, std::string_view key, const nlohmann::json& value) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX))
      at.type_error(key, value, "an integer in range");
    return value.get<int64_t>();
  }
  // 5e8 is a float in JSON; DeepSpeed (pydantic, Python ints) accepts it where integers are meant.
  if (value.is_number_float()) {
    double d = value.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
  }
  at.type_error(key, value, "an integer");
}

bool Section::flag(std::string_view key, bool fallback) {
  return read<bool>(key, [&](const nlohmann::json& v) {
           if (!v.is_boolean()) type_error(key, v, "a boolean (true or false)");
           return v.get<bool>();
         })
      .value_or(fallback);
}

double Section::number(std::string_view key, double fallback) { return optional_number(key).value_or(fallback); }

std::optional<double> Section::optional_number(std::string_view key) {
  return read<double>(key, [&](const nlohmann::json& v) { return as_number(*this, key, v); });
}

int64_t Section::integer(std::string_view key, int64_t fallback) {
  return optional_integer(key).value_or(fallback);
}

std::optional<int64_t> Section::optional_integer(std::string_view key) {
  return read<int64_t>(key, [&](const nlohmann::json& v) { return as_integer(*this, key, v); });
}

std::string Section::string(std::string_view key, const std::string& fallback) {
  return optional_string(key).value_or(fallback);
}

std::optional<std::string> Section::optional_string(std::string_view key) {
  return read<std::string>(key, [&](const nlohmann::json& v) {
    if (!v.is_string()) type_error(key, v, "a string");
    return v.get<std::string>();
  });
}

std::vector<std::string> Section::strings(std::string_view key) {
  return read<std::vector<std::string>>(key, [&](const nlohmann::json& v) {
           std::vector<std::string> out;
           if (!v.is_array()) type_error(key, v, "a list of strings");
           for (const auto& item : v) {
             if (!item.is_string()) type_error(key, v, "a list of strings");
             out.push_back(item.get<std::string>());
           }
           return out;
         })
      .value_or(std::vector<std::string>{});
}

size_t Section::choice(std::string_view key, const std::vector<std::string>& choices, size_t fallback,
                       bool ignore_case) {
  return read<size_t>(key, [&](const nlohmann::json& v) -> size_t {
           std::string list;
           for (const auto& c : choices) list += (list.empty() ? "\"" : ", \"") + c + "\"";
           if (!v.is_string()) type_error(key, v, fmt::format("one of {}", list).c_str());
           const auto& s = v.get_ref<const std::string&>();
           for (size_t i = 0; i < choices.size(); ++i)
             if (ignore_case ? to_lower(s) == to_lower(choices[i]) : s == choices[i]) return i;
           fail(key, fmt::format("{} is not one of {}{}", show(v), list, did_you_mean(s, choices)));
         })
      .value_or(fallback);
}

Section Section::object(std::string_view key) { return Section(*ctx_, get(key), path(key), drop_auto_); }

void Section::at_least(std::string_view key, double value, double min) {
  if (!(value >= min)) ctx_->error(path(key), fmt::format("{} must be >= {}", value, min));
}

void Section::greater_than(std::string_view key, double value, double min) {
  if (!(value > min)) ctx_->error(path(key), fmt::format("{} must be > {}", value, min));
}

void Section::finish(bool warn_only) const {
  if (value_ == nullptr) return;
  for (const auto& item : value_->items()) {
    if (std::find(known_.begin(), known_.end(), item.key()) != known_.end()) continue;
    if (warn_only)
      ctx_->warn(path(item.key()), "unknown key, ignored as DeepSpeed does" + did_you_mean(item.key(), known_));
    else
      ctx_->error(path(item.key()), "unknown key" + did_you_mean(item.key(), known_));
  }
}

}  // namespace ds::cfg
