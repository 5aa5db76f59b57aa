// Per-step metrics written by rank 0: JSON lines (`dsworker --metrics FILE.jsonl`) and DeepSpeed's
// csv_monitor layout (one CSV per metric under <output_path>/<job_name>/, rows "samples,value").
#pragma once
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "engine/engine.h"

namespace ds {

class MetricsWriter {
 public:
  // Either destination may be empty (off). Throws std::runtime_error naming a path it cannot open.
  MetricsWriter(const std::string& jsonl_path, const std::string& csv_dir);
  void write(const StepStats& stats, int64_t global_samples);

 private:
  std::ofstream& csv(const std::string& metric);
  std::unique_ptr<std::ofstream> jsonl_;
  std::string csv_dir_;
  std::map<std::string, std::ofstream> csv_files_;
};

}  // namespace ds
