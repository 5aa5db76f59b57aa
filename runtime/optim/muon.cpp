// Muon as DeepSpeed's MuonWithAuxAdam: the matrices the engine marks (TensorRange rows × cols; muon_shape says
// which) step by Muon, the other tensors by Adam with decoupled weight decay. Per matrix, with β the momentum:
//   m ← β·m + (1−β)·g;  u ← (1−β)·g + β·m (Nesterov);  O ← newton_schulz(u) · √max(1, rows/cols)
//   p ← p·(1 − lr·wd) − lr·O
// Newton–Schulz needs the whole u: on a partition each rank forms u on its part and the exchange gathers every
// rank's; the matrices are dealt out among the ranks (each orthogonalizes about 1/W of the work, the largest
// first, to the least loaded rank) and a reduce-scatter of the results brings each rank its parts, from the one
// rank that formed each (a sum with zeros: exact). The Adam group's lr is
// adam_lr / muon_lr times the step's lr (the schedule scales both). State: exp_avg holds Muon's momentum for the
// matrices and Adam's first moment for the rest, exp_avg_sq Adam's second moment (zero for the matrices). fp32.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <fmt/format.h>

#include "cpu/adam.h"
#include "cpu/newton_schulz.h"
#include "optim/optimizers.h"
#include "optim/state_buffer.h"
#include "optim/tensor_views.h"

namespace ds::optim {
namespace {

class Muon final : public Optimizer {
 public:
  Muon(const MuonParams& params, double muon_lr, size_t n)
      : params_(params), muon_lr_(muon_lr), exp_avg_(n, amp::Storage::F32), exp_avg_sq_(n, amp::Storage::F32) {}

  void step(std::span<const Segment> segments, const std::vector<TensorRange>& tensors, double lr,
            int64_t step) override {
    const size_t n = check_step_args("Muon", segments, exp_avg_.size(), step);
    const std::vector<TensorPlace> places = place_tensors("Muon", segments, tensors, n);
    for (const Segment& s : segments)
      if (s.param_type != amp::Storage::F32 || s.grad_type != amp::Storage::F32)
        throw std::invalid_argument("Muon: steps fp32 parameters and gradients only");
    const bool any_matrix = std::any_of(tensors.begin(), tensors.end(), [](const TensorRange& t) { return t.rows > 0; });
    if (any_matrix) update_.assign(n, 0.0f);
    adam_and_momentum(tensors, places, lr * params_.adam_lr / muon_lr_, step);
    if (!any_matrix) return;
    if (exchange_.world > 1) orthogonalize_dealt(tensors);
    else orthogonalize_own(tensors);
    const float decay = 1.0f - static_cast<float>(lr * params_.weight_decay);
    for (size_t t = 0; t < tensors.size(); ++t) {  // p ← p·(1 − lr·wd) − lr·scale·O on this rank's parts
      const TensorRange& r = tensors[t];
      if (r.rows == 0 || places[t].size == 0) continue;
      const float scaled_lr = static_cast<float>(
          lr * std::sqrt(std::max(1.0, static_cast<double>(r.rows) / static_cast<double>(r.cols))));
      float* p = static_cast<float*>(places[t].segment->params) + places[t].within;
      const float* o = ortho_.data() + r.offset;
      for (size_t i = 0; i < r.size; ++i) p[i] = p[i] * decay - scaled_lr * o[i];
    }
  }

  bool reads_whole_tensors() const override { return true; }
  void set_exchange(PartitionExchange exchange) override { exchange_ = std::move(exchange); }

  std::vector<StateView> state() override { return {exp_avg_.view("exp_avg"), exp_avg_sq_.view("exp_avg_sq")}; }

  // OneCycle's momentum cycling: the Adam group's betas and Muon's momentum (β1).
  void set_betas(double beta1, double beta2) override {
    params_.beta1 = params_.momentum = beta1;
    params_.beta2 = beta2;
  }

 private:
  // ortho_ [n]: each matrix's part orthogonalized, from update_ holding the whole matrices (one rank, or stage 0).
  void orthogonalize_own(const std::vector<TensorRange>& tensors) {
    ortho_.assign(update_.size(), 0.0f);
    for (size_t t = 0; t < tensors.size(); ++t) {
      const TensorRange& r = tensors[t];
      if (r.rows == 0 || r.size == 0) continue;
      check_matrix(t, r, update_.size());
      matrix_.resize(r.rows * r.cols);
      cpu::newton_schulz(update_.data() + r.whole, matrix_.data(), static_cast<int64_t>(r.rows),
                         static_cast<int64_t>(r.cols));
      std::copy_n(matrix_.data() + r.within, r.size, ortho_.data() + r.offset);
    }
  }

