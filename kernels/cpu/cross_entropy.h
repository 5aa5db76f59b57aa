// Softmax cross-entropy over classes with int32 labels, the loss of a classifier.
//   logits [rows, classes] fp32, row-major; labels [rows] int32 in [0, classes)
//   loss = (1/rows) Σ_r ( logsumexp(logits[r,:]) − logits[r, labels[r]] )
// Forward stores stats[r] = {m_r, s_r}, m_r = max_c logits[r,c], s_r = log Σ_c exp(logits[r,c] − m_r)
// (2·rows floats: the layer's workspace), which is all backward needs besides the logits:
//   dlogits[r,c] = (exp(logits[r,c] − m_r − s_r) − [c == labels[r]]) · g / rows   (OVERWRITTEN)
// where g = d(total)/d(loss). Stability: the max is subtracted before exp, and it is kept apart
// from s_r so that large logits (|x| ~ 1000, where fp32 has 6e-5 spacing) lose no precision.
// Accumulation: each row's Σexp and the mean over rows are summed in double and rounded once,
// which costs nothing next to the exps and keeps the loss accurate for any row count.
// A label outside [0, classes) throws std::out_of_range naming the row and the value.
// Non-finite logits propagate (NaN loss), so overflow detection downstream sees them.
#pragma once
#include <cstdint>

namespace ds::cpu {

// Returns the mean loss; writes stats[rows, 2].
float cross_entropy_forward(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                            float* stats);
float cross_entropy_forward_reference(const float* logits, const int32_t* labels, int64_t rows,
                                      int64_t classes, float* stats);

// dlogits[rows, classes] from logits, labels, stats (from forward) and g.
void cross_entropy_backward(const float* logits, const int32_t* labels, const float* stats, float g,
                            int64_t rows, int64_t classes, float* dlogits);
void cross_entropy_backward_reference(const float* logits, const int32_t* labels, const float* stats,
                                      float g, int64_t rows, int64_t classes, float* dlogits);

}  // namespace ds::cpu
