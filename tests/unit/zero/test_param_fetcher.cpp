// Stage 3's parameter fetcher on 2 thread ranks: every layer acquired holds its gathered parameters;
// the gathers a step issues (the last layer kept between forward and backward, persistent layers
// gathered once after the step); prefetch within its limits; layers acquired out of order refused;
// chunks read in (parameter offload) in the order of the gathers, never more at once than the
// source's buffers, each released once its gather is done.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "comm/thread_ranks.h"
#include "zero/layout.h"
#include "zero/param_fetcher.h"

using namespace ds;
using namespace ds::zero;

namespace {

const std::vector<size_t> kLayers{5, 7, 3};  // padded at 2 ranks: 6, 8, 4

// Element k of the full buffer: its index + 1 inside a layer, 0 in the padding.
float full_value(const PartitionLayout& l, size_t unit, size_t k) {
  const Unit& u = l.units()[unit];
  return k < u.size ? static_cast<float>(u.begin + k + 1) : 0.0f;
}

// This rank's partition: its chunk of every unit.
std::vector<float> partition_of(const PartitionLayout& l) {
  std::vector<float> p(l.partition_size());
  for (size_t i = 0; i < l.units().size(); ++i) {
    const Unit& u = l.units()[i];
    for (size_t k = 0; k < u.chunk; ++k) p[u.part_offset + k] = full_value(l, i, static_cast<size_t>(l.rank()) * u.chunk + k);
  }
  return p;
}

// One step's uses (forward, then backward), checking every gathered layer; returns the wrong elements.
size_t run_step(ParamFetcher& f, const PartitionLayout& l) {
  std::vector<size_t> order{0, 1, 2, 2, 1, 0};
  size_t wrong = 0;
  for (size_t layer : order) {
    const auto* got = static_cast<const float*>(f.acquire(layer));
    for (size_t k = 0; k < l.units()[layer].padded(); ++k) wrong += got[k] != full_value(l, layer, k);
    f.release(layer);
  }
  f.end_step();
  return wrong;
}

// The partition, as if swapped: every chunk must be read in through `buffers` buffers. Records
// the reads and the most buffers held at once.
class ReadChunks final : public ChunkSource {
 public:
  ReadChunks(const PartitionLayout& l, const std::vector<float>& part, size_t buffers)
      : layout_(l), part_(part), buffers_(buffers) {}
  const std::byte* in_memory(size_t) const override { return nullptr; }
  bool can_read() const override { return held_.size() < buffers_; }
  void read(size_t unit) override {
    REQUIRE(can_read());
    held_.push_back(unit);
    reads.push_back(unit);
    most_held = std::max(most_held, held_.size());
  }
  const std::byte* wait(size_t unit) override {
    REQUIRE(std::find(held_.begin(), held_.end(), unit) != held_.end());
    return reinterpret_cast<const std::byte*>(part_.data() + layout_.units()[unit].part_offset);
  }
  void release(size_t unit) override {
    auto it = std::find(held_.begin(), held_.end(), unit);
    REQUIRE(it != held_.end());
    held_.erase(it);
  }
  size_t held() const { return held_.size(); }

  std::vector<size_t> reads;
  size_t most_held = 0;

 private:
  const PartitionLayout& layout_;
  const std::vector<float>& part_;
  size_t buffers_;
  std::vector<size_t> held_;
};

}  // namespace

