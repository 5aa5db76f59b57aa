// `dsckpt inspect`: what a checkpoint holds, as the text dsckpt prints (runtime/checkpoint/README.md).
#pragma once
#include <string>

namespace ds::ckpt {

// Reads DIR/TAG (verifying every checksum, as read_checkpoint) and describes it: step, world size,
// stage, precision, rank files, loss scale, tensors and parameters. Throws CheckpointError naming
// the file and what is wrong.
std::string inspect_checkpoint(const std::string& dir, const std::string& tag);

}  // namespace ds::ckpt
