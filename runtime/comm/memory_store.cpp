// MemoryStore: the Store interface over a map guarded by a mutex, for threads of one process.
// Waiters block on a condition variable that every set/add wakes.
#include <condition_variable>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/store.h"
#include "comm/wire.h"
#include "core/errors.h"

namespace ds {
namespace {

class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard lock(mutex_);
      map_[key] = value;
    }
    changed_.notify_all();
  }

  std::string get(const std::string& key, Millis timeout) override {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_until(lock, wire::deadline_after(timeout), [&] { return map_.count(key) > 0; }))
      throw CommError(fmt::format("store: get '{}' timed out after {}", key, wire::format_duration(timeout)));
    return map_.at(key);
  }

  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    std::unique_lock lock(mutex_);
    auto missing = [&] {
      std::vector<std::string> out;
      for (const auto& k : keys)
        if (!map_.count(k)) out.push_back(k);
      return out;
    };
    if (!changed_.wait_until(lock, wire::deadline_after(timeout), [&] { return missing().empty(); }))
      throw CommError(fmt::format("store: wait timed out after {}; missing keys: {}", wire::format_duration(timeout),
                                  fmt::join(missing(), ", ")));
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t value = 0;
    {
      std::lock_guard lock(mutex_);
      auto it = map_.find(key);
      if (it != map_.end()) value = wire::parse_counter(key, it->second);
      value += delta;
      map_[key] = std::to_string(value);
    }
    changed_.notify_all();
    return value;
  }

  bool remove(const std::string& key) override {
    std::lock_guard lock(mutex_);
    return map_.erase(key) > 0;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> map_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

}  // namespace ds
