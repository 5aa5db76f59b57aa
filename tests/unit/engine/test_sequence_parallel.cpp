// Sequence parallelism's pieces on their own: the all-to-alls the gpt plugin calls around attention
// (DeepSpeed-Ulysses' layout: rank r gets piece r of every column block, the whole sequence, rank i's
// positions at i·T) and their inverse, over real Gloo groups of 2 and 4 ranks; and the sequence chunks
// the data is cut into and predictions are joined from.
#include <doctest/doctest.h>

#include <vector>

#include "comm/thread_ranks.h"
#include "engine/model_collectives.h"
#include "engine/sequence_slice.h"

using namespace ds;

namespace {

// A value that says where it came from: batch row, position in the whole sequence, column.
float tag(size_t b, size_t position, size_t column) { return static_cast<float>(b * 10000 + position * 100 + column); }

}  // namespace

TEST_CASE("sequence parallelism: the all-to-all gives each rank its heads over the whole sequence, and back") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    const size_t B = 2, T = 3, blocks = 3, w = 2, S = static_cast<size_t>(ranks), K = blocks * S * w;
    run_ranks(ranks, [&](ProcessGroup& group) {
      const size_t me = static_cast<size_t>(group.rank());
      std::vector<float> x(B * T * K), y(B * S * T * K / S), back(x.size());
      for (size_t b = 0; b < B; ++b)
        for (size_t t = 0; t < T; ++t)
          for (size_t k = 0; k < K; ++k) x[(b * T + t) * K + k] = tag(b, me * T + t, k);
      ModelGroups groups;
      groups.sequence = &group;
      const ds_collectives c = model_collectives(groups);
      CHECK(!c.allreduce_sum);  // no tensor parallelism
      REQUIRE(c.seq_to_heads(c.ctx, x.data(), y.data(), B, T, K, blocks) == DS_OK);
      bool placed = true;  // y [B, S·T, blocks·w]: piece `me` of each block, every position
      for (size_t b = 0; b < B; ++b)
        for (size_t p = 0; p < S * T; ++p)
          for (size_t blk = 0; blk < blocks; ++blk)
            for (size_t i = 0; i < w; ++i)
              placed &= y[(b * S * T + p) * blocks * w + blk * w + i] == tag(b, p, (blk * S + me) * w + i);
      CHECK(placed);
      REQUIRE(c.seq_to_sequence(c.ctx, y.data(), back.data(), B, T, K, blocks) == DS_OK);
      CHECK(back == x);  // the round trip is the identity, as DeepSpeed's own Ulysses test asserts
      CHECK(c.seq_to_heads(c.ctx, x.data(), y.data(), B, T, K + 1, blocks) == DS_ERROR);  // K not in whole pieces
    });
  }
}

TEST_CASE("sequence parallelism: samples are cut into chunks of positions, and chunks join back") {
  const int64_t n = 2, L = 6, inner = 2;
  std::vector<int32_t> whole(static_cast<size_t>(n * L * inner));
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<int32_t>(i);
  std::vector<int32_t> chunks(whole.size()), joined(whole.size());
  const size_t chunk = whole.size() / 3;
  for (int r = 0; r < 3; ++r)
    take_sequence_chunk(whole.data(), chunks.data() + static_cast<size_t>(r) * chunk, n, L, inner, sizeof(int32_t), r, 3);
  CHECK(chunks[0] == 0);
  CHECK(chunks[4] == 12);  // rank 0, sample 1: positions 0-1 of the second sample
  CHECK(chunks[chunk] == 4);  // rank 1 starts at position 2
  join_sequence_chunks(chunks.data(), joined.data(), n, L, inner, sizeof(int32_t), 3);
  CHECK(joined == whole);
}
