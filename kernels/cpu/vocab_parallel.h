// Vocabulary-parallel embedding and cross-entropy (Megatron's VocabParallelEmbedding and
// vocab_parallel_cross_entropy), for tensor parallelism: each rank of the group holds classes
// [first, first + classes) of a vocabulary of `vocab`: those rows of the token embedding, those columns
// of the logits. What the ranks compute, summed or max-reduced over the group where said, is the whole
// vocabulary's result (embedding.h, cross_entropy.h); those whole-vocabulary kernels are the reference
// the tests combine shards against.
//
//   embedding:  out[n, :] = wte_rows[tokens[n] − first, :] for tokens in the shard, 0 for the others
//               (SUM over the group: the lookup); backward dwte_rows[tokens[n] − first, :] += dout[n, :]
//               for the shard's tokens (ACCUMULATED), positions in order.
//   cross-entropy, stats [3, n] (the layer's workspace), in three steps with two all-reduces between:
//     shard_max:    stats[0] = max of the row's shard logits (then all-reduce MAX: M),
//                   stats[1] = the label's logit if it is in the shard, else 0 (then all-reduce SUM);
//     shard_sumexp: stats[2] = Σ_c exp(logits[r, c] − M) (then all-reduce SUM: S);
//     shard_loss:   loss = (1/n) Σ_r (log S_r + M_r − picked_r);
//     backward:     dlogits[r, c] = (exp(logits[r, c] − M_r) / S_r − [first + c == label_r]) · g / n (OVERWRITTEN).
// Sums and exps run in double and round once (the row bodies: vocab_parallel_row.h, shared with the CUDA
// kernels). A token or label outside [0, vocab) throws std::out_of_range naming
// its position and value before anything is written. A NaN logit gives a NaN max, so a NaN loss.
#pragma once
#include <cstdint>

namespace ds::cpu {

void embedding_rows_forward(const int32_t* tokens, const float* wte_rows, float* out, int64_t n, int64_t C,
                            int64_t first, int64_t rows, int64_t vocab);
void embedding_rows_backward(const int32_t* tokens, const float* dout, float* dwte_rows, int64_t n, int64_t C,
                             int64_t first, int64_t rows, int64_t vocab);

void cross_entropy_shard_max(const float* logits, const int32_t* labels, int64_t n, int64_t classes, int64_t first,
                             int64_t vocab, float* stats);
void cross_entropy_shard_sumexp(const float* logits, int64_t n, int64_t classes, float* stats);
float cross_entropy_shard_loss(const float* stats, int64_t n);
void cross_entropy_shard_backward(const float* logits, const int32_t* labels, const float* stats, float g, int64_t n,
                                  int64_t classes, int64_t first, float* dlogits);

}  // namespace ds::cpu
