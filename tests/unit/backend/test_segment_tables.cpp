// SegmentTables (runtime/backend/segment_tables.h) over host memory: a table is uploaded once for its
// segments and found again after, holds segment_table()'s bytes, is told apart from another kind's
// segments with the same bytes, and the one used longest ago is released when the capacity is reached.
// On the emulated CUDA backend: a multi-tensor call with the same tensors uploads nothing again and gives
// the same update as one call per tensor.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/segment_tables.h"
#include "cpu/adam_element.h"

namespace {

using ds::backend::SegmentTables;
using ds::cuda::AdamSegment;
using ds::cuda::RoundSegment;
using ds::cuda::SquaresSegment;

struct HostMemory {  // the tables' blocks, and the ones released
  std::map<void*, std::unique_ptr<std::byte[]>> blocks;
  std::vector<void*> released;
  size_t uploads = 0;
  SegmentTables::Memory memory() {
    return {[this](size_t bytes) {
              auto block = std::make_unique<std::byte[]>(bytes);
              void* p = block.get();
              blocks[p] = std::move(block);
              return p;
            },
            [this](void* p) { released.push_back(p); },
            [this](void* dst, const void* src, size_t bytes) {
              ++uploads;
              if (bytes > 0) std::memcpy(dst, src, bytes);  // (an empty table's source may be null)
            }};
  }
};

template <class Segment>
bool holds(const void* table, const std::vector<Segment>& segments) {
  const std::vector<std::byte> expected = ds::cuda::segment_table(segments.data(), segments.size());
  return table != nullptr && (expected.empty() || std::memcmp(table, expected.data(), expected.size()) == 0);
}

}  // namespace

TEST_CASE("segment tables: uploaded once per segments, found again, released the least recently used first") {
  HostMemory host;
  SegmentTables tables(host.memory(), 2);
  // (addresses the tables never read: the middle one's value is a size when the bytes are read as RoundSegments)
  float* const x = reinterpret_cast<float*>(uintptr_t{1} << 40);
  const std::vector<SquaresSegment> a = {{x, 5000}, {reinterpret_cast<float*>(uintptr_t{4100}), 300}, {x + 5000, 16}};
  std::vector<SquaresSegment> b = a;
  b[0].n = 4999;  // the same tensors but one element
  const void* ta = tables.find(a.data(), a.size());
  CHECK(holds(ta, a));
  CHECK(tables.find(a.data(), a.size()) == ta);
  CHECK(host.uploads == 1);
  const void* tb = tables.find(b.data(), b.size());
  CHECK(tb != ta);
  CHECK(holds(tb, b));
  CHECK(host.uploads == 2);

  // Another kind's segments with a's bytes: a table of its own.
  std::vector<RoundSegment> same_bytes(a.size() * sizeof(SquaresSegment) / sizeof(RoundSegment));
  REQUIRE(same_bytes.size() * sizeof(RoundSegment) == a.size() * sizeof(SquaresSegment));
  std::memcpy(same_bytes.data(), a.data(), a.size() * sizeof(SquaresSegment));
  CHECK(tables.find(a.data(), a.size()) == ta);  // (a used last: b goes first)
  const void* tr = tables.find(same_bytes.data(), same_bytes.size());
  CHECK(tr != ta);
  CHECK(host.uploads == 3);
  CHECK(host.released == std::vector<void*>{const_cast<void*>(tb)});
  CHECK(tables.size() == 2);
  CHECK(tables.find(a.data(), a.size()) == ta);  // kept
  CHECK(host.uploads == 3);
  tables.find(b.data(), b.size());  // back: the round table goes
  CHECK(host.uploads == 4);
  CHECK(host.released.back() == tr);
  CHECK(tables.uploads() == 4);

  const std::vector<AdamSegment> none;
  CHECK(holds(tables.find(none.data(), 0), none));  // an empty table is a table too (no blocks: no launch)
}

TEST_CASE("segment tables (emulated CUDA): AdamW over the same tensors uploads its table once, the per-tensor bits") {
  ds::backend::Cuda cuda(0);
  const std::vector<size_t> sizes = {3, 4096, 5000};
  std::vector<void*> allocated;  // released at the end
  auto device_floats = [&](size_t n, float base) {
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = base + 0.001f * static_cast<float>(i % 97);
    auto* p = static_cast<float*>(cuda.allocate(n * sizeof(float)));
    allocated.push_back(p);
    cuda.to_device(p, host.data(), n * sizeof(float));
    return p;
  };
  struct Tensors {
    std::vector<float*> p, g, m, v;
  };
  auto make = [&] {
    Tensors t;
    for (size_t n : sizes) {
      t.p.push_back(device_floats(n, 0.5f));
      t.g.push_back(device_floats(n, -0.25f));
      t.m.push_back(device_floats(n, 0.0f));
      t.v.push_back(device_floats(n, 0.0f));
    }
    return t;
  };
  Tensors multi = make(), single = make();
  std::vector<ds::backend::Device::AdamTensor> all;
  for (size_t k = 0; k < sizes.size(); ++k) all.push_back({multi.p[k], multi.g[k], multi.m[k], multi.v[k], sizes[k]});
  const ds::cpu::AdamArgs args{0.9f, 0.999f, 1e-8f, 0.0f, -1e-2f, 1.0f, -1e-3f};
  const size_t before = cuda.table_uploads();
  for (int step = 1; step <= 3; ++step) {
    cuda.adam_steps(all, args, true);
    for (size_t k = 0; k < sizes.size(); ++k)
      cuda.adam_step(single.p[k], single.g[k], single.m[k], single.v[k], sizes[k], args, true);
  }
  CHECK(cuda.table_uploads() == before + 1);
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<float> a(sizes[k]), b(sizes[k]);
    cuda.to_host(a.data(), multi.p[k], a.size() * sizeof(float));
    cuda.to_host(b.data(), single.p[k], b.size() * sizeof(float));
    CHECK(a == b);
    CHECK(a[0] != 0.5f);
  }
  all.pop_back();  // other tensors: another table
  cuda.adam_steps(all, args, true);
  CHECK(cuda.table_uploads() == before + 2);
  for (void* p : allocated) cuda.release(p);
}
