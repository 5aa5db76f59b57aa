// ds::sdk::Config: a model plugin's view of the config's "model" block (part of the plugin SDK,
// ds_plugin_sdk.h). Typed getters with defaults name the key in every error; keys never asked
// for are reported after the model is built, with the closest known key.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace ds::sdk {

// A wrong "model" block: an unknown key, a value of the wrong type or out of range. The message
// names the key ("model.hidden: 0 is not >= 1"). Config throws it; a model's constructor throws it
// for values it rejects itself. create() returns DS_CONFIG_ERROR for it (dsworker: exit 2).
struct ConfigError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The config's "model" block. Each get() marks its key as known; after the model's constructor,
// create() rejects keys nobody read: `model.hiden: unknown key (did you mean 'hidden'?)`.
class Config {
 public:
  explicit Config(const std::string& json_text) {
    try {
      j_ = nlohmann::json::parse(json_text.empty() ? std::string("{}") : json_text);
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(std::string("model: config is not valid JSON: ") + e.what());
    }
    if (!j_.is_object()) throw ConfigError("model: config must be a JSON object, got " + j_.dump());
  }

  // The engine's "tensor_parallel": {"rank": r, "size": T} (ds_plugin.h), read into `tp`; absent: size 1.
  // Only a model that splits its parameters reads it: for the others it stays an unknown key.
  template <class TP>
  void tensor_parallel(TP& tp) {
    group("tensor_parallel", tp.rank, tp.size);
  }
  // The engine's "sequence_parallel": {"rank": s, "size": S} likewise, read by a model that splits sequences.
  template <class SP>
  void sequence_parallel(SP& sp) {
    group("sequence_parallel", sp.rank, sp.size);
  }

  bool has(const std::string& key) {
    known_.insert(key);
    return j_.contains(key);
  }
  // The value of `key`, or `fallback` when absent. A value of the wrong type throws, naming the key.
  template <class T>
  T get(const std::string& key, T fallback) {
    known_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (!it->is_number_integer()) throw bad(key, *it, "an integer");
      if constexpr (std::is_unsigned_v<T>) {
        if (it->is_number_integer() && !it->is_number_unsigned()) throw bad(key, *it, "a non-negative integer");
        const uint64_t v = it->template get<uint64_t>();
        if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) throw bad(key, *it, "a smaller integer");
        return static_cast<T>(v);
      } else {
        if (it->is_number_unsigned() &&
            it->template get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max()))
          throw bad(key, *it, "a smaller integer");
        const int64_t v = it->template get<int64_t>();
        if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
          throw bad(key, *it, "a smaller integer");
        return static_cast<T>(v);
      }
    } else {
      try {
        return it->template get<T>();
      } catch (const nlohmann::json::exception&) {
        throw bad(key, *it, std::is_same_v<T, bool>               ? "a boolean"
                            : std::is_floating_point_v<T>         ? "a number"
                            : std::is_same_v<T, std::string>      ? "a string"
                                                                  : "of the expected type");
      }
    }
  }
  // Like get(), but the value must be >= min.
  template <class T>
  T get_at_least(const std::string& key, T fallback, T min) {
    const T v = get<T>(key, fallback);
    if (v < min)
      throw ConfigError("model." + key + ": " + std::to_string(v) + " is not >= " + std::to_string(min));
    return v;
  }
  const nlohmann::json& json() const { return j_; }

  // Throws for the first key never asked for (called by DS_PLUGIN's create()).
  void check_unknown_keys() const {
    for (const auto& [key, value] : j_.items()) {
      if (known_.count(key)) continue;
      std::string msg = "model." + key + ": unknown key";
      std::string best;
      size_t best_d = 3;  // suggest only close matches
      for (const std::string& k : known_) {
        const size_t d = distance(key, k);
        if (d < best_d) best_d = d, best = k;
      }
      if (!best.empty()) msg += " (did you mean '" + best + "'?)";
      std::string all;
      for (const std::string& k : known_) all += (all.empty() ? "" : ", ") + k;
      throw ConfigError(msg + "; known keys: " + (all.empty() ? "none" : all));
    }
  }

 private:
  void group(const char* key, int32_t& rank, int32_t& size) {
    known_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return;
    const std::string where = std::string("model.") + key + ": ";
    if (!it->is_object() || !it->contains("rank") || !it->contains("size") || !(*it)["rank"].is_number_integer() ||
        !(*it)["size"].is_number_integer())
      throw ConfigError(where + it->dump() + " is not {\"rank\": r, \"size\": n}");
    rank = (*it)["rank"].template get<int32_t>();
    size = (*it)["size"].template get<int32_t>();
    if (size < 1 || rank < 0 || rank >= size)
      throw ConfigError(where + "rank " + std::to_string(rank) + " of " + std::to_string(size));
  }
  static ConfigError bad(const std::string& key, const nlohmann::json& v, const char* want) {
    return ConfigError("model." + key + ": " + v.dump() + " is not " + want);
  }
  static size_t distance(const std::string& a, const std::string& b) {  // Levenshtein
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
        diag = up;
      }
    }
    return row[b.size()];
  }
  nlohmann::json j_;
  std::set<std::string> known_;
};

}  // namespace ds::sdk
