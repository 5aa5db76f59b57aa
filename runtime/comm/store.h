// The rendezvous key-value store. Rank 0 serves it over TCP at MASTER_ADDR:MASTER_PORT (TcpStore);
// every rank, rank 0 included, is a client. Values are raw bytes. Every connection must present the
// job token (DS_JOB_TOKEN); a wrong or missing token is refused, and the server logs the refusal.
// MemoryStore is the same interface in one process, for the thread-ranks test harness.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ds {

using Millis = std::chrono::milliseconds;

class Store {
 public:
  virtual ~Store() = default;
  // Sets key to value (overwrites). Blocking until acknowledged.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of key, waiting up to `timeout` for it to be set. Throws CommError on timeout.
  virtual std::string get(const std::string& key, Millis timeout) = 0;
  // Waits until every key exists. Throws CommError naming the missing keys on timeout.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // Atomically adds delta to the integer counter at key (created at 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Removes key; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;
};

// A store shared by threads of one process (tests).
std::shared_ptr<Store> make_memory_store();

// Rank 0's server: listens on `port` on all interfaces (port 0: any free port), serving from a
// background thread until destroyed. Throws CommError naming the port if it is in use.
class TcpStoreServer {
 public:
  virtual ~TcpStoreServer() = default;
  virtual int port() const = 0;  // the port it listens on
};
std::unique_ptr<TcpStoreServer> serve_tcp_store(int port, const std::string& token);

// A client of the server at host:port, retrying the connection until `connect_timeout`.
// Throws CommError if it cannot connect in time or the token is refused. Safe to share between
// threads (one connection per concurrent request). set/add/remove fail after `connect_timeout`
// without a reply; get/wait after their own timeout; a server that goes away fails at once.
std::shared_ptr<Store> connect_tcp_store(const std::string& host, int port, const std::string& token,
                                         Millis connect_timeout);

}  // namespace ds
