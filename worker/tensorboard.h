// TensorBoard event files, as DeepSpeed's `tensorboard` block writes them through torch's
// SummaryWriter: <dir>/events.out.tfevents.<unix seconds>.<hostname>, a sequence of TFRecords
// (length, masked CRC-32C of the length, an Event protobuf, masked CRC-32C of it), starting with the
// file_version record; each scalar is an Event {wall_time, step, summary {value {tag, simple_value}}}.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

namespace ds {

class EventWriter {
 public:
  // Creates `dir` and a new event file in it; throws std::runtime_error naming the path on failure.
  explicit EventWriter(const std::string& dir);
  void scalar(const std::string& tag, int64_t step, double value);
  void flush() { out_.flush(); }
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);  // one TFRecord
  std::string path_;
  std::ofstream out_;
};

}  // namespace ds
