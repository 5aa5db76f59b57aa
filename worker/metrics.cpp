// JSONL and CSV metrics (see metrics.h).
#include "metrics.h"

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ds {

MetricsWriter::MetricsWriter(const std::string& jsonl_path, const std::string& csv_dir,
                             const std::string& tensorboard_dir, int64_t tokens_per_sample, bool append,
                             bool wall_clock_breakdown)
    : tokens_per_sample_(tokens_per_sample), append_(append), wall_clock_breakdown_(wall_clock_breakdown),
      csv_dir_(csv_dir) {
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<EventWriter>(tensorboard_dir);
  if (!jsonl_path.empty()) {
    jsonl_ = std::make_unique<std::ofstream>(jsonl_path, append ? std::ios::app : std::ios::trunc);
    if (!*jsonl_) throw std::runtime_error(fmt::format("--metrics {}: cannot open for writing", jsonl_path));
  }
  if (!csv_dir_.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(csv_dir_, ec);
    if (ec) throw std::runtime_error(fmt::format("csv_monitor: cannot create {}: {}", csv_dir_, ec.message()));
  }
}

std::ofstream& MetricsWriter::csv(const std::string& prefix, const std::string& metric) {
  const std::string path = fmt::format("{}/{}_Samples_{}.csv", csv_dir_, prefix, metric);
  auto it = csv_files_.find(path);
  if (it != csv_files_.end()) return it->second;
  std::ofstream& f = csv_files_[path];
  const bool fresh = !append_ || !std::filesystem::exists(path);
  f.open(path, fresh ? std::ios::trunc : std::ios::app);
  if (!f) throw std::runtime_error(fmt::format("csv_monitor: cannot open {}", path));
  if (fresh) f << "samples," << metric << "\n";
  return f;
}

void MetricsWriter::flush() {
  if (jsonl_) jsonl_->flush();
  for (auto& [path, f] : csv_files_) f.flush();
  if (tensorboard_) tensorboard_->flush();
}

void MetricsWriter::write(const StepStats& s, int64_t global_samples) {
  const double samples_per_sec = s.seconds > 0 ? static_cast<double>(s.samples) / s.seconds : 0.0;
  const std::pair<const char*, double> phases[] = {
      {"elapsed_time_ms_forward", s.phases.forward * 1e3},
      {"elapsed_time_ms_backward", s.phases.backward() * 1e3},
      {"elapsed_time_ms_backward_inner", s.phases.backward_inner * 1e3},
      {"elapsed_time_ms_backward_allreduce", s.phases.backward_allreduce * 1e3},
      {"elapsed_time_ms_step", s.phases.step * 1e3}};
  if (jsonl_) {
    nlohmann::ordered_json j = {{"step", s.step},   {"epoch", s.epoch},         {"loss", s.loss},
                                {"lr", s.lr},       {"grad_norm", s.grad_norm}, {"samples_per_sec", samples_per_sec},
                                {"samples", global_samples}, {"loss_scale", s.loss_scale},
                                {"skipped", s.skipped}, {"sent_bytes", s.sent_bytes},
                                {"averaged_gradients", s.averaged}};
    if (tokens_per_sample_ > 0) j["tokens_per_sec"] = samples_per_sec * static_cast<double>(tokens_per_sample_);
    if (wall_clock_breakdown_)
      for (const auto& [name, ms] : phases) j[name] = ms;
    *jsonl_ << j.dump() << "\n";
  }
  if (tensorboard_) {
    tensorboard_->scalar("Train/Samples/train_loss", global_samples, s.loss);
    tensorboard_->scalar("Train/Samples/lr", global_samples, s.lr);
    tensorboard_->scalar("Train/Samples/grad_norm", global_samples, s.grad_norm);
    tensorboard_->scalar("Train/Samples/loss_scale", global_samples, s.loss_scale);
    if (tokens_per_sample_ > 0)
      tensorboard_->scalar("Train/Samples/tokens_per_sec", global_samples,
                           samples_per_sec * static_cast<double>(tokens_per_sample_));
    if (wall_clock_breakdown_)
      for (const auto& [name, ms] : phases) tensorboard_->scalar(std::string("Train/Samples/") + name, global_samples, ms);
  }
  if (!csv_dir_.empty()) {
    csv("Train", "train_loss") << global_samples << "," << fmt::format("{}", s.loss) << "\n";
    csv("Train", "lr") << global_samples << "," << fmt::format("{}", s.lr) << "\n";
    csv("Train", "grad_norm") << global_samples << "," << fmt::format("{}", s.grad_norm) << "\n";
    csv("Train", "loss_scale") << global_samples << "," << fmt::format("{}", s.loss_scale) << "\n";
    if (wall_clock_breakdown_)
      for (const auto& [name, ms] : phases) csv("Train", name) << global_samples << "," << fmt::format("{}", ms) << "\n";
  }
  flush();
}

void MetricsWriter::write_validation(int64_t step, int64_t global_samples, double val_loss) {
  if (jsonl_) {
    nlohmann::ordered_json j = {{"step", step}, {"samples", global_samples}, {"val_loss", val_loss}};
    *jsonl_ << j.dump() << "\n";
  }
  if (tensorboard_) tensorboard_->scalar("Validation/Samples/val_loss", global_samples, val_loss);
  if (!csv_dir_.empty()) csv("Validation", "val_loss") << global_samples << "," << fmt::format("{}", val_loss) << "\n";
  flush();
}

}  // namespace ds
