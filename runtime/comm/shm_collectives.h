// Collectives among ranks on one host through one shared-memory segment per group, instead of TCP
// over loopback: each rank copies its data in once, reduces its own chunk from everyone's copies,
// and copies the results out. The chunk layout and the order in which each element is summed are
// ring.h's, so the results are bit-identical to the ring's, and each rank hands its peers the same
// bytes the ring would send them. The Gloo group uses it when every rank of the group shares this
// host's boot, network, PID and /dev/shm namespaces, unless DS_COMM_SHM=0 (a value other than 0 or
// 1 is an error at set-up). Internal to gloo_group.cpp. Every function blocks until this rank's
// part is done, returns the payload bytes this rank handed its peers, and throws when a peer left
// the group, exited, or made no progress for `timeout`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/ring.h"
#include "comm/store.h"

namespace ds::shm {

// Identifies what ranks must share for the segment to work; empty when unknown.
std::string host_identity();
// DS_COMM_SHM as set: "" (unset: on), "0" (TCP only) or "1"; any other value throws CommError naming it.
// Groups check it before connecting, so every rank refuses a bad value alike.
std::string setting_from_env();

class Collectives {
 public:
  // Collective over the group's `store` (keys under shm/): null on every rank, so that the group
  // keeps to TCP, unless all ranks share this host and every one could map the segment.
  static std::unique_ptr<Collectives> connect(Store& store, int rank, int size, Millis timeout);
  ~Collectives();  // tells peers still waiting on this rank that it has left
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  // Applied to this rank's reduced elements before its peers copy them (Avg's division).
  using FinishFn = std::function<void(void* data, size_t n)>;

  // In place: as ring reduce_scatter + allgather over `chunks` (ring::split); finish may be null.
  size_t allreduce(void* data, const ring::Layout& chunks, size_t elem, ring::ReduceFn reduce, const FinishFn& finish,
                   Millis timeout);
  // As ring::reduce_scatter: out = this rank's chunk of the reduction of every rank's `in`.
  size_t reduce_scatter(const void* in, void* out, const ring::Layout& chunks, size_t elem, ring::ReduceFn reduce,
                        Millis timeout);
  // As ring::allgather: in place, chunk `rank` of data is this rank's contribution.
  size_t allgather(void* data, const ring::Layout& chunks, size_t elem, Millis timeout);
  // As ring::broadcast: data[0..bytes) on every rank becomes root's.
  size_t broadcast(void* data, size_t bytes, int root, Millis timeout);

 private:
  struct Segment;
  Collectives(std::unique_ptr<Segment> segment, int rank, int size);

  // Starts the next piece: waits until every rank is done with the buffers it reuses.
  uint32_t begin_piece(Millis timeout);
  void publish(int flag, uint32_t seq);
  void wait_for(int peer, int flag, uint32_t seq, Millis timeout);
  void wait_all(int flag, uint32_t seq, Millis timeout);
  // out[0..count) = the sum of every rank's slot of piece `seq` from byte `at` on, in the ring's
  // order for this rank's chunk: rank r+1's, then r+2's, ..., then r's own.
  void reduce_own_chunk(void* out, uint32_t seq, size_t at, size_t count, ring::ReduceFn reduce) const;
  char* input(uint32_t seq, int rank) const;  // rank's copy-in slot for the piece
  char* result(uint32_t seq) const;           // the reduced piece

  std::unique_ptr<Segment> segment_;
  const int rank_, size_;
  uint32_t seq_ = 0;  // pieces started; every rank starts the same pieces in the same order
  int spins_ = 0;     // polls of a flag before sleeping on it
};

}  // namespace ds::shm
