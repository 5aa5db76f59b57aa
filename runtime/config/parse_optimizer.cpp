// The `optimizer` section: type (DeepSpeed's names case-insensitively, torch's exactly) and the
// constructor keyword arguments of FusedAdam / torch.optim.SGD / FusedLion / FusedLamb (reference §2.5, §4) and
// of DeepSpeed's OnebitAdam / ZeroOneAdam / OnebitLamb (fp16/onebit/*.py); and the checks those
// three make against other sections (ZeRO stage 0, 1-bit LAMB's dynamic loss scale).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/parse.h"

namespace ds::cfg {
namespace {

const std::vector<std::string> kSupported = {"Adam", "AdamW",      "Adagrad",     "RMSprop",   "SGD", "Lion",
                                             "Muon", "Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb"};

OptimizerType parse_type(Section& s, const std::optional<std::string>& name) {
  if (!name) s.fail("type", fmt::format("missing (one of {})", fmt::join(kSupported, ", ")));
  // DeepSpeed lower-cases its own optimizer names; anything else is a torch.optim class name,
  // which is case-sensitive ("SGD").
  std::string lower = to_lower(*name);
  if (lower == "adam") return OptimizerType::Adam;
  if (lower == "adamw") return OptimizerType::AdamW;
  if (lower == "adagrad") return OptimizerType::Adagrad;
  if (lower == "lion") return OptimizerType::Lion;
  if (lower == "muon") return OptimizerType::Muon;
  if (lower == "lamb") return OptimizerType::Lamb;
  if (lower == "onebitadam") return OptimizerType::OneBitAdam;
  if (lower == "zerooneadam") return OptimizerType::ZeroOneAdam;
  if (lower == "onebitlamb") return OptimizerType::OneBitLamb;
  if (*name == "SGD") return OptimizerType::SGD;
  if (*name == "RMSprop") return OptimizerType::RMSprop;
  s.fail("type", fmt::format("\"{}\" is not supported by dsworker (supported: {}){}", *name, fmt::join(kSupported, ", "),
                             did_you_mean(*name, kSupported)));
}

// DeepSpeed's engine refuses this key for every optimizer.
void reject_max_grad_norm(Section& p) {
  if (p.has("max_grad_norm"))
    p.fail("max_grad_norm", "not supported as an optimizer parameter; use the top-level 'gradient_clipping'");
}

std::pair<double, double> parse_betas(Section& p, std::pair<double, double> fallback) {
  const auto* v = p.get("betas");
  if (v == nullptr) return fallback;
  if (!v->is_array() || v->size() != 2 || !(*v)[0].is_number() || !(*v)[1].is_number())
    p.type_error("betas", *v, "a pair of numbers [beta1, beta2]");
  std::pair<double, double> b{(*v)[0].get<double>(), (*v)[1].get<double>()};
  for (double beta : {b.first, b.second})
    if (!(beta >= 0.0 && beta < 1.0)) p.fail("betas", fmt::format("{} must lie in [0, 1)", show(*v)));
  return b;
}

double non_negative(Section& p, const char* key, double fallback) {
  double v = p.number(key, fallback);
  p.at_least(key, v, 0.0);
  return v;
}

AdamParams parse_adam(Section& p, OptimizerType type) {
  AdamParams a;
  a.torch_adam = p.flag("torch_adam", false);
  // DeepSpeed: decoupled decay if the type is AdamW *or* adam_w_mode (default true), so plain
  // "Adam" is AdamW unless adam_w_mode is false, and "AdamW" ignores adam_w_mode: false.
  a.adam_w_mode = p.flag("adam_w_mode", true) || type == OptimizerType::AdamW;
  std::tie(a.beta1, a.beta2) = parse_betas(p, {a.beta1, a.beta2});
  a.eps = non_negative(p, "eps", a.eps);
  // torch_adam selects torch.optim.AdamW in decoupled mode, whose default weight decay is 0.01.
  a.weight_decay = non_negative(p, "weight_decay", a.torch_adam && a.adam_w_mode ? 0.01 : 0.0);
  a.bias_correction = p.flag("bias_correction", a.bias_correction);
  if (p.flag("amsgrad", false)) p.fail("amsgrad", "true is not supported (FusedAdam has no AMSGrad variant)");
  p.flag("set_grad_none", true);  // FusedAdam's zero_grad behaviour: no effect here
  return a;
}

SgdParams parse_sgd(Section& p) {
  SgdParams s;
  s.momentum = non_negative(p, "momentum", s.momentum);
  s.dampening = p.number("dampening", s.dampening);
  s.weight_decay = non_negative(p, "weight_decay", s.weight_decay);
  s.nesterov = p.flag("nesterov", s.nesterov);
  if (s.nesterov && (s.momentum <= 0.0 || s.dampening != 0.0))
    p.fail("nesterov", "true requires momentum > 0 and dampening 0 (as torch.optim.SGD)");
  if (p.flag("maximize", false)) p.fail("maximize", "true is not supported by dsworker");
  for (const char* speed_only : {"foreach", "differentiable", "fused"}) p.flag(speed_only, false);
  return s;
}

// torch.optim.Adagrad's keywords (DeepSpeed's choice without offload), and DeepSpeedCPUAdagrad's amsgrad and
// fp32_optimizer_states (its choice with offload_optimizer).
AdagradParams parse_adagrad(Section& p) {
  AdagradParams a;
  a.lr_decay = non_negative(p, "lr_decay", a.lr_decay);
  a.weight_decay = non_negative(p, "weight_decay", a.weight_decay);
  a.initial_accumulator_value = non_negative(p, "initial_accumulator_value", a.initial_accumulator_value);
  a.eps = non_negative(p, "eps", a.eps);
  if (p.flag("maximize", false)) p.fail("maximize", "true is not supported by dsworker");
  if (p.flag("amsgrad", false)) p.fail("amsgrad", "true is not supported (Adagrad has no AMSGrad variant)");
  for (const char* speed_only : {"foreach", "differentiable", "fused"}) p.flag(speed_only, false);
  p.flag("fp32_optimizer_states", true);  // the sum is fp32 unless bf16.bf16_optimizer_states says otherwise
  return a;
}

// torch.optim.RMSprop's keywords; torch's checks (every number at least 0).
RmspropParams parse_rmsprop(Section& p) {
  RmspropParams r;
  r.alpha = non_negative(p, "alpha", r.alpha);
  r.eps = non_negative(p, "eps", r.eps);
  r.weight_decay = non_negative(p, "weight_decay", r.weight_decay);
  r.momentum = non_negative(p, "momentum", r.momentum);
  r.centered = p.flag("centered", r.centered);
  if (p.flag("maximize", false)) p.fail("maximize", "true is not supported by dsworker");
  for (const char* speed_only : {"foreach", "differentiable", "capturable"}) p.flag(speed_only, false);
  return r;
}

// FusedLion(params, lr, betas, weight_decay, set_grad_none): any other key is an error, as the constructor's
// TypeError in DeepSpeed (Lion has no eps).
LionParams parse_lion(Section& p) {
  LionParams l;
  std::tie(l.beta1, l.beta2) = parse_betas(p, {l.beta1, l.beta2});
  l.weight_decay = non_negative(p, "weight_decay", l.weight_decay);
  p.flag("set_grad_none", true);  // FusedLion's zero_grad behaviour: no effect here
  return l;
}

// MuonWithAuxAdam's two groups from one `params`: the Muon group's lr, momentum, weight_decay, muon_lr and
// ns_method; the Adam group's lr, betas, eps, weight_decay and adam_lr. DeepSpeed drops any other key without
// a word; dsworker refuses it (so that e.g. "nesterov": false or "ns_steps" is not silently ignored).
// `lr` is the optimizer's lr as parsed (absent: 0.02); it becomes the Muon group's.
MuonParams parse_muon(Section& p, double& lr) {
  MuonParams m;
  const bool has_lr = p.has("lr");
  m.adam_lr = non_negative(p, "adam_lr", has_lr ? lr : m.adam_lr);
  lr = non_negative(p, "muon_lr", has_lr ? lr : 0.02);
  if (lr <= 0.0)
    p.fail(p.has("muon_lr") ? "muon_lr" : "lr",
           fmt::format("{} must be > 0 for Muon (its schedule scales the Adam group's lr in proportion)", lr));
  m.momentum = non_negative(p, "momentum", m.momentum);
  if (m.momentum >= 1.0) p.fail("momentum", fmt::format("{} must be < 1", m.momentum));
  m.weight_decay = non_negative(p, "weight_decay", m.weight_decay);
  std::tie(m.beta1, m.beta2) = parse_betas(p, {m.beta1, m.beta2});
  m.eps = non_negative(p, "eps", m.eps);
  static const std::vector<std::string> kMethods = {"gram", "standard"};
  p.choice("ns_method", kMethods, 0);  // the same iteration, computed in another order: see muon.cpp
  return m;
}

LambParams parse_lamb(Section& p) {
  LambParams l;
  std::tie(l.beta1, l.beta2) = parse_betas(p, {l.beta1, l.beta2});
  l.eps = non_negative(p, "eps", l.eps);
  l.eps_inside_sqrt = p.flag("eps_inside_sqrt", l.eps_inside_sqrt);
  l.weight_decay = non_negative(p, "weight_decay", l.weight_decay);
  l.bias_correction = p.flag("bias_correction", l.bias_correction);
  l.max_coeff = non_negative(p, "max_coeff", l.max_coeff);
  l.min_coeff = non_negative(p, "min_coeff", l.min_coeff);
  if (l.min_coeff > l.max_coeff)
    p.fail("min_coeff", fmt::format("{} is larger than max_coeff {}", l.min_coeff, l.max_coeff));
  if (p.flag("amsgrad", false)) p.fail("amsgrad", "true is not supported (FusedLamb has no AMSGrad variant)");
  return l;
}

int64_t count_at_least(Section& p, const char* key, int64_t fallback, int64_t min) {
  const int64_t v = p.integer(key, fallback);
  p.at_least(key, static_cast<double>(v), static_cast<double>(min));
  return v;
}

// The keys the three 1-bit optimizers share. `name` is DeepSpeed's class, for messages.
void parse_compressed_common(Section& p, CompressedCommParams& c, const char* name) {
  std::tie(c.beta1, c.beta2) = parse_betas(p, {c.beta1, c.beta2});
  c.eps = non_negative(p, "eps", c.eps);
  c.weight_decay = non_negative(p, "weight_decay", c.weight_decay);
  p.flag("bias_correction", true);   // DeepSpeed stores both and never reads them: no bias correction,
  p.flag("eps_inside_sqrt", false);  // eps outside the square root
  if (p.flag("amsgrad", false)) p.fail("amsgrad", fmt::format("true is not supported ({} has no AMSGrad variant)", name));
  const char* ignored = "ignored: dsworker compresses over its own Gloo process group";
  c.cuda_aware = p.flag("cuda_aware", c.cuda_aware);
  if (p.has("cuda_aware")) p.warn("cuda_aware", ignored);
  static const std::vector<std::string> kBackends = {"nccl", "mpi", "hccl", "compressed"};
  c.comm_backend_name = kBackends[p.choice("comm_backend_name", kBackends, 0)];
  if (p.has("comm_backend_name")) p.warn("comm_backend_name", ignored);
}

OneBitAdamParams parse_onebit_adam(Section& p) {
  OneBitAdamParams a;
  parse_compressed_common(p, a, "OnebitAdam");
  a.freeze_step = count_at_least(p, "freeze_step", a.freeze_step, 0);
  return a;
}

ZeroOneAdamParams parse_zero_one_adam(Section& p) {
  ZeroOneAdamParams z;
  parse_compressed_common(p, z, "ZeroOneAdam");
  z.var_freeze_step = count_at_least(p, "var_freeze_step", z.var_freeze_step, 0);
  z.var_update_scaler = count_at_least(p, "var_update_scaler", z.var_update_scaler, 1);
  z.local_step_scaler = count_at_least(p, "local_step_scaler", z.local_step_scaler, 1);
  z.local_step_clipper = count_at_least(p, "local_step_clipper", z.local_step_clipper, 1);
  return z;
}

OneBitLambParams parse_onebit_lamb(Section& p) {
  OneBitLambParams l;
  parse_compressed_common(p, l, "OnebitLamb");
  l.freeze_step = count_at_least(p, "freeze_step", l.freeze_step, 0);
  l.max_coeff = non_negative(p, "max_coeff", l.max_coeff);
  l.min_coeff = non_negative(p, "min_coeff", l.min_coeff);
  if (l.min_coeff > l.max_coeff)
    p.fail("min_coeff", fmt::format("{} is larger than max_coeff {}", l.min_coeff, l.max_coeff));
  l.coeff_beta = non_negative(p, "coeff_beta", l.coeff_beta);
  if (l.coeff_beta >= 1.0) p.fail("coeff_beta", fmt::format("{} must be < 1", l.coeff_beta));
  l.factor_max = non_negative(p, "factor_max", l.factor_max);
  l.factor_min = non_negative(p, "factor_min", l.factor_min);
  if (l.factor_min > l.factor_max)
    p.fail("factor_min", fmt::format("{} is larger than factor_max {}", l.factor_min, l.factor_max));
  l.factor_threshold = non_negative(p, "factor_threshold", l.factor_threshold);
  return l;
}

bool compressed(OptimizerType t) {
  return t == OptimizerType::OneBitAdam || t == OptimizerType::ZeroOneAdam || t == OptimizerType::OneBitLamb;
}

}  // namespace

// Muon orthogonalizes each matrix whole, in fp32: not a tensor-parallel share, not sub-groups streamed from NVMe,
// not bf16 master weights.
void check_muon_fits(Context& ctx, const DsConfig& c) {
  if (c.tensor_parallel.autotp_size > 1)
    ctx.fail("tensor_parallel.autotp_size", fmt::format("{}: optimizer Muon orthogonalizes whole matrices, not a "
                                                        "tensor-parallel rank's share", c.tensor_parallel.autotp_size));
  const auto& offload = c.zero_optimization.offload_optimizer;
  if (offload && offload->device == OffloadDevice::nvme)
    ctx.fail("zero_optimization.offload_optimizer.device", "nvme: optimizer Muon orthogonalizes whole matrices, "
                                                           "which NVMe's sub-groups do not hold (use cpu)");
  if (c.bf16.master_weights_and_grads)
    ctx.fail("bf16.bf16_master_weights_and_grads", "true: optimizer Muon updates fp32 master weights");
}

void check_optimizer_fits(Context& ctx, const DsConfig& c) {
  const OptimizerType type = c.optimizer.type;
  if (type == OptimizerType::Muon) check_muon_fits(ctx, c);
  if (!compressed(type)) return;
  const std::string_view name = optimizer_type_name(type);
  if (c.zero_optimization.stage != 0)
    ctx.fail("zero_optimization.stage",
             fmt::format("{}: optimizer {} needs stage 0 (it compresses the whole momentum on every rank; DeepSpeed "
                         "refuses ZeRO with it too)", c.zero_optimization.stage, name));
  if (type == OptimizerType::OneBitLamb && c.fp16.enabled && c.fp16.loss_scale != 0.0)
    ctx.fail("fp16.loss_scale", fmt::format("{}: optimizer OneBitLamb needs dynamic loss scaling (loss_scale 0), as "
                                            "DeepSpeed", c.fp16.loss_scale));
}

std::optional<OptimizerConfig> parse_optimizer(Section& top) {
  if (!top.has("optimizer")) return std::nullopt;
  Section s = top.object("optimizer");
  OptimizerConfig c;
  c.legacy_fusion = s.flag("legacy_fusion", false);
  Section p = s.object("params");
  auto type = s.optional_string("type");
  s.finish();
  c.type = parse_type(s, type);

  reject_max_grad_norm(p);
  const bool lr_1e2 = c.type == OptimizerType::Adagrad || c.type == OptimizerType::RMSprop;  // (torch's defaults)
  c.lr = non_negative(p, "lr", lr_1e2 ? 1e-2 : c.lr);
  switch (c.type) {
    case OptimizerType::Adam:
    case OptimizerType::AdamW: c.params = parse_adam(p, c.type); break;
    case OptimizerType::SGD: c.params = parse_sgd(p); break;
    case OptimizerType::Adagrad: c.params = parse_adagrad(p); break;
    case OptimizerType::RMSprop: c.params = parse_rmsprop(p); break;
    case OptimizerType::Lion: c.params = parse_lion(p); break;
    case OptimizerType::Muon: c.params = parse_muon(p, c.lr); break;
    case OptimizerType::Lamb: c.params = parse_lamb(p); break;
    case OptimizerType::OneBitAdam: c.params = parse_onebit_adam(p); break;
    case OptimizerType::ZeroOneAdam: c.params = parse_zero_one_adam(p); break;
    case OptimizerType::OneBitLamb: c.params = parse_onebit_lamb(p); break;
  }
  p.finish();
  return c;
}

}  // namespace ds::cfg