TEST_CASE("param fetcher: gathered layers, and the gathers of a step with and without persistent layers") {
  run_ranks(2, [](ProcessGroup& g) {
    const PartitionLayout l(kLayers, 1, true, g.size(), g.rank());
    const std::vector<float> part = partition_of(l);
    MemoryChunks chunks(l, part.data(), sizeof(float));
    {
      ParamFetcher f(l, g, chunks, amp::Storage::F32, FetchLimits{0, 1'000'000, 0, 0}, 1);  // no prefetch
      const uint64_t before = g.comms().stats("allgather").count;
      CHECK(run_step(f, l) == 0);
      CHECK(run_step(f, l) == 0);
      // 0, 1, 2 forward; 2 kept for backward; 1, 0: five gathers a step.
      CHECK(g.comms().stats("allgather").count - before == 10);
    }
    {
      // Layer 2 (3 elements) persistent: gathered at construction and after each step, never per use.
      const uint64_t before = g.comms().stats("allgather").count;
      ParamFetcher f(l, g, chunks, amp::Storage::F32, FetchLimits{0, 1'000'000, 3, 100}, 1);
      CHECK(f.persistent_bytes() == 4 * sizeof(float));
      CHECK(run_step(f, l) == 0);
      CHECK(g.comms().stats("allgather").count - before == 1 + 4 + 1);
    }
  });
}

TEST_CASE("param fetcher: prefetch stays within its limits and the live cap") {
  run_ranks(2, [](ProcessGroup& g) {
    const PartitionLayout l(kLayers, 1, true, g.size(), g.rank());
    const std::vector<float> part = partition_of(l);
    MemoryChunks chunks(l, part.data(), sizeof(float));
    // Unlimited prefetch: the first acquire gathers the whole model at once.
    ParamFetcher all(l, g, chunks, amp::Storage::F32, FetchLimits{1'000'000, 1'000'000, 0, 0}, 1);
    CHECK(run_step(all, l) == 0);
    CHECK(all.pooled_bytes() >= (6 + 8 + 4) * sizeof(float));
    // At most 8 live elements: the layer in use plus what fits beside it, never the whole model.
    ParamFetcher capped(l, g, chunks, amp::Storage::F32, FetchLimits{1'000'000, 8, 0, 0}, 1);
    CHECK(run_step(capped, l) == 0);
    CHECK(capped.pooled_bytes() < (6 + 8 + 4) * sizeof(float));
  });
}

TEST_CASE("param fetcher: a layer acquired out of order is refused") {
  run_ranks(2, [](ProcessGroup& g) {
    const PartitionLayout l(kLayers, 1, true, g.size(), g.rank());
    const std::vector<float> part = partition_of(l);
    MemoryChunks chunks(l, part.data(), sizeof(float));
    ParamFetcher f(l, g, chunks, amp::Storage::F32, FetchLimits{0, 1'000'000, 0, 0}, 1);
    CHECK_THROWS_WITH_AS(f.acquire(1), "ParamFetcher: layer 1 acquired out of order", std::logic_error);
    f.acquire(0);
    CHECK_THROWS_WITH_AS(f.release(1), "ParamFetcher: layer 1 released out of order", std::logic_error);
    f.release(0);
  });
}

TEST_CASE("param fetcher: chunks read in the order of the gathers, within the buffers, and released") {
  run_ranks(2, [](ProcessGroup& g) {
    const PartitionLayout l(kLayers, 1, true, g.size(), g.rank());
    const std::vector<float> part = partition_of(l);
    for (size_t buffers : {1, 2, 3}) {
      for (int64_t prefetch : {int64_t{0}, int64_t{1'000'000}}) {
        CAPTURE(buffers);
        CAPTURE(prefetch);
        ReadChunks chunks(l, part, buffers);
        {
          ParamFetcher f(l, g, chunks, amp::Storage::F32, FetchLimits{prefetch, 1'000'000, 0, 0}, 1);
          CHECK(run_step(f, l) == 0);
          CHECK(run_step(f, l) == 0);
        }
        // Each step gathers 0, 1, 2, then 1, 0 (2 kept for backward); the last step's end reads the
        // next step's first chunks ahead, which the fetcher drops when it goes.
        const std::vector<size_t> step{0, 1, 2, 1, 0};
        std::vector<size_t> expected = step;
        expected.insert(expected.end(), step.begin(), step.end());
        expected.insert(expected.end(), step.begin(), step.begin() + static_cast<std::ptrdiff_t>(buffers));
        CHECK(chunks.reads == expected);
        CHECK(chunks.most_held == buffers);
        CHECK(chunks.held() == 0);
      }
    }
  });
}
