// One chunk of causal attention's queries, as the GEMM form (attention.cpp) forms the scores: per
// head the queries [first, first + rows) against the keys [0, first + rows), the chunk's causal
// prefix (every key after the chunk is masked for all of its rows, so its scores are never formed).
// The chunk's scores are dense blocks [heads, rows, width()]; row r of such a block is head r / rows,
// query query(r), and its softmax stats are row stats_row(r) of stats [heads·T, 2].
#pragma once
#include <cstdint>

#include "simt/hd.h"

namespace ds::cuda {

struct QueryChunk {
  int64_t T;      // the sequence length
  int64_t first;  // the chunk's first query
  int64_t rows;   // its queries per head, 1..T - first

  DS_HD int64_t width() const { return first + rows; }
  DS_HD int64_t query(int64_t r) const { return first + r % rows; }
  DS_HD int64_t stats_row(int64_t r) const { return (r / rows) * T + query(r); }
};

// The queries per chunk for sequence length T: T split into about T/256 chunks (4 to 16), rounded up to
// whole 16-row tiles. Chunks cut the products' work to (n + 1)/2n of the whole T×T (62.5% for 4, 53%
// for 16); more of them would mean more, smaller GEMMs and more launches.
inline int64_t attention_query_rows(int64_t T) {
  const int64_t chunks = T / 256 < 4 ? 4 : T / 256 > 16 ? 16 : T / 256;
  const int64_t rows = (T + chunks - 1) / chunks;
  return (rows + 15) / 16 * 16;
}

}  // namespace ds::cuda