  // The same on a partition: every rank's update gathered, each matrix orthogonalized by the rank it is dealt to
  // into a buffer of the gathered layout (zero elsewhere), and the sums over the ranks scattered into ortho_.
  void orthogonalize_dealt(const std::vector<TensorRange>& tensors) {
    exchange_.gather(update_.data(), gathered_);
    formed_.assign(gathered_.size(), 0.0f);
    std::vector<double> load(static_cast<size_t>(exchange_.world), 0.0);
    std::vector<size_t> order;  // the matrices, the costliest first (rows·cols·min(rows, cols) multiply-adds)
    for (size_t t = 0; t < tensors.size(); ++t)
      if (tensors[t].rows > 0) order.push_back(t);
    auto cost = [&](size_t t) {
      const TensorRange& r = tensors[t];
      return static_cast<double>(r.rows * r.cols) * static_cast<double>(std::min(r.rows, r.cols));
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost(a) > cost(b); });
    for (size_t t : order) {  // (every rank deals alike: the same tensors in the same order)
      const auto to = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[to] += cost(t);
      if (to != static_cast<size_t>(exchange_.rank)) continue;
      const TensorRange& r = tensors[t];
      check_matrix(t, r, gathered_.size());
      cpu::newton_schulz(gathered_.data() + r.whole, formed_.data() + r.whole, static_cast<int64_t>(r.rows),
                         static_cast<int64_t>(r.cols));
    }
    ortho_.assign(update_.size(), 0.0f);
    exchange_.scatter(formed_, ortho_.data());
  }

  static void check_matrix(size_t t, const TensorRange& r, size_t whole_size) {
    if (r.whole + r.rows * r.cols > whole_size || r.within + r.size > r.rows * r.cols)
      throw std::invalid_argument(fmt::format("Muon: tensor {} lies outside its {} x {} matrix", t, r.rows, r.cols));
  }

  // Adam's update of the other tensors at adam_lr; for the matrices the momentum, and u in update_.
  void adam_and_momentum(const std::vector<TensorRange>& tensors, const std::vector<TensorPlace>& places,
                         double adam_lr, int64_t step) {
    const AdamParams adam{params_.beta1, params_.beta2, params_.eps, params_.weight_decay, true, true, false};
    const cpu::AdamArgs args = adam_args(adam, adam_lr, step);
    const auto beta = static_cast<float>(params_.momentum), rest = 1.0f - beta;
    float* m = exp_avg_.as<float>();
    for (size_t t = 0; t < places.size(); ++t) {
      const TensorPlace& at = places[t];
      if (at.size == 0) continue;
      float* p = static_cast<float*>(at.segment->params) + at.within;
      const float* g = static_cast<const float*>(at.segment->grads) + at.within;
      if (tensors[t].rows == 0) {
        cpu::adam_step({p, g, m + at.offset, exp_avg_sq_.as<float>() + at.offset, at.size}, args, true);
        continue;
      }
      float* u = update_.data() + at.offset;
      for (size_t i = 0; i < at.size; ++i) {
        float& momentum = m[at.offset + i];
        momentum = beta * momentum + rest * g[i];
        u[i] = rest * g[i] + beta * momentum;
      }
    }
  }

  MuonParams params_;
  double muon_lr_;
  StateBuffer exp_avg_;     // [n]: Muon's momentum (matrices), Adam's m (the rest)
  StateBuffer exp_avg_sq_;  // [n]: Adam's v
  PartitionExchange exchange_;  // on a partition: the ranks' updates and results
  // Kept from step to step (their pages stay faulted in): u [n]; every rank's u; the matrices' parts
  // orthogonalized [n]; the dealt matrices orthogonalized in the gathered layout; one matrix orthogonalized whole.
  std::vector<float> update_, gathered_, ortho_, formed_, matrix_;
};

}  // namespace

}  // namespace ds::optim

namespace ds {

std::pair<size_t, size_t> muon_matrix(std::string_view name, std::span<const int64_t> dims) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (dims.size() < 2 || lower.find("embed") != std::string::npos || lower.find("lm_head") != std::string::npos)
    return {0, 0};
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  if (count == 0) return {0, 0};
  return {static_cast<size_t>(dims[0]), static_cast<size_t>(count / dims[0])};
}

}  // namespace ds

namespace ds::optim {

std::unique_ptr<Optimizer> make_muon(const MuonParams& params, double muon_lr, size_t n) {
  return std::make_unique<Muon>(params, muon_lr, n);
}

}  // namespace ds::optim
