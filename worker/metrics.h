// Per-step metrics written by rank 0: JSON lines (`dsworker --metrics FILE.jsonl`), DeepSpeed's
// csv_monitor layout (one CSV per metric under <output_path>/<job_name>/, rows "samples,value") and
// its tensorboard block (an event file there, the same metrics as scalars tagged
// "Train/Samples/<metric>", x = global samples).
// A training step is a line with "loss"; a validation pass is a line with "val_loss" (and the
// CSV Validation_Samples_val_loss.csv).
#pragma once
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "tensorboard.h"

namespace ds {

class MetricsWriter {
 public:
  // Any destination may be empty (off). Throws std::runtime_error naming a path it cannot open.
  // tokens_per_sample > 0 (token data) adds tokens_per_sec to each step's line.
  // append: continue the files of a resumed run instead of replacing them.
  // wall_clock_breakdown: each step also records its phases' times in milliseconds, as DeepSpeed's
  // monitor does (Train/Samples/elapsed_time_ms_forward, _backward, _backward_inner, _backward_allreduce,
  // _step; the same keys in the JSONL line).
  MetricsWriter(const std::string& jsonl_path, const std::string& csv_dir, const std::string& tensorboard_dir,
                int64_t tokens_per_sample, bool append, bool wall_clock_breakdown);
  void write(const StepStats& stats, int64_t global_samples);
  void write_validation(int64_t step, int64_t global_samples, double val_loss);

 private:
  std::ofstream& csv(const std::string& prefix, const std::string& metric);
  void flush();
  int64_t tokens_per_sample_;
  bool append_;
  bool wall_clock_breakdown_;
  std::unique_ptr<std::ofstream> jsonl_;
  std::string csv_dir_;
  std::map<std::string, std::ofstream> csv_files_;
  std::unique_ptr<EventWriter> tensorboard_;
};

}  // namespace ds
