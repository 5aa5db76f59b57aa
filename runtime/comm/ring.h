// The collective algorithms of the Gloo group, over Gloo's unbound buffers (send/recv by slot) —
// ours rather than Gloo's so that the bytes each rank sends are known exactly and the reduction
// order is fixed (bit-identical results on every rank and every run). Internal to gloo_group.cpp.
// Every function blocks until this rank's part is done, returns the payload bytes this rank sent,
// and throws on a transport error or when `timeout` passes without progress.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/store.h"

namespace gloo {
class Context;
}

namespace ds::ring {

// A Gloo exception's message without its "[file.cc:123] " prefix.
std::string clean_error(const char* what);

// Chunk i of a buffer spans elements [offset[i], offset[i] + count[i]).
struct Layout {
  std::vector<size_t> offset, count;
};
Layout equal_chunks(size_t count, int n);  // n chunks of `count` (reduce_scatter, allgather)
Layout split(size_t count, int n);         // `count` split as evenly as possible (allreduce)

// out = a ⊕ b elementwise over n elements (out may alias a or b).
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// Ring reduce-scatter: out[0..count[rank]) = ⊕ over ranks of their in chunk `rank`. n-1 steps;
// sends every chunk but one's own: (n-1)/n of the input when chunks are equal.
size_t reduce_scatter(gloo::Context& ctx, const void* in, void* out, const Layout& chunks, size_t elem,
                      ReduceFn reduce, Millis timeout);
// Ring allgather in place: data's chunk `rank` is this rank's contribution; afterwards every chunk
// holds its owner's. Sends (n-1)/n of the buffer when chunks are equal.
size_t allgather(gloo::Context& ctx, void* data, const Layout& chunks, size_t elem, Millis timeout);
// Binomial-tree broadcast of bytes from root, in place: ceil(log2 n) rounds.
size_t broadcast(gloo::Context& ctx, void* data, size_t bytes, int root, Millis timeout);

}  // namespace ds::ring
