// A test-only NcclApi: "device" memory is host memory, a stream is a worker thread running its
// tasks in order (the default stream, nullptr: one such thread for the process), an event is a flag
// set by its stream (a stream told to wait for it runs nothing more until then), and the NCCL
// collectives run on a Gloo group of the communicator's ranks (thread ranks of this process, which
// share the unique id's in-memory store). Like NCCL in non-blocking mode, every collective first answers ncclInProgress
// and settles at the next ncclCommGetAsyncError; a failed collective leaves its error there. So
// the NCCL process group runs end to end in ctest, failures included, without a GPU.
#pragma once
#include <chrono>
#include <functional>

#include "comm/nccl_api.h"

namespace ds::test {

const NcclApi& fake_nccl_api();

// How long the fake's Gloo collectives wait for a missing peer (default 10 s).
void set_fake_nccl_timeout(std::chrono::milliseconds timeout);

// Queues `work` on the default stream, as a kernel launched there: it runs later, on the stream's thread.
void run_on_fake_default_stream(std::function<void()> work);

}  // namespace ds::test
