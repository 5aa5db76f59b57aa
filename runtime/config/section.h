// Internal to ds_config: reading one JSON object of a config. Typed getters name the key path and
// the value in their errors; every key read becomes "known", and finish() reports the others with
// the closest known key as a suggestion. Errors and warnings go through a Context that knows the
// config's name and the line of each key path, and collects every problem so that one run reports
// them all: a bad value is recorded and read as absent (its default applies) and parsing goes on;
// fail() records and abandons the section being read (guard() catches that and goes on).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds::cfg {

// Where messages point, and the errors and warnings collected so far.
struct Context {
  std::string name;                                     // e.g. "ds_config.json"
  std::function<int(const std::string& path)> line_of;  // 1-based line of a key path; 0 = unknown
  std::vector<std::string> errors, warnings;
  std::vector<std::string> notes;  // what dsworker chose for the user: "auto" values, defaults


  // "name: path" (or "name:line: path" when the line is known; just "name" for the root).
  std::string where(const std::string& path) const;
  void error(const std::string& path, const std::string& what);  // records; parsing goes on
  [[noreturn]] void fail(const std::string& path, const std::string& what);  // records, throws Abort
  void warn(const std::string& path, const std::string& what);
  void note(const std::string& path, const std::string& what);
};

// Thrown by fail() once the error is recorded: the section being read is abandoned.
struct Abort {};

// Runs `parse` (one section, or one cross-key check); an Abort ends it and parsing goes on.
template <typename Parse>
void guard(Parse&& parse) {
  try {
    parse();
  } catch (const Abort&) {
  }
}

std::string to_lower(std::string_view s);

// " (did you mean 'x'?)" naming the candidate closest to `word` by edit distance (case-insensitive)
// when it is close enough to be a typo, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// A JSON value as it appears in messages: strings quoted, numbers as written.
std::string show(const nlohmann::json& value);

class Section {
 public:
  // `value` null or absent: an empty section. Not an object: error at `path`.
  // `drop_auto`: the string "auto" counts as not given (DeepSpeed's pydantic sections).
  Section(Context& ctx, const nlohmann::json* value, std::string path, bool drop_auto = false);

  std::string path(std::string_view key) const;  // "path.key"
  Context& context() const { return *ctx_; }

  // The value of `key`, marking it known; nullptr when absent, null, or dropped "auto".
  const nlohmann::json* get(std::string_view key);
  bool has(std::string_view key) { return get(key) != nullptr; }

  bool flag(std::string_view key, bool fallback);
  double number(std::string_view key, double fallback);
  std::optional<double> optional_number(std::string_view key);
  int64_t integer(std::string_view key, int64_t fallback);
  std::optional<int64_t> optional_integer(std::string_view key);
  std::string string(std::string_view key, const std::string& fallback);
  std::optional<std::string> optional_string(std::string_view key);
  std::vector<std::string> strings(std::string_view key);  // array of strings; absent = empty
  // One of `choices` (compared case-insensitively when `ignore_case`); returns its index.
  size_t choice(std::string_view key, const std::vector<std::string>& choices, size_t fallback,
                bool ignore_case = false);
  Section object(std::string_view key);  // absent = empty section

  // Range checks on a value read from `key` ("… must be >= 0"); a failed check is recorded.
  void at_least(std::string_view key, double value, double min);
  void greater_than(std::string_view key, double value, double min);

  [[noreturn]] void fail(std::string_view key, const std::string& what) const;  // records, abandons the section
  void error(std::string_view key, const std::string& what) const;              // records, goes on
  [[noreturn]] void type_error(std::string_view key, const nlohmann::json& value, const char* expected) const;
  void warn(std::string_view key, const std::string& what);

  // Reports every key that was never read: an error, or with `warn_only` a warning that it is
  // ignored (DeepSpeed ignores unknown top-level keys).
  void finish(bool warn_only = false) const;

 private:
  void accept(std::string_view key);  // mark known
  // The value at `key` converted by `convert`, or nullopt when absent or bad (the error recorded).
  template <typename T, typename Convert>
  std::optional<T> read(std::string_view key, Convert convert);

  Context* ctx_;
  const nlohmann::json* value_;  // an object, or nullptr
  std::string path_;
  bool drop_auto_;
  std::vector<std::string> known_;
};

// Value conversions with the same messages, for values not directly under a Section key.
double as_number(const Section& at, std::string_view key, const nlohmann::json& value);
int64_t as_integer(const Section& at, std::string_view key, const nlohmann::json& value);

}  // namespace ds::cfg
