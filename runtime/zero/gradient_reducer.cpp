// Gradient reduction per unit, overlapped with backward (see gradient_reducer.h).
#include "zero/gradient_reducer.h"

#include <algorithm>

namespace ds::zero {

GradientReducer::GradientReducer(const PartitionLayout& layout, ProcessGroup& group, int stage, Averaging averaging,
                                 bool overlap)
    : layout_(layout), group_(group), stage_(stage), max_in_flight_(overlap ? 1 : 0) {
  const double world = group.size();
  if (group.size() > 1) {
    pre_ = averaging.prescale ? 1.0 / world : 1.0 / averaging.predivide_factor;
    post_ = averaging.prescale ? 1.0 : averaging.predivide_factor / world;
  }
  grads_.assign(stage <= 1 ? layout.full_size() : layout.partition_size(), 0.0f);
}

GradientReducer::~GradientReducer() {
  for (auto& f : in_flight_) {  // a step that failed half-way: no reduction may outlive its buffer
    try {
      f.work->wait();
    } catch (...) {
    }
  }
}

void GradientReducer::scale(float* data, size_t n, double factor) {
  if (factor == 1.0) return;
  for (size_t k = 0; k < n; ++k) data[k] = static_cast<float>(data[k] * factor);
}

void GradientReducer::begin_step() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

float* GradientReducer::unit_grads(size_t unit) {
  const Unit& u = layout_.units()[unit];
  if (stage_ <= 1) return grads_.data() + u.begin;
  if (bucket_unit_ != unit) {
    bucket_ = pool_.acquire(u.padded());
    std::fill(bucket_.begin(), bucket_.end(), 0.0f);
    bucket_unit_ = unit;
  }
  return bucket_.data();
}

void GradientReducer::unit_done(size_t unit, bool last) {
  const Unit& u = layout_.units()[unit];
  const bool single = group_.size() == 1;
  if (stage_ <= 1) {
    if (!last || single || u.size == 0) return;
    float* data = grads_.data() + u.begin;
    scale(data, u.padded(), pre_);
    in_flight_.push_back({unit, {}, stage_ == 0
                                        ? group_.allreduce_async(data, u.padded(), DataType::F32, ReduceOp::Sum)
                                        : group_.reduce_scatter_async(data, grads_.data() + layout_.owned_begin(u),
                                                                      u.chunk, DataType::F32, ReduceOp::Sum)});
    return;
  }
  std::vector<float> bucket = std::move(bucket_);
  bucket_unit_ = SIZE_MAX;
  if (single || u.size == 0) {  // nothing to reduce: the bucket is this rank's chunk
    std::transform(bucket.begin(), bucket.end(), grads_.begin() + u.part_offset, grads_.begin() + u.part_offset,
                   [](float g, float sum) { return sum + g; });
    pool_.release(std::move(bucket));
    return;
  }
  scale(bucket.data(), bucket.size(), pre_);
  float* mine = bucket.data() + static_cast<size_t>(layout_.rank()) * u.chunk;
  auto work = group_.reduce_scatter_async(bucket.data(), mine, u.chunk, DataType::F32, ReduceOp::Sum);
  in_flight_.push_back({unit, std::move(bucket), std::move(work)});
  while (in_flight_.size() > max_in_flight_) complete_oldest();
}

void GradientReducer::complete_oldest() {
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  f.work->wait();
  if (stage_ <= 1) return;
  const Unit& u = layout_.units()[f.unit];
  const float* mine = f.bucket.data() + static_cast<size_t>(layout_.rank()) * u.chunk;
  float* sum = grads_.data() + u.part_offset;
  for (size_t k = 0; k < u.chunk; ++k) sum[k] += mine[k];
  pool_.release(std::move(f.bucket));
}

void GradientReducer::finish() {
  while (!in_flight_.empty()) complete_oldest();
  if (post_ == 1.0) return;
  if (stage_ == 1) {
    for (const Unit& u : layout_.units()) scale(grads_.data() + layout_.owned_begin(u), u.chunk, post_);
  } else {
    scale(grads_.data(), grads_.size(), post_);
  }
}

float* GradientReducer::owned_grads(const Unit& unit) {
  if (stage_ == 0) return grads_.data() + unit.begin;
  if (stage_ == 1) return grads_.data() + layout_.owned_begin(unit);
  return grads_.data() + unit.part_offset;
}

double GradientReducer::owned_sum_of_squares() {
  double sum = 0.0;
  for (const Unit& u : layout_.units()) {
    const float* g = owned_grads(u);
    for (size_t k = 0; k < u.chunk; ++k) sum += static_cast<double>(g[k]) * g[k];
  }
  return sum;
}

void GradientReducer::scale_owned(double factor) {
  for (const Unit& u : layout_.units()) scale(owned_grads(u), u.chunk, factor);
}

size_t GradientReducer::bytes() const { return grads_.size() * sizeof(float) + pool_.bytes(); }

}  // namespace ds::zero
