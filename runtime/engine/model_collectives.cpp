// The split model's collectives (model_collectives.h). The all-to-alls stage their chunks so that
// chunk j goes to sequence-parallel rank j: seq_to_heads sends rank j piece j of every column block
// of this rank's positions, and places what rank i sends at positions [i·T, (i+1)·T); seq_to_sequence
// undoes it.
#include "engine/model_collectives.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace ds {
namespace {

template <class Fn>
ds_status guarded(const char* what, Fn&& fn) noexcept {
  try {
    fn();
    return DS_OK;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsworker: %s: %s\n", what, e.what());
    return DS_ERROR;
  }
}

// The shape of one all-to-all: x [B, T, K] on each of S ranks, K = blocks · S · w.
struct Layout {
  size_t B, T, K, blocks, S, w;
  Layout(int64_t b, int64_t t, int64_t k, int32_t nb, int s) {
    if (b < 1 || t < 1 || nb < 1 || k % (static_cast<int64_t>(nb) * s) != 0)
      throw std::invalid_argument(fmt::format("sequence-parallel all-to-all: [{}, {}, {}] in {} blocks over {} ranks",
                                              b, t, k, nb, s));
    B = static_cast<size_t>(b), T = static_cast<size_t>(t), K = static_cast<size_t>(k);
    blocks = static_cast<size_t>(nb), S = static_cast<size_t>(s), w = K / (blocks * S);
  }
  size_t chunk() const { return B * T * K / S; }  // floats to or from one rank
};

void exchange(ModelGroups& g, const Layout& l) {
  g.recv.resize(g.send.size());
  g.sequence->alltoall(g.send.data(), g.recv.data(), l.chunk(), DataType::F32);
}

void to_heads(ModelGroups& g, const float* x, float* y, const Layout& l) {
  g.send.resize(l.chunk() * l.S);
  for (size_t j = 0; j < l.S; ++j)  // chunk j: piece j of every block, [B, T, blocks, w]
    for (size_t bt = 0; bt < l.B * l.T; ++bt)
      for (size_t blk = 0; blk < l.blocks; ++blk)
        std::memcpy(&g.send[j * l.chunk() + (bt * l.blocks + blk) * l.w], x + bt * l.K + (blk * l.S + j) * l.w,
                    l.w * sizeof(float));
  exchange(g, l);
  const size_t row = l.K / l.S;  // y [B, S·T, K/S]: rank i's positions come i·T on
  for (size_t i = 0; i < l.S; ++i)
    for (size_t b = 0; b < l.B; ++b)
      std::memcpy(y + (b * l.S * l.T + i * l.T) * row, &g.recv[i * l.chunk() + b * l.T * row], l.T * row * sizeof(float));
}

void to_sequence(ModelGroups& g, const float* y, float* x, const Layout& l) {
  g.send.resize(l.chunk() * l.S);
  const size_t row = l.K / l.S;
  for (size_t i = 0; i < l.S; ++i)  // chunk i: rank i's positions, [B, T, K/S]
    for (size_t b = 0; b < l.B; ++b)
      std::memcpy(&g.send[i * l.chunk() + b * l.T * row], y + (b * l.S * l.T + i * l.T) * row, l.T * row * sizeof(float));
  exchange(g, l);
  for (size_t j = 0; j < l.S; ++j)  // from rank j: piece j of every block of this rank's positions
    for (size_t bt = 0; bt < l.B * l.T; ++bt)
      for (size_t blk = 0; blk < l.blocks; ++blk)
        std::memcpy(x + bt * l.K + (blk * l.S + j) * l.w, &g.recv[j * l.chunk() + (bt * l.blocks + blk) * l.w],
                    l.w * sizeof(float));
}

}  // namespace

ds_collectives model_collectives(ModelGroups& groups) {
  ds_collectives c{};
  c.ctx = &groups;
  if (groups.tensor != nullptr) {
    c.allreduce_sum = [](void* ctx, float* data, int64_t n) noexcept {
      return guarded("tensor-parallel all-reduce", [&] {
        static_cast<ModelGroups*>(ctx)->tensor->allreduce(data, static_cast<size_t>(n), DataType::F32, ReduceOp::Sum);
      });
    };
    c.allreduce_max = [](void* ctx, float* data, int64_t n) noexcept {
      return guarded("tensor-parallel all-reduce", [&] {
        static_cast<ModelGroups*>(ctx)->tensor->allreduce(data, static_cast<size_t>(n), DataType::F32, ReduceOp::Max);
      });
    };
    c.allgather = [](void* ctx, const float* in, float* out, int64_t n) noexcept {
      return guarded("tensor-parallel all-gather", [&] {
        static_cast<ModelGroups*>(ctx)->tensor->allgather(in, out, static_cast<size_t>(n), DataType::F32);
      });
    };
  }
  if (groups.sequence != nullptr) {
    c.seq_to_heads = [](void* ctx, const float* x, float* y, int64_t B, int64_t T, int64_t K, int32_t blocks) noexcept {
      return guarded("sequence-parallel all-to-all", [&] {
        auto& g = *static_cast<ModelGroups*>(ctx);
        to_heads(g, x, y, Layout(B, T, K, blocks, g.sequence->size()));
      });
    };
    c.seq_to_sequence = [](void* ctx, const float* y, float* x, int64_t B, int64_t T, int64_t K, int32_t blocks) noexcept {
      return guarded("sequence-parallel all-to-all", [&] {
        auto& g = *static_cast<ModelGroups*>(ctx);
        to_sequence(g, y, x, Layout(B, T, K, blocks, g.sequence->size()));
      });
    };
  }
  return c;
}

}  // namespace ds
