// Distributed tests without a cluster: N ranks as threads of one process, meeting through one
// MemoryStore and talking through real Gloo groups over loopback TCP (gloo's own test harness does
// the same). Used by the tests of comm and of every module above it.
#pragma once
#include <chrono>
#include <functional>

#include "comm/process_group.h"

namespace ds {

// Runs body(group) on n threads, one per rank, each with its own Gloo group (127.0.0.1) whose
// set-up and collectives time out after `timeout`. Returns when every thread has ended; if any rank
// threw, rethrows the lowest failing rank's error as CommError("rank 2: <message>"). A rank that
// throws closes its group, so peers blocked on it fail instead of waiting for the timeout.
void run_ranks(int n, const std::function<void(ProcessGroup& group)>& body,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));
// The same, with the store the ranks share, for tests that make further groups (pipeline stages).
void run_ranks(int n, const std::function<void(ProcessGroup& group, std::shared_ptr<Store> store)>& body,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace ds
